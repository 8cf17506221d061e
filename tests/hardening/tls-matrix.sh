#!/bin/sh
# SPDX-License-Identifier: MIT
# The mutual-TLS matrix in one place. Each bad client or agent is refused with
# one clear line on BOTH sides (the agent's log and fleetq's stderr, or
# openssl s_client as an independent client), gets zero rows, and the agent
# goes on serving: a good query after each case still answers in full.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1 gpu01
certs other 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 10 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
dated_cert "$T/ca" expired expired-client 200101000000Z 210101000000Z
dated_cert "$T/ca" future future-client 400101000000Z 410101000000Z
Q="SELECT count(*) FROM collectives"
N=$(sqlite3 "$T/n.db" "$Q")
start_agent a "$T/n.db" ca; A=$PORT; APID=$PID
start_agent picky "$T/n.db" ca --allow-client 'ops-*'; PICKY=$PORT; PPID_=$PID
CERTHOST=gpu01 start_agent misnamed "$T/n.db" ca; MIS=$PORT
CASES=0

# still_serves NAME PORT PID: the agent is alive and answers a good client in full.
still_serves() {
	kill -0 "$3" 2>/dev/null || fail "agent $1 died"
	fqc client -w "127.0.0.1:$2" --format tsv "$Q"
	[ "$RC" = 0 ] || { cat "$T/err" >&2; fail "agent $1 stopped serving: exit $RC"; }
	grep -qx "127.0.0.1:$2	$N" "$T/out" || fail "agent $1 answered '$(cat "$T/out")'"
}
# refused WHAT: fleetq exited 4 (TLS) with nothing on stdout.
refused() {
	[ "$RC" = 4 ] || { cat "$T/err" >&2; fail "$1: exit $RC, want 4"; }
	no_rows "$1"
	CASES=$((CASES + 1))
}

# 1. no client certificate (fleetq will not even try: use s_client).
sleep 1 | openssl s_client -connect "127.0.0.1:$A" -CAfile "$T/ca/ca.crt" -quiet \
	-no_ign_eof >"$T/sc.out" 2>"$T/sc.err"
[ ! -s "$T/sc.out" ] || fail "no certificate: s_client got data: $(od -c "$T/sc.out" | head)"
grep -qi "certificate required\|alert" "$T/sc.err" || fail "no certificate: s_client says $(cat "$T/sc.err")"
log_has a "^.* refused client 127\.0\.0\.1:[0-9]+: tls handshake failed: peer did not return a certificate$"
CASES=$((CASES + 1))
still_serves a "$A" "$APID"

# 2. a certificate from another CA.
"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/other/client.crt" --key "$T/other/client.key" \
	-w "127.0.0.1:$A" --format tsv "$Q" >"$T/out" 2>"$T/err"
RC=$?
refused "another CA"
err_has "tls: 127\.0\.0\.1:$A \(agent refused our certificate: client certificate not trusted: unable to get local issuer certificate"
log_has a "refused client 127\.0\.0\.1:[0-9]+: client certificate not trusted: unable to get local issuer certificate \(depth 0\)$"
still_serves a "$A" "$APID"

# 3. expired, 4. not yet valid: signed by the right CA, outside their dates.
fqc expired -w "127.0.0.1:$A" --format tsv "$Q"
refused "expired certificate"
err_has "tls: 127\.0\.0\.1:$A \(agent refused our certificate: client certificate not trusted: certificate has expired"
log_has a "refused client 127\.0\.0\.1:[0-9]+: client certificate not trusted: certificate has expired \(depth 0\)$"
fqc future -w "127.0.0.1:$A" --format tsv "$Q"
refused "not-yet-valid certificate"
err_has "tls: 127\.0\.0\.1:$A \(agent refused our certificate: client certificate not trusted: certificate is not yet valid"
log_has a "refused client 127\.0\.0\.1:[0-9]+: client certificate not trusted: certificate is not yet valid \(depth 0\)$"
# s_client with the expired certificate: the refusal arrives as an ERROR frame, no HELLO.
sleep 1 | openssl s_client -connect "127.0.0.1:$A" -CAfile "$T/ca/ca.crt" -cert \
	"$T/ca/expired.crt" -key "$T/ca/expired.key" -quiet -no_ign_eof >"$T/sc.out" 2>"$T/sc.err"
