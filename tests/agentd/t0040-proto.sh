#!/bin/sh
# SPDX-License-Identifier: MIT
# Untrusted bytes: an oversized frame, garbage, another protocol version and
# a frame a client must not send each end the session with ERROR; the agent
# serves the next client; idle sessions are closed.
. "$(dirname "$0")/lib.sh"
make_certs
make_db
start_agentd --idle-timeout 1

# A header announcing 100 MiB: ERROR PROTO, then the connection closes.
fq raw-len 104857600 >"$T/big.out" 2>&1 || true
has "$T/big.out" "error code=1 msg=frame of 104857600 bytes is over the 16777216-byte limit"
has "$T/big.out" "closed"
fq query "SELECT 7" >"$T/next.out" 2>&1 || fail "next client exited $?"
has "$T/next.out" "7"

fq raw-garbage >"$T/garbage.out" 2>&1 || true
has_re "$T/garbage.out" '^error code=1 msg=bad frame: .+'
has "$T/garbage.out" "closed"

fq raw-version 2 >"$T/version.out" 2>&1 || true
has "$T/version.out" "error code=2 msg=protocol version 2 not supported; this agent speaks version 1"
has "$T/version.out" "closed"

# A query in the same write as the bad frame is never run.
fq query "SELECT 8" ping raw-garbage >"$T/mixed.out" 2>&1 || true
has "$T/mixed.out" "end id=1 status=0 rows=1 truncated=0 msg="
has_re "$T/mixed.out" '^pong '
has_re "$T/mixed.out" '^error code=1 '

# Idle sessions are closed (--idle-timeout 1).
fq wait-close >"$T/idle.out" 2>&1 || true
has "$T/idle.out" "closed"
has_re "$T/agentd.log" 'idle for 1 s, closing'

fq query "SELECT 9" >"$T/last.out" 2>&1 || fail "last client exited $?"
has "$T/last.out" "9"
kill -0 "$APID" || fail "agentd died"
echo ok
