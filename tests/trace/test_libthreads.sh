#!/bin/bash
# SPDX-License-Identifier: MIT
# NCCL's own threads are not the job's CPU work: 4 ranks, rank 1's stand-in libnccl starting
# a proxy service thread from inside ncclCommInitRank and a progress thread from that one, as
# NCCL does, the progress thread spinning half of every millisecond
# (FQ_STANDIN_PROXY_SPIN_PCT). collectives.cpu_ns (the process's CPU work between two
# collectives, outside waits) must leave it out: rank 1's total stays with its peers', while
# counting the spin would put it above them by about the spin's CPU time. The spin must be
# large enough for that to show, or the test could not fail.
. "$(dirname "$0")/lib.sh"
trap 'rm -rf "$WORK"' EXIT
RANKS=4 STEPS=300 JOB=fqlibthr-$$
DB=$WORK/trace.db
FQ_STANDIN_PROXY_SPIN_PCT=50 FQ_STANDIN_PROXY_SPIN_RANK=1 \
	"$DRIVER" --db "$DB" --probes "nccl,sync,malloc,sched,tcp,proc,$LIBS" -- \
	"$STANDIN/fq-workload" --ranks $RANKS --steps $STEPS --step-us 2000 --kernel-us 2000 \
	--job-id "$JOB" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "workload under the tracer failed"; }
grep -q '^ring_drops=0$' "$WORK/out" || fail "ring buffer drops: $(grep ring_drops "$WORK/out")"
spin=$(sed -n 's/^fq-standin nccl: rank 1 proxy progress cpu_ns \([0-9]*\)$/\1/p' "$WORK/out")
[ -n "$spin" ] || { cat "$WORK/out"; fail "rank 1's proxy progress thread reported no CPU time"; }
expect "proxy threads on rank 1 only" \
	"$(grep -c 'proxy progress cpu_ns' "$WORK/out")" 1
PIDS="SELECT pid FROM processes WHERE job_id = '$JOB'"
# each rank's CPU work over its collectives (the first has none: nothing before it)
work() {
	q "SELECT sum(cpu_ns) FROM collectives WHERE pid IN ($PIDS) AND rank = $1 AND cpu_ns IS NOT NULL"
}
w1=$(work 1)
peers=$(for r in 0 2 3; do work $r; done | sort -n)
echo "rank 1's proxy progress thread: $spin ns of CPU; CPU work, rank 1: $w1 ns; ranks 0, 2, 3: $(echo $peers)"
med=$(echo "$peers" | sed -n 2p)
[ -n "$w1" ] && [ -n "$med" ] && [ "$med" -gt 0 ] || fail "no cpu_ns on the ranks' collectives"
# the spin is a real share of the work: counting it would show
[ "$spin" -gt $((med / 2)) ] || fail "the proxy thread spun $spin ns, under half a peer's CPU work ($med ns): the test cannot tell"
# left out: rank 1 within a quarter of the spin of its peers' median
diff=$((w1 > med ? w1 - med : med - w1))
[ "$diff" -lt $((spin / 4)) ] || fail "rank 1's CPU work $w1 ns against its peers' median $med ns: $diff ns apart, the proxy thread spun $spin ns (counted as the job's work?)"
echo "ok: rank 1's CPU work is its peers' ($diff ns apart; the proxy spun $spin ns)"
expect "meta cpu_work" "$(q "SELECT value FROM meta WHERE key = 'cpu_work'")" \
	"every thread but those NCCL started, outside probed waits"
# the proxy threads' own off-CPU rows are still recorded: they are the process's threads
expect "off-CPU rows of threads other than the ranks' main ones" \
	"$(q "SELECT count(DISTINCT tid) > 0 FROM offcpu WHERE pid IN (SELECT pid FROM processes WHERE job_id = '$JOB' AND rank = 1) AND tid != pid")" 1
echo "PASS"
