#!/bin/sh
# SPDX-License-Identifier: MIT
# The trace file renamed away and a new one created at the same path, as
# log-rotation tools do (issue 14): agentd's pooled read connections must not
# go on serving the old file. Eight identical queries at once, before and
# after the swap, all see the file that is at --db now.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 10 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
start_agent a "$T/n.db" ca
A=$PORT
OLD=$(sqlite3 "$T/n.db" "SELECT count(*) FROM collectives")

# eight QUERY at once; prints each answer, one a line
eight() {
	for k in 1 2 3 4 5 6 7 8; do
		"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" \
			-w "127.0.0.1:$A" --format tsv \
			"SELECT count(*) FROM collectives" >"$T/o.$k" 2>"$T/e.$k" &
		eval "p$k=\$!"
	done
	for k in 1 2 3 4 5 6 7 8; do
		eval "wait \$p$k" || { cat "$T/e.$k" >&2; fail "query $k failed"; }
		tail -n 1 "$T/o.$k" | cut -f2
	done
}

eight >"$T/before"
[ "$(sort -u "$T/before")" = "$OLD" ] || fail "before the swap: $(sort "$T/before" | uniq -c)"
eight >/dev/null # the pool is warm: connections wait for the next query

mv "$T/n.db" "$T/n.db.1"
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 30 >"$T/gen2.log" 2>&1 ||
	fail "fq-tracegen (new file)"
NEW=$(sqlite3 "$T/n.db" "SELECT count(*) FROM collectives")
[ "$NEW" != "$OLD" ] || fail "test files alike"
eight >"$T/after"
echo "after the swap: $(sort "$T/after" | uniq -c | tr -s ' \n' ' ') (old $OLD, new $NEW)"
[ "$(sort -u "$T/after")" = "$NEW" ] || fail "queries still read the old file"
echo ok
