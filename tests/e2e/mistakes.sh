#!/bin/sh
# SPDX-License-Identifier: MIT
# A newcomer's mistakes get the message that names the fix: a missing key, a certificate given
# as the key, another certificate's key (in agentd's words), --insecure with certificates, a
# plaintext client to a TLS agent (a hint, not only a timeout), --since 0 (all time).
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1 other
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --steps 10 >"$T/gen.log" 2>&1 || fail "fq-tracegen"
start_agent n "$T/n.db" ca
HL=127.0.0.1:$PORT
C="$T/ca"
run() { "$FLEETQ" "$@" >"$T/out" 2>"$T/err"; RC=$?; }

run -w "$HL" --ca "$C/ca.crt" --cert "$C/client.crt" --key "$T/nosuch.key" "SELECT 1"
expect_rc 2 "missing key"
expect_err "cannot read key '$T/nosuch.key': No such file or directory: check --key"
run -w "$HL" --ca "$C/ca.crt" --cert "$C/client.crt" --key "$C/client.crt" "SELECT 1"
expect_rc 2 "certificate as key"
expect_err "cannot load key '$C/client.crt': it holds a certificate, not a private key"
run -w "$HL" --ca "$C/ca.crt" --cert "$C/client.crt" --key "$C/other.key" "SELECT 1"
expect_rc 2 "another certificate's key"
expect_err "key '$C/other.key' does not match certificate '$C/client.crt': check --key"
run -w "$HL" --ca "$T/nosuch.crt" --cert "$C/client.crt" --key "$C/client.key" "SELECT 1"
expect_rc 2 "missing CA"
expect_err "cannot read CA certificate '$T/nosuch.crt': No such file or directory: check --ca"
# agentd says the same of its own files
"$AGENTD" --listen 127.0.0.1:0 --db "$T/n.db" --no-trace --ca "$C/ca.crt" \
	--cert "$C/127.0.0.1.crt" --key "$T/nosuch.key" 2>"$T/err"
expect_err "cannot read key '$T/nosuch.key': No such file or directory"

# --insecure with certificates on the command line: not silently ignored
run -w "$HL" --insecure --ca "$C/ca.crt" "SELECT 1"
expect_rc 2 "--insecure --ca"
expect_err "--insecure talks plaintext: --ca does not apply"
# ... those of a config file are (one file serves both kinds of agent)
printf 'ca = %s\n' "$C/ca.crt" >"$T/conf"
FLEETQ_CONFIG=$T/conf run -w "$HL" --insecure --connect-timeout 1 "SELECT 1"
expect_rc 3 "--insecure, ca in the config file"
# a plaintext client to a TLS agent: a hint with the timeout
expect_err "no HELLO within 1s (does the agent serve TLS? then drop --insecure)"

# --since 0 is all time, as 'all'
run stragglers --show-sql --since 0
expect_rc 0 "--since 0"
grep -q "^--   :since_ns = 0 (all time)$" "$T/out" || fail "--since 0 is not all time: $(cat "$T/out")"
echo ok
