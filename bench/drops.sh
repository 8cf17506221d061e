#!/bin/sh
# SPDX-License-Identifier: MIT
# Drops: bench/probe_cost issues ncclAllReduce on the stand-in libnccl from THREADS threads
# at paced rates (RATES calls/s; 0 = as fast as it can) for SECONDS each, under a fresh
# agentd tracing that library (one traced call = one collectives row). After each rate
# agentd is stopped (it flushes and writes meta ring_drops / store_drops / trace_events)
# and the trace's rows for the driver's pid are compared with what it issued:
#   missing = issued - rows; unexplained = missing - ring_drops - store_drops (must be 0).
# Target: zero drops at 200k events/s; beyond, drops counted, never silent.
#   bench/drops.sh [BUILD_DIR] [RATES] [SECONDS] [THREADS]
. "$(dirname "$0")/lib.sh"
rates=${2:-50000 100000 200000 400000 0}
secs=${3:-5}
threads=${4:-2}
PC=$B/bench/probe_cost
need "$AGENTD" "$PC" "$STANDIN/libnccl.so.2"
private_libs
[ "$(id -u)" = 0 ] || die "needs root to load BPF programs"
meta() { sqlite3 "$1" "SELECT coalesce((SELECT value FROM meta WHERE key = '$2'), 0)"; }

printf "drops: %s threads, %s s per rate, fresh agentd per rate\n" "$threads" "$secs"
printf "  %10s %10s %10s %10s %10s %10s %12s\n" target reached issued rows ring_drops \
	store_drops unexplained
first_drop=- at200=- silent=0
for r in $rates; do
	db=$T/drops-$r.db
	start_tracer "$db"
	"$PC" $PCL rate "$threads" "$r" "$secs" >"$T/pc.out" || die "probe_cost failed"
	stop_tracer
	pid=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' "$T/pc.out")
	issued=$(sed -n 's/.*issued=\([0-9]*\).*/\1/p' "$T/pc.out")
	reached=$(sed -n 's/.*rate_per_s=\([0-9]*\).*/\1/p' "$T/pc.out")
	rows=$(sqlite3 "$db" "SELECT count(*) FROM collectives WHERE pid = $pid AND op = 'AllReduce'")
	rd=$(meta "$db" ring_drops)
	sd=$(meta "$db" store_drops)
	miss=$((issued - rows))
	unexp=$((miss - rd - sd))
	[ "$unexp" -gt 0 ] && silent=$((silent + unexp))
	[ "$first_drop" = - ] && [ $((rd + sd)) -gt 0 ] && first_drop=$reached
	[ "$r" = 200000 ] && at200=$((rd + sd))
	printf "  %10s %10s %10s %10s %10s %10s %12s\n" "$r" "$reached" "$issued" "$rows" "$rd" \
		"$sd" "$unexp"
done
echo "  (ring/store drops count every traced process's events; unexplained counts only the driver's)"
echo "  first rate with drops: $first_drop events/s; silent (unexplained) losses: $silent"
met=no
[ "$at200" = 0 ] && [ "$silent" -le 0 ] && met=yes
result drops_at_200k "$at200" events - "0_at_200k/s,_none_silent" $met
result drops_first_rate "$first_drop" events/s - "-" -
