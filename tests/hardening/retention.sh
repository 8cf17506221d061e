#!/bin/sh
# SPDX-License-Identifier: MIT
# --retain-bytes bounds the trace end to end: a tracing agentd with a 1 MiB
# bound under a live workload lets its file grow past the bound between
# retention passes and trims it back under it, keeps serving the newest rows,
# and records the bound in meta. A bound below the least a trace needs, or
# one given with --no-trace, is refused at start.
. "$(dirname "$0")/lib.sh"
"$AGENTD" --listen 127.0.0.1:0 --insecure --db "$T/x.db" --retain-bytes 1000 2>"$T/x.err" &&
	fail "--retain-bytes 1000 accepted"
grep -q "^agentd: --retain-bytes 1000 is below 1048576" "$T/x.err" ||
	fail "--retain-bytes 1000: $(cat "$T/x.err")"
"$AGENTD" --listen 127.0.0.1:0 --insecure --no-trace --db "$T/x.db" --retain-age 60 \
	2>"$T/x.err" && fail "--retain-age with --no-trace accepted"
grep -q "^agentd: --retain-age bounds the trace agentd writes: with --no-trace" "$T/x.err" ||
	fail "--retain-age with --no-trace: $(cat "$T/x.err")"

need_trace
BOUND=1048576

"$AGENTD" --listen 127.0.0.1:0 --insecure --db "$DB" --node retain --retain-bytes $BOUND \
	--probes "nccl,sync,sched,proc,$LIBS" --port-file "$T/a.port" --log "$T/a.log" \
	2>"$T/a.err" &
APID=$!
PIDS="$PIDS $APID"
i=0
until grep -q 'serving' "$T/a.log" 2>/dev/null; do
	kill -0 "$APID" 2>/dev/null || fail "agentd exited at start: $(cat "$T/a.err")"
	i=$((i + 1))
	[ $i -lt 600 ] || fail "agentd did not start"
	sleep 0.05
done
A=$(cat "$T/a.port")
q() {
	"$FLEETQ" --insecure -w "127.0.0.1:$A" --format tsv "$1" 2>"$T/qerr" | tail -n 1 | cut -f2
}
[ "$(q "SELECT value FROM meta WHERE key = 'retain_bytes'")" = $BOUND ] ||
	fail "meta retain_bytes is not $BOUND: $(cat "$T/qerr")"

size() {
	stat -c %s "$DB"
}
"$FQ_WORKLOAD" --ranks 4 --steps 20000 --step-us 200 --job-id retain-$$ >"$T/wl.log" 2>&1 &
WL=$!
PIDS="$PIDS $WL"
max=0
while kill -0 "$WL" 2>/dev/null; do
	s=$(size)
	[ "$s" -gt "$max" ] && max=$s
	sleep 0.2
done
wait "$WL" || fail "workload failed: $(tail -n 3 "$T/wl.log")"
echo "largest file seen while the workload ran: $max bytes (bound $BOUND)"
[ "$max" -gt $((4 * BOUND)) ] ||
	fail "the trace never grew past 4 times the bound ($max bytes): nothing to trim, raise the load"
# The next pass (every 10 s) trims it; its checkpoint gives the pages back.
i=0
until [ "$(size)" -le $((2 * BOUND)) ]; do
	i=$((i + 1))
	[ $i -lt 120 ] || fail "the trace stays at $(size) bytes, over the bound of $BOUND"
	sleep 0.5
done
echo "trimmed to $(size) bytes"
n=$(q "SELECT count(*) FROM collectives")
[ "$n" -gt 0 ] 2>/dev/null || fail "no collectives kept after the trim: $(cat "$T/qerr")"
kill -0 "$APID" || fail "agentd died"
grep -iE "cannot write|write error" "$T/a.log" && fail "the writer failed"
echo ok
