#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq keeps its TLS sessions in a cache file, so that its next run resumes (the
# agent's query log says tls=resumed). The file is mode 0600 in a 0700 folder, one per
# client certificate and CA; a damaged or foreign file is ignored without a word;
# --no-session-cache and 'session_cache = no' make full handshakes and write nothing;
# concurrent runs leave a whole file; an agent that cannot resume (restart, SIGHUP) gets
# a full handshake, silently, and a client it no longer allows is refused.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 10 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
export XDG_CACHE_HOME="$T/cache"
D=$XDG_CACHE_HOME/fleetq
start_agent a "$T/n.db" ca
A=$PORT APID=$PID
Q="SELECT count(*) FROM collectives"
N=$(sqlite3 "$T/n.db" "$Q")

# count WORD: the agent's query lines that say tls=WORD
count() { grep -c " tls=$1 " "$T/a.log" || true; }
# run WHAT [fleetq options]: one query to the agent, exit 0, nothing on stderr but coverage
run() {
	what=$1
	shift
	fq -w "127.0.0.1:$A" --format tsv "$@" "$Q"
	expect_rc 0 "$what"
	grep -qx "127.0.0.1:$A	$N" "$T/out" || fail "$what: output '$(cat "$T/out")'"
	[ "$(grep -cv '^coverage: ' "$T/err")" = 0 ] || fail "$what: stderr '$(cat "$T/err")'"
}
# expect WHAT FULL RESUMED: the agent's handshakes so far
expect() {
	[ "$(count full)" = "$2" ] && [ "$(count resumed)" = "$3" ] ||
		fail "$1: $(count full) full and $(count resumed) resumed handshakes, want $2 and $3"
}
mode() { stat -c %a "$1"; }

# 1. the first run makes a full handshake and writes the file; the second resumes.
run "first run"
expect "first run" 1 0
F=$(echo "$D"/sessions-*)
[ -f "$F" ] || fail "no session cache file in $D"
[ "$(mode "$D")" = 700 ] || fail "cache folder mode $(mode "$D"), want 700"
[ "$(mode "$F")" = 600 ] || fail "cache file mode $(mode "$F"), want 600"
run "second run"
expect "second run" 1 1
[ "$(mode "$F")" = 600 ] || fail "rewritten cache file mode $(mode "$F"), want 600"

# 2. opted out: full handshakes, the file is neither used nor written.
cp "$F" "$T/copy"
run "--no-session-cache" --no-session-cache
expect "--no-session-cache" 2 1
cmp -s "$F" "$T/copy" || fail "--no-session-cache rewrote the cache file"
rm -rf "$XDG_CACHE_HOME"
run "--no-session-cache, no folder" --no-session-cache
[ ! -e "$XDG_CACHE_HOME" ] || fail "--no-session-cache made $XDG_CACHE_HOME"
echo "session_cache = no" >"$T/nocache.conf"
FLEETQ_CONFIG="$T/nocache.conf"
run "session_cache = no"
FLEETQ_CONFIG=/dev/null
[ ! -e "$XDG_CACHE_HOME" ] || fail "'session_cache = no' made $XDG_CACHE_HOME"
expect "opted out" 4 1

# 3. a damaged file costs a full handshake and nothing else; the next run resumes again.
full=4 resumed=1
for damage in garbage truncated flipped empty foreign-mode; do
	run "before $damage"
	[ -f "$F" ] || fail "no cache file before $damage"
	size=$(stat -c %s "$F")
	case $damage in
	garbage) head -c 2000 /dev/urandom >"$F" ;;
	truncated) head -c $((size / 2)) "$F" >"$T/half" && cat "$T/half" >"$F" ;;
	flipped)
		python3 -c 'import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) - 100] ^= 0x40
