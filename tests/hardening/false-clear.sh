#!/bin/sh
# SPDX-License-Identifier: MIT
# Exit 0 means "looked everywhere and found nothing" (a Slurm epilog or a CI gate trusts
# it): an analysis that saw no rank (no such job, a window before the trace), part of a
# communicator (-w naming some of the job's nodes), or a fan-out where no node answered
# (even under --min-coverage 0) exits 3 with one line that says what to check.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
NOW_S=$(date +%s)
START=$(((NOW_S - 15) * 1000000000))
# one 32-rank job (4242), 8 ranks on each of 4 nodes, ending ~5 s ago
HOSTS=
for k in 0 1 2 3; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 8 --rank-base $((8 * k)) \
		--nranks 32 --steps 200 --start-ns $START --seed 7 >"$T/gen.log" 2>&1 ||
		fail "fq-tracegen node$k"
	start_agent "n$k" "$T/n$k.db" ca
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
	[ $k = 0 ] && FIRST=127.0.0.1:$PORT
done
export FLEETQ_SQL_DIR="$(dirname "$0")/../../sql/analysis"

# the whole job: a verdict, exit 0
fq -w "$HOSTS" stragglers --since 2m
expect_rc 0 "stragglers over the whole job"
fq -w "$HOSTS" netcheck --since 2m
expect_rc 0 "netcheck over the whole job"

# no such job: no verdict
for a in stragglers netcheck; do
	fq -w "$HOSTS" $a --job 9999 --since 15m
	expect_rc 3 "$a --job 9999"
	err_has "^fleetq: no collectives of job 9999 in the last 15m on 4 nodes: check --job/--since$"
	! grep -q "none among\|nothing among" "$T/err" || fail "$a --job 9999 says all clear"
	fq -w "$HOSTS" $a --job 9999 --since 15m --format tsv
	expect_rc 3 "$a --job 9999 --format tsv"
	fq -q -w "$HOSTS" $a --job 9999 --since 15m --format json
	expect_rc 3 "$a --job 9999 --format json -q"
	err_has "^fleetq: no collectives of job 9999"
done
# the job's own id and all time: a verdict
fq -w "$HOSTS" stragglers --job 4242 --since all
expect_rc 0 "stragglers --job 4242 --since all"

# traces older than the window
sleep 1
fq -w "$HOSTS" stragglers --since 1s
expect_rc 3 "stragglers over a window after the trace"
err_has "^fleetq: no collectives in the last 1s on 4 nodes: check --since$"
fq -w "$HOSTS" netcheck --since 1s
expect_rc 3 "netcheck over a window after the trace"

# a partial communicator: 8 of 32 ranks answered
fq -w "$FIRST" stragglers --since all
expect_rc 3 "stragglers on one node of four"
err_has "^fleetq: 8 of 32 ranks of communicator [0-9a-f]{16} answered: query every node of the job$"
fq -w "$FIRST" stragglers --since all --format tsv --all
expect_rc 3 "stragglers --format tsv on one node of four"
fq -w "$FIRST" netcheck --since all
expect_rc 3 "netcheck on one node of four"
err_has "^fleetq: 8 of 32 ranks of communicator"

# the CI example must not print PASS for either
printf '%s\n' "$HOSTS" | tr , '\n' >"$T/hosts"
FLEETQ_CA=$T/ca/ca.crt FLEETQ_CERT=$T/ca/client.crt FLEETQ_KEY=$T/ca/client.key \
	sh "$(dirname "$0")/../../examples/ci/straggler-gate.sh" --hosts "$T/hosts" --job 9999 \
	--since 15m >"$T/out" 2>"$T/err"
RC=$?
expect_rc 3 "straggler-gate.sh --job 9999"
! grep -q PASS "$T/out" || fail "straggler-gate.sh: $(cat "$T/out")"
grep -q "no collectives of job 9999" "$T/out" || fail "straggler-gate.sh: $(cat "$T/out")"
echo "$FIRST" >"$T/hosts1"
FLEETQ_CA=$T/ca/ca.crt FLEETQ_CERT=$T/ca/client.crt FLEETQ_KEY=$T/ca/client.key \
	sh "$(dirname "$0")/../../examples/ci/straggler-gate.sh" --hosts "$T/hosts1" \
	--since all >"$T/out" 2>"$T/err"
RC=$?
expect_rc 3 "straggler-gate.sh over one node of four"
! grep -q PASS "$T/out" || fail "straggler-gate.sh: $(cat "$T/out")"

# gate agrees
fq -w "$HOSTS" gate --save "$T/base.json" --job 9999 --since 15m
expect_rc 3 "gate --job 9999"

