# SPDX-License-Identifier: MIT
# (e) the profiler plugin path: a DDP-shaped job with NCCL_PROFILER_PLUGIN set to a test double
# that checks handles and call order. Per rank: one Coll start and stop per collective, its
# seqNumbers 0..n-1 per function; one KernelCh per channel with KernelChStop recorded before
# its stop and stop >= start, at the kernel's GPU start/stop from the report; the same commHash
# on every rank, NCCL's hash of the unique id; finalize once per communicator, nothing left.
# A pipeline's Send/Recv: one P2p event each, with its peer and its channels.
. "$(dirname "$0")/lib.sh"

N=4 S=12 B=4
P5=$STANDIN_DIR/libfq-test-profiler.so
P4=$STANDIN_DIR/libfq-test-profiler-v4.so
HASH=$STANDIN_DIR/standin_nccl_hash
for x in "$P5" "$P4" "$HASH"; do [ -e "$x" ] || fail "not built: $x"; done

# lines OUT WORD: every line of the plugin's output files that starts with WORD
lines() { cat "$1".* 2>/dev/null | awk -v w="$2" '$1 == w'; }

NCCL_PROFILER_PLUGIN=$P5 FQ_TEST_PROFILER_OUT=$T/p5 "$FQ_WORKLOAD" --ranks $N --steps $S \
	--shape ddp --buckets $B --sync-every 5 --step-us 400 --kernel-us 600 \
	--report "$T/r.tsv" 2>"$T/err" || fail "DDP job with the profiler plugin exited $?"
[ "$(ls "$T"/p5.* | wc -l)" = $N ] || fail "expected one plugin output per rank"
if lines "$T/p5" error | grep -q .; then
	fail "plugin saw misuse: $(lines "$T/p5" error | head -n 3 | tr '\n' ';')"
fi
n=$((S * B))
[ "$(lines "$T/p5" init | wc -l)" = $N ] || fail "init not called once per rank"
[ "$(lines "$T/p5" finalize | awk -v n=$n '$3 == n && $4 == 2 * n' | wc -l)" = $N ] ||
	fail "finalize missing or counts wrong: $(lines "$T/p5" finalize | tr '\n' ';')"
# commHash: one value on every rank, NCCL's hash of the unique id in the report
uid=$(awk -F'\t' '$4 == "ncclCommInitRank" { print $8; exit }' "$T/r.tsv")
want=$("$HASH" "$uid") || fail "standin_nccl_hash failed"
got=$(lines "$T/p5" init | awk '{ print $5 }' | sort -u | tr '\n' ' ')
[ "$got" = "$want " ] || fail "commHash on the ranks: '$got', fq_nccl_hash of the id: $want"
lines "$T/p5" init | awk -v n=$N '$3 != n || $4 != 1 { bad = 1 } END { exit bad }' ||
	fail "init: nranks or nNodes wrong: $(lines "$T/p5" init | tr '\n' ';')"
# one Coll start and one stop per collective, seqNumber 0..n-1 per rank, AllReduce, Float32
for r in $(seq 0 $((N - 1))); do
	[ "$(lines "$T/p5" coll_start | awk -v r=$r '$2 == r' | wc -l)" = $n ] ||
		fail "rank $r: not $n Coll starts"
	[ "$(lines "$T/p5" coll_stop | awk -v r=$r '$2 == r' | wc -l)" = $n ] ||
		fail "rank $r: not $n Coll stops"
	lines "$T/p5" coll_start | awk -v r=$r '$2 == r && ($4 != "AllReduce" ||
		$5 != seq++ || $7 != "ncclFloat32" || $8 != 2) { bad = 1 } END { exit bad }' ||
		fail "rank $r: Coll seqNumbers not 0..$((n - 1)) in order, or func/datatype wrong"
done
[ "$(lines "$T/p5" coll_start | awk '{ print $3 }' | sort -u | wc -l)" = \
  "$(lines "$T/p5" coll_stop | awk '{ print $3 }' | sort -u | wc -l)" ] ||
	fail "Coll starts and stops do not pair up by handle"
