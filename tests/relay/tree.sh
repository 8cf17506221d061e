#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq --tree-width 3 over nine agentd processes (real mutual TLS, fq-tracegen traces)
# gives the same merged rows, coverage and exit status as the flat fan-out; a dead
# leaf, a leaf with another CA's certificate and a relay that dies mid-stream are
# reported by name behind their relay.
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1
certs evil 127.0.0.1
NOW_S=$(date +%s)
START=$(((NOW_S - 15) * 1000000000))

# nine nodes of one 36-rank job with a slow rank; agents accept the relays' node
# certificate (CN 127.0.0.1) besides the client's.
HOSTS=
for k in 0 1 2 3 4 5 6 7 8; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 4 --rank-base $((4 * k)) \
		--nranks 36 --steps 200 --start-ns $START --seed 7 --slow-rank 6 \
		--slow-pct 20 >"$T/gen.log" 2>&1 || fail "fq-tracegen node$k"
	start_agent "a$k" "$T/n$k.db" ca
	eval "P$k=$PORT"
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
done
Q="SELECT rank, seq, ts_ns, dur_ns FROM collectives ORDER BY rank, seq"
N=$(for k in 0 1 2 3 4 5 6 7 8; do sqlite3 "$T/n$k.db" "SELECT count(*) FROM collectives"; done |
	awk '{s += $1} END {print s}')

# 1. plain query: flat and tree merge the same rows, every node by its own name.
fq -w "$HOSTS" --format tsv "$Q"
expect_rc 0 "flat query"
sort "$T/out" >"$T/flat"
[ "$(wc -l <"$T/flat")" -eq $((N + 1)) ] || fail "flat: $(wc -l <"$T/flat") lines, want $((N + 1))"
fq -w "$HOSTS" --tree-width 3 --format tsv "$Q"
expect_rc 0 "tree query"
expect_err "coverage: 9/9 nodes ok"
sort "$T/out" >"$T/tree"
cmp -s "$T/flat" "$T/tree" || { diff "$T/flat" "$T/tree" | head >&2; fail "tree rows differ from flat"; }
for k in 0 4 8; do
	eval "p=\$P$k"
	grep -q "^127.0.0.1:$p	" "$T/tree" || fail "no rows of node$k in the tree result"
done
# width 2: relays of relays (depth 3)
fq -w "$HOSTS" --tree-width 2 --format tsv "$Q"
expect_rc 0 "tree width 2"
sort "$T/out" | cmp -s "$T/flat" - || fail "tree width 2 rows differ from flat"
# the relays really relayed: the first agent's log names its peers' rows
grep -q "query peer=" "$T/a0.log" || fail "relay a0 logged no query"

# sql errors and row limits read the same through relays: exit status, coverage line.
# same_as_flat ARGS...: runs fleetq flat and with --tree-width 3, compares everything.
same_as_flat() {
	fq -w "$HOSTS" --format tsv "$@"
	RCF=$RC
	sort "$T/out" >"$T/o.flat"
	cp "$T/err" "$T/e.flat"
	fq -w "$HOSTS" --tree-width 3 --format tsv "$@"
	[ "$RC" = "$RCF" ] || fail "$*: exit $RC through the tree, $RCF flat"
	sort "$T/out" | cmp -s "$T/o.flat" - || fail "$*: rows differ through the tree"
	cmp -s "$T/e.flat" "$T/err" || { diff "$T/e.flat" "$T/err" >&2; fail "$*: stderr differs"; }
}
same_as_flat "SELECT nope FROM collectives"
[ "$RC" = 2 ] || fail "sql error: exit $RC"
expect_err "sql error on all 9 nodes"
same_as_flat --max-rows 5 "$Q"
expect_err "rows limited by --max-rows"

