#!/bin/sh
# SPDX-License-Identifier: MIT
# certs/mkcerts: CA, host and client certificates with the right usages and
# names, private keys 0600, an existing CA reused when hosts are added.
. "$(dirname "$0")/lib.sh"
D=$T/pki
"$MKCERTS" --days 30 "$D" localhost node7.example.org 10.9.8.7 2>/dev/null || fail "mkcerts"
for f in ca localhost node7.example.org 10.9.8.7 client; do
	[ -s "$D/$f.crt" ] && [ -s "$D/$f.key" ] || fail "missing $D/$f.{crt,key}"
	[ "$(stat -c %a "$D/$f.key")" = 600 ] || fail "$f.key is mode $(stat -c %a "$D/$f.key")"
done
openssl x509 -in "$D/ca.crt" -noout -text >"$T/ca.txt"
has_re "$T/ca.txt" 'CA:TRUE'
has_re "$T/ca.txt" 'Certificate Sign'
has_re "$T/ca.txt" 'ASN1 OID: prime256v1'
openssl verify -CAfile "$D/ca.crt" -purpose sslserver "$D/localhost.crt" "$D/node7.example.org.crt" \
	"$D/10.9.8.7.crt" >/dev/null || fail "host certificates do not verify as servers"
openssl verify -CAfile "$D/ca.crt" -purpose sslclient "$D/client.crt" "$D/localhost.crt" \
	>/dev/null || fail "client certificates do not verify as clients"
openssl x509 -in "$D/localhost.crt" -noout -ext subjectAltName >"$T/san"
has_re "$T/san" 'DNS:localhost, IP Address:127\.0\.0\.1'
openssl x509 -in "$D/node7.example.org.crt" -noout -ext subjectAltName >"$T/san"
has_re "$T/san" 'DNS:node7\.example\.org$'
openssl x509 -in "$D/10.9.8.7.crt" -noout -ext subjectAltName >"$T/san"
has_re "$T/san" 'IP Address:10\.9\.8\.7$'
openssl x509 -in "$D/client.crt" -noout -subject >"$T/subj"
has_re "$T/subj" 'CN ?= ?fleetq-client'
openssl x509 -in "$D/client.crt" -noout -ext extendedKeyUsage >"$T/eku"
has_re "$T/eku" 'TLS Web Client Authentication'
lacks_re "$T/eku" 'Server'
end=$(openssl x509 -in "$D/localhost.crt" -noout -enddate | cut -d= -f2)
[ $(( $(date -d "$end" +%s) - $(date +%s) )) -lt $((31 * 86400)) ] || fail "--days 30 ignored"

# Adding a host later keeps the CA (so existing certificates stay valid).
ca_before=$(sha256sum <"$D/ca.crt")
"$MKCERTS" --client ops-bob "$D" node8 2>/dev/null || fail "mkcerts node8"
[ "$(sha256sum <"$D/ca.crt")" = "$ca_before" ] || fail "the CA was replaced"
openssl verify -CAfile "$D/ca.crt" "$D/node8.crt" "$D/localhost.crt" >/dev/null || fail "node8"
openssl x509 -in "$D/client.crt" -noout -subject >"$T/subj"
has_re "$T/subj" 'CN ?= ?ops-bob'

"$MKCERTS" 2>/dev/null && fail "mkcerts without arguments succeeded"
"$MKCERTS" --days x "$D" h 2>/dev/null && fail "mkcerts --days x succeeded"
echo ok
