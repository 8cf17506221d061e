#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq stragglers / netcheck / ping over four real agentd processes (--no-trace, real
# certificates) serving fq-tracegen traces of one 16-rank job, 4 ranks per node: a clean
# job exits 0, a slow rank exits 1 naming it first, a hung rank exits 5 with its seq.
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1
NOW_S=$(date +%s)
# The job ran until 5 s ago: inside --since 2m, and old enough for a hang to show.
STEPS=200
START=$(((NOW_S - 15) * 1000000000))

# gen TAG ARGS...: writes $T/TAG-n{0..3}.db (ARGS after the defaults: the last wins)
gen() {
	tag=$1
	shift
	for k in 0 1 2 3; do
		"$TRACEGEN" --out "$T/$tag-n$k.db" --node "node$k" --ranks 4 --rank-base $((4 * k)) \
			--nranks 16 --steps $STEPS --start-ns $START "$@" >"$T/gen.log" 2>&1 ||
			fail "fq-tracegen $tag node$k"
	done
}
# serve TAG: an agent for each of them; sets HOSTS
serve() {
	HOSTS=
	for k in 0 1 2 3; do
		start_agent "$1$k" "$T/$1-n$k.db" ca
		HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
	done
}
# job TAG ARGS...: both
job() {
	gen "$@"
	serve "$1"
}

# 1. clean: exit 0, "no straggler", all 16 ranks seen
job clean --seed 5
fq -w "$HOSTS" stragglers --since 2m
expect_rc 0 "clean job"
grep -q "^no straggler: 16 ranks in 1 communicator, last 2m" "$T/out" ||
	fail "clean report: $(cat "$T/out")"
expect_err "fleetq: stragglers: none among 16 ranks"
expect_err "coverage: 4/4 nodes ok"
# "clean" holds for the collectives judged: the report says how much time they span, the
# job's whole run here, and less where --max-seqs keeps only the newest
span=$(sqlite3 "$T/clean-n0.db" "SELECT printf('%.1f', (max(ts_ns) - min(ts_ns)) / 1e9) FROM collectives")
grep -q ": $span s of collectives judged$" "$T/out" || fail "judged span, want $span s: $(cat "$T/out")"
fq -w "$HOSTS" stragglers --since 2m --max-seqs 50
span=$(sqlite3 "$T/clean-n0.db" "SELECT printf('%.1f', (max(ts_ns) - min(ts_ns)) / 1e9) FROM collectives
	WHERE seq > (SELECT max(seq) - 50 FROM collectives)")
grep -q "^no straggler: 16 ranks in 1 communicator, last 2m, newest 50 seqs: $span s of collectives judged$" "$T/out" ||
	fail "judged span with --max-seqs 50, want $span s: $(cat "$T/out")"

# global options before the subcommand work the same
"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" \
	-w "$HOSTS" stragglers --since 2m --format json --with-coverage >"$T/out" 2>"$T/err"
RC=$?
expect_rc 0 "clean job, json"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["rows"] == [], d["rows"]
assert "verdict" in d["columns"] and d["columns"][0] == "comm_hash", d["columns"]
assert d["coverage"]["ok"] == 4, d["coverage"]
' "$T/out" || fail "clean json: $(cat "$T/out")"

# 1b. p2p on the same communicator (Send/Recv number their own seqs, as agentd does):
# one rank's Send/Recv rows, more of them than collectives and newer, change nothing
sqlite3 "$T/clean-n0.db" "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n
	WHERE i < $((2 * STEPS + 9)))
	INSERT INTO collectives (ts_ns, dur_ns, pid, tid, comm_ptr, comm_hash, rank, nranks, seq,
		op, count, bytes, datatype, peer, busy_ns)
	SELECT (SELECT max(ts_ns) FROM collectives) + 1 + i, 1000, c.pid, c.tid, c.comm_ptr,
		c.comm_hash, c.rank, c.nranks, i, CASE i % 2 WHEN 0 THEN 'Send' ELSE 'Recv' END,
		1024, 4096, 'float32', c.rank + 1, 0
	FROM n, (SELECT * FROM collectives WHERE rank = 0 LIMIT 1) c" ||
	fail "cannot add p2p rows"
fq -w "$HOSTS" stragglers --since 2m
expect_rc 0 "clean job with p2p rows on one rank"
grep -q "^no straggler: 16 ranks in 1 communicator, last 2m" "$T/out" ||
	fail "clean report with p2p rows: $(cat "$T/out")"
fq -w "$HOSTS" netcheck --since 2m
expect_rc 0 "netcheck, clean job with p2p rows"

# 2. netcheck on the clean job: nothing to name, exit 0
fq -w "$HOSTS" netcheck --since 2m
expect_rc 0 "netcheck, clean"
grep -q "^no network trouble: 16 ranks" "$T/out" || fail "netcheck report: $(cat "$T/out")"

