#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq netcheck over four real agents serving generated traces: TCP retransmits planted
# inside node2's slowest collectives are named (exit 1); the same job without them is clean.
. "$(dirname "$0")/../e2e/lib.sh"
command -v sqlite3 >/dev/null || fail "the sqlite3 CLI is needed to plant retransmits"

certs ca 127.0.0.1
START=$((($(date +%s) - 15) * 1000000000))
HOSTS=
for k in 0 1 2 3; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 4 --rank-base $((4 * k)) \
		--nranks 16 --steps 200 --start-ns $START --seed 8 --slow-rank 13 --slow-pct 5 \
		>"$T/gen.log" 2>&1 || fail "fq-tracegen node$k"
	# background: one unattributed retransmit every 2 s on every node
	sqlite3 "$T/n$k.db" "WITH RECURSIVE t(x) AS (SELECT $START + 777000000 UNION ALL
		SELECT x + 2000000000 FROM t WHERE x < $START + 9000000000)
		INSERT INTO tcp_retransmits (ts_ns, pid, saddr, sport, daddr, dport, state)
		SELECT x, NULL, '10.0.0.$k', 40000, '10.0.0.9', 29500, 'ESTABLISHED' FROM t" ||
		fail "background retransmits"
	start_agent "node$k" "$T/n$k.db" ca
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
done
NODE2=127.0.0.1:$(cat "$T/node2.port")

fq -w "$HOSTS" netcheck --since 2m
expect_rc 0 "netcheck before planting"
grep -q "^no network trouble: 16 ranks in 1 communicator, last 2m" "$T/out" ||
	fail "clean netcheck: $(cat "$T/out")"

# node2: 3 retransmits by each rank's process inside each of its 20 slowest collectives
sqlite3 "$T/n2.db" "WITH w AS (SELECT c.pid, c.ts_ns, s.ts_ns + s.dur_ns AS e,
	row_number() OVER (PARTITION BY c.pid ORDER BY s.dur_ns DESC) AS k
	FROM collectives c JOIN cuda_calls s ON s.pid = c.pid AND s.kind = 'sync'
	AND s.ts_ns BETWEEN c.ts_ns AND c.ts_ns + 1000000), n(i) AS (VALUES (1), (2), (3))
	INSERT INTO tcp_retransmits (ts_ns, pid, saddr, sport, daddr, dport, state)
	SELECT w.ts_ns + n.i * (w.e - w.ts_ns) / 4, w.pid, '10.0.0.3', 41000 + w.pid,
	'10.0.0.7', 29500, 'ESTABLISHED' FROM w, n WHERE w.k <= 20" || fail "plant retransmits"

fq -w "$HOSTS" netcheck --since 2m
expect_rc 1 "netcheck after planting"
[ "$(grep -c "^network: $NODE2 rank [0-9]* (pid [0-9]*): TCP retransmits: " "$T/out")" = 4 ] ||
	fail "want node2's 4 ranks named: $(cat "$T/out")"
grep "^network:" "$T/out" | grep -qv "$NODE2" && fail "another node named: $(cat "$T/out")"
expect_err "fleetq: netcheck: 4 findings (first: rank "
fq -w "$HOSTS" netcheck --since 2m --format csv
expect_rc 1 "netcheck csv"
head -n 1 "$T/out" | grep -q "^node,comm_hash,rank,pid,source," || fail "csv: $(head -n 1 "$T/out")"
[ "$(grep -c ",tcp,retransmits," "$T/out")" = 4 ] || fail "csv rows: $(cat "$T/out")"
echo PASS
