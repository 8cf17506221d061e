#!/bin/sh
# SPDX-License-Identifier: MIT
# Who may talk: a client from another CA is refused with ERROR AUTH and no
# rows; a client without a certificate gets no HELLO; --allow-client filters
# on CN and DNS names; the agent keeps serving the good client throughout.
. "$(dirname "$0")/lib.sh"
make_certs
make_certs "$T/other" localhost
make_db
start_agentd

# A certificate from another CA: refused with a reason, nothing served.
"$FQTC" --port "$PORT" --ca "$T/certs/ca.crt" --cert "$T/other/client.crt" \
	--key "$T/other/client.key" query "SELECT a FROM t" >"$T/other.out" 2>&1 && \
	fail "a client of another CA was served"
has_re "$T/other.out" '^error code=3 msg=client certificate not trusted: '
lacks_re "$T/other.out" '^(hello|columns|end|[0-9])'
has_re "$T/agentd.log" "refused client 127\.0\.0\.1:[0-9]+: client certificate not trusted"

# The same under TLS 1.2, where the handshake itself would otherwise carry the refusal.
"$FQTC" --tls12 --port "$PORT" --ca "$T/certs/ca.crt" --cert "$T/other/client.crt" \
	--key "$T/other/client.key" query "SELECT a FROM t" >"$T/other12.out" 2>&1 && \
	fail "a TLS 1.2 client of another CA was served"
has "$T/other12.out" "tls TLSv1.2"
has_re "$T/other12.out" '^error code=3 msg=client certificate not trusted: '
lacks_re "$T/other12.out" '^(hello|columns|end|[0-9])'

# The good client still gets served, over TLS 1.2 too.
"$FQTC" --tls12 --port "$PORT" --ca "$T/certs/ca.crt" --cert "$T/certs/client.crt" \
	--key "$T/certs/client.key" query "SELECT 12" >"$T/good12.out" 2>&1 || fail "TLS 1.2 client"
has "$T/good12.out" "tls TLSv1.2"
has "$T/good12.out" "12"
fq query "SELECT count(*) FROM t" >"$T/good.out" 2>&1 || fail "good client exited $?"
has "$T/good.out" "1000"

# openssl s_client: with a client certificate the HELLO (naming the node)
# arrives; without one, the handshake fails and no HELLO does.
sc() {
	sleep 1 | openssl s_client -connect "127.0.0.1:$PORT" -CAfile "$T/certs/ca.crt" \
		-quiet -no_ign_eof "$@" >"$T/sc.out" 2>"$T/sc.err" || true
}
sc -cert "$T/certs/client.crt" -key "$T/certs/client.key"
grep -q testnode "$T/sc.out" || fail "s_client with a certificate got no HELLO"
sc
! grep -q testnode "$T/sc.out" || fail "s_client without a certificate got a HELLO"
has_re "$T/agentd.log" "refused client 127\.0\.0\.1:[0-9]+: .*(certificate|tls)"

fq query "SELECT 1" >"$T/good.out" 2>&1 || fail "good client exited $? after refusals"
has "$T/good.out" "end id=1 status=0 rows=1 truncated=0 msg="

# Allow-list: fnmatch on the CN and DNS SANs.
kill "$APID"
wait "$APID" 2>/dev/null || true
start_agentd --allow-client 'ops-*' --allow-client 'robot.example.org'
fq query "SELECT 1" >"$T/deny.out" 2>&1 && fail "fleetq-client passed --allow-client 'ops-*'"
has_re "$T/deny.out" "^error code=3 msg=client 'fleetq-client' matches no --allow-client pattern"
lacks_re "$T/deny.out" '^(hello|columns|end)'
"$MKCERTS" --client ops-alice "$T/certs" >/dev/null 2>&1 || fail "mkcerts --client"
fq query "SELECT 1" >"$T/allow.out" 2>&1 || fail "ops-alice refused: $(cat "$T/allow.out")"
has_re "$T/allow.out" "^hello .* peer=ops-alice "
has "$T/allow.out" "end id=1 status=0 rows=1 truncated=0 msg="
echo ok
