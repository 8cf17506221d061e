#!/bin/bash
# SPDX-License-Identifier: MIT
#
# false-failures.sh: how often does `fleetq gate` fail a CLEAN build? A baseline from K clean
# runs of the CI stand-in job (gate --save --append), then M further clean runs compared
# against it with the default tolerance (10%, k = 3 MADs). Prints the false-failure rate of
# runs and of checks, which metrics tripped, and, measured in the same run for comparison:
# the rate against a one-run baseline (tolerance only, no spread) and the detection rate of
# runs with one rank 20% slower (a gate that never fails is no gate).
#
# usage: bench/gate/false-failures.sh [BUILD_DIR] (default build-gate)
#   MODE=live (default when root with BTF): real agentd tracers scoped to cgroups, over
#        fq-workload (8 ranks, 4 "nodes"); MODE=generated: fq-tracegen traces, other seeds.
#   K=5 M=10 SLOW=2 STEPS=100 GATE_OPTS="" (more fleetq gate options, e.g. --samples 4)
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "${1:-$SRC/build-gate}" && pwd) || { echo "bench: no build directory" >&2; exit 1; }
FLEETQ=$B/fanout/fleetq AGENTD=$B/agentd/agentd TRACEGEN=$B/tests/tracegen/fq-tracegen
STANDIN=$B/standin
K=${K:-5} M=${M:-10} SLOW=${SLOW:-2} STEPS=${STEPS:-100}
if [ -z "${MODE:-}" ]; then
	MODE=generated
	[ "$(id -u)" = 0 ] && [ -r /sys/kernel/btf/vmlinux ] && MODE=live
fi
export FLEETQ_CONFIG=/dev/null
T=$(mktemp -d "${TMPDIR:-/tmp}/fq-gatebench.XXXXXX")
PIDS= CG=
cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	for p in $PIDS; do wait "$p" 2>/dev/null; done
	if [ -n "$CG" ]; then
		for k in 0 1 2 3; do rmdir "$CG/node$k" 2>/dev/null; done
		rmdir "$CG" 2>/dev/null
	fi
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
die() { echo "bench: $*" >&2; exit 1; }

"$SRC/certs/mkcerts" "$T/ca" 127.0.0.1 >/dev/null 2>&1 || die "mkcerts"
TLS="--ca $T/ca/ca.crt --cert $T/ca/client.crt --key $T/ca/client.key"

# agent HOSTS NAME DB [options]: starts agentd, appends its address to the file HOSTS.
agent() {
	hf=$1 name=$2 db=$3
	shift 3
	"$AGENTD" --listen 127.0.0.1:0 --db "$db" --node "$name" --ca "$T/ca/ca.crt" \
		--cert "$T/ca/127.0.0.1.crt" --key "$T/ca/127.0.0.1.key" \
		--port-file "$T/$name.port" --log "$T/$name.log" "$@" >/dev/null 2>&1 &
	PIDS="$PIDS $!"
	for _ in $(seq 600); do [ -s "$T/$name.port" ] && break; sleep 0.05; done
	[ -s "$T/$name.port" ] || die "agentd $name did not start: $(tail -n 3 "$T/$name.log")"
	echo "127.0.0.1:$(cat "$T/$name.port")" >>"$hf"
}

# run ID [slow]: one job; sets HOSTS (a file) and JOB (the --job, or empty)
if [ "$MODE" = live ]; then
	V2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
	CG=$V2/fqgatebench-$$
	mkdir -p "$CG" || die "cannot create $CG"
	for k in 0 1 2 3; do mkdir -p "$CG/node$k"; done
	LIBS="lib:$STANDIN/libnccl.so.2,lib:$STANDIN/libcudart.so.13,lib:$STANDIN/libcuda.so.1"
	for k in 0 1 2 3; do
		agent "$T/live.hosts" "node$k" "$T/node$k.db" --cgroup "$CG/node$k" \
			--probes "nccl,sync,sched,proc,$LIBS" --ib-interval 0
	done
	HOSTS=$T/live.hosts
	run() {
		JOB=job-$1-$$
		extra=
		[ -n "${2:-}" ] && extra="--slow-rank 5 --slow-pct 20"
		# shellcheck disable=SC2086
		"$STANDIN/fq-workload" --ranks 8 --steps "$STEPS" --step-us 5000 --job-id "$JOB" \
			--cgroup-parent "$CG" --cgroups 4 $extra >"$T/w.log" 2>&1 || die "fq-workload"
		for _ in $(seq "${WAIT_TICKS:-300}"); do
			# shellcheck disable=SC2086
			n=$("$FLEETQ" $TLS --hosts "$HOSTS" --format csv --merge "SELECT sum(n) FROM results" \
				"SELECT count(*) AS n FROM collectives WHERE pid IN (SELECT pid FROM processes
				 WHERE job_id = '$JOB')" 2>/dev/null | tail -n 1)
			[ "$n" = $((8 * STEPS)) ] && return 0
			sleep 0.1
		done
		[ -n "${WARM:-}" ] && return 1
		die "$JOB: $n collectives traced, want $((8 * STEPS))"
	}
