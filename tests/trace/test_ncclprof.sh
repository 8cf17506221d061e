#!/bin/bash
# SPDX-License-Identifier: MIT
# fleetq's NCCL profiler plugin under the tracer: ncclprof-drive calls it as NCCL does for
# 40 all-reduces, 20 all-gathers and 10 rounds of Send, Send, Recv; the uprobe on its hand-over
# function must put exactly those calls into nccl_kernels, each with the GPU times the driver
# gave its channels, and each Send/Recv with its peer and a seq counted per peer.
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
expect "kernel rows (all-reduce, all-gather, send, recv)" \
	"$(q "SELECT sum(op = 'AllReduce') || ',' || sum(op = 'AllGather') || ',' || sum(op = 'Send') || ',' || sum(op = 'Recv') FROM nccl_kernels")" \
	"$N,$((N / 2)),$((N / 2)),$((N / 4))"
R=$((N / 4))
expect "seqs per op and peer, from 0 without gaps" \
	"$(q "SELECT group_concat(op || ':' || ifnull(peer, '-') || ':' || n || ':' || lo || ':' || hi, ' ') FROM (SELECT op, peer, count(DISTINCT seq) n, min(seq) lo, max(seq) hi FROM nccl_kernels GROUP BY op, peer ORDER BY op, peer)")" \
	"AllGather:-:$((N / 2)):0:$((N / 2 - 1)) AllReduce:-:$N:0:$((N - 1)) Recv:1:$R:0:$((R - 1)) Send:0:$R:0:$((R - 1)) Send:3:$R:0:$((R - 1))"
expect "communicator, rank, channels, partial" \
	"$(q "SELECT DISTINCT nccl_comm || ',' || rank || ',' || nranks || ',' || nchannels || ',' || partial FROM nccl_kernels")" \
	"$HASH,2,4,2,0"
# channel c of seq s lasts 10000 + 100 s + c: the kernel spans start to the later channel's stop
expect "GPU times as given (rows that differ)" \
	"$(q "SELECT count(*) FROM nccl_kernels WHERE gpu_dur_ns IS NOT 10001 + 100 * seq OR gpu_ch_ns IS NOT 2 * (10000 + 100 * seq) + 1 OR gpu_start_ns IS NOT 1000000000 + 1000000 * seq + 1000 * (CASE op || ifnull(peer, '') WHEN 'AllGather' THEN 1 WHEN 'Send3' THEN 2 WHEN 'Send0' THEN 3 WHEN 'Recv1' THEN 4 ELSE 0 END)")" 0
expect "host times (enqueue within the run, positive launch time)" \
	"$(q "SELECT count(*) FROM nccl_kernels WHERE ts_ns < (SELECT min(start_ns) FROM processes) - 1000000000 OR host_dur_ns < 0")" 0
echo "PASS"
