#!/bin/sh
# SPDX-License-Identifier: MIT
# Agents that misbehave (fq-fakeagent, plaintext on loopback with --insecure): a
# stream cut before END is "partial" and its rows are dropped; garbage, another
# protocol version, an oversized frame or a wrong END row count are protocol
# errors; an ERROR frame refusing us is a TLS/auth failure. A real agent beside
# them answers in full.
. "$(dirname "$0")/lib.sh"

[ -x "${FAKEAGENT:-}" ] || fail "FAKEAGENT is not set"
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 10 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
start_agent real "$T/n.db" - --insecure; REAL=$PORT


Q="SELECT 7 AS a, 'real' AS b"
for mode in ok partial garbage version badcount huge errorauth; do
	fake $mode
	"$FLEETQ" --insecure -w "127.0.0.1:$REAL,127.0.0.1:$port" --format csv --timeout 10 "$Q" \
		>"$T/out" 2>"$T/err"
	RC=$?
	case $mode in
	ok) want_rc=0 want="coverage: 2/2 nodes ok, 4 rows" ;;
	partial) want_rc=3 want="partial: 127.0.0.1:$port (connection lost after 3 rows, rows dropped" ;;
	garbage | version | huge) want_rc=3 want="protocol error: 127.0.0.1:$port" ;;
	badcount) want_rc=3 want="protocol error: 127.0.0.1:$port (END counts 5 rows, 3 arrived)" ;;
	errorauth) want_rc=4 want="tls: 127.0.0.1:$port (agent refused our certificate" ;;
	esac
	expect_rc $want_rc "fake agent '$mode'"
	expect_err "$want"
	grep -qx "127.0.0.1:$REAL,7,real" "$T/out" || fail "'$mode': the real node's row is missing"
	n=$(grep -c "^127.0.0.1:$port," "$T/out")
	if [ $mode = ok ]; then
		[ "$n" = 3 ] || fail "'ok': $n fake rows, want 3"
	else
		[ "$n" = 0 ] || fail "'$mode': $n rows merged from a failed node"
	fi
done
echo "ok"
