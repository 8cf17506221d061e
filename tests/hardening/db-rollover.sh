#!/bin/sh
# SPDX-License-Identifier: MIT
# The trace file renamed away under a tracing agentd, as log-rotation tools do
# (issue 14). The writer used to go on writing the renamed file while queries
# served the path, and its WAL stayed at the path's names. Now:
# - renamed away (the path free): the renamed file is closed whole (WAL
#   checkpointed into it, no -wal left at the path) and stops growing; a new
#   trace file starts at the path, with the tracer's meta, and queries see it
#   grow;
# - a user's file moved to the path: the writer does not write into it (not
#   a byte changes; queries serve it read-only), says why once in its log, and
#   starts a new trace there once the path is free again.
. "$(dirname "$0")/lib.sh"
need_trace

trace_agent a roll "nccl,sync,proc,$LIBS"
"$FQ_WORKLOAD" --ranks 2 --steps 400000 --step-us 2000 --job-id roll-$$ >"$T/wl.log" 2>&1 &
PIDS="$PIDS $!"

# served SQL: what agentd answers (one value)
served() {
	"$FLEETQ" --insecure -w "127.0.0.1:$A" --format tsv "$1" 2>"$T/cerr" | tail -n 1 | cut -f2
}
# grows SQL: the agent's answer to SQL grows within 10 s
grows() {
	a=$(served "$1")
	i=0
	until [ "$(served "$1")" -gt "${a:-0}" ] 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 100 ] || fail "$2: '$1' stayed at '$a' ($(cat "$T/cerr"))"
		sleep 0.1
	done
}
# file_rows FILE: collectives in FILE, read beside agentd
file_rows() { sqlite3 "$1" "SELECT count(*) FROM collectives"; }
COUNT="SELECT count(*) FROM collectives"
START="SELECT value FROM meta WHERE key = 'agent_start_ns'"

PROBES="SELECT value FROM meta WHERE key = 'probes'"
grows "$COUNT" "before any rename"
start0=$(served "$START")
probes0=$(served "$PROBES")
[ -n "$probes0" ] || fail "no meta 'probes' before the rename"

# 1. renamed away, the path left free
mv "$DB" "$DB.1"
log_has a "trace store '$DB' was renamed away \(now '$DB.1'\): closed it"
log_has a "trace store '$DB': writing a new trace file there"
[ -s "$DB" ] || fail "no new trace file at the path"
grows "$COUNT" "after the rename"
start1=$(served "$START")
[ "$start1" != "$start0" ] || fail "queries still serve the renamed file"
[ "$(served "$PROBES")" = "$probes0" ] || fail "the new file lacks the tracer's meta 'probes'"
sleep 1.5 # the writer's rows would show in the renamed file by now
[ ! -e "$DB.1-wal" ] || [ ! -s "$DB.1-wal" ] || fail "the renamed file kept a WAL"
n1=$(file_rows "$DB.1")
sleep 1.5
[ "$(file_rows "$DB.1")" = "$n1" ] || fail "the renamed file still grows ($n1 -> $(file_rows "$DB.1"))"
[ "$(sqlite3 "$DB.1" 'PRAGMA integrity_check')" = ok ] || fail "the renamed file is not whole"
[ "$n1" -gt 0 ] || fail "the renamed file lost its rows"
echo "renamed: $DB.1 closed with $n1 collectives; new file served (agent_start_ns $start0 -> $start1)"

# 2. a user's file moved to the path
sqlite3 "$T/user.db" "CREATE TABLE t(x); INSERT INTO t VALUES (42);" || fail "sqlite3"
sum=$(sha256sum <"$T/user.db")
mv "$DB" "$DB.2"
mv "$T/user.db" "$DB"
log_has a "'$DB' is not a fleetq trace file .*dropping records until the path is free or empty"
sleep 2
[ "$(sha256sum <"$DB")" = "$sum" ] || fail "agentd changed the user's file"
[ ! -e "$DB-wal" ] || fail "a WAL sits beside the user's file"
[ "$(served "SELECT x FROM t")" = 42 ] || fail "queries do not serve the file at the path"
[ "$(grep -c 'dropping records until the path is free' "$T/a.log")" = 1 ] ||
	fail "the refusal is not logged once"
[ "$(sqlite3 "$DB.2" 'PRAGMA integrity_check')" = ok ] || fail "the second renamed file is not whole"
echo "user's file: unchanged and served read-only; $DB.2 closed with $(file_rows "$DB.2") collectives"

# 3. the path free again
mv "$DB" "$T/user.db"
i=0
until [ "$(grep -c "'$DB': writing a new trace file there" "$T/a.log")" = 2 ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "no new trace file once the path was free"
	sleep 0.1
done
grows "$COUNT" "after the path was freed"
[ "$(sha256sum <"$T/user.db")" = "$sum" ] || fail "agentd changed the user's file"
kill -0 "$APID" || fail "agentd died"
echo ok
