#!/bin/sh
# SPDX-License-Identifier: MIT
# --fail-if: a query over the merged rows after any fan-out; rows -> exit 1 and the rows on
# stderr (stdout keeps the normal output), none -> 0; usage (2) and hangs (5) still win.
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1
START=$((($(date +%s) - 15) * 1000000000))
HOSTS=
for k in 0 1; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 4 --rank-base $((4 * k)) --nranks 8 \
		--steps 150 --start-ns $START --seed 4 --hang-rank 5 --hang-at 100 >"$T/gen.log" 2>&1 ||
		fail "fq-tracegen node$k"
	start_agent "n$k" "$T/n$k.db" ca
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
done

Q="SELECT rank, count(*) AS n FROM collectives GROUP BY rank"
BEHIND="SELECT node, rank FROM results WHERE n < (SELECT max(n) FROM results)"
fq -w "$HOSTS" --format csv --fail-if "$BEHIND" "$Q"
expect_rc 1 "a rank behind"
expect_err "fleetq: --fail-if: 1 row:"
expect_err "127.0.0.1:[0-9]*  *5"
[ "$(wc -l <"$T/out")" = 9 ] || fail "stdout is the query's csv: $(cat "$T/out")"
fq -w "$HOSTS" --format csv --fail-if "SELECT * FROM results WHERE n > 1000" "$Q"
expect_rc 0 "no row"
fq -w "$HOSTS" --fail-if "SELECT * FROM clock WHERE abs(offset_ns) > 3600e9" "$Q"
expect_rc 0 "clock table"
# options after the query work as well
fq -w "$HOSTS" "$Q" --fail-if "SELECT 1 FROM results WHERE rank = 5"
expect_rc 1 "after the query"
fq -w "$HOSTS" --fail-if "SELECT nope FROM results" "$Q"
expect_rc 2 "bad --fail-if SQL"
expect_err "fleetq: --fail-if: no such column: nope"
# a node down: coverage (3) without rows, 1 with them
fq -w "$HOSTS,127.0.0.1:$(free_port)" --fail-if "SELECT 1 FROM results WHERE 0" "$Q"
expect_rc 3 "node down, no rows"
fq -w "$HOSTS,127.0.0.1:$(free_port)" --fail-if "SELECT 1 FROM results" "$Q"
expect_rc 1 "node down, rows"
# with stragglers: the hang (5) wins over --fail-if (1)
fq -w "$HOSTS" stragglers --since 2m --fail-if "SELECT 1 FROM results"
expect_rc 5 "hang wins"
fq -w "$HOSTS" netcheck --since 2m --fail-if "SELECT 1 FROM results LIMIT 1"
expect_rc 1 "netcheck with --fail-if rows"
fq -w "$HOSTS" netcheck --since 2m --fail-if "SELECT 1 FROM results WHERE 0"
expect_rc 0 "netcheck, no rows"
echo PASS
