#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq facing a hostile agent (tests/e2e/fakeagent.c): rows past --max-rows fail that
# node, bytes past --max-bytes (default 256 MiB a node) cut it, so a stream of 1 MiB frames
# cannot grow fleetq to gigabytes; thousands of columns of one name are not cubic and more
# columns than the merge holds fail that node, not the run; terminal escapes from an agent
# never reach a terminal raw; and 195,000 unreachable hosts are summed up in seconds.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 1 --steps 5 >"$T/gen.log" 2>&1 || fail "fq-tracegen"
start_agent good "$T/n.db" - --insecure
GOOD=127.0.0.1:$PORT

# run SECONDS ARGS...: fleetq under 768 MiB of address space and SECONDS
run() {
	lim=$1
	shift
	(ulimit -v 786432; exec timeout "$lim" "$FLEETQ" --insecure "$@") >"$T/out" 2>"$T/err"
	RC=$?
}

# 1. a stream of 1 MiB frames that never ends
fake flood
FLOOD=127.0.0.1:$port
run 20 -w "$FLOOD" --max-rows 10 --timeout 10 "SELECT 1"
expect_rc 3 "flood, --max-rows 10"
err_has "protocol error: $FLOOD \\(sent more rows than the 10 asked for \\(--max-rows\\)\\)"
run 20 -w "$FLOOD" --max-bytes 32M --timeout 10 "SELECT 1"
expect_rc 3 "flood, --max-bytes 32M"
err_has "truncated: $FLOOD \\(fleetq's --max-bytes of 33554432 per node reached"
run 20 -w "$FLOOD" --max-bytes 32M --timeout 10 --merge "SELECT count(*) FROM results" \
	"SELECT 1"
expect_rc 3 "flood, --max-bytes 32M, --merge"
# the default (256 MiB a node) holds too: well inside 768 MiB
run 30 -w "$FLOOD,$GOOD" --timeout 20 --format tsv \
	--merge "SELECT node, count(*) FROM results GROUP BY node ORDER BY node = '$GOOD'" \
	"SELECT 1 AS a, 'x' AS b"
expect_rc 3 "flood, default --max-bytes"
err_has "truncated: $FLOOD \\(fleetq's --max-bytes of 268435456 per node reached"
grep -q "^$GOOD	1$" "$T/out" || fail "flood: the good node's row is missing: $(cat "$T/out")"
run 20 -w "$FLOOD" --max-bytes 0 "SELECT 1"
expect_rc 2 "--max-bytes 0"

# 2. columns: 1,998 of one name in seconds; more than the merge holds fail that node only
fake dupcols2k
run 10 -w "127.0.0.1:$port" --timeout 5 --format csv "SELECT 1"
expect_rc 0 "1,998 columns named x"
head -n 1 "$T/out" | grep -q ",x_1998$" || fail "1,998 columns: $(head -c 200 "$T/out")"
for m in dupcols widecols; do
	fake $m
	run 10 -w "127.0.0.1:$port" --timeout 5 "SELECT 1"
	expect_rc 3 "$m"
	err_has "columns differ: 127.0.0.1:$port \\([0-9]+ columns, more than the merge holds"
	run 10 -w "127.0.0.1:$port,$GOOD" --timeout 5 "SELECT 1"
	expect_rc 3 "$m and a good node"
	err_has "columns differ: 127.0.0.1:$port "
	grep -q "^$GOOD	1$" "$T/out" || fail "$m: the good node's row is missing"
done

# 3. terminal escapes: escaped in the table's header and cells, in csv and tsv on a
# terminal (script(1) gives one), and in every stderr line
ESC=$(printf '\033')
fake escape
run 10 -w "127.0.0.1:$port" --format table "SELECT 1"
expect_rc 0 "escape"
! grep -q "$ESC" "$T/out" || fail "ESC in the table: $(od -c "$T/out" | head)"
grep -q '\\x1b\]0;pwned\\x07' "$T/out" || fail "table: $(cat "$T/out")"
run 10 -w "127.0.0.1:$port" --format table ping
! grep -q "$ESC" "$T/out" || fail "ESC in the ping table"
if command -v script >/dev/null; then
	for f in tsv csv; do
		script -qec "$FLEETQ --insecure -w 127.0.0.1:$port --format $f 'SELECT 1'" \
			/dev/null >"$T/tty" 2>&1 </dev/null
		grep -q 'pwned' "$T/tty" || fail "$f on a terminal: $(cat "$T/tty")"
		! grep -q "$ESC" "$T/tty" || fail "ESC in $f on a terminal"
	done
fi
# off a terminal, tsv keeps the bytes (a pipe wants the data)
run 10 -w "127.0.0.1:$port" --format tsv "SELECT 1"
grep -q "$ESC" "$T/out" || fail "tsv into a pipe lost the agent's bytes"
fake escend
run 10 -w "127.0.0.1:$port" "SELECT 1"
! grep -q "$ESC" "$T/err" || fail "ESC on stderr: $(od -c "$T/err" | head)"
grep -q 'no such table: \\x1b\]0;pwned' "$T/err" || fail "escend: $(cat "$T/err")"

# 4. 195,000 unreachable hosts, --timeout 2: the summary takes no longer than the run
start=$(date +%s)
run 40 -w '127.0.0.[1-3]:[1-65000]' --timeout 2 --connect-timeout 1 "SELECT 1"
took=$(($(date +%s) - start))
[ "$RC" = 3 ] || fail "195,000 hosts: exit $RC: $(tail -c 300 "$T/err")"
[ "$took" -le 15 ] || fail "195,000 hosts with --timeout 2 took $took s"
echo "hostile-agent: ok ($took s for 195,000 hosts)"
