#!/bin/sh
# SPDX-License-Identifier: MIT
# Connection patterns that must not lock real clients out or hold memory
# (issue 14): 330 connections holding a partial ClientHello, reconnecting as
# soon as they are closed (from six addresses, then from one), and 20
# authenticated sessions each sending 16 MiB - 1 of a frame. Real clients are
# served meanwhile; agentd's RSS stays under 256 MiB and falls back once the
# sessions close.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 20 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
start_agent a "$T/n.db" ca
A=$PORT APID=$PID

rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# hold SOURCES SECONDS: 330 sockets from the given 127.0.0.x addresses, each
# sending the first bytes of a ClientHello and nothing more, reopened as soon
# as agentd closes one, until SECONDS pass.
hold() {
	python3 - "$A" "$1" "$2" <<'PY' &
import selectors, socket, sys, time
port, srcs, secs = int(sys.argv[1]), sys.argv[2].split(","), float(sys.argv[3])
# a TLS record header announcing a 512-byte handshake message, and 10 bytes of it
partial = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03]) + b"\0" * 4
sel = selectors.DefaultSelector()
def open_one(src):
    s = socket.socket()
    s.bind((src, 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    sel.register(s, selectors.EVENT_WRITE, [src, False])
for i in range(330):
    open_one(srcs[i % len(srcs)])
end = time.time() + secs
while time.time() < end:
    for key, ev in sel.select(0.2):
        s, (src, sent) = key.fileobj, key.data
        try:
            if not sent:
                s.send(partial)
                sel.modify(s, selectors.EVENT_READ, [src, True])
                continue
            if s.recv(4096):
                continue
        except OSError:
            pass
        sel.unregister(s)
        s.close()
        open_one(src)
PY
	HOLD=$!
}

# served WHAT: five queries from 127.0.0.1, each answered within 5 s.
served() {
	for k in 1 2 3 4 5; do
		t0=$(date +%s%3N)
		fq -w "127.0.0.1:$A" --format tsv --timeout 5 "SELECT count(*) FROM meta"
		[ "$RC" = 0 ] || { cat "$T/err" >&2; fail "$1: a real client was not served"; }
		echo "$1: query $k served in $(($(date +%s%3N) - t0)) ms"
	done
}

hold 127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7 8
sleep 2
served "330 partial handshakes from 6 addresses"
wait "$HOLD"
log_has a "closed [0-9]+ unfinished tls handshakes to make room: over --max-handshakes 64"

hold 127.0.0.9 8
sleep 2
served "330 partial handshakes from one address"
wait "$HOLD"
log_has a "closed [0-9]+ connections at once: over --max-conns-per-source 64"

# 20 sessions each sending 16 MiB - 1 of a 16 MiB frame, then holding it.
base=$(rss "$APID")
python3 - "$A" "$T/ca" "$APID" >"$T/frames.out" 2>&1 <<'PY' || { cat "$T/frames.out" >&2; fail "frame senders"; }
import socket, ssl, struct, sys, time
port, cad, pid = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=cad + "/ca.crt")
ctx.load_cert_chain(cad + "/client.crt", cad + "/client.key")
body = struct.pack(">I", 16 << 20) + b"\x81" * ((16 << 20) - 1)
held, refused = [], 0
for i in range(20):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
    s.recv(65536)  # HELLO
    try:
        s.sendall(body)
        s.settimeout(0.5)
        try:
            if s.recv(65536) == b"":
                refused += 1
                continue
            refused += 1  # an ERROR frame
            continue
        except (socket.timeout, ssl.SSLError):
            pass
        held.append(s)
    except OSError:
        refused += 1
rss = max(int(l.split()[1]) for l in open("/proc/%s/status" % pid) if l.startswith("VmRSS"))
hwm = max(int(l.split()[1]) for l in open("/proc/%s/status" % pid) if l.startswith("VmHWM"))
print("held", len(held), "refused", refused, "rss", rss, "hwm", hwm)
for s in held:
    s.close()
PY
cat "$T/frames.out"
hwm=$(sed -n 's/.* hwm \([0-9]*\)$/\1/p' "$T/frames.out")
[ "$hwm" -lt 262144 ] || fail "20 large frames: agent peak RSS ${hwm} kB, over 256 MiB"
grep -q "refused [1-9]" "$T/frames.out" || fail "no large frame was refused past --frame-mem"
log_has a "frame of 16777220 bytes refused: .* --frame-mem"
sleep 1
after=$(rss "$APID")
echo "agent VmRSS ${base} kB before the frames, ${after} kB after they closed"
[ "$after" -lt $((base + 32768)) ] || fail "frame memory kept: VmRSS ${after} kB, ${base} kB before"
served "after the large frames"

# A client turned away at the door reads why, not "TLS protocol error".
start_agent b "$T/n.db" ca --max-conns-per-source 1
python3 -c 'import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
open(sys.argv[2], "w").close()
time.sleep(10)' "$PORT" "$T/held" &
HOLD=$!
i=0
until [ -e "$T/held" ]; do
	i=$((i + 1))
	[ $i -lt 500 ] || fail "the holding connection did not connect"
	sleep 0.02
done
sleep 0.2 # accepted by the agent
fq -w "127.0.0.1:$PORT" "SELECT 1"
kill "$HOLD"
expect_rc 4 "over --max-conns-per-source"
err_has "handshake failed: agent closed the connection \(busy, or limiting this address"
echo "ok"
