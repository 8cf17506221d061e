#!/bin/sh
# SPDX-License-Identifier: MIT
# Nodes that fail: unreachable, stalled past the deadline, different columns, the same
# SQL error everywhere. Each is reported, the exit status says so, and every other
# node's rows are all there.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
for k in 1 2 3; do
	"$TRACEGEN" --out "$T/n$k.db" --node "n$k" --ranks 2 --rank-base $((2 * k - 2)) \
		--nranks 6 --steps 30 --start-ns 1700000000000000000 >"$T/gen$k.log" 2>&1 || fail "fq-tracegen n$k"
done
start_agent n1 "$T/n1.db" ca; P1=$PORT
start_agent n2 "$T/n2.db" ca; P2=$PORT
start_agent n3 "$T/n3.db" ca; P3=$PORT; PID3=$PID
DEAD=$(free_port)
Q="SELECT rank, seq, dur_ns FROM collectives"

# rows_of HOST DB: fleetq's tsv rows of HOST equal sqlite3's rows of DB.
rows_of() {
	grep "^$1	" "$T/out" | cut -f2- >"$T/got"
	sqlite3 -separator '	' "$2" "$Q" >"$T/want"
	[ -s "$T/want" ] || fail "sqlite3 read nothing from $2"
	cmp -s "$T/got" "$T/want" || fail "rows of $1 are not all there"
}

# 1. a port nobody listens on: unreachable, exit 3, the others complete.
fq -w "127.0.0.1:[$P1,$DEAD,$P2,$P3]" --format tsv "$Q"
expect_rc 3 "one node unreachable"
expect_err "coverage: 3/4 nodes ok"
expect_err "unreachable: 127.0.0.1:$DEAD"
rows_of 127.0.0.1:$P1 "$T/n1.db"
rows_of 127.0.0.1:$P2 "$T/n2.db"
rows_of 127.0.0.1:$P3 "$T/n3.db"
grep -q "^127.0.0.1:$DEAD	" "$T/out" && fail "rows for the unreachable node"

# 2. --min-coverage 0.5 with one node down: exit 0, still reported.
fq -w "127.0.0.1:[$P1,$DEAD,$P2,$P3]" --format tsv --min-coverage 0.5 "$Q"
expect_rc 0 "--min-coverage 0.5"
expect_err "unreachable: 127.0.0.1:$DEAD"
# ... and 0.9 is not met by 3/4.
fq -w "127.0.0.1:[$P1,$DEAD,$P2,$P3]" --format tsv --min-coverage 0.9 "$Q"
expect_rc 3 "--min-coverage 0.9"

# 3. a stalled agent (SIGSTOP: the kernel still accepts, nobody speaks): timeout at
# the overall deadline, exit 3, the others intact.
kill -STOP "$PID3"
fq -w "127.0.0.1:[$P1-$P1],127.0.0.1:$P2,127.0.0.1:$P3" --format tsv --timeout 2 \
	--connect-timeout 30 "$Q"
kill -CONT "$PID3"
expect_rc 3 "stalled agent"
expect_err "timeout: 127.0.0.1:$P3"
expect_err "coverage: 2/3 nodes ok"
rows_of 127.0.0.1:$P1 "$T/n1.db"
rows_of 127.0.0.1:$P2 "$T/n2.db"
grep -q "^127.0.0.1:$P3	" "$T/out" && fail "rows for the stalled node"

# A listener that accepts and never speaks: no HELLO within the connect timeout.
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)
' >"$T/mute.port" &
PIDS="$PIDS $!"
await "mute listener" 100 0.05 - test -s "$T/mute.port"
MUTE=$(cat "$T/mute.port")
fq -w "127.0.0.1:$P1,127.0.0.1:$MUTE" --format tsv --connect-timeout 1 "$Q"
expect_rc 3 "mute listener"
expect_err "timeout: 127.0.0.1:$MUTE"
rows_of 127.0.0.1:$P1 "$T/n1.db"

# 4. columns that differ from the first node's to answer: a per-node error, that
# node's rows not merged. Which node answers first is up to the scheduler, so
# accept either, but exactly one.
sqlite3 "$T/x1.db" "CREATE TABLE t(a, b); INSERT INTO t VALUES (1, 'one'), (2, 'two');"
sqlite3 "$T/x2.db" "CREATE TABLE t(a, c); INSERT INTO t VALUES (3, 'three');"
start_agent x1 "$T/x1.db" ca; X1=$PORT
start_agent x2 "$T/x2.db" ca; X2=$PORT
fq -w "127.0.0.1:$X1,127.0.0.1:$X2" --format csv "SELECT * FROM t"
expect_rc 3 "columns differ"
if grep -q "columns differ: 127.0.0.1:$X2 " "$T/err"; then
	want="node,a,b
127.0.0.1:$X1,1,one
127.0.0.1:$X1,2,two"
elif grep -q "columns differ: 127.0.0.1:$X1 " "$T/err"; then
	want="node,a,c
127.0.0.1:$X2,3,three"
else
	cat "$T/err" >&2
	fail "columns differ: not reported"
fi
[ "$(cat "$T/out")" = "$want" ] || fail "columns differ: output '$(cat "$T/out")'"

# 5. the same SQL error on every node: said once, plainly, exit 2 (the query is wrong).
fq -w "127.0.0.1:[$P1,$P2,$P3]" --format csv "SELECT * FROM no_such_table"
expect_rc 2 "SQL error everywhere"
[ "$(grep -c 'no such table: no_such_table' "$T/err")" -ge 1 ] || fail "error not shown"
[ "$(grep -c '^fleetq: sql error on all 3 nodes: .*no such table: no_such_table' "$T/err")" = 1 ] ||
	{ cat "$T/err" >&2; fail "the common SQL error is not said once"; }

# 6. json carries the failures too.
fq -w "127.0.0.1:[$P1,$DEAD]" --format json --with-coverage "$Q"
expect_rc 3 "json with a failure"
python3 - "$T" "$DEAD" <<'PY' || fail "json coverage"
import json, sys
d = json.load(open(sys.argv[1] + "/out"))
c = d["coverage"]
assert c["total"] == 2 and c["ok"] == 1, c
f = c["failures"]
assert len(f) == 1 and f[0]["outcome"] == "unreachable", f
assert f[0]["nodes"] == ["127.0.0.1:" + sys.argv[2]], f
PY
echo "ok"