# --min-coverage 0 forgives some nodes, not all of them
DEAD=127.0.0.1:$(free_port)
fq -w "$DEAD" --min-coverage 0 --connect-timeout 2 "SELECT 1"
expect_rc 3 "query, every node unreachable, --min-coverage 0"
fq -w "$FIRST" --min-coverage 0 "SELECT * FROM no_such_table"
expect_rc_not0() { [ "$RC" != 0 ] || fail "$1: exit 0"; }
expect_rc_not0 "query, SQL error on every node, --min-coverage 0"
fq -w "$DEAD" --min-coverage 0 --connect-timeout 2 ping
expect_rc 3 "ping, every node unreachable, --min-coverage 0"
fq -w "$DEAD,$FIRST" --min-coverage 0 --connect-timeout 2 "SELECT 1"
expect_rc 0 "query, one node of two, --min-coverage 0"

# ... but a rank with nothing on a communicator in the window answered if its node sent the
# communicator's newest collective: a 2-rank job whose rank 1 last used the communicator
# 20 s before rank 0 (a pipeline's world communicator carries send/recv and a barrier now
# and then, and one rank's barrier fell inside the window, the other's not) is covered
# (each window is 10 s from now: the jobs end when made, not when the test began)
END_S=$(date +%s)
for k in 0 1; do
	"$TRACEGEN" --out "$T/p$k.db" --node "pp$k" --ranks 1 --rank-base $k --nranks 2 \
		--steps 200 --end "$END_S" --seed 9 --comm-hash 00000000000000aa >"$T/gen.log" 2>&1 ||
		fail "fq-tracegen pp$k"
done
python3 -c "import sqlite3, sys
d = sqlite3.connect(sys.argv[1])
for t in ('collectives', 'cuda_calls', 'offcpu'):
    d.execute('UPDATE %s SET ts_ns = ts_ns - 20000000000' % t)
d.commit()" "$T/p1.db" || fail "moving pp1's collectives back"
start_agent p0 "$T/p0.db" ca
P0=127.0.0.1:$PORT
start_agent p1 "$T/p1.db" ca
fq -w "$P0,127.0.0.1:$PORT" stragglers --since 10s
expect_rc 0 "stragglers, a rank idle on its communicator in the window"
! grep -q "ranks of communicator" "$T/err" || fail "idle rank counted as missing: $(cat "$T/err")"
fq -w "$P0" stragglers --since 10s
expect_rc 3 "stragglers without the idle rank's node"
err_has "^fleetq: 1 of 2 ranks of communicator 00000000000000aa answered: query every node of the job$"

