#!/bin/bash
# SPDX-License-Identifier: MIT
# A process that enters the traced cgroup after its exec, with libnccl already mapped:
# the tracer (scoped, no pre-attached libraries) must catch the move, attach, and see the
# communicator init and every all-reduce with rank, nranks, hash and seq.
. "$(dirname "$0")/lib.sh"
MIGRATE=$3
V2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$V2" ] || skip "no cgroup2 mount"
CG=$V2/fqtrace-migrate-$$
cleanup() {
	rmdir "$CG" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
mkdir "$CG" || skip "cannot create a cgroup under $V2"
DB=$WORK/trace.db
CALLS=50
"$DRIVER" --db "$DB" --cgroup "$CG" --probes "nccl,sync,proc" -- \
	"$MIGRATE" "$STANDIN/libnccl.so.2" "$CG" $CALLS >"$WORK/out" 2>&1 ||
	{ cat "$WORK/out"; fail "migrating process under the tracer failed"; }
cat "$WORK/out"
PID=$(sed -n 's/^pid=\([0-9]*\) .*/\1/p' "$WORK/out")
[ -n "$PID" ] || fail "no pid line from the migrating process"
expect "comm init seen (rank, nranks, hash)" \
	"$(q "SELECT rank || ',' || nranks || ',' || length(comm_hash) FROM comms WHERE pid = $PID")" "0,1,16"
expect "all-reduces (count, distinct seq, min, max, with hash)" \
	"$(q "SELECT count(*) || ',' || count(DISTINCT seq) || ',' || min(seq) || ',' || max(seq) || ',' || count(comm_hash) FROM collectives WHERE pid = $PID")" \
	"$CALLS,$CALLS,0,$((CALLS - 1)),$CALLS"
echo PASS
