#!/bin/sh
# SPDX-License-Identifier: MIT
# Faults and load: an agent SIGKILLed mid-stream is a failed node whose rows
# are dropped, never merged as complete (exit 3); a slowloris frame (a header,
# then a byte a second), an unfinished TLS handshake and an idle session are
# closed by their timeouts; oversized and malformed frames close only their
# own connection; 64 clients at once on one agent are each served or refused
# as busy, with the agent's peak RSS bounded.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 50 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
FAULTS=0

# 1. SIGKILL mid-stream, beside a good node.
start_agent victim "$T/n.db" ca --max-rows 100000000 --max-bytes 100000000000
V=$PORT VPID=$PID
start_agent good "$T/n.db" ca; G=$PORT
BIG="WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 50000000) SELECT i, hex(randomblob(64)) FROM c"
"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" \
	-w "127.0.0.1:[$V,$G]" --min-coverage 0.5 --format tsv --timeout 120 "$BIG" \
	>"$T/out" 2>"$T/err" &
FQ=$!
PIDS="$PIDS $FQ"
# kill once the victim has sent a good part of its stream
i=0
until [ "$(awk '/^wchar:/ { print $2 }' "/proc/$VPID/io" 2>/dev/null || echo 0)" -gt 20000000 ]; do
	i=$((i + 1))
	[ $i -lt 600 ] || fail "the victim never streamed 20 MB"
	sleep 0.1
done
kill -9 "$VPID"
wait "$FQ"
RC=$?
[ "$RC" = 3 ] || { cat "$T/err" >&2; fail "SIGKILL mid-stream: exit $RC, want 3"; }
err_has "partial: 127\.0\.0\.1:$V \(connection lost after [0-9]+ rows, rows dropped"
! grep -q "^127\.0\.0\.1:$V	" "$T/out" || fail "the killed node's partial rows were printed"
grep -q "^127\.0\.0\.1:$G	" "$T/out" || fail "the good node's rows are missing"
FAULTS=$((FAULTS + 1))

# 2. slow and broken clients against a plaintext agent and a TLS one.
start_agent plain "$T/n.db" - --insecure --idle-timeout 2; P=$PORT PPID_=$PID
start_agent tls "$T/n.db" ca --handshake-timeout 2 --idle-timeout 2; S=$PORT SPID=$PID
python3 - "$P" "$S" >"$T/slow.out" 2>&1 <<'PY' || fail "slow clients: $(cat "$T/slow.out")"
import socket, struct, sys, time
plain, tls = int(sys.argv[1]), int(sys.argv[2])

def closed_within(s, secs):
    """True once the peer closes (EOF or reset) within secs; reads and drops data."""
    s.settimeout(1)
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            continue
        except ConnectionResetError:
            return True
    return False

# slowloris: a frame header announcing 100 bytes, then one byte a second
s = socket.create_connection(("127.0.0.1", plain))
s.sendall(struct.pack(">I", 100))
sent, closed = 0, False
for _ in range(40):
    try:
        s.sendall(b"\x01")
        sent += 1
    except OSError:
        closed = True
        break
    if closed_within(s, 1):
        closed = True
        break
assert closed and sent < 100, "slowloris: still open after %d bytes" % sent
print("slowloris closed after", sent, "bytes")

# an idle session after HELLO
s = socket.create_connection(("127.0.0.1", plain))
assert closed_within(s, 30), "idle session not closed"
print("idle closed")

# a TLS client that never finishes its handshake (TCP only, then silence)
s = socket.create_connection(("127.0.0.1", tls))
assert closed_within(s, 30), "unfinished handshake not closed"
print("handshake closed")

# oversized frame header, then garbage: each closes its own connection
for bad in (struct.pack(">I", 0xFFFFFFFF), struct.pack(">I", 8) + b"\xc1" * 8):
    s = socket.create_connection(("127.0.0.1", plain))
    s.sendall(bad)
    assert closed_within(s, 30), "bad frame %r: not closed" % bad[:8]
print("bad frames closed")
PY
log_has plain "client 127\.0\.0\.1:[0-9]+ \(-\): idle for 2 s, closing"
log_has tls "client 127\.0\.0\.1:[0-9]+: tls handshake timed out after 2 s"
log_has plain "frame of 4294967295 bytes is over the [0-9]+-byte limit; closing"
log_has plain "bad frame: "
FAULTS=$((FAULTS + 5))
"$FLEETQ" --insecure -w "127.0.0.1:$P" --format tsv "SELECT 7" >"$T/out" 2>"$T/err" ||
	fail "plain agent stopped serving after the slow clients"
kill -0 "$SPID" && kill -0 "$PPID_" || fail "an agent died"

# 3. 64 clients at once: served, or refused as busy; never a crash or a hang.
start_agent busy "$T/n.db" ca --max-conns 16 --max-queries 4; B=$PORT BPID=$PID
SLOW="WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 300000) SELECT count(*) FROM c"
k=0
pids=
while [ $k -lt 64 ]; do
	k=$((k + 1))
	"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" \
		-w "127.0.0.1:$B" --format tsv --timeout 60 "$SLOW" >"$T/c$k.out" 2>"$T/c$k.err" &
	pids="$pids $!"
done
ok=0 busy=0 k=0
for p in $pids; do
	k=$((k + 1))
	if wait "$p"; then
		grep -qx "127.0.0.1:$B	300000" "$T/c$k.out" || fail "client $k: wrong answer"
		ok=$((ok + 1))
	elif grep -qE "busy|queries running, retry" "$T/c$k.err"; then
		busy=$((busy + 1))
	else
		fail "client $k neither served nor busy: $(cat "$T/c$k.err")"
	fi
done
echo "64 clients: $ok served, $busy busy"
[ $ok -ge 1 ] || fail "no client was served"
hwm=$(vmhwm "$BPID")
echo "agent VmHWM ${hwm} kB under 64 clients"
[ "$hwm" -lt 65536 ] || fail "agent peak RSS ${hwm} kB, over 64 MiB"
fq -w "127.0.0.1:$B" --format tsv "SELECT 1"
[ "$RC" = 0 ] || fail "agent stopped serving after the load"
FAULTS=$((FAULTS + 1))
echo "ok: $FAULTS faults"
