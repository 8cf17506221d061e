#!/bin/sh
# SPDX-License-Identifier: MIT
# One SQL function call must not run past the query's deadline (issue 14).
# SQLite 3.40's printf() repeats a %c conversion's character once per unit of
# precision and goes on after the string outgrew the length limit:
# printf('%.2000000000c', 'x') spent seconds returning NULL, past any deadline,
# and a row of calls each just under the limit ran them all out. Now each
# query ends within its 1 s deadline + 1 s by the agent's own clock, the
# oversized calls with the value limit's reason, and agentd's peak RSS stays
# under 256 MiB (docs/security.md, "one SQL function call").
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 10 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
start_agent a "$T/n.db" ca --timeout-ms 1000
A=$PORT APID=$PID

# Each call's %c alone stays under the 16 MiB value limit, its result does not:
# every call does its full work and returns NULL, holding no memory.
row=$(python3 -c 'print("SELECT " + ", ".join("printf(\x27%%s%%.16700000c\x27, printf(\x27%%.20000c\x27, \x27y\x27), \x27a\x27) AS c%d" % i for i in range(100)))')
wide=$(python3 -c 'print("SELECT " + ", ".join("printf(\x27%%.*c\x27, 16000000, \x27a\x27) AS c%d" % i for i in range(20)))')
TOOBIG='larger than the [0-9]+-byte limit'
tab=$(printf '\t')
cat >"$T/attacks" <<SQL
$TOOBIG	SELECT printf('%.2000000000c', 'x')
$TOOBIG	SELECT format('%.*c', 2147483647, 'a')
$TOOBIG	SELECT printf('%.9000000c%.9000000c', 'a', 'b')
$TOOBIG	SELECT printf('%5.*c%.*c', 2147483647, -1, 2147483647, 'a')
$TOOBIG	SELECT zeroblob(2000000000)
$TOOBIG	SELECT randomblob(2000000000)
$TOOBIG	SELECT replace(printf('%.1000000c', 'a'), 'a', 'aaaaaaaaaaaaaaaaaaaa')
deadline|memory budget	$row
deadline|memory budget	$wide
SQL

n=0
while IFS="$tab" read -r want sql; do
	n=$((n + 1))
	l0=$(wc -l <"$T/a.log")
	printf "%s" "$sql" >"$T/q.sql"
	fq -w "127.0.0.1:$A" --format tsv --timeout 60 - <"$T/q.sql"
	[ "$RC" = 3 ] || { cat "$T/out" "$T/err" >&2; fail "attack $n: exit $RC, want 3"; }
	grep -qE -- "$want" "$T/err" || { cat "$T/err" >&2; fail "attack $n: reason lacks /$want/"; }
	ms=$(tail -n +$((l0 + 1)) "$T/a.log" | sed -n 's/.* ms=\([0-9]*\) status=.*/\1/p' | tail -n 1)
	echo "attack $n: agent ${ms} ms: $(grep -m1 -oE 'query (ran past|exceeded)[^:]*|a value is larger[^:]*' "$T/err")"
	[ -n "$ms" ] || fail "attack $n: no query line in the agent's log"
	[ "$ms" -le 2000 ] || fail "attack $n: the query ran ${ms} ms, past its 1000 ms deadline + 1 s"
	kill -0 "$APID" 2>/dev/null || fail "agent died on attack $n"
done <"$T/attacks"
[ "$n" = 9 ] || fail "only $n attacks ran"

# What stays: printf and format as SQLite has them.
fq -w "127.0.0.1:$A" --format tsv "SELECT printf('%5.2f|%-4d|%.3c|%s|%q|%,d', 3.14159, 7, 'xy', NULL, 'it''s', 1234567), format('%d%%', 50), printf(NULL), printf('%.*c', 3, 'é'), length(printf('%.*c', 1000000, 'a'))"
[ "$RC" = 0 ] || { cat "$T/err" >&2; fail "printf no longer answers"; }
got=$(tail -n 1 "$T/out" | cut -f2-)
[ "$got" = " 3.14|7   |xxx||it''s|1,234,567${tab}50%${tab}${tab}ééé${tab}1000000" ] ||
	fail "printf changed: '$got'"
hwm=$(vmhwm "$APID")
[ "$hwm" -lt 262144 ] || fail "agent peak RSS ${hwm} kB, over 256 MiB"
echo "ok: $n attacks; agent VmHWM $hwm kB"