# 2. fleetq stragglers: the same report either way, but for the measured numbers (each
# run samples the clocks anew, through a relay as relay offset + leaf offset) and, with them,
# whether lateness is past its clock's uncertainty (which signals are marked as naming).
mask() {
	sed -E 's/[-+]?[0-9]+\.[0-9]+/N/g; /signals that name it/d; /clock offset uncertainty/d;
		s/^  \* /    /; s/ +/ /g' "$1"
}
fq -w "$HOSTS" stragglers --since 2m
RCF=$RC
cp "$T/out" "$T/sflat"
fq -w "$HOSTS" --tree-width 3 stragglers --since 2m
[ "$RC" = "$RCF" ] || fail "stragglers exit $RC through the tree, $RCF flat"
[ "$RCF" = 1 ] || fail "stragglers found no slow rank (exit $RCF)"
mask "$T/sflat" >"$T/sflat.m"
mask "$T/out" >"$T/stree.m"
cmp -s "$T/sflat.m" "$T/stree.m" || { diff "$T/sflat.m" "$T/stree.m" >&2; fail "stragglers report differs"; }
grep -q "rank 6" "$T/out" || fail "tree stragglers does not name rank 6: $(cat "$T/out")"

# 2b. relays sample their leaves' clocks as often as fleetq samples its own nodes, with or
# without a time parameter in the query (stragglers --since all has none): HELLO + 4 PINGs
# for every node, leaves included (a leaf sampled only by its HELLO had offsets off by the
# handshake's length, which blurred the lateness signal through relays).
fq -w "$HOSTS" --tree-width 3 --pings 4 --format tsv \
	--merge "SELECT node, samples FROM clock ORDER BY node" "SELECT 1"
expect_rc 0 "tree query with --pings 4"
[ "$(awk 'NR > 1' "$T/out" | wc -l)" = 9 ] || fail "clock rows: $(cat "$T/out")"
awk 'NR > 1 && $2 != 5 { bad = 1 } END { exit bad }' "$T/out" ||
	fail "clock samples through the tree, want 5 a node: $(cat "$T/out")"
fq -w "$HOSTS" stragglers --since all
cp "$T/out" "$T/aflat"
fq -w "$HOSTS" --tree-width 3 stragglers --since all
mask "$T/aflat" >"$T/aflat.m"
mask "$T/out" >"$T/atree.m"
cmp -s "$T/aflat.m" "$T/atree.m" || { diff "$T/aflat.m" "$T/atree.m" >&2; fail "stragglers --since all differs"; }

# 3. a dead leaf behind a relay: unreachable by name, others' rows intact, exit 3.
DEAD=$(free_port)
H2="127.0.0.1:$P0,127.0.0.1:$DEAD,127.0.0.1:$P2,127.0.0.1:$P3,127.0.0.1:$P4,127.0.0.1:$P5"
fq -w "$H2" --tree-width 2 --format tsv "$Q"
expect_rc 3 "dead leaf"
expect_err "coverage: 5/6 nodes ok"
expect_err "unreachable: 127.0.0.1:$DEAD"
# the relay that could not reach it is named
expect_err "unreachable: 127.0.0.1:$DEAD (relay 127.0.0.1:$P0: "
for k in 0 2 3 4 5; do
	eval "p=\$P$k"
	want=$(sqlite3 "$T/n$k.db" "SELECT count(*) FROM collectives")
	got=$(grep -c "^127.0.0.1:$p	" "$T/out")
	[ "$got" = "$want" ] || fail "node$k: $got rows behind the relay, want $want"
done

# 4. a leaf whose certificate comes from another CA: tls for that leaf, exit 4.
start_agent evil "$T/n1.db" evil; EVIL=$PORT
# hosts keep their order: P0 relays to P2, which relays to EVIL (a leaf two hops down).
fq -w "127.0.0.1:$P0,127.0.0.1:$P2,127.0.0.1:$EVIL" --tree-width 1 --format tsv "$Q"
expect_rc 4 "leaf with another CA"
expect_err "tls: 127.0.0.1:$EVIL"
expect_err "tls: 127.0.0.1:$EVIL (relay 127.0.0.1:$P0: relay 127.0.0.1:$P2: "
expect_err "coverage: 2/3 nodes ok"

