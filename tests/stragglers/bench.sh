#!/bin/sh
# SPDX-License-Identifier: MIT
# Latency of fleetq stragglers over 4 local agents (mutual TLS) serving generated traces of
# about 1M rows each (16 ranks, 4 per node), against a baseline measured in the same run:
# the same fan-out with a trivial query (SELECT count(*) FROM collectives).
# Not a test. Run from a build dir:
#   FLEETQ=fanout/fleetq AGENTD=agentd/agentd TRACEGEN=tests/tracegen/fq-tracegen \
#   MKCERTS=../certs/mkcerts FLEETQ_SQL_DIR=../sql/analysis sh ../tests/stragglers/bench.sh
. "$(dirname "$0")/../e2e/lib.sh"
STEPS=${STEPS:-62500}
REPS=${REPS:-5}
certs ca 127.0.0.1
START=$((($(date +%s) - STEPS / 20 - 5) * 1000000000))
HOSTS=
for k in 0 1 2 3; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 4 --rank-base $((4 * k)) \
		--nranks 16 --steps "$STEPS" --start-ns $START --seed 6 --slow-rank 6 \
		--slow-pct 20 >"$T/gen$k.log" 2>&1 &
done
wait
for k in 0 1 2 3; do
	start_agent "node$k" "$T/n$k.db" ca --timeout-ms 300000
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rows per node: $(sqlite3 "$T/n0.db" "SELECT (SELECT count(*) FROM collectives) +
	(SELECT count(*) FROM cuda_calls) + (SELECT count(*) FROM offcpu)")"

# best of REPS, in ms
best() {
	b=
	for i in $(seq "$REPS"); do
		t0=$(date +%s%N)
		fq -w "$HOSTS" "$@"
		t1=$(date +%s%N)
		ms=$(((t1 - t0) / 1000000))
		[ -z "$b" ] || [ "$ms" -lt "$b" ] && b=$ms
	done
	echo "$b"
}
base=$(best "SELECT count(*) FROM collectives")
s60=$(best --timeout 300 stragglers --since 60s)
fq -w "$HOSTS" --timeout 300 stragglers --since 60s
rc60=$RC
head -n 1 "$T/out"
sall=$(best --timeout 300 stragglers --since all)
fq -w "$HOSTS" --timeout 300 stragglers --since all
rcall=$RC
echo "baseline fan-out (count(*)):        ${base} ms"
echo "stragglers --since 60s (exit $rc60):    ${s60} ms  ($(echo "scale=1; $s60 / $base" | bc)x baseline)"
echo "stragglers --since all (exit $rcall):    ${sall} ms  ($(echo "scale=1; $sall / $base" | bc)x baseline)"
head -n 1 "$T/out"
tail -n 1 "$T/err"
