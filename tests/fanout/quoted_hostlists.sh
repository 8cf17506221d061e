#!/bin/sh
# SPDX-License-Identifier: MIT
# Every hostlist shown after -w is quoted, in README.md, the docs, the examples, fleetq --help
# and fleetq's messages: unquoted, the shell expands gpu[01-16] to a file named gpu1.
# usage: quoted_hostlists.sh FLEETQ SOURCE-DIR
set -u
FLEETQ=$1
SRC=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/fq-quote.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0
# -w, then a word holding a bracket that does not start with a quote (roff: \- and \(aq)
bad='(^|[^a-z])(\\)?-w +[^ '"'"'"\\]*\['
check() { # NAME FILE
	if grep -nE -- "$bad" "$2" >"$T/hits"; then
		sed "s|^|FAIL: unquoted hostlist in $1:|" "$T/hits" >&2
		fails=$((fails + 1))
	fi
}
"$FLEETQ" --help >"$T/help" 2>&1
check "fleetq --help" "$T/help"
( cd "$T" && FLEETQ_CONFIG=/dev/null "$FLEETQ" -w 'x' ) >"$T/noquery" 2>&1
grep -q "no query" "$T/noquery" || { echo "FAIL: no 'no query' message" >&2; fails=$((fails + 1)); }
check "the no-query message" "$T/noquery"
for f in "$SRC/README.md" "$SRC"/docs/*.1 "$SRC"/docs/*.8 "$SRC"/docs/*.md "$SRC"/examples/*/*.md \
	"$SRC"/examples/*/*.sh "$SRC"/examples/slurm/*; do
	[ -f "$f" ] && check "${f#"$SRC"/}" "$f"
done
# the check itself finds what it looks for
printf 'fleetq -w gpu[01-04] ping\n' >"$T/bad"
grep -qE -- "$bad" "$T/bad" || { echo "FAIL: the pattern misses an unquoted hostlist" >&2; exit 1; }
printf 'fleetq \\-w \\(aqgpu[01\\-04]\\(aq ping\n' >"$T/good"
! grep -qE -- "$bad" "$T/good" || { echo "FAIL: the pattern flags a quoted hostlist" >&2; exit 1; }
[ $fails = 0 ] || exit 1
echo ok