else
	START=$((($(date +%s) - 15) * 1000000000))
	run() {
		JOB=
		HOSTS=$T/gen$1.hosts
		: >"$HOSTS"
		extra=
		[ -n "${2:-}" ] && extra="--slow-rank 5 --slow-pct 20"
		for k in 0 1 2 3; do
			# shellcheck disable=SC2086
			"$TRACEGEN" --out "$T/gen$1-$k.db" --node "node$k" --ranks 2 --rank-base $((2 * k)) \
				--nranks 8 --steps "$STEPS" --start-ns $START --seed $((1000 + $1)) $extra \
				>/dev/null 2>&1 || die "fq-tracegen"
			agent "$HOSTS" "gen$1-$k" "$T/gen$1-$k.db" --no-trace
		done
	}
fi

# gate ARGS...: fleetq gate on the last run; sets RC
gate() {
	# shellcheck disable=SC2086
	"$FLEETQ" $TLS --hosts "$HOSTS" gate --since 30m ${JOB:+--job "$JOB"} ${GATE_OPTS:-} "$@" \
		>"$T/out" 2>"$T/err"
	RC=$?
}

echo "mode $MODE: baseline from K=$K clean runs, then M=$M clean and $SLOW slow runs" >&2
# a warm-up job, not measured: the agents' probes settle (attach races, first-use costs)
[ "$MODE" = live ] && { WARM=1 run 0 || echo "warm-up job: not all traced" >&2; }
for i in $(seq 1 "$K"); do
	run "$i"
	gate --save "$T/base.json" --append
	[ $RC = 0 ] || die "save run $i: $(cat "$T/err")"
	[ "$i" = 1 ] && cp "$T/base.json" "$T/one.json"
done
ff=0 ff1=0 checks=0 bad=0 bad1=0
: >"$T/tripped"
for i in $(seq 1 "$M"); do
	run $((100 + i))
	gate --baseline "$T/base.json" --format csv
	[ $RC = 0 ] || [ $RC = 1 ] || die "compare run $i: exit $RC: $(cat "$T/err")"
	[ $RC = 1 ] && ff=$((ff + 1))
	checks=$((checks + $(tail -n +2 "$T/out" | wc -l)))
	n=$(grep -c ',regressed,\|,regressed$\|,missing,\|,missing$' "$T/out")
	bad=$((bad + n))
	grep ',regressed,\|,missing,' "$T/out" | cut -d, -f1,3 >>"$T/tripped"
	for tol in 20 30; do
		gate --baseline "$T/base.json" --tolerance $tol% -q
		[ $RC = 1 ] && eval "fft$tol=\$((\${fft$tol:-0} + 1))"
	done
	gate --baseline "$T/one.json" --format csv
	[ $RC = 1 ] && ff1=$((ff1 + 1))
	bad1=$((bad1 + $(grep -c ',regressed,\|,missing,' "$T/out")))
	echo "clean run $i: K-run baseline $( [ $ff -gt 0 ] && echo "($ff failed so far)" || echo ok)" >&2
done
det=0
for i in $(seq 1 "$SLOW"); do
	run $((200 + i)) slow
	gate --baseline "$T/base.json"
	[ $RC = 1 ] && grep -q "^busy_gap_us  *5  .*regressed$" "$T/out" && det=$((det + 1))
done
rate() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b ? a / b : 0 }'; }
echo "false failures, default tolerance, K=$K-run baseline: $ff of $M clean runs" \
	"(rate $(rate $ff "$M")); checks $bad of $checks (rate $(rate $bad $checks))"
echo "false failures, one-run baseline (no spread):        $ff1 of $M clean runs" \
	"(rate $(rate $ff1 "$M")); checks $bad1 of $checks"
echo "false failures, K-run baseline, --tolerance 20%:   ${fft20:-0} of $M clean runs"
echo "false failures, K-run baseline, --tolerance 30%:   ${fft30:-0} of $M clean runs"
echo "detected: $det of $SLOW runs with rank 5 20% slower (busy_gap_us rank 5)"
if [ -s "$T/tripped" ]; then
	echo "tripped (metric,rank: count):"
	sort "$T/tripped" | uniq -c | sort -rn | head -n 10 | sed 's/^/  /'
fi
echo "RESULT gate_false_failure_rate $(rate $ff "$M") runs baseline=$(rate $ff1 "$M") ratio=-" \
	"target=0 met=$([ $ff = 0 ] && echo yes || echo no)"
