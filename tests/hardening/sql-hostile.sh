#!/bin/sh
# SPDX-License-Identifier: MIT
# Hostile SQL through fleetq -> agentd: writes, ATTACH (quoted names, URIs),
# PRAGMA writes, load_extension, VACUUM INTO, several statements, CTE bombs,
# huge blobs and strings, cross joins, deep expressions, huge IN lists. Each
# is refused or stopped by a limit with a one-line reason (lines marked "~"
# may instead answer one small row: SQLite's printf gives NULL past the length
# limit rather than an error, and an IN list under the 1 MiB SQL limit is a
# query like any other); the trace file's
# bytes never change; no file appears; the agent answers the next query; its
# peak RSS stays bounded.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 4 --nranks 4 --steps 500 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
start_agent a "$T/n.db" ca --timeout-ms 3000 --max-rows 100000 --max-bytes 8000000
A=$PORT APID=$PID
sum0=$(sha256sum <"$T/n.db")
ls "$T" >"$T/files.before"
N=$(sqlite3 "$T/n.db" "SELECT count(*) FROM collectives")

big_in=$(python3 -c 'print("SELECT 1 WHERE 1 IN (" + ",".join(str(i) for i in range(100000)) + ")")')
huge_in=$(python3 -c 'print("SELECT 1 WHERE 1 IN (" + ",".join(str(i) for i in range(300000)) + ")")')
deep=$(python3 -c 'print("SELECT " + "(" * 5000 + "1" + ")" * 5000)')
deep_neg=$(python3 -c 'print("SELECT " + "- " * 50000 + "1")')
cat >"$T/attacks" <<SQL
INSERT INTO meta(key, value) VALUES ('pwned', 1)
UPDATE collectives SET dur_ns = 0
DELETE FROM collectives
CREATE TABLE x(a)
CREATE TEMP TABLE x(a)
DROP TABLE collectives
ALTER TABLE collectives ADD COLUMN z
ATTACH DATABASE '$T/att.db' AS o
ATTACH '$T/it''s here.db' AS "my db"
ATTACH 'file:$T/uri.db?mode=rwc' AS u
ATTACH 'file:/tmp/x?mode=rwc' AS u
ATTACH ':memory:' AS m
PRAGMA journal_mode=DELETE
PRAGMA writable_schema=1
PRAGMA query_only=0
PRAGMA user_version=7
PRAGMA wal_checkpoint(TRUNCATE)
SELECT * FROM pragma_journal_mode('delete')
SELECT load_extension('/tmp/evil.so')
VACUUM INTO '$T/copy.db'
VACUUM INTO 'file:$T/copy2.db?mode=rwc'
VACUUM
SELECT 1; DELETE FROM collectives
SELECT 1; ATTACH '$T/two.db' AS t
BEGIN IMMEDIATE
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT count(*) FROM c
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c) SELECT i FROM c
WITH RECURSIVE c(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM c) SELECT length(s) FROM c
SELECT randomblob(2000000000)
SELECT zeroblob(2000000000)
SELECT length(randomblob(2000000000))
~ SELECT printf('%.*c', 2000000000, 'x')
~ SELECT length(printf('%.*c', 2000000000, 'x'))
SELECT count(*) FROM collectives a, collectives b, collectives c, cuda_calls d
SELECT a.ts_ns, b.ts_ns FROM collectives a, collectives b, cuda_calls c
SELECT group_concat(hex(randomblob(1000))) FROM collectives a, collectives b
SELECT a.ts_ns FROM collectives a, collectives b ORDER BY random()
SELECT readfile('/etc/shadow')
SELECT writefile('$T/w', 'x')
~ $big_in
$huge_in
$deep
$deep_neg
SQL
n=0
while IFS= read -r sql; do
	n=$((n + 1))
	null_ok=
	case $sql in
	"~ "*) sql=${sql#\~ } null_ok=1 ;;
	esac
	printf "%s" "$sql" >"$T/q.sql"
	fq -w "127.0.0.1:$A" --format tsv --timeout 60 - <"$T/q.sql"
	if [ "$RC" = 0 ] && [ -n "$null_ok" ]; then
		[ "$(wc -l <"$T/out")" -le 2 ] && [ "$(wc -c <"$T/out")" -lt 200 ] ||
			fail "attack $n answered '$(head -c 200 "$T/out")', want one small row"
		echo "coverage: answered one small row: $(tail -n 1 "$T/out")" >"$T/err"
	else
		[ "$RC" != 0 ] || fail "attack $n exited 0: $(printf %.120s "$sql")"
		# 2: the agent refused the SQL itself (the query's fault); 3: a limit cut it
		[ "$RC" = 2 ] || [ "$RC" = 3 ] ||
			{ cat "$T/err" >&2; fail "attack $n: exit $RC, want 2 or 3"; }
		[ "$RC" = 3 ] || grep -qE "coverage: 0/1 node ok.*sql error" "$T/err" ||
			{ cat "$T/err" >&2; fail "attack $n: exit 2 without a refusal"; }
		# one clear reason in the coverage line; no node counted as ok
		grep -qE "coverage: 0/1 node ok.*(sql error|denied|timeout|truncated|memory|limit)" \
			"$T/err" ||
			{ cat "$T/err" >&2; fail "attack $n: no reason: $(printf %.120s "$sql")"; }
	fi
	head -c 2000 "$T/err" | sed "s/^/attack $n: /" >>"$T/reasons"
	# truncated results may carry rows, but none is merged as complete output
	kill -0 "$APID" 2>/dev/null || fail "agent died on attack $n: $(printf %.120s "$sql")"
	[ "$(sha256sum <"$T/n.db")" = "$sum0" ] || fail "attack $n changed the trace file"
	# the agent serves the next query
	fq -w "127.0.0.1:$A" --format tsv "SELECT count(*) FROM collectives"
	[ "$RC" = 0 ] && grep -qx "127.0.0.1:$A	$N" "$T/out" ||
		{ cat "$T/err" >&2; fail "agent did not serve after attack $n"; }
done <"$T/attacks"
[ $n -ge 30 ] || fail "only $n attacks ran"
ls "$T" | grep -vxF -f "$T/files.before" | grep -vE '^(out|err|reasons|attacks|files\.before|q\.sql|new)$' \
	>"$T/new" || true
[ ! -s "$T/new" ] || fail "attacks created files: $(cat "$T/new")"
hwm=$(vmhwm "$APID")
echo "agent VmHWM ${hwm} kB after $n attacks"
[ "$hwm" -lt 262144 ] || fail "agent peak RSS ${hwm} kB, over 256 MiB"
echo "ok: $n attacks refused or stopped"