# KernelCh: channels 0 and 1 per collective, at the kernel's GPU start and stop
[ "$(lines "$T/p5" kch_stop | wc -l)" = $((N * n * 2)) ] || fail "not 2 KernelCh per collective"
awk -F'\t' 'NR > 1 && $4 == "kernel:ncclDevKernel_AllReduce" {
		split($8, kv, /[ =]/); print $1, $5, kv[2], kv[4] }' "$T/r.tsv" | sort >"$T/gpu"
lines "$T/p5" kch_stop | awk '{ print $2, $5, $7, $8 }' | sort -u >"$T/kch"
[ "$(wc -l <"$T/kch")" = $((N * n)) ] || fail "the two channels disagree on GPU times"
cmp -s "$T/gpu" "$T/kch" || fail "KernelCh pTimers differ from the kernels' GPU start/stop"
awk '$4 < $3 { bad = 1 } END { exit bad }' "$T/kch" || fail "a KernelCh stops before it starts"

# FSDP: all-gathers and reduce-scatters interleave; each function numbers its own from 0
NCCL_PROFILER_PLUGIN=$P5 FQ_TEST_PROFILER_OUT=$T/fs "$FQ_WORKLOAD" --ranks 2 --steps 3 \
	--shape fsdp --layers 2 --step-us 200 --kernel-us 300 2>"$T/err" ||
	fail "FSDP job with the plugin exited $?"
[ -z "$(lines "$T/fs" error)" ] ||
	fail "FSDP: plugin saw misuse: $(lines "$T/fs" error | head -n 1)"
for f in AllGather:12 ReduceScatter:6; do
	lines "$T/fs" coll_start | awk -v f=${f%:*} -v n=${f#*:} '$4 == f {
			if ($5 != seq[$2]++) bad = 1 }
		END { for (r = 0; r < 2; r++) if (seq[r] != n) bad = 1; exit bad }' ||
		fail "FSDP: ${f%:*} seqNumbers are not 0..$((${f#*:} - 1)) on each rank"
done
[ "$(lines "$T/fs" kch_stop | wc -l)" = $((2 * 18 * 2)) ] ||
	fail "FSDP: not 2 KernelCh per collective"

# pipeline: every Send/Recv a P2p event naming its peer, on the 2-rank pair communicators
# (stage 0 sends forward to peer 1, stage 1 back to peer 0), each with its 2 KernelCh
M=2
NCCL_PROFILER_PLUGIN=$P5 FQ_TEST_PROFILER_OUT=$T/pp FQ_TEST_PROFILER_MASK=70 "$FQ_WORKLOAD" \
	--ranks 4 --stages 2 --micro $M --steps 3 --shape pipeline --step-us 200 \
	--kernel-us 300 2>"$T/err" || fail "pipeline job with the plugin exited $?"
[ -z "$(lines "$T/pp" error)" ] ||
	fail "pipeline: plugin saw misuse: $(lines "$T/pp" error | head -n 1)"
np=$((2 * M * 3))
for f in "$T"/pp.*; do
	awk -v np=$np -v m=$((M * 3)) '
		$1 == "p2p_start" { n++; s += $4 == "Send"; r += $4 == "Recv"; peer[$5] = 1
			if ($3 in seen) bad = 1; seen[$3] = 1 }
		$1 == "kch_stop" && ($3 in seen) { k[$3]++ }
		END { for (i in seen) if (k[i] != 2) bad = 1
			if (n != np || s != m || r != m || length(peer) != 1) bad = 1
			exit bad }' "$f" ||
		fail "pipeline: $f: not $((M * 3)) Sends and Recvs to one peer, 2 KernelCh each"
