#!/bin/sh
# SPDX-License-Identifier: MIT
# Nodes that answer with different columns (two versions of a schema, a hostile node):
# the column set most nodes answered with wins, ties to the first host in the hostlist,
# whichever node is fastest; the others are "columns differ". Direct output and --merge.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
for k in 0 1 2; do
	"$TRACEGEN" --out "$T/n$k.db" --node "n$k" --ranks 1 --steps 5 >"$T/gen.log" 2>&1 ||
		fail "fq-tracegen n$k"
done
# n0 the old schema (x, y, z), n1 and n2 the new (a, b)
sqlite3 "$T/n0.db" "CREATE TABLE v(x, y, z); INSERT INTO v VALUES (0, 0, 0)" || fail "n0 v"
for k in 1 2; do
	sqlite3 "$T/n$k.db" "CREATE TABLE v(a, b); INSERT INTO v VALUES ($k, 'new')" || fail "n$k v"
done
start_agent n0 "$T/n0.db" ca
H0=127.0.0.1:$PORT
start_agent n1 "$T/n1.db" ca
H1=127.0.0.1:$PORT
P1=$PID
start_agent n2 "$T/n2.db" ca
H2=127.0.0.1:$PORT
P2=$PID

# 1. the new schema on 2 of 3 nodes wins, though the old one answered first
for mode in direct merge; do
	for i in 1 2 3; do
		kill -STOP $P1 $P2
		if [ $mode = merge ]; then
			"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" \
				-w "$H0,$H1,$H2" --format csv --merge "SELECT * FROM results" \
				"SELECT * FROM v" >"$T/out" 2>"$T/err" &
		else
			"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" \
				-w "$H0,$H1,$H2" --format csv "SELECT * FROM v" >"$T/out" 2>"$T/err" &
		fi
		f=$!
		sleep 1
		kill -CONT $P1 $P2
		wait $f
		RC=$?
		expect_rc 3 "$mode run $i: one node of three with other columns"
		[ "$(head -n 1 "$T/out")" = "node,a,b" ] || fail "$mode run $i: header $(head -n 1 "$T/out")"
		[ "$(tail -n +2 "$T/out" | sort)" = "$(printf '%s,1,new\n%s,2,new\n' "$H1" "$H2" | sort)" ] ||
			fail "$mode run $i: rows $(cat "$T/out")"
		err_has "columns differ: $H0 \\(3 columns, the 2 nodes that agree have 2\\)"
	done
done

# 2. a tie (one node each): the first host in the hostlist wins, even when it is slowest
kill -STOP $P1
"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" \
	-w "$H1,$H0" --format csv "SELECT * FROM v" >"$T/out" 2>"$T/err" &
f=$!
sleep 1
kill -CONT $P1
wait $f
RC=$?
expect_rc 3 "tie"
[ "$(head -n 1 "$T/out")" = "node,a,b" ] || fail "tie: header $(head -n 1 "$T/out")"
err_has "columns differ: $H0 \\(3 columns, the 1 node that agree"

# 3. a fast fake agent with columns of its own, first in the hostlist, fails alone
fake ok
start_agent p1 "$T/n1.db" - --insecure
Q1=127.0.0.1:$PORT
start_agent p2 "$T/n2.db" - --insecure
Q2=127.0.0.1:$PORT
for i in 1 2 3; do
	"$FLEETQ" --insecure -w "127.0.0.1:$port,$Q1,$Q2" --format csv \
		"SELECT a AS k, b AS w FROM v" >"$T/out" 2>"$T/err"
	RC=$?
	expect_rc 3 "fake agent run $i"
	[ "$(head -n 1 "$T/out")" = "node,k,w" ] || fail "fake agent run $i: $(cat "$T/out")"
	err_has "columns differ: 127.0.0.1:$port \\(column 1 is 'a', the 2 nodes that agree have 'k'\\)"
done
echo "column-sets: ok"
