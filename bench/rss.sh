#!/bin/sh
# SPDX-License-Identifier: MIT
# agentd memory: VmRSS and VmHWM (KiB, from /proc/PID/status)
#   --no-trace: idle after start, and after streaming a 1M-row query to fleetq (mTLS);
#   tracer (stand-in libraries attached at start): idle after start, the peak RSS sampled
#   every second under sustained ingest (fq-workload, 8 ranks, --step-us 0, STEPS steps),
#   and idle after it. Targets: --no-trace <= 16 MB; tracer <= 32 MB under sustained load.
#   The baseline for the ratios is the target itself (ratio <= 1 meets it).
#   bench/rss.sh [BUILD_DIR] [STEPS]
. "$(dirname "$0")/lib.sh"
steps=${2:-30000}
need "$AGENTD" "$FLEETQ" "$STANDIN/fq-workload"
[ "$(id -u)" = 0 ] || die "needs root to load BPF programs"
n=1000000
db=$(stream_db "$n")
mb() { fmt "$(calc "$1 / 1024")" 1; }
certs 127.0.0.1

start_agent idle "$db" --no-trace --max-rows 100000000 --max-bytes 4294967296 --timeout-ms 600000
sleep 2
nr_idle=$(kib "$APID" VmRSS)
nh_idle=$(kib "$APID" VmHWM)
fq -w "127.0.0.1:$PORT" --max-rows 100000000 --timeout 600 --format tsv -q \
	"SELECT a, b, c, d FROM b" >/dev/null || die "fleetq failed"
sleep 1
nr_q=$(kib "$APID" VmRSS)
nh_q=$(kib "$APID" VmHWM)
kill "$APID"

libs="lib:$STANDIN/libnccl.so.2,lib:$STANDIN/libcudart.so.13,lib:$STANDIN/libcuda.so.1"
start_agent tracer "$T/trace.db" --probes "nccl,sync,launch,sched,proc,$libs" --ib-interval 0
i=0
until grep -q "attached .*libcuda" "$T/tracer.err"; do
	i=$((i + 1))
	[ $i -lt 300 ] || die "the tracer did not attach to the stand-in libcuda"
	sleep 0.1
done
sleep 2
tr_idle=$(kib "$APID" VmRSS)
th_idle=$(kib "$APID" VmHWM)
t0=$(now)
"$STANDIN/fq-workload" --ranks 8 --steps "$steps" --step-us 0 >"$T/wl.out" 2>&1 &
WL=$!
PIDS="$PIDS $WL"
peak=0
while kill -0 "$WL" 2>/dev/null; do
	r=$(kib "$APID" VmRSS)
	[ "$r" -gt "$peak" ] && peak=$r
	sleep 1
done
wait "$WL" || die "fq-workload failed: $(tail -n 2 "$T/wl.out")"
t1=$(now)
sleep 3
tr_after=$(kib "$APID" VmRSS)
th_after=$(kib "$APID" VmHWM)
kill "$APID"
wait "$APID" 2>/dev/null || true
ev=$(sqlite3 "$T/trace.db" "SELECT value FROM meta WHERE key = 'trace_events'")
drops=$(sqlite3 "$T/trace.db" "SELECT (SELECT value FROM meta WHERE key = 'ring_drops') || ' ring, ' || coalesce((SELECT value FROM meta WHERE key = 'store_drops'), 0) || ' store'")
secs=$(calc "$t1 - $t0")

echo "rss: agentd VmRSS / VmHWM"
echo "  --no-trace idle:                    $(mb "$nr_idle") / $(mb "$nh_idle") MiB"
echo "  --no-trace after a 1M-row query:    $(mb "$nr_q") / $(mb "$nh_q") MiB"
echo "  tracer idle:                        $(mb "$tr_idle") / $(mb "$th_idle") MiB"
echo "  tracer peak RSS under ingest:       $(mb "$peak") MiB ($ev events in $(fmt "$secs" 1) s = $(fmt "$(calc "$ev / $secs")" 0)/s; drops: $drops)"
echo "  tracer after ingest (idle again):   $(mb "$tr_after") / $(mb "$th_after") MiB"
met() { [ "$(calc "$1 <= $2")" = 1 ] && echo yes || echo no; }
result rss_notrace_idle_kib "$nr_idle" KiB 16384 "<=16MiB" "$(met "$nr_idle" 16384)"
result rss_notrace_hwm_after_1M_query_kib "$nh_q" KiB 16384 "<=16MiB" "$(met "$nh_q" 16384)"
result rss_tracer_idle_kib "$tr_idle" KiB 32768 "<=32MiB" "$(met "$tr_idle" 32768)"
result rss_tracer_hwm_under_load_kib "$th_after" KiB 32768 "<=32MiB" "$(met "$th_after" 32768)"