done
[ "$(lines "$T/pp" p2p_start | awk '{ print $5 }' | sort | uniq -c | awk '{ print $1 }' |
	tr '\n' ' ')" = "$((2 * np)) $((2 * np)) " ] ||
	fail "pipeline: P2p peers not 0 for stage 1 and 1 for stage 0"
# with Coll | KernelCh alone NCCL still starts P2p events (for their channels)
NCCL_PROFILER_PLUGIN=$P5 FQ_TEST_PROFILER_OUT=$T/pk "$FQ_WORKLOAD" --ranks 2 --stages 2 \
	--micro 1 --steps 2 --shape pipeline --step-us 200 2>"$T/err" ||
	fail "pipeline job with mask Coll | KernelCh exited $?"
[ "$(lines "$T/pk" p2p_start | wc -l)" = 8 ] && [ -z "$(lines "$T/pk" error)" ] ||
	fail "pipeline, mask Coll | KernelCh: expected 8 P2p events and no error"

# without KernelCh in the mask: Coll events only
NCCL_PROFILER_PLUGIN=$P5 FQ_TEST_PROFILER_OUT=$T/m FQ_TEST_PROFILER_MASK=2 "$FQ_WORKLOAD" \
	--ranks 2 --steps 3 --shape ddp --buckets 2 --step-us 200 2>"$T/err" ||
	fail "job with mask Coll exited $?"
[ "$(lines "$T/m" coll_start | wc -l)" = 12 ] && [ -z "$(lines "$T/m" kch_stop)" ] ||
	fail "mask Coll: expected 12 Coll events and no KernelCh"
# a v4 plugin gets the same events
NCCL_PROFILER_PLUGIN=$P4 FQ_TEST_PROFILER_OUT=$T/v4 "$FQ_WORKLOAD" --ranks 2 --steps 3 \
	--shape ddp --buckets 2 --step-us 200 2>"$T/err" || fail "job with a v4 plugin exited $?"
[ "$(lines "$T/v4" kch_stop | wc -l)" = 24 ] && [ -z "$(lines "$T/v4" error)" ] ||
	fail "v4 plugin: expected 24 KernelCh events and no error"
# an init that fails: the job runs without the plugin, saying so once per rank
NCCL_PROFILER_PLUGIN=$P5 FQ_TEST_PROFILER_OUT=$T/f FQ_TEST_PROFILER_INIT_FAIL=1 \
	"$FQ_WORKLOAD" --ranks 2 --steps 3 --shape ddp --buckets 2 --step-us 200 2>"$T/err" ||
	fail "job with a failing plugin init exited $?"
[ "$(lines "$T/f" init_failed | wc -l)" = 2 ] && [ "$(cat "$T"/f.* | wc -l)" = 2 ] ||
	fail "failed init: the plugin still got events: $(cat "$T"/f.* | head -n 3 | tr '\n' ';')"
[ "$(grep -c 'profiler init failed (3); continuing without' "$T/err")" = 2 ] ||
	fail "a failed plugin init was not reported once per rank"
# no NCCL_PROFILER_PLUGIN: nothing loaded
env -u NCCL_PROFILER_PLUGIN FQ_TEST_PROFILER_OUT=$T/none "$FQ_WORKLOAD" --ranks 2 --steps 2 \
	--shape ddp --step-us 200 2>"$T/err" || fail "job without a plugin exited $?"
! ls "$T"/none.* >/dev/null 2>&1 || fail "a plugin was loaded without NCCL_PROFILER_PLUGIN"
# a library without the symbols: one line, and the job runs
NCCL_PROFILER_PLUGIN=$STANDIN_DIR/libcuda.so.1 "$FQ_WORKLOAD" --ranks 2 --steps 3 \
	--shape ddp --step-us 200 2>"$T/err" || fail "job with a symbol-less plugin exited $?"
[ "$(grep -c 'neither ncclProfiler_v5 nor ncclProfiler_v4; ignored' "$T/err")" = 2 ] ||
	fail "a symbol-less plugin was not reported once per rank"
echo "ok"
