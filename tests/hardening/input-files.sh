#!/bin/sh
# SPDX-License-Identifier: MIT
# Files and hostlists the user names cannot hang fleetq, exhaust its memory or count a
# node twice: /dev/zero as hosts or config file, a FIFO, a directory as FLEETQ_CONFIG, a
# NUL in a hosts line, host:9401 and host:09401, and IPv6 literals ([::1]:PORT).
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 1 --steps 5 >"$T/gen.log" 2>&1 || fail "fq-tracegen"
start_agent n "$T/n.db" ca
A=127.0.0.1:$PORT

# run LIMIT ARGS...: fleetq under 512 MiB of address space and LIMIT seconds
run() {
	lim=$1
	shift
	(ulimit -v 524288; exec timeout "$lim" "$FLEETQ" "$@") >"$T/out" 2>"$T/err"
	RC=$?
}

run 20 --hosts /dev/zero "SELECT 1"
expect_rc 2 "--hosts /dev/zero"
err_has "^fleetq: hosts file '/dev/zero': line 1 holds a NUL byte"
FLEETQ_CONFIG=/dev/zero run 20 -w "$A" "SELECT 1"
expect_rc 2 "FLEETQ_CONFIG=/dev/zero"
err_has "^fleetq: config file '/dev/zero': line 1 holds a NUL byte"
head -c 67108865 /dev/zero | tr '\0' a >"$T/big"
run 20 --hosts "$T/big" "SELECT 1"
expect_rc 2 "a 64 MiB hosts file"
err_has "is larger than 67108864 bytes"
rm -f "$T/big"

# a FIFO: no writer reads as empty at once; a silent writer is given up on after 10 s
mkfifo "$T/fifo" || fail "mkfifo"
run 20 --hosts "$T/fifo" "SELECT 1"
expect_rc 2 "--hosts FIFO without a writer"
FLEETQ_CONFIG=$T/fifo run 20 -w "$A" --insecure "SELECT 1"
[ "$RC" != 124 ] || fail "FLEETQ_CONFIG FIFO blocked"
sleep 15 >"$T/fifo" &
W=$!
PIDS="$PIDS $W"
run 14 --hosts "$T/fifo" "SELECT 1"
expect_rc 2 "--hosts FIFO with a silent writer"
err_has "nothing written for 10 s"
kill $W 2>/dev/null

# FLEETQ_CONFIG naming a directory is an error, not ignored
FLEETQ_CONFIG=$T run 20 -w "$A" "SELECT 1"
expect_rc 2 "FLEETQ_CONFIG=directory"
err_has "^fleetq: config file '$T' is a directory"

# a NUL in a hosts line
printf '%s\n127.0.0.1:1\0junk\n' "$A" >"$T/hosts-nul"
run 20 --hosts "$T/hosts-nul" "SELECT 1"
expect_rc 2 "NUL in a hosts line"
err_has "line 2 holds a NUL byte"

# host:PORT and host:0PORT are one node
printf '%s\n127.0.0.1:0%s\n' "$A" "$PORT" >"$T/hosts-dup"
before=$(grep -c "agentd: query " "$T/n.log")
fq --hosts "$T/hosts-dup" -w "127.0.0.1:00$PORT" "SELECT 1"
expect_rc 0 "host:PORT and host:0PORT"
err_has "^coverage: 1/1 node ok, 1 row$"
sleep 0.3
[ "$(grep -c "agentd: query " "$T/n.log")" = $((before + 1)) ] ||
	fail "host:PORT and host:0PORT queried $(($(grep -c "agentd: query " "$T/n.log") - before)) times"

# IPv6 literals
"$AGENTD" --listen '[::1]:0' --db "$T/n.db" --no-trace --insecure --node six \
	--port-file "$T/six.port" --log "$T/six.log" &
PIDS="$PIDS $!"
i=0
while [ ! -s "$T/six.port" ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || skip "no IPv6 loopback"
	sleep 0.05
done
P6=$(cat "$T/six.port")
fq --insecure -w "[::1]:$P6" "SELECT 1"
expect_rc 0 "[::1]:PORT"
err_has "^coverage: 1/1 node ok, 1 row$"
fq --insecure -w "[::1]" --port "$P6" "SELECT 1"
expect_rc 0 "[::1] --port"
fq --insecure -w "[::1]:0$P6,[::1]:$P6" "SELECT 1"
expect_rc 0 "[::1]:0PORT,[::1]:PORT"
err_has "^coverage: 1/1 node ok, 1 row$"
# an address is never a name to resolve (TLS, not reachable here: any outcome but that)
fq -w "[fd00::17]:9" --connect-timeout 1 "SELECT 1"
! grep -q "cannot resolve" "$T/err" || fail "[fd00::17]: $(cat "$T/err")"
echo "input-files: ok"