open(p, "wb").write(b)' "$F"
		;;
	empty) : >"$F" ;;
	foreign-mode) chmod 644 "$F" ;;
	esac
	run "$damage file"
	run "after $damage"
	# before: full the first time (no file since 2.), then resumed; damaged: full; after: resumed
	if [ "$damage" = garbage ]; then
		full=$((full + 2)) resumed=$((resumed + 1))
	else
		full=$((full + 1)) resumed=$((resumed + 2))
	fi
	expect "$damage file" "$full" "$resumed"
	[ "$(mode "$F")" = 600 ] || fail "cache file mode $(mode "$F") after $damage"
done

# 4. concurrent runs: every one answers, and the file they leave is whole.
n=0
while [ $n -lt 6 ]; do
	"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" \
		-q -w "127.0.0.1:$A" --format tsv "$Q" >"$T/par$n.out" 2>&1 &
	eval "P$n=\$!"
	n=$((n + 1))
done
n=0
while [ $n -lt 6 ]; do
	eval "wait \$P$n" || fail "concurrent run $n failed: $(cat "$T/par$n.out")"
	n=$((n + 1))
done
r=$(count resumed)
run "after the concurrent runs"
[ "$(count resumed)" = $((r + 1)) ] || fail "the file the concurrent runs left does not resume"
[ -z "$(ls -A "$D" | grep -v '^sessions-')" ] || fail "left in $D: $(ls -A "$D")"

# 5. another client certificate (same CA) has its own file and starts with a full handshake.
cp -r "$T/ca" "$T/ca2"
"$MKCERTS" --client fleetq-other "$T/ca2" >"$T/mkcerts-other.log" 2>&1 || fail "mkcerts --client"
f=$(count full)
"$FLEETQ" --ca "$T/ca2/ca.crt" --cert "$T/ca2/client.crt" --key "$T/ca2/client.key" \
	-q -w "127.0.0.1:$A" --format tsv "$Q" >"$T/out" 2>"$T/err" || fail "other client"
[ "$(count full)" = $((f + 1)) ] || fail "another client certificate resumed a session"
[ "$(ls "$D" | wc -l)" = 2 ] || fail "want a file per client certificate: $(ls "$D")"

# 6. SIGHUP: sessions of before the reload do not resume; the run after it makes a new one.
f=$(count full) r=$(count resumed)
kill -HUP "$APID"
i=0
until grep -q "SIGHUP: reloaded" "$T/a.log"; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "agent did not log its reload"
	sleep 0.1
done
run "after SIGHUP"
run "after SIGHUP, again"
[ "$(count full)" = $((f + 1)) ] && [ "$(count resumed)" = $((r + 1)) ] ||
	fail "after SIGHUP: want one full handshake, then a resumed one"

# 7. the agent restarted on the same port: the cached session is refused, silently.
kill "$APID"
wait "$APID" 2>/dev/null
mv "$T/a.log" "$T/a-1.log"
start_agent a "$T/n.db" ca --listen "127.0.0.1:$A"
APID=$PID
[ "$PORT" = "$A" ] || fail "agent restarted on port $PORT, not $A"
run "agent restarted"
expect "agent restarted" 1 0

# 8. restarted with an allow list that leaves us out: refused, resumption or not.
kill "$APID"
wait "$APID" 2>/dev/null
mv "$T/a.log" "$T/a-2.log"
start_agent a "$T/n.db" ca --listen "127.0.0.1:$A" --allow-client 'ops-*'
APID=$PID
fq -w "127.0.0.1:$A" --format tsv "$Q"
expect_rc 4 "client no longer allowed"
expect_err "tls: 127.0.0.1:$A"
grep -q "refused client .*'fleetq-client' matches no --allow-client pattern" "$T/a.log" ||
	fail "agent did not refuse fleetq-client"
fq -w "127.0.0.1:$A" --format tsv "$Q"
expect_rc 4 "client no longer allowed, second run"
[ "$(grep -c "matches no --allow-client" "$T/a.log")" = 2 ] || fail "want two refusals"
echo ok
