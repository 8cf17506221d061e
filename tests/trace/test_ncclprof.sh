#!/bin/bash
# SPDX-License-Identifier: MIT
# fleetq's NCCL profiler plugin under the tracer: ncclprof-drive calls it as NCCL does for
# 40 all-reduces and 20 all-gathers; the uprobe on its hand-over function must put exactly
# those collectives into nccl_kernels, each with the GPU times the driver gave its channels.
. "$(dirname "$0")/lib.sh"
DRIVE=$3
PLUGIN=$4
trap 'rm -rf "$WORK"' EXIT
DB=$WORK/trace.db
N=40
"$DRIVER" --db "$DB" --probes "nccl,sync,sched,proc,lib:$PLUGIN" -- \
	"$DRIVE" "$PLUGIN" $N >"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "driver under the tracer failed"; }
cat "$WORK/out"
HASH=$(grep -E '^[0-9a-f]{16}$' "$WORK/out")
[ -n "$HASH" ] || fail "the driver printed no communicator hash"
expect "kernel rows (all-reduce, all-gather)" \
	"$(q "SELECT sum(op = 'AllReduce') || ',' || sum(op = 'AllGather') FROM nccl_kernels")" "$N,$((N / 2))"
expect "seqs per op, from 0 without gaps" \
	"$(q "SELECT group_concat(op || ':' || n || ':' || lo || ':' || hi, ' ') FROM (SELECT op, count(DISTINCT seq) n, min(seq) lo, max(seq) hi FROM nccl_kernels GROUP BY op ORDER BY op)")" \
	"AllGather:$((N / 2)):0:$((N / 2 - 1)) AllReduce:$N:0:$((N - 1))"
expect "communicator, rank, channels, partial" \
	"$(q "SELECT DISTINCT nccl_comm || ',' || rank || ',' || nranks || ',' || nchannels || ',' || partial FROM nccl_kernels")" \
	"$HASH,2,4,2,0"
# channel c of seq s lasts 10000 + 100 s + c: the kernel spans start to the later channel's stop
expect "GPU times as given (rows that differ)" \
	"$(q "SELECT count(*) FROM nccl_kernels WHERE gpu_dur_ns <> 10001 + 100 * seq OR gpu_ch_ns <> 2 * (10000 + 100 * seq) + 1 OR gpu_start_ns <> 1000000000 + 1000000 * seq + 1000 * (op = 'AllGather')")" 0
expect "host times (enqueue within the run, positive launch time)" \
	"$(q "SELECT count(*) FROM nccl_kernels WHERE ts_ns < (SELECT min(start_ns) FROM processes) - 1000000000 OR host_dur_ns < 0")" 0
echo "PASS"
