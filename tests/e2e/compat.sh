#!/bin/sh
# SPDX-License-Identifier: MIT
# Nodes asked again for a table their agent predates (fanout/compat.c): a node that answers
# the second time with columns of its own fails alone. fq-fakeagent (plaintext, listed
# first) says "no such table: gpu_busy", then answers columns (a, b); beside it a real agentd
# (--no-trace, --insecure) serves an fq-tracegen file without gpu_busy. Both are asked again
# together; the real node's rows are the analysis's columns and count, the fake's do not,
# whichever the hostlist puts first.
. "$(dirname "$0")/lib.sh"

"$TRACEGEN" --out "$T/old.db" --node old --ranks 4 --nranks 4 --steps 200 --kernels \
	--slow-rank 2 --slow-pct 30 >"$T/gen.log" 2>&1 || fail "fq-tracegen"
sqlite3 "$T/old.db" "DROP TABLE gpu_busy" || fail "cannot age the file"
start_agent old "$T/old.db" - --insecure
OLD=127.0.0.1:$PORT
fake oldcols
FAKE=127.0.0.1:$port

fq -w "$FAKE,$OLD" --insecure --pings 0 stragglers --since 10m
# the real old node counts, the fake's other columns fail it alone
expect_err "coverage: 1/2 nodes ok"
expect_err "columns differ: $FAKE"
expect_err "fleetq: 1 node's agent predates table gpu_busy: read as empty there"
grep -q "^straggler: rank 2 on $OLD" "$T/out" || [ "$RC" = 3 ] ||
	fail "want rank 2 named or no verdict (1 of 2 nodes): rc $RC: $(cat "$T/out")"
echo PASS