# pipe_pair TAG END COMM [FIRST]: a pipeline of one rank a stage, two nodes of one rank whose
# collectives, ending at END, all turn to send/recv but the 3 from seq FIRST (renumbered from
# 0, as agentd numbers collectives apart from send/recv); serves them, their hosts in $PP
pipe_pair() {
	PP=
	for k in 0 1; do
		"$TRACEGEN" --out "$T/$1$k.db" --node "$1$k" --ranks 1 --rank-base $k --nranks 2 \
			--steps 200 --end "$2" --seed 11 --comm-hash "$3" >"$T/gen.log" 2>&1 ||
			fail "fq-tracegen $1$k"
		python3 -c "import sqlite3, sys
d = sqlite3.connect(sys.argv[1])
f = int(sys.argv[2])
d.execute(\"UPDATE collectives SET op = CASE WHEN rank = 0 THEN 'Send' ELSE 'Recv' END, \"
          \"peer = 1 - rank WHERE seq NOT BETWEEN ? AND ?\", (f, f + 2) if f >= 0 else (-1, -1))
d.execute(\"UPDATE collectives SET seq = seq - ? WHERE op NOT IN ('Send', 'Recv')\", (f,))
kept = d.execute(\"SELECT count(*) FROM collectives WHERE op NOT IN ('Send', 'Recv')\").fetchone()[0]
assert kept == (3 if f >= 0 else 0), kept
d.commit()" "$T/$1$k.db" "${4:--1}" || fail "send/recv $1$k"
		start_agent "$1$k" "$T/$1$k.db" ca
		PP="$PP${PP:+,}127.0.0.1:$PORT"
	done
}
# only send/recv in the window, nothing to compare ranks by
pipe_pair ss "$(date +%s)" 00000000000000bb
fq -w "$PP" stragglers --since 10s
expect_rc 3 "stragglers over send/recv only"
err_has "^fleetq: only send/recv in the last 10s on 2 nodes, no collective to compare ranks by: stragglers judges collectives$"
# the same with a barrier or two in the window (3 collectives of each rank 2.5 s ago stay
# all-reduces): a clean verdict over those would say nothing of the send/recv either
pipe_pair sb "$(date +%s)" 00000000000000bd 150
fq -w "$PP" stragglers --since 10s
expect_rc 3 "stragglers over send/recv and a barrier or two"
err_has "^fleetq: only 3 collectives a rank beside [0-9]* send/recv in the last 10s on 2 nodes, too few to compare ranks by: stragglers judges collectives$"
grep -q "^no verdict: only 3 collectives a rank beside" "$T/out" ||
	fail "send/recv and a barrier or two: the report says '$(cat "$T/out")'"
# an idle stretch (a checkpoint with a barrier every 2 s): about 10 collectives a rank in
# the last 20 s; a clean verdict over those would be a verdict on nothing
END_S=$(date +%s)
for k in 0 1; do
	"$TRACEGEN" --out "$T/i$k.db" --node "idle$k" --ranks 2 --rank-base $((2 * k)) --nranks 4 \
		--steps 30 --step-ns 2000000000 --end "$END_S" --seed 17 \
		--comm-hash 00000000000000be >"$T/gen.log" 2>&1 || fail "fq-tracegen idle$k"
	start_agent "idle$k" "$T/i$k.db" ca
	IDLE="${IDLE:-}${IDLE:+,}127.0.0.1:$PORT"
done
fq -w "$IDLE" stragglers --since 20s
expect_rc 3 "stragglers over an idle stretch"
err_has "^fleetq: only [0-9]+ collectives? a rank in the last 20s on 2 nodes, too few to compare ranks by \\(16 at least\\): widen --since$"
# (the report says no verdict too, not "no straggler")
grep -q "^no verdict: only [0-9]* collectives\{0,1\} a rank in the last 20s" "$T/out" ||
	fail "an idle stretch: the report says '$(cat "$T/out")'"
fq -w "$IDLE" netcheck --since 20s
expect_rc 3 "netcheck over an idle stretch"
err_has "^fleetq: only [0-9]+ collectives? a rank in the last 20s on 2 nodes, too few to find slow ones in \\(16 at least\\): widen --since$"
grep -q "^no verdict: only" "$T/out" || fail "netcheck, an idle stretch: the report says '$(cat "$T/out")'"
# the same job over a minute: 30 a rank, a verdict
fq -w "$IDLE" stragglers --since 2m
expect_rc 0 "stragglers over the idle job's whole minute"
fq -w "$IDLE" netcheck --since 2m
expect_rc 0 "netcheck over the idle job's whole minute"
# its newest 5 seqs: too few as well, and --max-seqs is what to change
fq -w "$IDLE" stragglers --since 2m --max-seqs 5 --format tsv
expect_rc 3 "stragglers --max-seqs 5"
err_has "^fleetq: only 5 collectives a rank in the last 2m on 2 nodes, too few to compare ranks by \\(16 at least\\): raise --max-seqs$"
# netcheck counts them alike (a rank's newest collective is in none of its slow windows)
fq -w "$IDLE" netcheck --since 2m --max-seqs 5
expect_rc 3 "netcheck --max-seqs 5"
err_has "^fleetq: only 5 collectives a rank in the last 2m on 2 nodes, too few to find slow ones in \\(16 at least\\): raise --max-seqs$"
# a communicator made by ncclCommSplit (a pipeline stage's data-parallel group): agentd sees
# no rank or size for it on the CPU side, only the plugin's kernel rows carry them. Its
# ranks answered: a verdict, exit 0; one of its two nodes: 1 of 2 answered, exit 3
END_S=$(date +%s)
for k in 0 1; do
	"$TRACEGEN" --out "$T/c$k.db" --node "cs$k" --ranks 1 --rank-base $k --nranks 2 \
		--steps 200 --end "$END_S" --seed 13 --kernels --comm-hash 00000000000000cc \
		>"$T/gen.log" 2>&1 || fail "fq-tracegen cs$k"
	python3 -c "import sqlite3, sys
d = sqlite3.connect(sys.argv[1])
for t in ('collectives', 'comms'):
    d.execute('UPDATE %s SET rank = NULL, nranks = NULL' % t)
assert d.execute('SELECT count(*) FROM nccl_kernels WHERE comm_hash IS NOT NULL').fetchone()[0]
d.commit()" "$T/c$k.db" || fail "split communicator cs$k"
	start_agent "c$k" "$T/c$k.db" ca
	CS="${CS:-}${CS:+,}127.0.0.1:$PORT"
	[ $k = 0 ] && C0=127.0.0.1:$PORT
done
fq -w "$CS" stragglers --since 10s
expect_rc 0 "stragglers on a split communicator"
fq -w "$C0" stragglers --since 10s
expect_rc 3 "stragglers on one node of a split communicator"
err_has "^fleetq: 1 of 2 ranks of communicator 00000000000000cc answered: query every node of the job$"
echo "false-clear: ok"
