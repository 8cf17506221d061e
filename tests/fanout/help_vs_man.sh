#!/bin/sh
# SPDX-License-Identifier: MIT
# Every long option fleetq --help lists is in the man page's OPTIONS, and back.
set -u
FLEETQ=$1
MAN=$2
fails=0
help=$("$FLEETQ" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
# Options are the tag lines (the line after .TP) of the OPTIONS section.
man=$(awk '/^\.SH OPTIONS/ { on = 1; next } /^\.SH/ { on = 0 } on && tag { print } { tag = /^\.TP/ }' "$MAN" |
	sed 's/\\-/-/g' | grep -o -- '--[a-z][a-z-]*' | sort -u)
[ -n "$help" ] || { echo "FAIL: no options in --help" >&2; exit 1; }
[ -n "$man" ] || { echo "FAIL: no options in $MAN" >&2; exit 1; }
for o in $help; do
	echo "$man" | grep -qx -- "$o" || { echo "FAIL: $o is in --help, not in $MAN" >&2; fails=$((fails + 1)); }
done
for o in $man; do
	echo "$help" | grep -qx -- "$o" || { echo "FAIL: $o is in $MAN, not in --help" >&2; fails=$((fails + 1)); }
done
# Short options too (-w, -x, -f, -q, -h): those that start a line of --help.
shelp=$("$FLEETQ" --help | grep -oE -- '^  -[a-zA-Z]\b' | tr -d ' ' | sort -u)
sman=$(awk '/^\.SH OPTIONS/ { on = 1; next } /^\.SH/ { on = 0 } on && tag { print } { tag = /^\.TP/ }' "$MAN" |
	sed 's/\\-/-/g' | grep -oE -- '(^|[ "])-[a-zA-Z]\b' | tr -d ' "' | sort -u)
[ -n "$shelp" ] || { echo "FAIL: no short options in --help" >&2; exit 1; }
for o in $shelp; do
	echo "$sman" | grep -qx -- "$o" || { echo "FAIL: $o is in --help, not in $MAN" >&2; fails=$((fails + 1)); }
done
for o in $sman; do
	echo "$shelp" | grep -qx -- "$o" || { echo "FAIL: $o is in $MAN, not in --help" >&2; fails=$((fails + 1)); }
done
# Exit codes agree too.
for c in 0 1 2 3 4 5 130; do
	grep -q "^\.It $c\|^\.IP $c\|^$c  " "$MAN" || { echo "FAIL: exit status $c not in $MAN" >&2; fails=$((fails + 1)); }
done
[ $fails = 0 ] || exit 1
echo ok
