#!/bin/bash
# SPDX-License-Identifier: MIT
# 4 ranks x 200 steps, rank 1 slowed by 50%: every collective exactly once, with rank, nranks,
# one comm hash, seq 0..199, syncs, busy gap and sync wait pointing at rank 1, off-CPU rows,
# process identity from the environment, no ring buffer drops.
. "$(dirname "$0")/lib.sh"
trap 'rm -rf "$WORK"' EXIT
RANKS=4 STEPS=200 JOB=fqtrace-$$
DB=$WORK/trace.db
"$DRIVER" --db "$DB" --probes "nccl,sync,malloc,sched,tcp,proc,$LIBS" -- \
	"$STANDIN/fq-workload" --ranks $RANKS --steps $STEPS --slow-rank 1 --slow-pct 50 \
	--job-id "$JOB" --report "$WORK/report.tsv" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "workload under the tracer failed"; }
cat "$WORK/out"
grep -q '^ring_drops=0$' "$WORK/out" || fail "ring buffer drops: $(grep ring_drops "$WORK/out")"

# this job's processes (other jobs may run on the host while we trace it)
PIDS="SELECT pid FROM processes WHERE job_id = '$JOB'"
expect "rank processes with RANK/WORLD_SIZE/job id" \
	"$(q "SELECT group_concat(rank) FROM (SELECT rank FROM processes WHERE job_id = '$JOB' AND world_size = $RANKS ORDER BY rank)")" "0,1,2,3"
expect "rank processes exited 0" \
	"$(q "SELECT count(*) FROM processes WHERE job_id = '$JOB' AND exit_code = 0 AND exit_ns > start_ns")" "$RANKS"

for r in 0 1 2 3; do
	want=$(awk -F'\t' -v r=$r '$1 == r && $4 == "ncclAllReduce"' "$WORK/report.tsv" | wc -l)
	expect "report: rank $r allreduces" "$want" "$STEPS"
	expect "rank $r collectives (count, distinct seq, min, max)" \
		"$(q "SELECT count(*) || ',' || count(DISTINCT seq) || ',' || min(seq) || ',' || max(seq) FROM collectives WHERE pid IN ($PIDS) AND rank = $r AND op = 'AllReduce'")" \
		"$want,$want,0,$((want - 1))"
	expect "rank $r sync calls" \
		"$(q "SELECT count(*) FROM cuda_calls WHERE pid IN (SELECT pid FROM processes WHERE job_id = '$JOB' AND rank = $r) AND kind = 'sync'")" \
		"$STEPS"
	expect "rank $r blocked off-CPU rows exist" \
		"$(q "SELECT count(*) > 0 FROM offcpu WHERE reason = 'blocked' AND pid IN (SELECT pid FROM processes WHERE job_id = '$JOB' AND rank = $r)")" 1
done
expect "collectives rank matches RANK of the process" \
	"$(q "SELECT count(*) FROM collectives c JOIN processes p USING (pid) WHERE p.job_id = '$JOB' AND (c.rank IS NOT p.rank OR c.nranks IS NOT $RANKS)")" 0
expect "one comm hash across ranks" \
	"$(q "SELECT count(DISTINCT comm_hash) || ',' || count(comm_hash) FROM collectives WHERE pid IN ($PIDS)")" "1,$((RANKS * STEPS))"
expect "comms rows (ranks, nranks, same hash, destroyed)" \
	"$(q "SELECT group_concat(rank) || ';' || count(DISTINCT nranks) || ';' || count(DISTINCT comm_hash) || ';' || count(destroyed_ns) FROM (SELECT * FROM comms WHERE pid IN ($PIDS) ORDER BY rank)")" \
	"0,1,2,3;1;1;$RANKS"
expect "comm hash of collectives = comm hash of comms" \
	"$(q "SELECT count(*) FROM collectives c WHERE pid IN ($PIDS) AND comm_hash NOT IN (SELECT comm_hash FROM comms)")" 0

# busy gap: median per rank, largest on the slow rank; sync wait: smallest on the slow rank
median_busy() {
	q "SELECT busy_ns FROM collectives WHERE pid IN ($PIDS) AND rank = $1 AND busy_ns IS NOT NULL ORDER BY busy_ns LIMIT 1 OFFSET (SELECT count(busy_ns) / 2 FROM collectives WHERE pid IN ($PIDS) AND rank = $1)"
}
slow_busy=$(median_busy 1)
[ -n "$slow_busy" ] || fail "no busy_ns for rank 1"
for r in 0 2 3; do
	b=$(median_busy $r)
	[ -n "$b" ] && [ "$slow_busy" -gt "$b" ] || fail "median busy_ns: rank 1 $slow_busy not above rank $r $b"
done
echo "ok: rank 1 has the largest median busy_ns ($slow_busy)"
expect "rank with the smallest total sync wait" \
	"$(q "SELECT p.rank FROM cuda_calls c JOIN processes p USING (pid) WHERE p.job_id = '$JOB' AND c.kind = 'sync' GROUP BY p.rank ORDER BY sum(c.dur_ns) LIMIT 1")" 1
expect "meta probe_cost_ns present" "$(q "SELECT value > 0 FROM meta WHERE key = 'probe_cost_ns'")" 1
expect "meta clock_source present" "$(q "SELECT value LIKE 'realtime%' FROM meta WHERE key = 'clock_source'")" 1
echo "PASS"
