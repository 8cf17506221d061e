#!/bin/sh
# SPDX-License-Identifier: MIT
# Every part of a tracing agentd logs to --log: the store (an old trace moved
# aside) and the tracer (its start-up probe cost), not only the server, and
# nothing of theirs lands on stderr. They share the server's file descriptor,
# so SIGHUP's reopen (tests/agentd/t0050-signals.sh) holds for them too.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root for BPF"
[ "${AGENTD_HAVE_TRACE:-0}" = 1 ] || skip "agentd built without tracing"
DB=$T/trace.db
LOG=$T/agentd.log
sqlite3 -batch "$DB" "CREATE TABLE meta (key TEXT PRIMARY KEY, value);
INSERT INTO meta VALUES ('schema_version', 1);" || fail "cannot make an old trace"

"$AGENTD" --listen 127.0.0.1:0 --insecure --db "$DB" --node tlog --probes "sched,proc" \
	--port-file "$T/a.port" --log "$LOG" 2>"$T/stderr" &
APID=$!
PIDS="$PIDS $APID"
i=0
until grep -q 'serving' "$LOG" 2>/dev/null; do
	kill -0 "$APID" 2>/dev/null || fail "agentd exited at start: $(cat "$T/stderr")"
	i=$((i + 1))
	[ $i -lt 600 ] || fail "agentd did not start"
	sleep 0.05
done
ts='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z agentd: '
grep -qE "${ts}trace store '$DB' has schema version 1 .*moved it to" "$LOG" ||
	fail "the store's line is not in --log"
grep -qE "${ts}trace: probe cost per hit" "$LOG" || fail "the tracer's line is not in --log"
grep -E 'trace store|trace: ' "$T/stderr" && fail "store or tracer lines on stderr, not in --log"
echo ok
