#!/bin/sh
# SPDX-License-Identifier: MIT
# TLS failures are their own outcome and exit status 4, whatever --min-coverage says:
# an agent with a certificate from another CA, one whose certificate names another
# host, one that refuses our client certificate. Plaintext only with --insecure, on
# loopback.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1 gpu01
certs evil 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 10 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
start_agent good "$T/n.db" ca; GOOD=$PORT
start_agent evil "$T/n.db" evil; EVIL=$PORT
CERTHOST=gpu01 start_agent misnamed "$T/n.db" ca; MISNAMED=$PORT
start_agent picky "$T/n.db" ca --allow-client nobody-we-know; PICKY=$PORT
Q="SELECT count(*) FROM collectives"
N=$(sqlite3 "$T/n.db" "$Q")

# 1. the agent's certificate comes from another CA.
fq -w "127.0.0.1:[$GOOD,$EVIL]" --format tsv --min-coverage 0 "$Q"
expect_rc 4 "agent certificate from another CA"
expect_err "tls: 127.0.0.1:$EVIL"
expect_err "coverage: 1/2 nodes ok"
grep -qx "127.0.0.1:$GOOD	$N" "$T/out" || fail "the good node's row is missing"

# 2. the certificate names gpu01 (signed by our CA), we dialled 127.0.0.1 / localhost.
fq -w "127.0.0.1:$MISNAMED" --format tsv "$Q"
expect_rc 4 "certificate for another host (IP dialled)"
expect_err "tls: 127.0.0.1:$MISNAMED"
fq -w "localhost:$MISNAMED" --format tsv "$Q"
expect_rc 4 "certificate for another host (name dialled)"
expect_err "tls: localhost:$MISNAMED"

# 3. the agent refuses our client certificate (TLS 1.3: after the handshake).
fq -w "127.0.0.1:$PICKY" --format tsv "$Q"
expect_rc 4 "client certificate refused"
expect_err "tls: 127.0.0.1:$PICKY"

# 4. TLS wins over coverage: both failures present, exit 4.
fq -w "127.0.0.1:[$GOOD,$EVIL,$(free_port)]" --format tsv "$Q"
expect_rc 4 "tls and unreachable"
expect_err "unreachable: "

# 5. missing or unreadable certificates: a usage error naming the file.
"$FLEETQ" -w "127.0.0.1:$GOOD" --ca "$T/nope.crt" --cert "$T/ca/client.crt" \
	--key "$T/ca/client.key" "$Q" >"$T/out" 2>"$T/err"
RC=$?
expect_rc 2 "missing CA file"
expect_err "nope.crt"
"$FLEETQ" -w "127.0.0.1:$GOOD" "$Q" >"$T/out" 2>"$T/err"
RC=$?
expect_rc 2 "no certificates at all"
expect_err "--ca"

# 6. certificates from a config file; flags win over it.
cat >"$T/fleetq.conf" <<CONF
# test config
ca = ca/ca.crt
cert = ca/client.crt
key = ca/client.key
port = $GOOD
format = csv
CONF
FLEETQ_CONFIG="$T/fleetq.conf" "$FLEETQ" -w 127.0.0.1 "$Q" >"$T/out" 2>"$T/err"
RC=$?
expect_rc 0 "config file"
grep -qx "127.0.0.1,$N" "$T/out" || fail "config file: output '$(cat "$T/out")'"
FLEETQ_CONFIG="$T/fleetq.conf" "$FLEETQ" -w 127.0.0.1 --format tsv --port "$EVIL" "$Q" \
	>"$T/out" 2>"$T/err"
RC=$?
expect_rc 4 "flags over config"

# 7. plaintext: only with --insecure, only to loopback.
start_agent plain "$T/n.db" - --insecure; PLAIN=$PORT
"$FLEETQ" --insecure -w "127.0.0.1:$PLAIN" --format tsv "$Q" >"$T/out" 2>"$T/err"
RC=$?
expect_rc 0 "--insecure to a plaintext agent"
grep -qx "127.0.0.1:$PLAIN	$N" "$T/out" || fail "--insecure: output '$(cat "$T/out")'"
"$FLEETQ" --insecure -w "192.0.2.1:$PLAIN" "$Q" >"$T/out" 2>"$T/err"
RC=$?
expect_rc 2 "--insecure to a non-loopback host"
expect_err "192.0.2.1"
# TLS client against a plaintext agent: a TLS failure, not a hang.
fq -w "127.0.0.1:$PLAIN" --format tsv --timeout 10 "$Q"
expect_rc 4 "TLS to a plaintext agent"
echo "ok"
