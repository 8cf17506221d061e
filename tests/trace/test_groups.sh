#!/bin/bash
# SPDX-License-Identifier: MIT
# NCCL groups: 3 ranks x 40 steps of fq-workload --ops grouped (per step one ungrouped
# all-reduce, then ncclGroupStart, all-reduce, a nested group with another, send, recv,
# ncclGroupEnd). Every rank has exactly one nccl_groups row per step with ncalls 4, its
# four calls inside the group's window on the same thread, and the report's counts.
. "$(dirname "$0")/lib.sh"
trap 'rm -rf "$WORK"' EXIT
RANKS=3 STEPS=40 JOB=fqgroups-$$
DB=$WORK/trace.db
"$DRIVER" --db "$DB" --probes "nccl,sync,sched,proc,$LIBS" -- \
	"$STANDIN/fq-workload" --ranks $RANKS --steps $STEPS --step-us 200 --ops grouped \
	--job-id "$JOB" --report "$WORK/report.tsv" >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "workload under the tracer failed"; }
cat "$WORK/out"
grep -q '^ring_drops=0$' "$WORK/out" || fail "ring buffer drops: $(grep ring_drops "$WORK/out")"
grep -q '^store_drops=0$' "$WORK/out" || fail "store drops: $(grep store_drops "$WORK/out")"

for r in $(seq 0 $((RANKS - 1))); do
	RP="SELECT pid FROM processes WHERE job_id = '$JOB' AND rank = $r"
	groups=$(awk -F'\t' -v r=$r '$1 == r && $4 == "ncclGroupEnd"' "$WORK/report.tsv" | wc -l)
	calls=$(awk -F'\t' -v r=$r '$1 == r && $4 == "ncclGroupEnd" { n += $6 } END { print n + 0 }' "$WORK/report.tsv")
	expect "report: rank $r groups, calls in them" "$groups,$calls" "$STEPS,$((4 * STEPS))"
	expect "rank $r nccl_groups (rows, sum ncalls, min ncalls, max ncalls, failed)" \
		"$(q "SELECT count(*) || ',' || sum(ncalls) || ',' || min(ncalls) || ',' || max(ncalls) || ',' || sum(ret != 0) FROM nccl_groups WHERE pid IN ($RP)")" \
		"$groups,$calls,4,4,0"
	expect "rank $r group times (dur >= end_dur > 0, rows on the rank's issuing thread)" \
		"$(q "SELECT count(*) FROM nccl_groups g JOIN processes p USING (pid) WHERE p.job_id = '$JOB' AND p.rank = $r AND g.dur_ns >= g.end_dur_ns AND g.end_dur_ns > 0 AND g.tid = g.pid")" \
		"$STEPS"
	expect "rank $r collectives inside a group window" \
		"$(q "SELECT count(*) FROM collectives c JOIN nccl_groups g ON c.pid = g.pid AND c.tid = g.tid AND c.ts_ns BETWEEN g.ts_ns AND g.ts_ns + g.dur_ns WHERE c.pid IN ($RP)")" \
		"$calls"
	expect "rank $r collectives in all (one ungrouped all-reduce a step)" \
		"$(q "SELECT count(*) FROM collectives WHERE pid IN ($RP)")" "$((5 * STEPS))"
done
expect "group windows do not overlap on a thread" \
	"$(q "SELECT count(*) FROM nccl_groups a JOIN nccl_groups b ON a.tid = b.tid AND a.rowid < b.rowid AND b.ts_ns < a.ts_ns + a.dur_ns AND a.ts_ns < b.ts_ns + b.dur_ns")" 0
echo "PASS"
