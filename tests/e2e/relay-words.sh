#!/bin/sh
# SPDX-License-Identifier: MIT
# A relay's END names each leaf's outcome in PROTOCOL.md's words (columns,
# protocol, agent); older agents sent fleetq's display words (columns differ,
# protocol error, agent error). fleetq reads both, and its coverage line is
# the same, word for word, whichever the relay spoke.
. "$(dirname "$0")/lib.sh"

[ -x "${FAKEAGENT:-}" ] || fail "FAKEAGENT is not set"
for mode in relaynew relayold; do
	fake $mode
	"$FLEETQ" --insecure --tree-width 1 --timeout 10 --format csv \
		-w "127.0.0.1:$port,leaf1.invalid,leaf2.invalid,leaf3.invalid" "SELECT 1 AS a, 2 AS b" \
		>"$T/out" 2>"$T/err"
	RC=$?
	expect_rc 3 "$mode"
	expect_err "coverage: 1/4 nodes ok, 0 rows" "$mode"
	expect_err "columns differ: leaf1.invalid (column 2 is 'x' where the first node has 'b': not merged)" "$mode"
	expect_err "protocol error: leaf2.invalid (relay 127.0.0.1:$port: protocol error)" "$mode"
	expect_err "agent error: leaf3.invalid (outside the relay's --relay-peer list: not dialled)" "$mode"
	sed "s/127\.0\.0\.1:$port/RELAY/g" "$T/err" >"$T/$mode.err"
done
cmp -s "$T/relaynew.err" "$T/relayold.err" ||
	fail "the coverage differs with the old words: $(diff "$T/relaynew.err" "$T/relayold.err")"
echo ok