# 5. a relay that refuses nothing but is not allowed by the leaves: tls for them.
start_agent picky "$T/n2.db" ca --allow-client nobody-we-know; PICKY=$PORT
fq -w "127.0.0.1:$P0,127.0.0.1:$PICKY" --tree-width 1 --format tsv "$Q"
expect_rc 4 "leaf refuses the relay's certificate"
expect_err "tls: 127.0.0.1:$PICKY"

# 5b. a leaf that hangs two hops down: each hop keeps a margin of the deadline, so the
# leaf's timeout comes up by name before fleetq's own deadline (not "via relay").
start_agent hang "$T/n3.db" ca; HANG=$PORT; kill -STOP "$PID"
fq -w "127.0.0.1:$P0,127.0.0.1:$P2,127.0.0.1:$HANG" --tree-width 1 --timeout 3 --format tsv "$Q"
kill -CONT "$PID"
expect_rc 3 "hung leaf"
expect_err "coverage: 2/3 nodes ok"
expect_err "timeout: 127.0.0.1:$HANG"
grep -q "via relay" "$T/err" && fail "hung leaf blamed on its relay: $(cat "$T/err")"
# the relay gives its leaves fleetq's --connect-timeout, not its own 5 s
kill -STOP "$PID"
fq -w "127.0.0.1:$P0,127.0.0.1:$P2,127.0.0.1:$HANG" --tree-width 1 --timeout 20 \
	--connect-timeout 1 --format tsv "$Q"
kill -CONT "$PID"
expect_rc 3 "hung leaf, --connect-timeout 1"
expect_err "not done within 1s"

# 5c. columns that differ two hops down: that leaf fails as "columns", never merged.
for x in 1 2 3; do
	cp "$T/n$x.db" "$T/x$x.db"
	col=a
	[ $x = 3 ] && col=b
	sqlite3 "$T/x$x.db" "CREATE VIEW v AS SELECT $x AS $col" || fail "cannot make view v"
	start_agent "x$x" "$T/x$x.db" ca
	eval "X$x=$PORT"
done
XH="127.0.0.1:$X1,127.0.0.1:$X2,127.0.0.1:$X3"
fq -w "$XH" --format tsv "SELECT * FROM v"
RCF=$RC
fq -w "$XH" --tree-width 1 --format tsv "SELECT * FROM v"
[ "$RC" = "$RCF" ] && [ "$RC" = 3 ] || fail "columns: exit $RC through the tree, $RCF flat"
expect_err "columns differ: 127.0.0.1:$X3"
expect_err "coverage: 2/3 nodes ok"
grep -q "	3$" "$T/out" && fail "rows of a leaf with other columns were merged"

# 6. a relay that dies mid-stream: its subtree reported failed, no row of it kept.
cp "$T/n0.db" "$T/big.db"
sqlite3 "$T/big.db" "CREATE TABLE pad AS WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL
	SELECT i + 1 FROM c WHERE i < 400000) SELECT i, hex(randomblob(64)) AS h FROM c" ||
	fail "cannot build the big trace"
start_agent relay "$T/big.db" ca; RELAY=$PORT; RPID=$PID
# stop the relay once the first rows are flowing: SIGKILL while fleetq reads.
( sleep 0.3; kill -9 "$RPID" ) &
KILLER=$!
fq -w "127.0.0.1:$RELAY,127.0.0.1:$P1,127.0.0.1:$P2,127.0.0.1:$P3" --tree-width 1 \
	--format tsv "SELECT i, h FROM pad, (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4)"
wait $KILLER
[ "$RC" = 3 ] || { cat "$T/err" >&2; fail "relay killed: exit $RC, want 3"; }
grep -q "coverage: 0/4 nodes ok" "$T/err" || { cat "$T/err" >&2; fail "relay killed: coverage"; }
grep -q "partial: " "$T/err" || { cat "$T/err" >&2; fail "relay killed: subtree not partial"; }
[ ! -s "$T/out" ] || [ "$(wc -l <"$T/out")" -le 1 ] || fail "rows of a dead relay kept"
exit 0
