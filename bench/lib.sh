# SPDX-License-Identifier: MIT
# Shared by the bench/*.sh scripts (sourced, not run). Each script takes the build
# directory as $1 (default: build) and ends with one line per figure:
#   RESULT <name> <value> <unit> baseline=<value> ratio=<value/baseline> target=<text> met=<yes|no|->
# which bench/run-all collects into its summary. Inputs that take long to make are cached
# under $FQ_BENCH_CACHE (default /tmp/fq-bench-cache), keyed by their parameters.
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$SRC/build}" && pwd) || { echo "bench: no build directory '${1:-build}'" >&2; exit 1; }
AGENTD=${AGENTD:-$B/agentd/agentd}
FLEETQ=$B/fanout/fleetq
TRACEGEN=$B/tests/tracegen/fq-tracegen
STANDIN=$B/standin
MKCERTS=$SRC/certs/mkcerts
CACHE=${FQ_BENCH_CACHE:-/tmp/fq-bench-cache}
REPS=${FQ_BENCH_REPS:-5}
export FLEETQ_CONFIG=/dev/null
unset SLURM_JOB_NODELIST
mkdir -p "$CACHE"
command -v sqlite3 >/dev/null || { echo "bench: needs the sqlite3 CLI" >&2; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/fq-bench.XXXXXX")
# fleetq's TLS session cache: this run's own, not the user's
export XDG_CACHE_HOME=$T/cache
PIDS=
cleanup() {
	for p in $PIDS; do
		kill "$p" 2>/dev/null || true
	done
	for p in $PIDS; do
		wait "$p" 2>/dev/null || true
	done
	if [ -n "${KEEP:-}" ]; then echo "kept $T" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

die() {
	echo "bench: $*" >&2
	for f in "$T"/*.err; do
		[ -s "$f" ] && tail -n 5 "$f" | sed "s|^|  $(basename "$f"): |" >&2
	done
	exit 1
}

need() {
	for x in "$@"; do
		[ -x "$x" ] || die "missing '$x': build it first (cmake --build $B)"
	done
}

now() { date +%s.%N; }
# calc EXPR: floating-point arithmetic
calc() { echo "scale=6; $*" | bc -l | sed 's/^\./0./; s/^-\./-0./'; }
# fmt X [DIGITS]
fmt() { printf "%.${2:-2}f" "$1"; }
# median X...: the middle value (the lower middle for an even count)
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# timeit CMD...: wall seconds of one run of CMD (stdout and stderr to $T/timeit.*)
timeit() {
	t0=$(now)
	"$@" >"$T/timeit.out" 2>"$T/timeit.err" || die "failed: $* ($(tail -n 2 "$T/timeit.err"))"
	t1=$(now)
	calc "$t1 - $t0"
}
# gen_nodes DIR NODES STEPS SEED [FQ-TRACEGEN ARGS...]: NODES fq-tracegen node files of 8
# ranks each (DIR/nI.db, one job of NODES * 8 ranks), cached under DIR (they take a while on a
# small box)
gen_nodes() {
	gd=$1 gn=$2 gs=$3 gseed=$4
	shift 4
	[ -f "$gd/done" ] && return 0
	rm -rf "$gd"
	mkdir -p "$gd"
	gi=0
	while [ $gi -lt "$gn" ]; do
		"$TRACEGEN" --out "$gd/n$gi.db" --node "node$gi" --ranks 8 --rank-base $((gi * 8)) \
			--nranks $((gn * 8)) --steps "$gs" --start-ns 1700000000000000000 \
			--seed "$gseed" "$@" >/dev/null 2>"$T/gen.err" ||
			die "fq-tracegen node$gi: $(cat "$T/gen.err")"
		gi=$((gi + 1))
	done
	touch "$gd/done"
}
# node_files DIR NODES: the paths gen_nodes made, space-separated
node_files() { gi=0; while [ $gi -lt "$2" ]; do printf '%s/n%d.db ' "$1" $gi; gi=$((gi + 1)); done; }
# an_peak ARGS...: the peak RSS in KiB (GNU time) of one an-run of sql/analysis's straggler
# files (from the start of time) with ARGS, or - where GNU time is not installed
an_peak() {
	[ -x /usr/bin/time ] || { echo -; return; }
	/usr/bin/time -f %M "$B/tests/analysis/an-run" "$SRC/sql/analysis/stragglers.node.sql" \
		"$SRC/sql/analysis/stragglers.merge.sql" -p since_ns=1 "$@" 2>&1 >/dev/null | tail -n 1
}
# result NAME VALUE UNIT BASELINE TARGET MET
result() {
	r=-
	if [ "$4" != - ]; then r=$(fmt "$(calc "$2 / $4")" 3); fi
	echo "RESULT $1 $2 $3 baseline=$4 ratio=$r target=$5 met=$6"
}

# certs HOST...: a CA, node certificates and a client certificate in $T/certs
certs() {
	"$MKCERTS" "$T/certs" "$@" >"$T/mkcerts.err" 2>&1 || die "mkcerts failed"
}

# start_agent NAME DB [agentd options...]: agentd on 127.0.0.1:0 with real mTLS
# (certificate 127.0.0.1 from certs); sets PORT and APID.
start_agent() {
	name=$1 db=$2
	shift 2
	rm -f "$T/$name.port"
	"$AGENTD" --listen 127.0.0.1:0 --port-file "$T/$name.port" --db "$db" \
		--ca "$T/certs/ca.crt" --cert "$T/certs/127.0.0.1.crt" \
		--key "$T/certs/127.0.0.1.key" --node "$name" "$@" 2>>"$T/$name.err" &
	APID=$!
	PIDS="$PIDS $APID"
	i=0
	until [ -s "$T/$name.port" ]; do
		i=$((i + 1))
		[ $i -lt 600 ] || die "agentd $name did not start"
		kill -0 "$APID" 2>/dev/null || die "agentd $name exited"
		sleep 0.05
	done
	PORT=$(cat "$T/$name.port")
}

# fq ARGS...: fleetq with the bench client certificate
fq() {
	"$FLEETQ" --ca "$T/certs/ca.crt" --cert "$T/certs/client.crt" --key "$T/certs/client.key" "$@"
}

# kib PID FIELD: a /proc/PID/status field (VmRSS, VmHWM, ...) in KiB
kib() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }

# start_tracer DB: agentd tracing only the library $LIB (a private copy no other agentd
# discovers), run under $AGENT_PIN if set (e.g. "taskset -c 1"); waits until it has
# attached; sets TPID. stop_tracer: SIGTERM and wait.
start_tracer() {
	rm -f "$T/tr.port"
	${AGENT_PIN:-} "$AGENTD" --insecure --listen 127.0.0.1:0 --port-file "$T/tr.port" --db "$1" \
		--ib-interval 0 --probes "nccl,lib:$LIB" 2>"$T/tracer.err" &
	TPID=$!
	PIDS="$PIDS $TPID"
	i=0
	until [ -s "$T/tr.port" ] && grep -q "attached" "$T/tracer.err"; do
		i=$((i + 1))
		[ $i -lt 600 ] || die "agentd with the tracer did not start"
		kill -0 "$TPID" 2>/dev/null || die "agentd with the tracer exited"
		sleep 0.05
	done
}
stop_tracer() {
	kill "$TPID"
	wait "$TPID" 2>/dev/null || true
}

# private_libs: copies of the stand-in libraries under names no agentd discovers (see
# bench/probe_cost.c); sets LIB (the libnccl copy, what start_tracer traces) and PCL
# (probe_cost's library arguments).
private_libs() {
	mkdir "$T/lib"
	cp "$STANDIN/libcuda.so.1" "$T/lib/libfqb-cuda.so"
	cp "$STANDIN/libcudart.so.13" "$T/lib/libfqb-cudart.so"
	cp "$STANDIN/libnccl.so.2" "$T/lib/libfqb-nccl.so"
	LIB=$T/lib/libfqb-nccl.so
	PCL="$T/lib/libfqb-cuda.so $T/lib/libfqb-cudart.so $LIB"
}

# stream_db N: $CACHE/stream-N.db, N rows of table b (a, b, c, d), made once; prints its path.
stream_db() {
	sdb=$CACHE/stream-$1.db
	if [ ! -s "$sdb" ]; then
		rm -f "$sdb.tmp"
		sqlite3 -batch "$sdb.tmp" <<SQL || die "cannot make $sdb"
CREATE TABLE b (a INTEGER, b INTEGER, c REAL, d TEXT);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < $1)
INSERT INTO b SELECT x, x % 1000, x / 3.0, 'rank-' || (x % 64) FROM n;
SQL
		mv "$sdb.tmp" "$sdb"
	fi
	echo "$sdb"
}
