#!/bin/sh
# SPDX-License-Identifier: MIT
# A plain query prints its rows straight from the wire; --merge "SELECT * FROM results"
# still reads them back out of the merge database. Both must print the same bytes, with
# the same stderr and exit status, in every format: clashing column names, values SQLite
# changes on the way (NaN), a node that fails after sending rows, a truncated node, a
# node that finishes after the ones behind it, empty and missing results, relays.
. "$(dirname "$0")/lib.sh"

[ -x "${FAKEAGENT:-}" ] || fail "FAKEAGENT is not set"
certs ca 127.0.0.1
# nodes k = 1..4 hold ranks 2k-2 and 2k-1; view v names its column b on node 4 only.
for k in 1 2 3 4; do
	"$TRACEGEN" --out "$T/n$k.db" --node "n$k" --ranks 2 --rank-base $((2 * k - 2)) \
		--nranks 8 --steps 40 --start-ns 1700000000000000000 >"$T/gen$k.log" 2>&1 || fail "fq-tracegen n$k"
	col=a
	[ $k = 4 ] && col=b
	sqlite3 "$T/n$k.db" "CREATE VIEW v AS SELECT rank AS $col FROM collectives" ||
		fail "cannot make view v on n$k"
	start_agent "n$k" "$T/n$k.db" ca
	eval "P$k=$PORT PID_n$k=$PID"
done
HOSTS=127.0.0.1:$P1,127.0.0.1:$P2,127.0.0.1:$P3,127.0.0.1:$P4

# queries NAME: how many queries agent NAME has logged.
queries() {
	grep -c "agentd: query " "$T/$1.log"
}

# run ARGS...: fq ARGS; with STOP=NAME (an agent) and WAIT="NAME...", that agent is
# stopped until the others have logged their query: it answers last.
run() {
	if [ -z "${STOP:-}" ]; then
		fq "$@"
		return
	fi
	for a in $WAIT; do
		eval "before_$a=\$(queries $a)"
	done
	eval "kill -STOP \$PID_$STOP"
	"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" "$@" \
		>"$T/out" 2>"$T/err" &
	fqpid=$!
	for a in $WAIT; do
		i=0
		while eval "[ \$(queries $a) -le \$before_$a ]"; do
			i=$((i + 1))
			[ $i -lt 600 ] || { eval "kill -CONT \$PID_$STOP"; fail "$a logged no query"; }
			sleep 0.05
		done
	done
	eval "kill -CONT \$PID_$STOP"
	wait $fqpid
	RC=$?
}

# same ARGS...: fleetq ARGS in every format, plain and through the merge database;
# stdout, stderr and exit status must agree. Leaves the plain csv run in $T/same.csv.
same() {
	for f in table csv tsv json ndjson; do
		run --format "$f" "$@"
		mv "$T/out" "$T/o.plain"
		mv "$T/err" "$T/e.plain"
		rc=$RC
		run --format "$f" --merge "SELECT * FROM results" "$@"
		[ "$RC" = "$rc" ] || fail "$f: $*: exit $rc, $RC through the merge database"
		cmp -s "$T/o.plain" "$T/out" || {
			diff "$T/out" "$T/o.plain" | head >&2
			fail "$f: $*: output differs from the merge database's"
		}
		cmp -s "$T/e.plain" "$T/err" || {
			diff "$T/err" "$T/e.plain" >&2
			fail "$f: $*: stderr differs from the merge database's"
		}
		[ "$f" = csv ] && cp "$T/o.plain" "$T/same.csv"
	done
	cp "$T/e.plain" "$T/err"
	RC=$rc
}

# rows HOST: how many csv rows of HOST the last same() printed.
rows() {
	grep -c "^$1," "$T/same.csv"
}

# 1. names that clash ("x", "X", "node", "x_2"), values of every type and awkward text.
QV="SELECT rank, seq, op, dur_ns, 1 AS x, 2 AS X, 'n' AS node, 3 AS x_2, -0.0 AS z,
 9223372036854775807 AS big, -9223372036854775807 - 1 AS small, 1e308 * 10 AS inf,
 -1e308 * 10 AS ninf, 0.1 AS r, 2.0 AS two, x'00ff10' AS b, x'' AS eb, '' AS et,
 CAST(x'610062' AS TEXT) AS nul, CAST(x'ff' AS TEXT) AS bad,
 'a' || char(9) || 'b' || char(10) || '\"c\",' || char(13) || '\\' AS esc,
 'é' || char(1) AS ctl, NULL AS n0 FROM collectives"
same -w "$HOSTS" "$QV"
[ "$RC" = 0 ] || fail "values: exit $RC"
head -n 1 "$T/same.csv" | grep -q '^node,rank,seq,op,dur_ns,x,X_2,node_2,x_2_2,z,' ||
	fail "values: header $(head -n 1 "$T/same.csv")"
n=$(sqlite3 "$T/n1.db" "SELECT count(*) FROM collectives")
[ "$(rows "127.0.0.1:$P1")" = "$n" ] || fail "values: $(rows "127.0.0.1:$P1") rows of n1, want $n"

