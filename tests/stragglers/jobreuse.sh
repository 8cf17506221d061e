#!/bin/sh
# SPDX-License-Identifier: MIT
# --job selects a job's processes, not their pids: two nodes ran three jobs one after another,
# the same pids each time (as on a box whose pids wrap, or the stand-in's runs). Served by real
# agents, `stragglers`, its evidence, `netcheck`, `timeline` and `gate` with --job see that
# job's communicators and ranks only:
#   job 101: ranks 0-3 on node0, 4-7 on node1, rank 6 slow; exited
#   job 202: ranks 4-7 on node0 (the same pids), 0-3 on node1 (pids of its own), rank 5 slow;
#            its exit was never recorded (exit_ns NULL: agentd was down), so on node0 it ends
#            where the next process of its pid begins
#   no job:  101's pids again, no job_id, rank 2 slow: never matches any --job
. "$(dirname "$0")/../e2e/lib.sh"

command -v sqlite3 >/dev/null || skip "no sqlite3"
[ -x "${AN_RUN:-}" ] || fail "AN_RUN is not set to an-run"
certs ca 127.0.0.1
NOW_S=$(date +%s)
STEPS=100
A=$(((NOW_S - 50) * 1000000000))
B=$(((NOW_S - 35) * 1000000000))
C=$(((NOW_S - 20) * 1000000000))

# gen NODE TAG START RANKBASE ARGS...: one job's part of node NODE in $T/TAG-nNODE.db
gen() {
	k=$1 tag=$2 start=$3 base=$4
	shift 4
	"$TRACEGEN" --out "$T/$tag-n$k.db" --node "node$k" --ranks 4 --rank-base "$base" \
		--nranks 8 --steps $STEPS --start-ns "$start" --kernels "$@" >"$T/gen.log" 2>&1 ||
		fail "fq-tracegen $tag node$k"
}

HOSTS=
for k in 0 1; do
	gen $k a $A $((4 * k)) --seed 11 --job-id 101 --slow-rank 6 --slow-pct 20
	gen $k b $B $((4 - 4 * k)) --seed 12 --job-id 202 --slow-rank 5 --slow-pct 20
	gen $k c $C $((4 * k)) --seed 13 --job-id none --slow-rank 2 --slow-pct 20
	db=$T/a-n$k.db
	if [ $k = 1 ]; then
		# on node1 job 202 has pids of its own (so its rows match by pid alone), and 101's
		# are reused by the run without a job id only
		for t in processes comms collectives cuda_calls offcpu nccl_kernels; do
			echo "UPDATE $t SET pid = pid + 1;"
		done | sqlite3 "$T/b-n$k.db" || fail "cannot move job 202's pids"
	fi
	# job 101 exited half a second after its last collective; the third run has no job id
	sqlite3 "$db" "UPDATE processes
		SET exit_ns = (SELECT max(ts_ns) FROM collectives) + 500000000;
		ATTACH '$T/b-n$k.db' AS b; ATTACH '$T/c-n$k.db' AS c;
		INSERT INTO processes SELECT * FROM b.processes;
		INSERT INTO processes SELECT pid, start_ns, exit_ns, exit_code, ppid, comm, cmdline,
			cgroup, cgroup_id, rank, local_rank, world_size, NULL FROM c.processes;" ||
		fail "cannot merge node$k"
	for t in comms collectives cuda_calls offcpu nccl_kernels; do
		sqlite3 "$db" "ATTACH '$T/b-n$k.db' AS b; ATTACH '$T/c-n$k.db' AS c;
			INSERT INTO main.$t SELECT * FROM b.$t;
			INSERT INTO main.$t SELECT * FROM c.$t" ||
			fail "cannot merge $t of node$k"
	done
	[ "$(sqlite3 "$db" "SELECT count(DISTINCT pid), count(*) FROM processes")" = \
		"$((4 + 4 * k))|12" ] ||
		fail "node$k: pids are not reused: $(sqlite3 "$db" "SELECT * FROM processes")"
	start_agent "node$k" "$db" ca
	eval "PORT$k=\$PORT"
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
done
HASH_A=$(sqlite3 "$T/a-n0.db" "SELECT comm_hash FROM comms ORDER BY ts_ns LIMIT 1")
HASH_B=$(sqlite3 "$T/b-n0.db" "SELECT comm_hash FROM comms LIMIT 1")
HASH_C=$(sqlite3 "$T/c-n0.db" "SELECT comm_hash FROM comms LIMIT 1")
[ -n "$HASH_A" ] && [ "$HASH_A" != "$HASH_B" ] && [ "$HASH_B" != "$HASH_C" ] ||
	fail "communicators: '$HASH_A' '$HASH_B' '$HASH_C'"

