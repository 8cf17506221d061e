#!/bin/sh
# SPDX-License-Identifier: MIT
# A session: HELLO fields, PING/PONG, several queries whose rows equal what
# the sqlite3 CLI returns, exact values of every type, bound parameters.
. "$(dirname "$0")/lib.sh"
make_certs
make_db
start_agentd

fq ping \
	query "SELECT a, b, c, d FROM t ORDER BY a" \
	query "SELECT count(*), sum(a), median(a), p99(a) BETWEEN 989 AND 991 FROM t" \
	query "SELECT k, x FROM v ORDER BY k" \
	--typed query "SELECT x FROM v ORDER BY k" \
	--int 500 --text 'row 7%' query "SELECT a FROM t WHERE a > ? OR d LIKE ? ORDER BY a LIMIT 3" \
	--null --real 0.5 --blob 00ff query "SELECT ? IS NULL, ?, hex(?)" \
	>"$T/out" 2>"$T/fqtc.err" || fail "fqtc exited $?"

# HELLO: who we are, who the agent says we are.
has_re "$T/out" '^tls TLSv1\.3$'
has_re "$T/out" '^hello agent=[0-9.]+ schema=1 node=testnode clock_source=realtime-test proto=1-1 peer=fleetq-client drops=0 lag=0 realtime=[0-9]+$'
has_re "$T/out" '^pong t1=[0-9]+ t2=[0-9]+$'
t1=$(sed -n 's/^pong t1=\([0-9]*\) t2=\([0-9]*\)$/\1/p' "$T/out")
t2=$(sed -n 's/^pong t1=\([0-9]*\) t2=\([0-9]*\)$/\2/p' "$T/out")
[ "$t2" -ge "$t1" ] || fail "PONG t2 $t2 is before t1 $t1 on one host"

# Every query ends with exactly one END, in order, on the same session.
[ "$(grep -c '^end ' "$T/out")" = 6 ] || fail "expected 6 END frames: $(cat "$T/out")"
has "$T/out" "end id=1 status=0 rows=1000 truncated=0 msg="
has "$T/out" "end id=2 status=0 rows=1 truncated=0 msg="
has "$T/out" "end id=3 status=0 rows=13 truncated=0 msg="
has "$T/out" "end id=4 status=0 rows=13 truncated=0 msg="
has "$T/out" "end id=5 status=0 rows=3 truncated=0 msg="
has "$T/out" "end id=6 status=0 rows=1 truncated=0 msg="

# Rows of query 1 equal the sqlite3 CLI's list output on the same file.
sed -n '/^columns a|b|c|d$/,/^end id=1 /p' "$T/out" | sed '1d;$d' >"$T/got"
sqlite3 -batch -noheader -list "$T/trace.db" "SELECT a, b, c, d FROM t ORDER BY a" >"$T/want"
[ "$(wc -l <"$T/want")" = 1000 ] || fail "sqlite3 CLI gave $(wc -l <"$T/want") rows"
cmp -s "$T/got" "$T/want" || fail "rows differ from the sqlite3 CLI: $(diff "$T/want" "$T/got" | head)"

has "$T/out" "1000|500500|500.5|1"

# Exact values: int64 extremes, doubles to the last bit, text with control
# bytes and UTF-8, blobs (empty too), NULL.
sed -n '/^end id=3 /,/^end id=4 /p' "$T/out" | sed '1,2d;$d' >"$T/typed"
cat >"$T/want" <<'W'
i:9223372036854775807
i:-9223372036854775808
i:0
i:-1
r:0x1.999999999999ap-4
r:0x1.fffffffffffffp+1023
r:0x0.0000000000001p-1022
r:-0x1.4p+1
t:
t:74616209616e640a6e65776c696e6520c3bc20e697a5e69cac
b:00ff10
b:
n
W
cmp -s "$T/typed" "$T/want" || fail "typed values differ: $(diff "$T/want" "$T/typed")"

# Parameters bind with their types.
has "$T/out" "columns a"
sed -n '/^end id=4 /,/^end id=5 /p' "$T/out" | sed '1,2d;$d' | tr '\n' ' ' >"$T/p"
[ "$(cat "$T/p")" = "7 70 71 " ] || fail "bound query gave '$(cat "$T/p")'"
has "$T/out" "1|0.5|00FF"

# One log line per query, naming the peer.
[ "$(grep -c ' query peer=fleetq-client ' "$T/agentd.log")" = 6 ] || fail "want 6 query log lines"
has_re "$T/agentd.log" 'query peer=fleetq-client addr=127\.0\.0\.1:[0-9]+ tls=full id=1 rows=1000 bytes=[0-9]+ ms=[0-9]+ status=ok sql="SELECT a, b, c, d FROM t ORDER BY a"'
echo ok
