#!/bin/sh
# SPDX-License-Identifier: MIT
# Relays that skipped the door (issue 14): a client that leaf B refuses
# directly must not get B's rows through relay A; B checks and logs the
# requester, not only the relay. A relay refuses to dial itself under another
# spelling, dials at most --relay-max-dial peers itself (the rest through
# sub-relays), and only --relay-peer hosts.
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1
# a second client certificate of the same CA: ops-alice (B allows ops-*)
mkdir -p "$T/ops"
cp "$T/ca/ca.crt" "$T/ca/ca.key" "$T/ops/"
"$MKCERTS" --client ops-alice "$T/ops" >"$T/mkcerts-ops.log" 2>&1 || fail "mkcerts ops-alice"
for k in 0 1 2 3; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 1 --rank-base $k --nranks 4 \
		--steps 5 >"$T/gen.log" 2>&1 || fail "fq-tracegen node$k"
done
Q="SELECT count(*) AS n FROM collectives"

start_agent a "$T/n0.db" ca; PA=$PORT
# B serves ops-* clients and the nodes (whose certificates relays use)
start_agent b "$T/n1.db" ca --allow-client 'ops-*' --allow-client 127.0.0.1; PB=$PORT

alice() {
	"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ops/client.crt" --key "$T/ops/client.key" "$@" \
		>"$T/out" 2>"$T/err"
	RC=$?
}

# 1. fleetq-client is refused by B directly (exit 4) ...
fq -w "127.0.0.1:$PB" --format tsv "$Q"
expect_rc 4 "refused client, directly"
# ... and through relay A: no rows of B, B named as refusing the client.
fq -w "127.0.0.1:$PA,127.0.0.1:$PB" --tree-width 1 --format tsv "$Q"
[ "$RC" != 0 ] || fail "refused client got B's rows through the relay"
grep -q "^127.0.0.1:$PB	" "$T/out" && fail "refused client got B's rows: $(cat "$T/out")"
expect_err "client 'fleetq-client', through relay '127.0.0.1', is not allowed by this agent's --allow-client"
grep -q "query peer=127.0.0.1 for=fleetq-client .*status=auth" "$T/b.log" ||
	fail "B's log does not name the client behind the relay"
# 2. ops-alice through the same relay: served, and B's log names her.
alice -w "127.0.0.1:$PA,127.0.0.1:$PB" --tree-width 1 --format tsv "$Q"
expect_rc 0 "allowed client through the relay"
grep -q "^127.0.0.1:$PB	5$" "$T/out" || fail "no rows of B for ops-alice: $(cat "$T/out")"
grep -q "query peer=127.0.0.1 for=ops-alice .*status=ok" "$T/b.log" ||
	fail "B's log does not name ops-alice behind the relay"

# 3. A relay does not dial itself: 127.0.0.2 is one of its addresses on its port
# (fleetq itself merges "127.0.0.1:0PORT" into "127.0.0.1:PORT" before sending).
n0=$(grep -c "query peer=" "$T/a.log")
fq -w "127.0.0.1:$PA,127.0.0.2:$PA,127.0.0.1:$PB" --tree-width 1 --format tsv "$Q"
expect_err "this is the relay itself: not dialled again"
n1=$(grep -c "query peer=" "$T/a.log")
[ $((n1 - n0)) = 1 ] || fail "relay A ran $((n1 - n0)) queries for one: it dialled itself"

# 4. --relay-max-dial 1: relay C, given D and E as leaves (its group of the
# fleet's five at --tree-width 2), dials D only, which relays to E; D refuses
# to dial outside its --relay-peer list, so E fails with that reason.
start_agent c "$T/n2.db" ca --relay-max-dial 1; PC=$PORT
start_agent d "$T/n3.db" ca --relay-peer 'nowhere.example'; PD=$PORT
start_agent e "$T/n0.db" ca; PE=$PORT
start_agent f "$T/n1.db" ca; PF=$PORT
start_agent g "$T/n2.db" ca; PG=$PORT
fq -w "127.0.0.1:$PC,127.0.0.1:$PD,127.0.0.1:$PE,127.0.0.1:$PF,127.0.0.1:$PG" --tree-width 2 \
	--format tsv "$Q"
expect_err "127.0.0.1:$PE (outside the relay's --relay-peer list: not dialled)"
grep -q "^127.0.0.1:$PD	5$" "$T/out" || fail "no rows of D: $(cat "$T/out")"
grep -q "^127.0.0.1:$PE	" "$T/out" && fail "E was dialled past --relay-peer"
grep -q "^127.0.0.1:$PG	5$" "$T/out" || fail "no rows of G: $(cat "$T/out")"
echo ok
