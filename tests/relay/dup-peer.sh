#!/bin/sh
# SPDX-License-Identifier: MIT
# A relay dials each node once (issue 14): peers that spell one node twice in
# one query ("localhost:P" and "LOCALHOST:P": fleetq keeps both, host names
# being case-sensitive in its hostlists; it merges "host:0P" itself) get an END
# of their own saying why, and the node runs the query once. Real agents, real
# mutual TLS; the check is relay_screen() in agentd/query_relay.c (the relay
# refusing itself is in door.sh).
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1 localhost
for k in 0 1; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 1 --rank-base $k --nranks 2 \
		--steps 5 >"$T/gen.log" 2>&1 || fail "fq-tracegen node$k"
done
Q="SELECT count(*) AS n FROM collectives"

start_agent a "$T/n0.db" ca; PA=$PORT
CERTHOST=localhost start_agent b "$T/n1.db" ca; PB=$PORT
start_agent c "$T/n0.db" ca; PC=$PORT
start_agent d "$T/n1.db" ca; PD=$PORT
start_agent e "$T/n0.db" ca; PE=$PORT

# queries N: the query lines in agent N's log
queries() { grep -c "query peer=" "$T/$1.log"; }

# --tree-width 2 over six: relay A gets both spellings of B as its own leaves
# (two, within the width: it would dial each), relay C gets D and E.
b0=$(queries b)
fq -w "127.0.0.1:$PA,localhost:$PB,LOCALHOST:$PB,127.0.0.1:$PC,127.0.0.1:$PD,127.0.0.1:$PE" \
	--tree-width 2 --format tsv "$Q"
cat "$T/out" "$T/err" >"$T/run.txt"
b1=$(queries b)
[ $((b1 - b0)) = 1 ] || fail "B ran $((b1 - b0)) queries for one: the relay dialled it twice"
grep -q "^localhost:$PB	5$" "$T/out" || fail "no rows of B: $(cat "$T/run.txt")"
grep -q "^LOCALHOST:$PB	" "$T/out" && fail "B answered twice: $(cat "$T/run.txt")"
expect_err "LOCALHOST:$PB (named twice in one query: dialled once)"
[ "$RC" != 0 ] || fail "exit 0 with a node not dialled"
for p in $PA $PC $PD $PE; do
	grep -q "^127.0.0.1:$p	5$" "$T/out" || fail "no rows of 127.0.0.1:$p: $(cat "$T/run.txt")"
done
echo "ok: B ran the query once: $(grep -o 'coverage:[^;]*' "$T/err")"
