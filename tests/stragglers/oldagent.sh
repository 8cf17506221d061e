#!/bin/sh
# SPDX-License-Identifier: MIT
# A fleet in the middle of an upgrade: four real agentd processes (--no-trace, real
# certificates) serving fq-tracegen traces of one 16-rank job, two of them files of agents
# older than the tables this fleetq's analyses read (gpu_busy, gpu_samples, process_gpus,
# gpu_activity dropped, as an agent that predates them never made them). Every analysis
# asks those nodes again with the tables read as empty: the slow rank on an old node is
# named, every node counts, and fleetq says which tables were missing where. A table of no
# trace schema stays the error it is.
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1
NOW_S=$(date +%s)
START=$(((NOW_S - 15) * 1000000000))
HOSTS=
for k in 0 1 2 3; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 4 --rank-base $((4 * k)) \
		--nranks 16 --steps 200 --start-ns $START --kernels --busy-frac 0.6 \
		--slow-rank 9 --slow-pct 30 >"$T/gen.log" 2>&1 || fail "fq-tracegen node$k"
done
# node1: before the GPU tables; node2: before gpu_busy and gpu_activity only
sqlite3 "$T/n1.db" "DROP TABLE gpu_busy; DROP TABLE gpu_samples; DROP TABLE process_gpus;
	DROP TABLE gpu_activity" || fail "cannot age node1's file"
sqlite3 "$T/n2.db" "DROP TABLE gpu_busy; DROP TABLE gpu_activity" || fail "cannot age node2's file"
for k in 0 1 2 3; do
	start_agent "old$k" "$T/n$k.db" ca
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
done
# the agents serve their files as they are (no table made for them)
[ "$(sqlite3 "$T/n1.db" "SELECT count(*) FROM sqlite_schema WHERE name = 'gpu_busy'")" = 0 ] ||
	fail "agentd --no-trace made a table in node1's file"

fq -w "$HOSTS" stragglers --since 2m
expect_rc 1 "slow rank 9 on an old agent's node"
head -n 1 "$T/out" | grep -q "^straggler: rank 9 on " || fail "want rank 9 first: $(cat "$T/out")"
expect_err "coverage: 4/4 nodes ok"
expect_err "fleetq: 2 nodes' agents predate table gpu_busy: read as empty there (what it holds: not measured; upgrade agentd)"
# its evidence: what the old file has (no GPU samples there)
grep -q "^  why: no GPU samples for its process" "$T/out" || fail "evidence of rank 9: $(cat "$T/out")"
# every rank, the old nodes' too, with its fields
fq -w "$HOSTS" stragglers --since 2m --all --format csv
python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert sorted(int(r["rank"]) for r in rows) == list(range(16)), rows
' "$T/out" || fail "every rank, csv: $(cat "$T/out")"

# the other analyses too
fq -w "$HOSTS" netcheck --since 2m
expect_rc 0 "netcheck over old agents"
expect_err "coverage: 4/4 nodes ok"
fq -w "$HOSTS" timeline --since 2m
expect_rc 0 "timeline over old agents"
expect_err "coverage: 4/4 nodes ok"

# every node old: nobody answered the first time, the second answers make the table
HOSTS2=
for k in 1 2; do
	start_agent "again$k" "$T/n$k.db" ca
	HOSTS2="$HOSTS2${HOSTS2:+,}127.0.0.1:$PORT"
done
fq -w "$HOSTS2" stragglers --since 2m --all --format csv
expect_rc 1 "only old agents"
expect_err "coverage: 2/2 nodes ok"
[ "$(tail -n +2 "$T/out" | wc -l)" = 8 ] || fail "only old agents: want 8 ranks: $(cat "$T/out")"

# an analysis file of one's own that reads a table no trace has: refused before any node is
# asked (the node file is checked against this build's schema), nothing asked again
mkdir -p "$T/sql"
cp "$FLEETQ_SQL_DIR"/*.sql "$T/sql/"
sed -i "s/JOIN gpu_busy b/JOIN gpu_busyy b/" "$T/sql/stragglers.node.sql"
grep -q gpu_busyy "$T/sql/stragglers.node.sql" || fail "cannot make the bad analysis file"
FLEETQ_SQL_DIR=$T/sql fq -w "$HOSTS" stragglers --since 2m
expect_rc 2 "a table of no schema"
expect_err "no such table: gpu_busyy"
grep -q "predate" "$T/err" && fail "asked again for a table of no schema: $(cat "$T/err")"
echo PASS
