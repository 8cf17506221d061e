#!/bin/sh
# SPDX-License-Identifier: MIT
# Writes through fleetq fail on every node as SQL errors, exit non-zero, and leave
# the agents' files byte for byte unchanged.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
for k in 1 2 3 4; do
	"$TRACEGEN" --out "$T/n$k.db" --node "n$k" --ranks 1 --rank-base $((k - 1)) \
		--nranks 4 --steps 20 --start-ns 1700000000000000000 >"$T/gen$k.log" 2>&1 || fail "fq-tracegen n$k"
done
HL=
for k in 1 2 3 4; do
	start_agent "n$k" "$T/n$k.db" ca
	HL="$HL${HL:+,}127.0.0.1:$PORT"
done
sha256sum "$T"/n?.db >"$T/before"

for sql in "DELETE FROM collectives" \
	"INSERT INTO meta(key, value) VALUES ('pwned', 1)" \
	"UPDATE collectives SET dur_ns = 0" \
	"DROP TABLE collectives" \
	"CREATE TABLE x(a)" \
	"ATTACH DATABASE '$T/other.db' AS o" \
	"PRAGMA journal_mode=DELETE"; do
	fq -w "$HL" --format csv "$sql"
	[ "$RC" != 0 ] || fail "'$sql' exited 0"
	expect_rc 2 "'$sql'"
	expect_err "coverage: 0/4 nodes ok"
	expect_err "sql error: 127.0.0.1:"
	# The same refusal on all four nodes is said once.
	[ "$(grep -c '^fleetq: sql error on all 4 nodes' "$T/err")" = 1 ] ||
		{ cat "$T/err" >&2; fail "'$sql': the common error is not said once"; }
	[ ! -s "$T/out" ] || fail "'$sql' printed rows: $(cat "$T/out")"
done
[ ! -e "$T/other.db" ] || fail "ATTACH created a file"
sha256sum "$T"/n?.db >"$T/after"
cmp -s "$T/before" "$T/after" || fail "a database file changed"
for k in 1 2 3 4; do
	[ "$(sqlite3 "$T/n$k.db" 'SELECT count(*) FROM collectives')" = 20 ] ||
		fail "n$k lost rows"
done

# Reads still work afterwards.
fq -w "$HL" --format csv --merge "SELECT sum(n) FROM results" "SELECT count(*) AS n FROM collectives"
expect_rc 0 "read after the write attempts"
[ "$(tail -n 1 "$T/out")" = 80 ] || fail "sum over nodes is '$(tail -n 1 "$T/out")', want 80"
echo "ok"
