#!/bin/sh
# SPDX-License-Identifier: MIT
# Where a traced call's time goes: one bench/probe_cost run (CALLS x 7 ncclAllReduce on a
# private copy of the stand-in libnccl) under an agentd tracing it, with
# kernel.bpf_stats_enabled=1 (put back afterwards). Prints, for this agentd's programs only
# (found through its fds), the BPF time per hit; agentd's calibration of a whole probed call
# (uprobe + uretprobe + BPF, meta probe_cost_ns); the untraced and traced ns per call of the
# same run; and the reader's wakeups and the loop's involuntary context switches.
# Environment as for agentd (FQ_RING_WAKEUP=0: a wakeup per record). Needs root and BTF.
#   bench/trace-breakdown.sh [BUILD_DIR] [CALLS]
. "$(dirname "$0")/lib.sh"
n=${2:-200000}
PC=$B/bench/probe_cost
need "$AGENTD" "$PC" "$STANDIN/libnccl.so.2"
command -v bpftool >/dev/null || die "needs bpftool"
[ "$(id -u)" = 0 ] || die "needs root to load BPF programs"
private_libs
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -q kernel.bpf_stats_enabled="$old_stats"; cleanup' EXIT

val() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" "$T/pc.out"; }
# vol TID-DIR: voluntary context switches of a thread
vol() { awk '$1 == "voluntary_ctxt_switches:" { print $2 }' "$1/status"; }

"$PC" $PCL cost "$n" >"$T/pc.out" || die "probe_cost failed"
base=$(val ns_per_call)
start_tracer "$T/trace.db"
sleep 1
ids=$(cat /proc/$TPID/fdinfo/* 2>/dev/null | awk '$1 == "prog_id:" { print $2 }' | sort -u)
for t in /proc/$TPID/task/*; do echo "$(basename "$t") $(vol "$t")"; done >"$T/vol.a"
sysctl -q kernel.bpf_stats_enabled=1
for id in $ids; do bpftool prog show id "$id"; done >"$T/progs.a"
if [ -x /usr/bin/time ]; then
	/usr/bin/time -f "%c" -o "$T/time.out" "$PC" $PCL cost "$n" >"$T/pc.out" || die "probe_cost failed"
else
	"$PC" $PCL cost "$n" >"$T/pc.out" || die "probe_cost failed"
	echo "?" >"$T/time.out"
fi
for id in $ids; do bpftool prog show id "$id"; done >"$T/progs.b"
sysctl -q kernel.bpf_stats_enabled="$old_stats"
for t in /proc/$TPID/task/*; do echo "$(basename "$t") $(vol "$t")"; done >"$T/vol.b"
traced=$(val ns_per_call)
stop_tracer
cal=$(sqlite3 "$T/trace.db" "SELECT value FROM meta WHERE key = 'probe_cost_ns'")
wk=$(sqlite3 "$T/trace.db" "SELECT value FROM meta WHERE key = 'ring_wakeup_bytes'")

# "ID: TYPE name NAME ... run_time_ns X run_cnt Y" -> NAME X Y
prog_stats() {
	awk '/^[0-9]+: / { name = ""; rt = 0; rc = 0
		for (i = 1; i < NF; i++) {
			if ($i == "name") name = $(i + 1)
			if ($i == "run_time_ns") rt = $(i + 1)
			if ($i == "run_cnt") rc = $(i + 1)
		}
		print name, rt, rc }' "$1"
}
prog_stats "$T/progs.a" | sort >"$T/ps.a"
prog_stats "$T/progs.b" | sort >"$T/ps.b"
echo "trace-breakdown: $n x 7 ncclAllReduce, ring_wakeup_bytes $wk (bpf_stats on: adds its own clock reads)"
echo "  untraced: $base ns per call; traced: $traced ns per call (added $(fmt "$(calc "$traced - $base")" 0) ns)"
echo "  agentd's calibration, a whole probed call with no reader/writer running: $cal ns"
join "$T/ps.a" "$T/ps.b" | awk '$5 > $3 { printf "  BPF %-18s %9d hits %7.0f ns/hit\n", $1, $5 - $3, ($4 - $2) / ($5 - $3) }'
join "$T/vol.a" "$T/vol.b" | awk '{ d = $3 - $2; if (d > m) m = d } END { printf "  agentd thread with the most wakeups (the ring reader): %d\n", m }'
echo "  the loop's involuntary context switches: $(tail -n 1 "$T/time.out")"
