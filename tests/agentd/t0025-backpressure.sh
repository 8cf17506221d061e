#!/bin/sh
# SPDX-License-Identifier: MIT
# A client that stops reading holds its query back: the worker waits for the
# output to drain instead of buffering the result, so the deadline finds it
# waiting on the client ("client reading slowly"), far short of the last row.
# Meanwhile other sessions are served.
. "$(dirname "$0")/lib.sh"
make_certs
sqlite3 -batch "$T/trace.db" <<'SQL' || fail "cannot make $T/trace.db"
CREATE TABLE b (a INTEGER, b INTEGER, c REAL, d TEXT);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 1000000)
INSERT INTO b SELECT x, x % 1000, x / 3.0, 'rank-' || (x % 64) FROM n;
SQL
start_agentd --max-rows 2000000

fq_bg "$T/slow" --timeout-ms 1500 send "SELECT a, b, c, d FROM b" sleep-ms 4000
# Another session is served while the slow one's worker waits.
fq query "SELECT count(*) FROM b" >"$T/other" 2>&1 || fail "other client exited $?"
has "$T/other" "1000000"
wait_for "the slow query's log line" grep -q 'sql="SELECT a, b, c, d FROM b"' "$T/agentd.log"
has_re "$T/agentd.log" 'status=timeout error="query ran past its 1500 ms deadline \(client reading slowly\)" sql="SELECT a, b, c, d FROM b"'
rows=$(sed -n 's/.* rows=\([0-9]*\) .*sql="SELECT a, b, c, d FROM b"/\1/p' "$T/agentd.log")
[ "$rows" -lt 1000000 ] || fail "the worker produced all $rows rows for a client that did not read"
echo ok
