#!/bin/sh
# SPDX-License-Identifier: MIT
# Where the analysis SQL comes from: $FLEETQ_SQL_DIR, else the files installed or next to a
# build tree, else the copies built into the binary (a binary copied alone still works);
# --show-sql prints both files with their parameters; broken files fail before any fan-out.
. "$(dirname "$0")/../lib.sh"
set -u
export FLEETQ_CONFIG=/dev/null
scratch fq-sqlfiles
SRC=$FLEETQ_SQL_DIR

# 1. --show-sql: both files, the parameter values, exit 0, no hosts needed
"$FLEETQ" stragglers --show-sql --since 5m --threshold 2.5 --job 42 --comm 00112233AABBCCDD \
	>"$T/out" 2>"$T/err" || fail "--show-sql: exit $?: $(cat "$T/err")"
grep -q "^-- node SQL, run on every node: $SRC/stragglers.node.sql$" "$T/out" || fail "node origin"
grep -q "^-- merge SQL, run over tables results and clock: $SRC/stragglers.merge.sql$" "$T/out" ||
	fail "merge origin"
grep -q "^-- stragglers.node.sql: what every node sends" "$T/out" || fail "node text"
grep -q "^-- stragglers.merge.sql: " "$T/out" || fail "merge text"
grep -q "^--   :since_ns = [0-9]* (coordinator clock now minus the window" "$T/out" || fail "since"
grep -q "^--   :threshold = 2.5$" "$T/out" || fail "threshold"
grep -q "^--   :job = '42'$" "$T/out" || fail "job"
grep -q "^--   :comm = '00112233aabbccdd'$" "$T/out" || fail "comm, lowercased"
grep -q "^--   :max_seqs = 1000 (per communicator" "$T/out" || fail "max_seqs default"
grep -q "^--   :min_effect = NULL (the file's default)$" "$T/out" || fail "min_effect default"
"$FLEETQ" stragglers --show-sql --min-effect 7 >"$T/out" 2>&1 || fail "--min-effect 7"
grep -q "^--   :min_effect = 0.07$" "$T/out" || fail "--min-effect 7 not bound as 0.07"
grep -q "^--   :effect_steps = NULL (the file's default)$" "$T/out" || fail "effect_steps default"
"$FLEETQ" stragglers --show-sql --effect-steps 0 >"$T/out" 2>&1 || fail "--effect-steps 0"
grep -q "^--   :effect_steps = 0$" "$T/out" || fail "--effect-steps 0 not bound as 0"
"$FLEETQ" stragglers --show-sql --max-seqs 512 >"$T/out" 2>&1 || fail "--max-seqs 512"
grep -q "^--   :max_seqs = 512 (" "$T/out" || fail "--max-seqs 512 not bound"
"$FLEETQ" netcheck --show-sql --max-seqs 0 >"$T/out" 2>&1 || fail "--max-seqs 0"
grep -q "^--   :max_seqs = NULL .*(no bound (--max-seqs 0))$" "$T/out" || fail "--max-seqs 0 not NULL"
"$FLEETQ" stragglers --show-sql --max-seqs -3 >"$T/out" 2>"$T/err" && fail "--max-seqs -3 accepted"
grep -q "max-seqs: invalid count '-3'" "$T/err" || fail "--max-seqs -3: $(cat "$T/err")"
"$FLEETQ" netcheck --show-sql --since all >"$T/out" 2>&1 || fail "netcheck --show-sql"
grep -q "^--   :since_ns = 0 (all time)$" "$T/out" || fail "--since all: $(head -n 5 "$T/out")"
grep -q "^-- netcheck.merge.sql: " "$T/out" || fail "netcheck merge text"

# 2. a copy of the binary alone: the built-in copies, identical to the source files
mkdir -p "$T/bin"
cp "$FLEETQ" "$T/bin/fleetq"
for a in stragglers netcheck; do
	env -u FLEETQ_SQL_DIR "$T/bin/fleetq" $a --show-sql --since all >"$T/out" 2>&1 ||
		fail "copied binary: $a --show-sql"
	origin=$(sed -n 's/^-- node SQL, run on every node: //p' "$T/out")
	case $origin in
	"built in" | */share/fleetq/sql/analysis/$a.node.sql) ;;
	*) fail "copied binary read '$origin'" ;;
	esac
	if [ "$origin" = "built in" ]; then
		# the node file: from its SPDX line to the blank line before the merge header
		awk '/^-- merge SQL/ { exit } /^-- SPDX/ { on = 1 } on' "$T/out" | sed '$d' >"$T/node.sql"
		# (the source's "-- include: NAME.sql" lines in place, as fleetq reads it)
		awk -v d="$SRC" '/^-- include: / { f = d "/" $3; while ((getline l < f) > 0) print l
			close(f); next } { print }' "$SRC/$a.node.sql" >"$T/src.sql"
		cmp -s "$T/node.sql" "$T/src.sql" || fail "built-in $a.node.sql differs from $SRC"
		grep -q "^jobproc AS MATERIALIZED" "$T/node.sql" || fail "built-in $a: no jobproc.sql"
	fi
