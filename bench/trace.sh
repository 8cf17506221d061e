#!/bin/sh
# SPDX-License-Identifier: MIT
# Traced call cost: ns per ncclAllReduce on the stand-in libnccl (bench/probe_cost, one
# thread, single-rank communicator) without agentd, and with agentd tracing that library
# (--probes nccl,lib:PATH: uprobe + uretprobe per call). Baseline in the same run: the
# untraced calls (before and after the traced ones). Also checks that the trace holds
# one row per traced call (or counted drops: calls come in bursts of 1000 at full speed). Target: <= 1500 ns added per call. Needs root and BTF.
#   bench/trace.sh [BUILD_DIR] [CALLS]
. "$(dirname "$0")/lib.sh"
n=${2:-200000}
PC=$B/bench/probe_cost
need "$AGENTD" "$PC" "$STANDIN/libnccl.so.2"
# private copies under names no agentd discovers (see bench/probe_cost.c)
mkdir "$T/lib"
cp "$STANDIN/libcuda.so.1" "$T/lib/libfqb-cuda.so"
cp "$STANDIN/libcudart.so.13" "$T/lib/libfqb-cudart.so"
cp "$STANDIN/libnccl.so.2" "$T/lib/libfqb-nccl.so"
LIB=$T/lib/libfqb-nccl.so
PCL="$T/lib/libfqb-cuda.so $T/lib/libfqb-cudart.so $LIB"
[ "$(id -u)" = 0 ] || die "needs root to load BPF programs"

cost() { "$PC" $PCL cost "$n" >"$T/pc.out" || die "probe_cost failed"; cat "$T/pc.out"; }
val() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" "$T/pc.out"; }

# start_tracer DB: agentd with the tracer on the stand-in libnccl only
start_tracer() {
	rm -f "$T/tr.port"
	"$AGENTD" --insecure --listen 127.0.0.1:0 --port-file "$T/tr.port" --db "$1" \
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

u=
cost >/dev/null # warm up
cost >/dev/null
u="$u $(val ns_per_call)"
start_tracer "$T/trace.db"
tr= pids=
for i in 1 2 3; do
	cost >/dev/null
	tr="$tr $(val ns_per_call)"
	pids="$pids $(val pid)"
done
stop_tracer
for i in 1 2; do
	cost >/dev/null
	u="$u $(val ns_per_call)"
done
calls=$(val calls)
rows=
for p in $pids; do
	rows="$rows $(sqlite3 "$T/trace.db" "SELECT count(*) FROM collectives WHERE pid = $p AND op = 'AllReduce'")"
done
drops=$(sqlite3 "$T/trace.db" "SELECT coalesce((SELECT value FROM meta WHERE key = 'ring_drops'), 0) || ' ring, ' || coalesce((SELECT value FROM meta WHERE key = 'store_drops'), 0) || ' store'")
mu=$(median $u)
mt=$(median $tr)
cal=$(sqlite3 "$T/trace.db" "SELECT value FROM meta WHERE key = 'probe_cost_ns'")
d=$(calc "$mt - $mu")
echo "trace: ns per ncclAllReduce on the stand-in, best of 7 x $n calls per run, median of runs"
echo "  untraced (baseline): $(fmt "$mu" 0) ns (runs:$u)"
echo "  traced by agentd:    $(fmt "$mt" 0) ns (runs:$tr)"
echo "  added per call: $(fmt "$d" 0) ns; ratio traced/untraced $(fmt "$(calc "$mt / $mu")" 3)"
echo "  agentd's own start-up calibration (meta probe_cost_ns): $cal ns"
echo "  trace rows per traced run:$rows of $calls calls each (drops counted by agentd: $drops)"
met=no
[ "$(calc "$d <= 1500")" = 1 ] && met=yes
result trace_added_ns_per_call "$(fmt "$d" 0)" ns "$(fmt "$mu" 0)" "<=1500ns_added" $met