grep -q "certificate has expired" "$T/sc.out" || fail "s_client, expired: no ERROR frame"
! grep -q "fleetq-agent\|\"node\"" "$T/sc.out" || fail "s_client, expired: got a HELLO"
CASES=$((CASES + 1))
still_serves a "$A" "$APID"

# 5. CN and SAN outside --allow-client.
fqc client -w "127.0.0.1:$PICKY" --format tsv "$Q"
refused "outside --allow-client"
err_has "tls: 127\.0\.0\.1:$PICKY \(agent refused our certificate: client 'fleetq-client' matches no --allow-client pattern"
log_has picky "refused client 127\.0\.0\.1:[0-9]+: client 'fleetq-client' matches no --allow-client pattern$"
# mkcerts --client replaces client.{crt,key}: from here the client is ops-bob.
"$MKCERTS" --client ops-bob "$T/ca" >/dev/null 2>&1 || fail "mkcerts --client ops-bob"
fqc client -w "127.0.0.1:$PICKY" --format tsv "$Q"
[ "$RC" = 0 ] || { cat "$T/err" >&2; fail "ops-bob refused by 'ops-*'"; }

# 6. a plaintext client to a TLS agent. fleetq waits for a HELLO that never
# comes (the agent waits for a ClientHello): a timeout on our side, the end
# of a handshake on the agent's. Then a plaintext client that does talk first.
"$FLEETQ" --insecure -w "127.0.0.1:$A" --format tsv --connect-timeout 2 "$Q" >"$T/out" 2>"$T/err"
RC=$?
[ "$RC" = 3 ] || fail "plaintext client to a TLS agent exited $RC, want 3"
no_rows "plaintext client"
err_has "timeout: 127\.0\.0\.1:$A \(no HELLO within 2s"
log_has a "refused client 127\.0\.0\.1:[0-9]+: closed during the tls handshake$"
printf 'GET / HTTP/1.0\r\n\r\n' | python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(sys.stdin.buffer.read())
print(len(s.recv(4096)))' "$A" >"$T/http.out" 2>&1 || true
log_has a "refused client 127\.0\.0\.1:[0-9]+: tls handshake failed: [a-z ]+$"
CASES=$((CASES + 1))
still_serves a "$A" "$PID"

# 7. the agent's certificate names gpu01, we dialled 127.0.0.1.
fqc client -w "127.0.0.1:$MIS" --format tsv "$Q"
refused "agent certificate for another host"
err_has "tls: 127\.0\.0\.1:$MIS \(.*(mismatch|does not match|certificate verify failed)"
log_has misnamed "refused client 127\.0\.0\.1:[0-9]+: (tls handshake failed|closed during the tls handshake)"

# 8. an agent whose own certificate expired: the client refuses it.
dated_cert "$T/ca" oldagent 127.0.0.1 200101000000Z 210101000000Z
sed -i 's/extendedKeyUsage = clientAuth/extendedKeyUsage = serverAuth/; s/DNS:127.0.0.1/IP:127.0.0.1/' \
	"$T/ca-oldagent/ca.cnf"
openssl ca -batch -notext -config "$T/ca-oldagent/ca.cnf" -cert "$T/ca/ca.crt" \
	-keyfile "$T/ca/ca.key" -startdate 200101000000Z -enddate 210101000000Z \
	-in "$T/ca-oldagent/csr" -out "$T/ca/oldagent.crt" >"$T/ca-oldagent/out2" 2>&1 ||
	fail "openssl ca oldagent: $(cat "$T/ca-oldagent/out2")"
"$AGENTD" --listen 127.0.0.1:0 --db "$T/n.db" --no-trace --node old --port-file "$T/old.port" \
	--log "$T/old.log" --ca "$T/ca/ca.crt" --cert "$T/ca/oldagent.crt" \
	--key "$T/ca/oldagent.key" &
PIDS="$PIDS $!"
await "old agent" 200 0.05 - test -s "$T/old.port"
OLD=$(cat "$T/old.port")
fqc client -w "127.0.0.1:$OLD" --format tsv "$Q"
refused "expired agent certificate"
err_has "tls: 127\.0\.0\.1:$OLD \(.*expired"
log_has old "refused client 127\.0\.0\.1:[0-9]+: (tls handshake failed|closed during the tls handshake)"

still_serves a "$A" "$APID"
still_serves picky "$PICKY" "$PPID_"
echo "ok: $CASES refusal cases"