done

# 3. adapted files: the user's folder wins; a broken file fails once, locally, naming it
mkdir "$T/sql"
cp "$SRC"/*.sql "$T/sql/"
sed -i 's/^SELECT .seq. AS kind,/SELECT :foo AS foo, '"'"'seq'"'"' AS kind,/' "$T/sql/stragglers.node.sql"
sed -i 's/^SELECT .\(last\|now\|rank\|kern\|p2p\|busy\).,/SELECT NULL, '"'"'\1'"'"',/' \
	"$T/sql/stragglers.node.sql"
FLEETQ_SQL_DIR=$T/sql "$FLEETQ" stragglers --show-sql >"$T/out" 2>"$T/err" ||
	fail "adapted file: $(cat "$T/err")"
grep -q "^--   :foo = NULL (not set by fleetq)$" "$T/out" || fail "unknown parameter not shown"
echo "SELECT nosuchcolumn FROM results" >"$T/sql/stragglers.merge.sql"
FLEETQ_SQL_DIR=$T/sql "$FLEETQ" -w 127.0.0.1:1 stragglers >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "$T/sql/stragglers.merge.sql: no such column" "$T/err" ||
	fail "broken merge file: rc=$rc $(cat "$T/err")"
# the shared CTE (jobproc.sql, named by an include line) comes from the same folder
echo "-- my jobproc" >>"$T/sql/jobproc.sql"
FLEETQ_SQL_DIR=$T/sql "$FLEETQ" netcheck --show-sql >"$T/out" 2>"$T/err" ||
	fail "adapted jobproc.sql: $(cat "$T/err")"
grep -q "^-- my jobproc$" "$T/out" || fail "adapted jobproc.sql not used"
grep -q "^-- include: " "$T/out" && fail "include line shown unexpanded"
mv "$T/sql/jobproc.sql" "$T/sql/jobproc.sql.x"
FLEETQ_SQL_DIR=$T/sql "$FLEETQ" -w 127.0.0.1:1 netcheck >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "cannot read '$T/sql/jobproc.sql'" "$T/err" ||
	fail "missing included file: rc=$rc $(cat "$T/err")"
printf -- '-- include: jobproc.sql\n' >"$T/sql/jobproc.sql"
FLEETQ_SQL_DIR=$T/sql "$FLEETQ" -w 127.0.0.1:1 netcheck >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 2 ] && grep -q "includes another file: one level only" "$T/err" ||
	fail "nested include: rc=$rc $(cat "$T/err")"
mv "$T/sql/jobproc.sql.x" "$T/sql/jobproc.sql"
rm "$T/sql/netcheck.node.sql"
FLEETQ_SQL_DIR=$T/sql "$FLEETQ" -w 127.0.0.1:1 netcheck >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 2 ] && grep -q "cannot read '$T/sql/netcheck.node.sql'.*FLEETQ_SQL_DIR" "$T/err" ||
	fail "missing file: rc=$rc $(cat "$T/err")"

# 4. the evidence files (why.*.sql): shown after the verdict's, checked before any fan-out, and
# a folder of files adapted before they existed still gives the verdict
"$FLEETQ" stragglers --show-sql >"$T/out" 2>&1 || fail "--show-sql with why"
grep -q "^-- evidence (a second fan-out, when a rank was named), node SQL: $SRC/why.node.sql$" \
	"$T/out" || fail "why node origin"
grep -q "^-- evidence merge SQL, run over its rows (table results): $SRC/why.merge.sql$" \
	"$T/out" || fail "why merge origin"
grep -q "^-- why.merge.sql: the evidence" "$T/out" || fail "why merge text"
rm -rf "$T/sql" && mkdir "$T/sql" && cp "$SRC"/*.sql "$T/sql/"
echo "SELECT nosuchcolumn FROM results" >"$T/sql/why.merge.sql"
FLEETQ_SQL_DIR=$T/sql "$FLEETQ" -w 127.0.0.1:1 stragglers >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 2 ] && grep -q "$T/sql/why.merge.sql: no such column" "$T/err" ||
	fail "broken why merge file: rc=$rc $(cat "$T/err")"
rm "$T/sql"/why.*.sql
FLEETQ_SQL_DIR=$T/sql "$FLEETQ" stragglers --show-sql >"$T/out" 2>"$T/err" ||
	fail "no why files: $(cat "$T/err")"
grep -q "^fleetq: stragglers: no evidence of why: cannot read '$T/sql/why.node.sql'" "$T/err" ||
	fail "no why files: $(cat "$T/err")"
grep -q "^-- evidence" "$T/out" && fail "no why files, yet evidence SQL shown"
echo PASS
