#!/bin/sh
# SPDX-License-Identifier: MIT
# The user's own mistakes and limits read as such: a mistyped subcommand is not sent to
# the nodes as SQL (exit 2 with a suggestion), SQL every answering node refuses exits 2
# (not 3, "coverage"), --max-rows is what was asked for (exit 0, said on stderr) unless an
# agent's own limit cut the rows, and a BUSY agent shows as "busy".
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
NOW_S=$(date +%s)
HOSTS=
for k in 0 1 2; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 2 --rank-base $((2 * k)) \
		--nranks 6 --steps 20 --start-ns $(((NOW_S - 5) * 1000000000)) >"$T/gen.log" 2>&1 ||
		fail "fq-tracegen node$k"
	start_agent "n$k" "$T/n$k.db" ca
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
done
A=${HOSTS%%,*}

# 1. a mistyped subcommand: a usage error, no query sent
fq -w "$HOSTS" straglers
expect_rc 2 "straglers"
err_has "^fleetq: unknown subcommand 'straglers'; did you mean 'stragglers'\?$"
fq -w "$HOSTS" netchek --since 5m
expect_rc 2 "netchek"
err_has "did you mean 'netcheck'\?$"
fq -w "$HOSTS" pnig
expect_rc 2 "pnig"
err_has "did you mean 'ping'\?$"
fq -w "$HOSTS" frobnicate
expect_rc 2 "frobnicate"
err_has "^fleetq: unknown subcommand 'frobnicate': see fleetq --help"
sleep 0.2
! grep -q "straglers\|netchek\|pnig\|frobnicate" "$T"/n*.log || fail "a typo reached an agent"
# one word that is SQL still goes to the nodes (and is refused there)
fq -w "$A" VACUUM
! grep -q "unknown subcommand" "$T/err" || fail "VACUUM taken for a subcommand"
grep -q "VACUUM" "$T/n0.log" || fail "VACUUM did not reach the agent"

# 2. SQL refused by every node that answered: the user's mistake, exit 2
fq -w "$HOSTS" "SELECT * FROM no_such_table"
expect_rc 2 "no such table on every node"
err_has "sql error on all 3 nodes: no such table: no_such_table"
fq -w "$HOSTS" "DELETE FROM collectives"
expect_rc 2 "a write on every node"
DEAD=127.0.0.1:$(free_port)
fq -w "$A,$DEAD" --connect-timeout 2 "SELECT * FROM no_such_table"
expect_rc 2 "no such table on the node that answered"
# but a table only some nodes have is coverage
sqlite3 "$T/n1.db" "CREATE TABLE extra(x); INSERT INTO extra VALUES (1)" ||
	fail "cannot add a table"
fq -w "$HOSTS" "SELECT * FROM extra"
expect_rc 3 "a table on one node of three"

# 3. --max-rows: the user's limit, exit 0, said on stderr
fq -w "$HOSTS" --max-rows 5 "SELECT seq FROM collectives"
expect_rc 0 "--max-rows 5"
[ "$(tail -n +2 "$T/out" | wc -l)" = 15 ] || fail "--max-rows 5: $(cat "$T/out")"
err_has "^coverage: 3/3 nodes ok, 15 rows; rows limited by --max-rows: "
fq -w "$HOSTS" --max-rows 5 --merge "SELECT count(*) FROM results" "SELECT seq FROM collectives"
expect_rc 0 "--max-rows 5 --merge"
[ "$(tail -n +2 "$T/out")" = 15 ] || fail "--max-rows 5 --merge: $(cat "$T/out")"
# fewer rows than the limit: no word about it
fq -w "$HOSTS" --max-rows 5 "SELECT 1"
expect_rc 0 "--max-rows 5, one row each"
! grep -q "limited" "$T/err" || fail "--max-rows not reached, yet said: $(cat "$T/err")"
# an analysis over the first rows only gives no verdict
fq -w "$HOSTS" --max-rows 5 stragglers --since all
expect_rc 3 "stragglers --max-rows 5"
err_has "^fleetq: --max-rows 5 cut the rows of 3 nodes"
# an agent's own limit (not asked for) is still coverage lost
start_agent lim "$T/n0.db" ca --max-rows 3
fq -w "127.0.0.1:$PORT" --max-rows 5 "SELECT seq FROM collectives"
expect_rc 3 "an agent's own --max-rows 3 under fleetq's 5"
err_has "truncated: 127.0.0.1:$PORT \\(row limit of 3 reached, 3 rows kept\\)"
fq -w "127.0.0.1:$PORT" "SELECT seq FROM collectives"
expect_rc 3 "an agent's own --max-rows 3"

# 4. BUSY reads "busy", in an END or an ERROR
fake busy
fq --insecure -w "127.0.0.1:$port" "SELECT 1"
expect_rc 3 "busy agent"
err_has "^coverage: 0/1 node ok, 0 rows; busy: 127.0.0.1:$port \\(8 queries running, try again\\)$"
! grep -q "sql error" "$T/err" || fail "BUSY shown as an sql error: $(cat "$T/err")"
fake errbusy
fq --insecure -w "127.0.0.1:$port" "SELECT 1"
expect_rc 3 "busy agent (ERROR)"
err_has "busy: 127.0.0.1:$port \(too many sessions \(256\)\)"
# 5. a column named rowid is the node's, not the merge's row id
B=$(echo "$HOSTS" | cut -d, -f2)
fq -w "$A,$B" --format csv --merge "SELECT * FROM results" "SELECT 42 AS rowid, 'v' AS k"
expect_rc 0 "rowid column"
[ "$(tail -n +2 "$T/out" | cut -d, -f2 | sort -u)" = 42 ] ||
	fail "rowid column overwritten: $(cat "$T/out")"
fq -w "$A,$B" --format csv --merge "SELECT rowid, oid, _rowid_ FROM results" \
	"SELECT 42 AS RowId, 7 AS k"
[ "$(tail -n +2 "$T/out" | cut -d, -f1 | sort -u)" = 42 ] ||
	fail "RowId column overwritten: $(cat "$T/out")"
fq -w "$A,$B" --fail-if "SELECT * FROM results WHERE rowid = 42" "SELECT 42 AS rowid, 'v' AS k"
expect_rc 1 "--fail-if over a rowid column"
fq -w "$A,$B" --format csv --merge "SELECT rowid, _rowid_, oid_2 FROM results" \
	"SELECT 1 AS rowid, 2 AS _rowid_, 3 AS oid"
expect_rc 0 "all three row id names taken"
[ "$(tail -n +2 "$T/out" | sort -u)" = "1,2,3" ] || fail "three row id names: $(cat "$T/out")"
echo "cli-mistakes: ok"