# 2. node 3 fails after its first ROWS frames went out (an error on its last row).
QF="WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 5000)
 SELECT i, printf('%040d', i) AS pad, CASE WHEN i = 5000 AND
 (SELECT min(rank) FROM collectives) = 4 THEN abs(-9223372036854775807 - 1) ELSE i END AS v
 FROM s"
same -w "$HOSTS" "$QF"
[ "$RC" = 3 ] || fail "failing node: exit $RC, want 3"
expect_err "sql error: 127.0.0.1:$P3"
[ "$(rows "127.0.0.1:$P3")" = 0 ] || fail "failing node: its rows were printed"
[ "$(rows "127.0.0.1:$P4")" = 5000 ] || fail "failing node: n4 printed $(rows "127.0.0.1:$P4") rows"

# 3. nodes cut by the user's --max-rows keep their rows (and are ok: it was asked for).
same -w "$HOSTS" --max-rows 7 "SELECT rank, seq FROM collectives"
[ "$RC" = 0 ] || fail "limited: exit $RC, want 0"
expect_err "rows limited by --max-rows"
[ "$(rows "127.0.0.1:$P2")" = 7 ] || fail "truncated: n2 printed $(rows "127.0.0.1:$P2") rows"

# 4. node 2 answers after nodes 3 and 4: its rows still print before theirs.
QS="SELECT rank, seq, dur_ns FROM collectives"
STOP=n2 WAIT="n1 n3 n4" same -w "$HOSTS" "$QS"
[ "$RC" = 0 ] || fail "late node: exit $RC"
awk -F, 'NR > 1 { print $1 }' "$T/same.csv" | uniq >"$T/order"
printf '127.0.0.1:%s\n' "$P1" "$P2" "$P3" "$P4" | cmp -s - "$T/order" ||
	fail "late node: nodes printed in the order $(tr '\n' ' ' <"$T/order")"

# 5. empty result (a header only), no result at all, a node with other columns.
same -w "$HOSTS" "SELECT rank, seq FROM collectives WHERE rank < 0"
[ "$RC" = 0 ] || fail "empty result: exit $RC"
[ "$(cat "$T/same.csv")" = "node,rank,seq" ] || fail "empty result: $(cat "$T/same.csv")"
same -w "$HOSTS" "SELECT nope FROM collectives"
[ "$RC" = 2 ] || fail "no result: exit $RC, want 2 (the SQL is wrong everywhere)"
[ ! -s "$T/same.csv" ] || fail "no result: csv output $(cat "$T/same.csv")"
# the first node to answer names the columns: node 4 answers last.
STOP=n4 WAIT="n1 n2 n3" same -w "$HOSTS" "SELECT * FROM v"
[ "$RC" = 3 ] || fail "columns: exit $RC, want 3"
expect_err "columns differ: 127.0.0.1:$P4"

# 6. through relays (groups n1+n2 and n3+n4): the same again.
same -w "$HOSTS" --tree-width 2 "$QV"
[ "$RC" = 0 ] || fail "relayed values: exit $RC"
same -w "$HOSTS" --tree-width 2 "$QF"
[ "$RC" = 3 ] || fail "relayed failing node: exit $RC, want 3"
[ "$(rows "127.0.0.1:$P3")" = 0 ] || fail "relayed failing node: its rows were printed"
same -w "$HOSTS" --tree-width 2 --max-rows 7 "SELECT rank, seq FROM collectives"
[ "$RC" = 0 ] || fail "relayed limited: exit $RC, want 0"
# node 2, a leaf of relay node 1, answers after relay node 3 and its leaf node 4.
STOP=n2 WAIT="n3 n4" same -w "$HOSTS" --tree-width 2 "$QS"
[ "$RC" = 0 ] || fail "relayed late node: exit $RC"
awk -F, 'NR > 1 { print $1 }' "$T/same.csv" | uniq | cmp -s "$T/order" - ||
	fail "relayed late node: nodes out of order"
same -w "$HOSTS" --tree-width 2 "SELECT * FROM v"
[ "$RC" = 3 ] || fail "relayed columns: exit $RC, want 3"
expect_err "columns differ: 127.0.0.1:$P4"

# 7. agents a real one never is: values SQLite changes (NaN becomes NULL), names that
# clash with "node" and each other, an empty name; a stream cut after 3 rows.
start_agent plain "$T/n1.db" - --insecure
REAL=$PORT
fake values
same --insecure -w "127.0.0.1:$port" "SELECT 1"
[ "$RC" = 0 ] || fail "fake values: exit $RC"
grep -q '^127.0.0.1:[0-9]*,,-0.0,0.0,1.0,0.1,1e+300$' "$T/same.csv" ||
	fail "fake values: NaN is not NULL: $(sed -n 2p "$T/same.csv")"
fake ok
OK=$port
fake partial
same --insecure -w "127.0.0.1:$OK,127.0.0.1:$port,127.0.0.1:$REAL" --timeout 10 \
	"SELECT 7 AS a, 'real' AS b"
[ "$RC" = 3 ] || fail "partial: exit $RC, want 3"
expect_err "partial: 127.0.0.1:$port"
[ "$(rows "127.0.0.1:$port")" = 0 ] || fail "partial: rows of the cut stream printed"
[ "$(rows "127.0.0.1:$OK")" = 3 ] || fail "partial: the whole fake node lost rows"
echo ok
