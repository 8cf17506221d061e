#!/bin/sh
# SPDX-License-Identifier: MIT
# --param NAME=VALUE: values reach the agents bound, never spliced into the SQL. The robust_z
# example of docs/schema.md (it uses :c) runs as written and flags the planted rank.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
HASH=00112233445566aa
"$TRACEGEN" --out "$T/n1.db" --node n1 --ranks 8 --steps 200 --slow-rank 5 --slow-pct 20 \
	--comm-hash $HASH >"$T/gen.log" 2>&1 || fail "fq-tracegen"
start_agent n1 "$T/n1.db" ca
HL=127.0.0.1:$PORT

# The example, from the docs as written.
awk '/^Typical use, one communicator/ { on = 1; next }
     on && /^```sql$/ { inblk = 1; next }
     inblk && /^```$/ { exit }
     inblk { print }' "$(dirname "$0")/../../docs/schema.md" >"$T/example.sql"
grep -q ':c' "$T/example.sql" || fail "no :c in the docs/schema.md example"
fq -w "$HL" --format csv --param c=$HASH - <"$T/example.sql"
expect_rc 0 "robust_z example"
[ "$(tail -n +2 "$T/out" | cut -d, -f2)" = 5 ] || fail "example: want rank 5 alone: $(cat "$T/out")"
# without the value: said before the fan-out, with the fix
fq -w "$HL" - <"$T/example.sql"
expect_rc 2 "no --param"
fq -w "$HL" --param x=1 - <"$T/example.sql"
expect_rc 2 "the wrong --param"
expect_err "query parameter ':c' has no value: pass --param c=VALUE"

# bound, not spliced: a quote in the value is data
fq -w "$HL" --format csv --param "c=x' OR '1'='1" \
	"SELECT count(*) AS n FROM collectives WHERE comm_hash = :c"
expect_rc 0 "injection attempt"
[ "$(tail -n 1 "$T/out" | cut -d, -f2)" = 0 ] || fail "a quote in --param changed the query: $(cat "$T/out")"
fq -w "$HL" --format csv --param ":c=$HASH" "SELECT count(*) AS n FROM collectives WHERE comm_hash = @c"
[ "$(tail -n 1 "$T/out" | cut -d, -f2)" = 1600 ] || fail ":c= and @c: $(cat "$T/out")"

# types: integer, real, text, quoted digits as text
fq -w "$HL" --format csv --param i=7 --param r=2.5 --param t=abc --param q="'007'" \
	"SELECT typeof(:i) || typeof(:r) || typeof(:t) || typeof(:q) AS t, :q AS q"
expect_rc 0 "types"
[ "$(tail -n 1 "$T/out")" = "127.0.0.1:$PORT,integerrealtexttext,007" ] ||
	fail "types: $(cat "$T/out")"

# --merge binds by name too
fq -w "$HL" --format csv --param r=5 --merge "SELECT rank, n FROM results WHERE rank = :r" \
	"SELECT rank, count(*) AS n FROM collectives GROUP BY rank"
expect_rc 0 "--merge :r"
[ "$(tail -n +2 "$T/out")" = "5,200" ] || fail "--merge :r: $(cat "$T/out")"

# mistakes
fq -w "$HL" --param c "SELECT :c"
expect_rc 2 "no ="
expect_err "give NAME=VALUE"
fq -w "$HL" --param c=1 --param c=2 "SELECT :c"
expect_rc 2 "twice"
expect_err "given twice"
fq -w "$HL" --param c=1 "SELECT 1"
expect_rc 2 "unused"
expect_err "the query has no parameter :c"
fq -w "$HL" --param c=1 "SELECT ?"
expect_rc 2 "bare ?"
expect_err "bare '?'"
fq -w "$HL" stragglers --param c=1
expect_rc 2 "stragglers --param"
echo ok
