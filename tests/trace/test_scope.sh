#!/bin/bash
# SPDX-License-Identifier: MIT
# Two agents on one host, each scoped to one "node" cgroup of a 4-rank job spread over two
# cgroups: each sees exactly its own two ranks, all their collectives, and the job's one comm.
. "$(dirname "$0")/lib.sh"
V2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$V2" ] || skip "no cgroup2 mount"
PARENT=fqtrace-scope-$$
CG=$V2/$PARENT
cleanup() {
	rmdir "$CG/node0" "$CG/node1" "$CG" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$CG/node0" "$CG/node1" || skip "cannot create cgroups under $V2"
RANKS=4 STEPS=100 JOB=fqscope-$$
P="nccl,sync,sched,proc,$LIBS"
# agent B (node1) waits for the workload to end; agent A (node0, scope given relative to the
# cgroup2 root) starts the workload once B is tracing
"$DRIVER" --db "$WORK/b.db" --cgroup "$CG/node1" --probes "$P" -- \
	sh -c "touch '$WORK/b.ready'; while [ ! -e '$WORK/done' ]; do sleep 0.05; done" \
	>"$WORK/b.out" 2>&1 &
BPID=$!
"$DRIVER" --db "$WORK/a.db" --cgroup "/$PARENT/node0" --probes "$P" -- \
	sh -c "while [ ! -e '$WORK/b.ready' ]; do sleep 0.05; done;
	       '$STANDIN/fq-workload' --ranks $RANKS --steps $STEPS --job-id $JOB \
	           --cgroup-parent '$CG' --cgroups 2; rc=\$?; touch '$WORK/done'; exit \$rc" \
	>"$WORK/a.out" 2>&1
ARC=$?
touch "$WORK/done"
wait $BPID
BRC=$?
cat "$WORK/a.out" "$WORK/b.out"
[ $ARC = 0 ] || fail "agent A / workload failed ($ARC)"
[ $BRC = 0 ] || fail "agent B failed ($BRC)"
for x in a b; do
	grep -q '^ring_drops=0$' "$WORK/$x.out" || fail "agent $x: ring buffer drops"
done
check() { # db, expected ranks "r1,r2"
	DB=$1
	expect "$2: processes in scope" \
		"$(q "SELECT group_concat(rank) FROM (SELECT rank FROM processes ORDER BY rank)")" "$2"
	expect "$2: job id" "$(q "SELECT count(*) FROM processes WHERE job_id IS NOT '$JOB'")" 0
	expect "$2: collectives per rank" \
		"$(q "SELECT group_concat(n) FROM (SELECT count(*) || '/' || count(DISTINCT seq) || '/' || max(seq) AS n FROM collectives GROUP BY rank ORDER BY rank)")" \
		"$STEPS/$STEPS/$((STEPS - 1)),$STEPS/$STEPS/$((STEPS - 1))"
	expect "$2: collectives only from scope" \
		"$(q "SELECT count(*) FROM collectives WHERE pid NOT IN (SELECT pid FROM processes)")" 0
	expect "$2: cuda calls only from scope" \
		"$(q "SELECT count(*) FROM cuda_calls WHERE pid NOT IN (SELECT pid FROM processes)")" 0
	expect "$2: offcpu only from scope" \
		"$(q "SELECT count(*) FROM offcpu WHERE pid NOT IN (SELECT pid FROM processes)")" 0
	expect "$2: one comm" "$(q "SELECT count(DISTINCT comm_hash) FROM comms")" 1
}
check "$WORK/a.db" "0,1"
check "$WORK/b.db" "2,3"
DB=$WORK/a.db
HA=$(q "SELECT comm_hash FROM comms LIMIT 1")
DB=$WORK/b.db
expect "same comm hash on both agents" "$(q "SELECT comm_hash FROM comms LIMIT 1")" "$HA"
echo PASS
