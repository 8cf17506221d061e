#!/bin/sh
# SPDX-License-Identifier: MIT
# Traced call cost: ns per ncclAllReduce on the stand-in libnccl (bench/probe_cost, one
# thread, single-rank communicator) without agentd, and with agentd tracing that library
# (--probes nccl,lib:PATH: uprobe + uretprobe per call). Baseline in the same run: the
# untraced calls (before and after the traced ones). Also checks that the trace holds
# one row per traced call (or counted drops: calls come in bursts of 1000 at full speed).
# Target: <= 1500 ns added per call. Needs root and BTF.
# Three traced placements, each against its own untraced baseline of the same run:
#   default  agentd and the loop float over all CPUs (the RESULT line);
#   wakeup   the same with FQ_RING_WAKEUP=0: a reader wakeup per record (the policy before
#            batched draining), for comparison;
#   pinned   the loop on one CPU (taskset -c $FQ_BENCH_LOOP_CPU, default 0), agentd on
#            another ($FQ_BENCH_AGENT_CPU, default 1): what the probes cost the calling
#            thread when agentd's reader and writer do not take its CPU.
# FQ_BENCH_TRACE_ONLY=default runs the first only.
#   bench/trace.sh [BUILD_DIR] [CALLS]
. "$(dirname "$0")/lib.sh"
n=${2:-200000}
PC=$B/bench/probe_cost
need "$AGENTD" "$PC" "$STANDIN/libnccl.so.2"
private_libs
[ "$(id -u)" = 0 ] || die "needs root to load BPF programs"

LCPU=${FQ_BENCH_LOOP_CPU:-0}
ACPU=${FQ_BENCH_AGENT_CPU:-1}
# LOOP_PIN / AGENT_PIN: command prefixes (taskset) for the pinned placement
LOOP_PIN= AGENT_PIN=
cost() { $LOOP_PIN "$PC" $PCL cost "$n" >"$T/pc.out" || die "probe_cost failed"; cat "$T/pc.out"; }
val() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" "$T/pc.out"; }

# place NAME DB: untraced runs around three traced runs; sets u_NAME tr_NAME pids_NAME
place() {
	u= tr= pids=
	cost >/dev/null # warm up
	cost >/dev/null
	u="$u $(val ns_per_call)"
	start_tracer "$2"
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
	eval "u_$1=\$u tr_$1=\$tr pids_$1=\$pids"
}
# report NAME DB TITLE: prints the placement's figures; sets d (ns added per call)
report() {
	eval "u=\$u_$1 tr=\$tr_$1 pids=\$pids_$1"
	rows=
	for p in $pids; do
		rows="$rows $(sqlite3 "$2" "SELECT count(*) FROM collectives WHERE pid = $p AND op = 'AllReduce'")"
	done
	drops=$(sqlite3 "$2" "SELECT coalesce((SELECT value FROM meta WHERE key = 'ring_drops'), 0) || ' ring, ' || coalesce((SELECT value FROM meta WHERE key = 'store_drops'), 0) || ' store'")
	wk=$(sqlite3 "$2" "SELECT coalesce((SELECT value FROM meta WHERE key = 'ring_wakeup_bytes'), 0)")
	mu=$(median $u)
	mt=$(median $tr)
	cal=$(sqlite3 "$2" "SELECT value FROM meta WHERE key = 'probe_cost_ns'")
	d=$(calc "$mt - $mu")
	echo "$3"
	echo "  untraced (baseline): $(fmt "$mu" 0) ns (runs:$u)"
	echo "  traced by agentd:    $(fmt "$mt" 0) ns (runs:$tr)"
	echo "  added per call: $(fmt "$d" 0) ns; ratio traced/untraced $(fmt "$(calc "$mt / $mu")" 3)"
	echo "  agentd's own start-up calibration (meta probe_cost_ns): $cal ns; ring_wakeup_bytes $wk"
	echo "  trace rows per traced run:$rows of $(val calls) calls each (drops counted by agentd: $drops)"
}

echo "trace: ns per ncclAllReduce on the stand-in, best of 7 x $n calls per run, median of runs"
place default "$T/trace.db"
report default "$T/trace.db" "default (agentd and the loop on any CPU, batched reader wakeups):"
d_default=$d mu_default=$mu
if [ "${FQ_BENCH_TRACE_ONLY:-}" != default ]; then
	FQ_RING_WAKEUP=0
	export FQ_RING_WAKEUP
	place wakeup "$T/trace-wakeup.db"
	unset FQ_RING_WAKEUP
	report wakeup "$T/trace-wakeup.db" "FQ_RING_WAKEUP=0 (a reader wakeup per record, the old policy), any CPU:"
	d_wakeup=$d
	if [ "$(nproc)" -ge 2 ]; then
		LOOP_PIN="taskset -c $LCPU" AGENT_PIN="taskset -c $ACPU"
		place pinned "$T/trace-pinned.db"
		LOOP_PIN= AGENT_PIN=
		report pinned "$T/trace-pinned.db" "pinned (loop on CPU $LCPU, agentd on CPU $ACPU; baseline: the loop alone on CPU $LCPU):"
		d_pinned=$d
		result trace_added_ns_per_call_pinned "$(fmt "$d_pinned" 0)" ns "$(fmt "$mu" 0)" - -
	fi
	result trace_added_ns_per_call_old_wakeups "$(fmt "$d_wakeup" 0)" ns "$(fmt "$d_default" 0)" - -
fi
met=no
[ "$(calc "$d_default <= 1500")" = 1 ] && met=yes
result trace_added_ns_per_call "$(fmt "$d_default" 0)" ns "$(fmt "$mu_default" 0)" "<=1500ns_added" $met
