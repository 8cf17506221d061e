#!/bin/sh
# SPDX-License-Identifier: MIT
# Read-only and limits: writes denied (file unchanged), SQL errors, the
# deadline, row and byte limits (client lower, never higher), busy, and a
# client that leaves mid-query freeing its worker.
. "$(dirname "$0")/lib.sh"
make_certs
make_db
before=$(sha256sum <"$T/trace.db")
start_agentd --max-rows 500 --max-queries 1

forever="WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
fq query "DELETE FROM t" \
	query "INSERT INTO t VALUES (1, 2, 3, 'x')" \
	query "CREATE TABLE evil (x)" \
	query "ATTACH DATABASE '$T/other.db' AS o" \
	query "SELECT * FROM no_such_table" \
	query "SELEKT 1" \
	query "SELECT 1; DELETE FROM t" \
	--timeout-ms 300 query "$forever" \
	--max-rows 5 query "SELECT a FROM t ORDER BY a" \
	--max-rows 100000 query "SELECT a FROM t ORDER BY a" \
	--max-bytes 1000 --count query "SELECT a, d FROM t ORDER BY a" \
	query "SELECT a FROM t WHERE a <= 500" \
	query "SELECT count(*) FROM t" \
	>"$T/out" 2>"$T/fqtc.err" || fail "fqtc exited $?"

has_re "$T/out" '^end id=1 status=5 rows=0 truncated=0 msg=.+'
has_re "$T/out" '^end id=2 status=5 rows=0 truncated=0 msg=.+'
has_re "$T/out" '^end id=3 status=5 rows=0 truncated=0 msg=.+'
has_re "$T/out" '^end id=4 status=(4|5) rows=0 truncated=0 msg=.+'
has_re "$T/out" '^end id=5 status=4 rows=0 truncated=0 msg=.*no_such_table'
has_re "$T/out" '^end id=6 status=4 rows=0 truncated=0 msg=.+'
has_re "$T/out" '^end id=7 status=(4|5) rows=0 truncated=0 msg=.+'
has_re "$T/out" '^end id=8 status=6 rows=0 truncated=1 msg=.*deadline'
has "$T/out" "end id=9 status=7 rows=5 truncated=1 msg=row limit of 5 reached"
# A client may not raise the agent's --max-rows 500.
has "$T/out" "end id=10 status=7 rows=500 truncated=1 msg=row limit of 500 reached"
has_re "$T/out" '^end id=11 status=8 rows=[1-9][0-9]* truncated=1 msg=byte limit of 1000 reached'
rows=$(sed -n 's/^end id=11 status=8 rows=\([0-9]*\) .*/\1/p' "$T/out")
[ "$rows" -lt 1000 ] || fail "byte limit let $rows rows through"
# Exactly at the limit is not truncated.
has "$T/out" "end id=12 status=0 rows=500 truncated=0 msg="
has "$T/out" "1000"
[ "$(grep -c '^end ' "$T/out")" = 13 ] || fail "expected 13 END frames"
[ "$(sha256sum <"$T/trace.db")" = "$before" ] || fail "the trace file changed"
[ ! -e "$T/other.db" ] || fail "ATTACH created $T/other.db"
has_re "$T/agentd.log" 'status=denied .*sql="DELETE FROM t"'
has_re "$T/agentd.log" 'status=timeout'

# --max-queries 1: a second query while one runs is told to retry.
fq_bg "$T/long" --timeout-ms 20000 query "$forever"
LONG=$BG
wait_for "the long query's COLUMNS" grep -q '^columns' "$T/long"
fq query "SELECT 1" >"$T/busy" 2>&1 || fail "busy client exited $?"
has "$T/busy" "end id=1 status=10 rows=0 truncated=0 msg=agent busy: 1 queries running, retry"
# The long query's client goes away: its worker must stop and free the slot.
kill "$LONG"
wait "$LONG" 2>/dev/null || true
try_query() {
	fq query "SELECT 42" >"$T/after" 2>&1 && grep -qx "42" "$T/after"
}
wait_for "the cancelled query's slot" try_query
has_re "$T/agentd.log" 'status=cancelled'
echo ok