# 3. ping: 4 nodes, connected, small offsets (one host), agent and schema versions
fq -w "$HOSTS" ping --format csv
expect_rc 0 "ping"
python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, rows
for r in rows:
    assert r["status"] == "ok", r
    assert abs(int(r["offset_us"])) < 50000, r
    assert 0 <= int(r["rtt_us"]) < 1000000, r
    assert r["schema"] == "5" and r["agent"], r
    assert r["name"].startswith("clean"), r
' "$T/out" || fail "ping: $(cat "$T/out")"

# 4. clock table in the merge database, for plain queries too (HELLO's sample)
fq -w "$HOSTS" --format csv --merge "SELECT count(*), max(abs(offset_ns)) < 50000000,
	min(rtt_ns) >= 0 FROM clock" "SELECT 1"
expect_rc 0 "clock table"
[ "$(tail -n 1 "$T/out")" = "4,1,1" ] || fail "clock table: $(cat "$T/out")"

# 5. slow rank 6 (node1) at 20%: exit 1, rank 6 on its node named first
job slow --seed 6 --slow-rank 6 --slow-pct 20
fq -w "$HOSTS" stragglers --since 2m
expect_rc 1 "slow rank"
head -n 1 "$T/out" | grep -Eq "^straggler: rank 6 on 127.0.0.1:[0-9]+ \\(costs its peers [0-9.]+% of (the span|a step)\\)$" ||
	fail "slow report: $(cat "$T/out")"
SLOWNODE=$(head -n 1 "$T/out" | sed 's/.* on //; s/ (.*//')
SLOWPORT=$(cat "$T/slow1.port")
[ "$SLOWNODE" = "127.0.0.1:$SLOWPORT" ] || fail "rank 6 is on node1 ($SLOWPORT), not $SLOWNODE"
grep -q "cost: peers lost [0-9.]* GPU-seconds" "$T/out" || fail "no cost: $(cat "$T/out")"
expect_err "1 straggler (first: rank 6 on "
fq -w "$HOSTS" stragglers --since 2m --format ndjson --with-coverage
expect_rc 1 "slow rank, ndjson"
head -n 1 "$T/out" | grep -q '"rank":6,' || fail "ndjson: $(head -n 1 "$T/out")"
tail -n 1 "$T/out" | grep -q '^{"coverage":{"total":4,"ok":4' || fail "ndjson coverage"
# a straggler on partial coverage is still a finding (1); clean on partial is not 0
fq -w "$HOSTS,127.0.0.1:$(free_port)" stragglers --since 2m
expect_rc 1 "slow rank, one node down"
expect_err "unreachable"
fq -w "$HOSTS" stragglers --since 2m --threshold 1e5
expect_rc 0 "slow rank under an absurd threshold"
! grep -q "closest" "$T/out" || fail "closest with no z past the threshold: $(cat "$T/out")"
# a clean verdict says which rank came closest, and by how much: under a bar of 90 % the
# slow rank is no straggler (exit 0), but the line under the verdict names it
fq -w "$HOSTS" stragglers --since 2m --min-effect 90
expect_rc 0 "slow rank under a bar of 90 %"
grep -q "^no straggler: 16 ranks" "$T/out" || fail "under a bar of 90 %: $(cat "$T/out")"
grep -Eq "^  closest: rank 6 on $SLOWNODE: its (synchronize waits stand|collective kernels stand|CPU work stands) out \(z [0-9.]+\), [0-9.]+% of the span, under the bar of 90.0%$" \
	"$T/out" || fail "closest line: $(cat "$T/out")"
# (a bar set by hand, over a span --max-seqs did not cut: no hint to widen it)
! grep -q "judges more of the window" "$T/out" || fail "--max-seqs hint without a cut: $(cat "$T/out")"
# a span --max-seqs cut to 40 steps grows the bar (x1.58 under --effect-steps 100): the
# closest line says that a longer span is judged with --max-seqs 4 times larger
fq -w "$HOSTS" stragglers --since 2m --min-effect 60 --max-seqs 40
expect_rc 0 "slow rank under a grown bar of 95 %"
grep -q "^  closest: rank 6 on $SLOWNODE: .*, under the bar of 9[0-9.]*%$" "$T/out" ||
	fail "closest line under a grown bar: $(cat "$T/out")"
grep -q "^  (the span was each communicator's newest 40 collectives, .* --max-seqs 160 judges more of the window)$" \
	"$T/out" || fail "no --max-seqs hint under a grown bar: $(cat "$T/out")"
# ... and only in the report: machine formats keep their rows (none)
fq -w "$HOSTS" stragglers --since 2m --min-effect 90 --format tsv
expect_rc 0 "slow rank under a bar of 90 %, tsv"
[ "$(wc -l <"$T/out")" = 1 ] || fail "tsv under a bar of 90 %: $(cat "$T/out")"

# 5b. the same slow rank 6, and rank 9's sockets (node2) retransmitting 40 segments over the
# job, 90 % of them on one flow: rank 6, with nothing of its own, gets rank 9's link as its
# likely cause (a lossy link delays the ranks its data reaches); rank 9's node counts them too
gen link --seed 6 --slow-rank 6 --slow-pct 20
sqlite3 "$T/link-n2.db" "WITH RECURSIVE i(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM i WHERE x < 39)
	INSERT INTO tcp_retransmits SELECT $START + 1000000000 + x * 50000000,
	(SELECT pid FROM processes WHERE rank = 9), '10.0.0.10', 40000 + (x % 10 = 9),
	'10.0.0.11', 29500, 'ESTABLISHED' FROM i" || fail "cannot add rank 9's retransmits"
