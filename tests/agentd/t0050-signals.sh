#!/bin/sh
# SPDX-License-Identifier: MIT
# SIGHUP reloads CA/cert/key for new sessions (and keeps the old ones when the
# new files are bad); SIGTERM lets a running query end with END SHUTDOWN after
# the grace period and exits 0.
. "$(dirname "$0")/lib.sh"
make_certs
make_certs "$T/new" localhost
make_db
start_agentd --drain-timeout 1 --timeout-ms 60000

fq query "SELECT 1" >"$T/a.out" 2>&1 || fail "first client exited $?"

# Swap in a new CA and server certificate, then SIGHUP.
cp "$T/new/ca.crt" "$T/certs/ca.crt"
cp "$T/new/localhost.crt" "$T/certs/localhost.crt"
cp "$T/new/localhost.key" "$T/certs/localhost.key"
kill -HUP "$APID"
wait_for "the reload" grep -q 'SIGHUP: reloaded' "$T/agentd.log"
"$FQTC" --port "$PORT" --ca "$T/new/ca.crt" --cert "$T/new/client.crt" --key "$T/new/client.key" \
	query "SELECT 2" >"$T/b.out" 2>&1 || fail "client of the new CA exited $?: $(cat "$T/b.out")"
has "$T/b.out" "2"
# The old client no longer verifies the agent (new server certificate) nor is trusted by it.
fq query "SELECT 3" >"$T/c.out" 2>&1 && fail "client of the old CA still served after reload"

# A broken key: the reload fails with one line and the agent keeps the new-CA context.
echo garbage >"$T/certs/localhost.key"
kill -HUP "$APID"
wait_for "the failed reload" grep -q 'SIGHUP: certificate reload failed' "$T/agentd.log"
has_re "$T/agentd.log" "SIGHUP: certificate reload failed, still using the old ones: cannot load key '.*localhost.key'"
"$FQTC" --port "$PORT" --ca "$T/new/ca.crt" --cert "$T/new/client.crt" --key "$T/new/client.key" \
	query "SELECT 4" >"$T/d.out" 2>&1 || fail "client after a failed reload exited $?"
has "$T/d.out" "4"

# SIGTERM with a query running: grace period, END SHUTDOWN, exit 0.
forever="WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
"$FQTC" --port "$PORT" --ca "$T/new/ca.crt" --cert "$T/new/client.crt" --key "$T/new/client.key" \
	query "$forever" wait-close >"$T/e.out" 2>&1 &
PIDS="$PIDS $!"
wait_for "the long query's COLUMNS" grep -q '^columns' "$T/e.out"
kill -TERM "$APID"
rc=0
wait "$APID" || rc=$?
[ "$rc" = 0 ] || fail "agentd exited $rc on SIGTERM"
wait_for "the client's END" grep -q '^end ' "$T/e.out"
has_re "$T/e.out" '^end id=1 status=11 rows=0 truncated=1 msg=agent is shutting down'
has_re "$T/agentd.log" 'stopping on signal 15: 1 queries running'
has_re "$T/agentd.log" 'status=shutdown'
has_re "$T/agentd.log" 'stopped$'

# SIGTERM when idle: exit 0 at once.
cp "$T/new/localhost.key" "$T/certs/localhost.key"
start_agentd
kill -TERM "$APID"
rc=0
wait "$APID" || rc=$?
[ "$rc" = 0 ] || fail "idle agentd exited $rc on SIGTERM"
echo ok
