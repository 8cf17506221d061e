#!/bin/sh
# SPDX-License-Identifier: MIT
# Not a test: streaming throughput of one agent to one client over mutual TLS,
# end to end, for ROWS of (int, int, double, text). Usage (from a build dir):
#   AGENTD=agentd/agentd FQTC=tests/agentd/fqtc MKCERTS=../certs/mkcerts \
#   SCHEMA_SQL=../sql/schema.sql sh ../tests/agentd/bench-stream.sh [ROWS]
# Prints the client's rows/s, and as a baseline measured in the same run the
# sqlite3 CLI reading the same rows from the same file.
. "$(dirname "$0")/lib.sh"
n=${1:-2000000}
make_certs
sqlite3 -batch "$T/trace.db" <<SQL || fail "cannot make the bench file"
CREATE TABLE b (a INTEGER, b INTEGER, c REAL, d TEXT);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < $n)
INSERT INTO b SELECT x, x % 1000, x / 3.0, 'rank-' || (x % 64) FROM n;
SQL
start_agentd --max-rows 100000000 --timeout-ms 600000
fq --count --max-rows 100000000 query "SELECT a, b, c, d FROM b" >"$T/out" || fail "fqtc"
grep -E '^(count|end)' "$T/out"
agent=$(sed -n 's/^count .* rows_per_s=\([0-9]*\)$/\1/p' "$T/out")
t0=$(date +%s.%N)
sqlite3 -batch "$T/trace.db" "SELECT a, b, c, d FROM b" >/dev/null
t1=$(date +%s.%N)
base=$(echo "$n / ($t1 - $t0)" | bc)
echo "baseline: sqlite3 CLI reading the same rows locally: $base rows/s"
echo "ratio agent-over-mTLS / local sqlite3 CLI: $(echo "scale=2; $agent / $base" | bc)"