serve link
fq -w "$HOSTS" stragglers --since 2m
expect_rc 1 "slow rank, a peer's lossy link"
head -n 1 "$T/out" | grep -q "^straggler: rank 6 on 127.0.0.1:$(cat "$T/link1.port") " ||
	fail "lossy link: want rank 6 first: $(cat "$T/out")"
grep -qx "  likely cause: none of its own; rank 9's sockets (127.0.0.1:$(cat "$T/link2.port")) retransmitted 40 TCP segments vs 0 median (flow 10.0.0.10:40000>10.0.0.11:29500): a lossy link delays the ranks its data reaches (network; fleetq netcheck)" \
	"$T/out" || fail "lossy link: want rank 9's link as the cause: $(cat "$T/out")"

# 5c. 24 all-reduces a step (an FSDP-sized step), rank 6 slower by 4 % of a step: the newest
# 1000 collectives are 42 steps, where the bar grows to 4.7 %; on the default --max-seqs
# fleetq asks again over the 2700 newest (112 steps, the bar 3 %) and names rank 6, and says
# so; with --max-seqs 1000 given, the verdict is clean and the closest line says why
job fsdp --steps 120 --colls-per-step 24 --seed 7 --slow-rank 6 --slow-pct 4
fq -w "$HOSTS" stragglers --since 2m
expect_rc 1 "slow rank, 24 collectives a step"
head -n 1 "$T/out" | grep -q "^straggler: rank 6 on 127.0.0.1:$(cat "$T/fsdp1.port") " ||
	fail "24 a step: want rank 6 first: $(cat "$T/out")"
grep -qx "  (the newest 1000 collectives of a communicator spanned 42 steps, under --effect-steps: judged its newest 2700)" \
	"$T/out" || fail "24 a step: no line for the wider span: $(cat "$T/out")"
expect_err "newest 2700 seqs"
# machine formats: the same verdict, the note on stderr, no clean rank's row
fq -w "$HOSTS" stragglers --since 2m --format csv
expect_rc 1 "slow rank, 24 collectives a step, csv"
[ "$(tail -n +2 "$T/out" | wc -l)" = 1 ] && tail -n 1 "$T/out" | grep -q ",6,[0-9]*,16,16,straggler," ||
	fail "24 a step, csv: want rank 6's row alone: $(cat "$T/out")"
expect_err "fleetq: stragglers: the newest 1000 collectives of a communicator spanned 42 steps, under --effect-steps: judged its newest 2700"
fq -w "$HOSTS" stragglers --since 2m --max-seqs 1000
expect_rc 0 "slow rank, 24 collectives a step, --max-seqs 1000"
grep -q "^  closest: rank 6 on 127.0.0.1:$(cat "$T/fsdp1.port"): .*, under the bar of 4\.[0-9]%$" "$T/out" ||
	fail "24 a step, --max-seqs 1000: want rank 6 closest: $(cat "$T/out")"
grep -q "^  (the span was each communicator's newest 1000 collectives, .* --max-seqs 4000 judges more of the window)$" \
	"$T/out" || fail "24 a step, --max-seqs 1000: no hint: $(cat "$T/out")"
! grep -q "judged its newest" "$T/out" || fail "widened though --max-seqs was given: $(cat "$T/out")"

# 6. hung rank 9 (node2) at seq 120: exit 5, "stopped at seq 120"
job hang --seed 3 --hang-rank 9 --hang-at 120
fq -w "$HOSTS" stragglers --since 2m
expect_rc 5 "hung rank"
head -n 1 "$T/out" | grep -q "^hung: rank 9 on 127.0.0.1:$(cat "$T/hang2.port") stopped at seq 120 ([a-zA-Z]*AllReduce)" ||
	fail "hang report: $(cat "$T/out")"
# a hang wins over coverage and TLS trouble
fq -w "$HOSTS,127.0.0.1:$(free_port)" stragglers --since 2m
expect_rc 5 "hung rank, one node down"

# 7. clean job with a node down: coverage short, never 0
fq -w "127.0.0.1:$(cat "$T/clean0.port"),127.0.0.1:$(free_port)" stragglers --since 2m
expect_rc 3 "clean on partial coverage"
grep -qx "no verdict: 1 of 2 nodes answered fully (see the coverage)" "$T/out" ||
	fail "clean on partial coverage: the report says '$(cat "$T/out")'"
! grep -q "none among" "$T/err" || fail "clean on partial coverage: stderr says '$(cat "$T/err")'"
fq -w "127.0.0.1:$(free_port)" stragglers --since 2m
expect_rc 3 "no node answered"
grep -q "^no answer" "$T/out" || fail "no-answer report: $(cat "$T/out")"

echo PASS