# comms FILE: the communicators FILE names, sorted, on one line
comms() {
	grep -o "$HASH_A\|$HASH_B\|$HASH_C" "$1" | sort -u | tr '\n' ' '
}

# stragglers ID SLOW NODEPORT HASH: only that job's slow rank, on its node, of its communicator
stragglers() {
	fq -w "$HOSTS" stragglers --since 2m --job "$1" --format ndjson
	expect_rc 1 "stragglers --job $1"
	[ "$(grep -c '"verdict":"straggler"' "$T/out")" = 1 ] ||
		fail "--job $1: one straggler wanted: $(cat "$T/out")"
	grep '"verdict":"straggler"' "$T/out" | grep -q "\"comm_hash\":\"$4\".*\"rank\":$2," ||
		fail "--job $1: rank $2 of $4 wanted: $(cat "$T/out")"
	[ "$(comms "$T/out")" = "$4 " ] || fail "--job $1 reads other jobs: $(cat "$T/out")"
	fq -w "$HOSTS" stragglers --since 2m --job "$1"
	expect_rc 1 "stragglers --job $1 (text)"
	head -n 1 "$T/out" | grep -q "^straggler: rank $2 on 127.0.0.1:$3 " ||
		fail "--job $1 text: $(cat "$T/out")"
	grep -q "^  pid [0-9]*, communicator $4 (8 of 8 ranks answered" "$T/out" ||
		fail "--job $1 text: $(cat "$T/out")"
}
stragglers 101 6 "$PORT1" "$HASH_A"
stragglers 202 5 "$PORT0" "$HASH_B"

# without --job every run is there: three communicators of 8 ranks
fq -w "$HOSTS" stragglers --since 2m --format ndjson
[ "$(comms "$T/out")" = "$(printf '%s\n' "$HASH_A" "$HASH_B" "$HASH_C" | sort | tr '\n' ' ')" ] ||
	fail "without --job: $(cat "$T/out")"
# a job nobody ran has no rank (the run without a job id is not one)
fq -w "$HOSTS" stragglers --since 2m --job none
[ "$RC" != 1 ] && [ "$(comms "$T/out")" = "" ] || fail "--job none: $RC $(cat "$T/out")"

# netcheck and timeline: that job's communicator only
for j in "101 $HASH_A" "202 $HASH_B"; do
	set -- $j
	fq -w "$HOSTS" netcheck --since 2m --job "$1"
	expect_rc 0 "netcheck --job $1"
	grep -q "^no network trouble: 8 ranks in 1 communicator," "$T/out" ||
		fail "netcheck --job $1: $(cat "$T/out")"
	fq -w "$HOSTS" timeline --since 2m --job "$1" --max-seqs 5
	expect_rc 0 "timeline --job $1"
	expect_err "of 8 ranks"
	[ "$(comms "$T/out")" = "$2 " ] || fail "timeline --job $1: $(cat "$T/out")"
done

# every node file that takes :job, as fleetq runs it (an-run: node file per trace, then a
# merge over the results): the why evidence's rows too, which its report only summarizes
cat >"$T/comms.sql" <<EOF
SELECT group_concat(comm_hash, ' ') FROM (SELECT DISTINCT comm_hash FROM results
	WHERE comm_hash IN ('$HASH_A', '$HASH_B', '$HASH_C') ORDER BY 1)
EOF
for f in stragglers netcheck timeline why; do
	for j in "101 $HASH_A" "202 $HASH_B" "none "; do
		set -- $j
		got=$("$AN_RUN" -g -p job="$1" -p max_seqs=1000 "$FLEETQ_SQL_DIR/$f.node.sql" \
			"$T/comms.sql" "$T/a-n0.db" "$T/a-n1.db" 2>"$T/an.err" | tail -n 1) ||
			fail "an-run $f --job $1: $(cat "$T/an.err")"
		[ "$got" = "${2:-NULL}" ] || fail "$f.node.sql, job $1: '$got', want '${2:-NULL}'"
	done
done

# gate: the metrics see the job's rows only
fq -w "$HOSTS" gate --since 2m --job 101 --save "$T/gate.json" \
	--metric "comms=SELECT count(DISTINCT comm_hash) FROM collectives" \
	--metric "kernel_comms=SELECT count(DISTINCT nccl_comm) FROM nccl_kernels" \
	--metric "syncs=SELECT count(*) FROM cuda_calls WHERE kind = 'sync'"
expect_rc 0 "gate --job 101"
python3 -c '
import json, sys
m = {x["name"]: x["series"][0]["values"] for x in json.load(open(sys.argv[1]))["metrics"]}
assert m == {"comms": [1.0], "kernel_comms": [1.0], "syncs": [800.0]}, m
' "$T/gate.json" || fail "gate --job 101: $(cat "$T/gate.json")"

echo PASS
