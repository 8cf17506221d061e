#!/bin/bash
# SPDX-License-Identifier: MIT
# Long fan-outs: the progress line names the node still in flight; the first Ctrl-C prints
# what arrived, marks the pending node "interrupted" in the coverage and exits 130; many
# failures whose messages hold the host name fold into one group.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --steps 10 >"$T/gen.log" 2>&1 || fail "fq-tracegen"
start_agent real "$T/n.db" - --insecure
REAL=$PORT
fake stall
STALL=$port
HL="127.0.0.1:$REAL,127.0.0.1:$STALL"

# 1. Ctrl-C (SIGINT; a background job of a script would have it ignored, so restore it)
env --default-signal=INT "$FLEETQ" --insecure -w "$HL" --format csv --timeout 60 \
	"SELECT count(*) AS n FROM collectives" >"$T/out" 2>"$T/err" &
FQ=$!
sleep 1.5
kill -INT $FQ
i=0
while kill -0 $FQ 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
kill -0 $FQ 2>/dev/null && { kill -KILL $FQ; fail "fleetq still runs 5 s after Ctrl-C"; }
wait $FQ
RC=$?
expect_rc 130 "Ctrl-C"
[ "$(cat "$T/out")" = "$(printf 'node,n\n127.0.0.1:%s,20' "$REAL")" ] ||
	fail "Ctrl-C: what arrived was not printed: $(cat "$T/out")"
expect_err "coverage: 1/2 nodes ok, 1 row; interrupted: 127.0.0.1:$STALL (interrupted after"
expect_err "fleetq: interrupted: printed what arrived"

# 1b. the second Ctrl-C ends fleetq at once: here while it prints what arrived into a
# pipe nobody reads (killed by SIGINT, not an exit status)
"$TRACEGEN" --out "$T/big.db" --node big --ranks 2 --steps 3000 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen big"
start_agent big "$T/big.db" - --insecure
python3 - "$FLEETQ" "127.0.0.1:$PORT,127.0.0.1:$STALL" <<'PY' || fail "second Ctrl-C"
import signal, subprocess, sys, time
p = subprocess.Popen([sys.argv[1], "--insecure", "-w", sys.argv[2], "--format", "csv",
                      "--merge", "SELECT * FROM results", "SELECT * FROM cuda_calls"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
time.sleep(1.5)
p.send_signal(signal.SIGINT)
time.sleep(1)
assert p.poll() is None, f"fleetq ended ({p.returncode}) though its stdout is full"
p.send_signal(signal.SIGINT)
rc = p.wait(timeout=5)
assert rc == -signal.SIGINT, f"after the second Ctrl-C: {rc}, want killed by SIGINT"
PY

# 2. the progress line (on a terminal) names the node in flight
script -qec "env --default-signal=INT $FLEETQ --insecure -w $HL --timeout 2.5 \
	'SELECT 1' >/dev/null" "$T/tty" >/dev/null 2>&1
grep -q "1/2 nodes done, 1 in flight (127.0.0.1:$STALL)" "$T/tty" ||
	fail "progress line: $(tr '\r' '\n' <"$T/tty" | head -5)"

# 3. twenty unresolvable hosts: one group, the host name folded out of the message
fq -w 'nosuch-fq-[01-20].invalid' --connect-timeout 2 "SELECT 1"
expect_rc 3 "unresolvable"
[ "$(grep -c '^coverage: ' "$T/err")" = 1 ] || fail "coverage lines: $(cat "$T/err")"
line=$(grep '^coverage: ' "$T/err")
[ ${#line} -lt 200 ] || fail "coverage line of ${#line} bytes: $line"
grep -qF "unreachable: nosuch-fq-[01-20].invalid (cannot resolve '<host>'" "$T/err" ||
	fail "not one group: $line"
grep -qF "fleetq: unreachable on all 20 nodes: cannot resolve '<host>'" "$T/err" ||
	fail "no common failure: $(cat "$T/err")"
echo ok
