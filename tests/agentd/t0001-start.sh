#!/bin/sh
# SPDX-License-Identifier: MIT
# Starting up: refusals are one line naming the problem; --insecure only on
# loopback; --help and --version.
. "$(dirname "$0")/lib.sh"
make_certs
make_db
C=$T/certs

# refuse WANT-REGEX ARGS...: agentd must exit non-zero with one line on stderr matching.
refuse() {
	want=$1
	shift
	rc=0
	"$AGENTD" "$@" >"$T/start.out" 2>"$T/start.err" </dev/null || rc=$?
	[ "$rc" != 0 ] || fail "agentd $* started"
	[ "$(wc -l <"$T/start.err")" = 1 ] || fail "agentd $*: want one line, got: $(cat "$T/start.err")"
	grep -qE -- "$want" "$T/start.err" || fail "agentd $*: want /$want/, got: $(cat "$T/start.err")"
}

refuse 'allowed only on loopback' --listen 0.0.0.0:0 --db "$T/trace.db" --insecure --no-trace
refuse 'allowed only on loopback' --listen '[::]:0' --db "$T/trace.db" --insecure --no-trace
refuse 'allowed only on loopback' --listen 10.1.2.3:7077 --db "$T/trace.db" --insecure --no-trace \
	--ca "$C/ca.crt" --cert "$C/localhost.crt" --key "$C/localhost.key"
refuse '--ca, --cert and --key are all required' --listen 127.0.0.1:0 --db "$T/trace.db" --no-trace
refuse '--ca, --cert and --key are all required' --listen 127.0.0.1:0 --db "$T/trace.db" \
	--no-trace --cert "$C/localhost.crt" --key "$C/localhost.key"
refuse "cannot parse --listen 'nonsense'" --listen nonsense --db "$T/trace.db" --no-trace --insecure
refuse "--max-rows wants a whole number" --listen 127.0.0.1:0 --max-rows -5
TLS="--ca $C/ca.crt --cert $C/localhost.crt --key $C/localhost.key"
# shellcheck disable=SC2086
refuse "cannot read certificate '$T/nope.crt'" --listen 127.0.0.1:0 --db "$T/trace.db" --no-trace \
	--ca "$C/ca.crt" --cert "$T/nope.crt" --key "$C/localhost.key"
refuse "cannot read CA file '$T/nope-ca.crt'" --listen 127.0.0.1:0 --db "$T/trace.db" --no-trace \
	--ca "$T/nope-ca.crt" --cert "$C/localhost.crt" --key "$C/localhost.key"
echo "not a key" >"$T/bad.key"
refuse "cannot load key '$T/bad.key'" --listen 127.0.0.1:0 --db "$T/trace.db" --no-trace \
	--ca "$C/ca.crt" --cert "$C/localhost.crt" --key "$T/bad.key"
refuse "does not match certificate" --listen 127.0.0.1:0 --db "$T/trace.db" --no-trace \
	--ca "$C/ca.crt" --cert "$C/localhost.crt" --key "$C/client.key"
# shellcheck disable=SC2086
refuse "$T/missing.db" --listen 127.0.0.1:0 --db "$T/missing.db" --no-trace $TLS
if [ "${AGENTD_HAVE_TRACE:-0}" = 0 ]; then
	# shellcheck disable=SC2086
	refuse '^agentd: built without tracing \(FLEETQ_BPF=OFF\); run with --no-trace to serve only$' \
		--listen 127.0.0.1:0 --db "$T/trace.db" $TLS
fi
[ ! -e "$T/missing.db" ] || fail "agentd created the missing database"

"$AGENTD" --help >"$T/help.out" || fail "--help exited $?"
grep -q -- '--allow-client PATTERN' "$T/help.out" || fail "--help lacks --allow-client"
# Every option --help lists is in the man page, and the other way round.
if [ -n "${AGENTD_MAN:-}" ]; then
	grep -oE -- '--[a-z][a-z-]+' "$T/help.out" | sort -u >"$T/help.opts"
	grep -E '^\.B' "$AGENTD_MAN" | grep -oE -- '\\-\\-[a-z][a-z\\-]*' | sed 's/\\//g' |
		sort -u >"$T/man.opts"
	cmp -s "$T/help.opts" "$T/man.opts" ||
		fail "--help and docs/agentd.8 disagree: $(diff "$T/help.opts" "$T/man.opts")"
	# The trace's bounds by default: the same numbers in both.
	for o in retain-bytes retain-age; do
		d=$(sed -n "/--$o /,/default:/p" "$T/help.out" | grep -oE 'default: [0-9]+' | head -n 1)
		[ -n "$d" ] || fail "--help gives no default for --$o"
		M=".BI $(printf '%s' "--$o" | sed 's/-/\\-/g') " awk \
			'index($0, ENVIRON["M"]) == 1 { on = 1; next } on && /^\.TP/ { exit } on' \
			"$AGENTD_MAN" | tr '\n' ' ' | grep -qE "\\($d[,;)]" ||
			fail "docs/agentd.8 does not give --$o's $d"
	done
fi
"$AGENTD" --version | grep -qE '^agentd [0-9]+\.[0-9]+' || fail "--version"

# --insecure on loopback: plaintext, no peer identity, queries work.
rm -f "$T/port"
"$AGENTD" --listen 127.0.0.1:0 --port-file "$T/port" --db "$T/trace.db" --insecure --no-trace \
	--node plainnode --log "$T/agentd.log" 2>>"$T/agentd.err" &
APID=$!
PIDS="$PIDS $APID"
wait_for "port file" test -s "$T/port"
PORT=$(cat "$T/port")
"$FQTC" --port "$PORT" --plain query "SELECT 5" >"$T/plain.out" 2>&1 || fail "plain client exited $?"
has_re "$T/plain.out" '^hello .* node=plainnode .* peer=\(none\) '
has "$T/plain.out" "5"
has_re "$T/agentd.log" 'PLAINTEXT, --insecure'
echo ok
