# SPDX-License-Identifier: MIT
# (f) job shapes and the device model: DDP's collectives come from a second thread, B a step,
# numbered 0..n-1; the host runs ahead of the device only as far as the launch queue lets it;
# a slower GPU grows only its compute kernels and makes its collective kernels the shortest;
# a stalled rank's kernels wait least; --blocking puts the wait in the collective call; FSDP
# and pipeline issue identical sequences per communicator; GPU clocks differ per rank; on
# device clocks (FQ_STANDIN_DEVICE_CLOCK=device) a collective ends on every rank at once, and
# --slow-of measured sizes the fault on the measured step.
. "$(dirname "$0")/lib.sh"

# col FILE RANK OP FIELD: values of a column ($7 dur_ns, or note key=value) for a rank's OP rows
col() {
	awk -F'\t' -v r="$2" -v op="$3" -v f="$4" 'NR > 1 && $1 == r && $4 == op {
		if (f == "dur") { print $7; next }
		n = split($8, kv, /[ =]/)
		for (i = 1; i < n; i += 2) if (kv[i] == f) print kv[i + 1] }' "$1"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }'; }
sum() { awk '{ s += $1 } END { printf "%d\n", s }'; }

# DDP, sync every step: B all-reduces a step from a thread that is not the main thread
N=4 S=10 B=8
"$FQ_WORKLOAD" --ranks $N --steps $S --shape ddp --step-us 400 --kernel-us 800 \
	--report "$T/d.tsv" 2>"$T/err" || fail "DDP job exited $?"
[ "$(ops_per_rank "$T/d.tsv" ncclAllReduce | awk '{ print $2 }' | sort -u)" = $((S * B)) ] ||
	fail "DDP: not $((S * B)) all-reduces per rank"
awk -F'\t' 'NR > 1 && $4 == "ncclAllReduce" && $2 == $3 { bad = 1 } END { exit bad }' "$T/d.tsv" ||
	fail "DDP: an all-reduce was issued from the main thread"
awk -F'\t' 'NR > 1 && $4 == "ncclAllReduce" && $5 != next_seq[$1]++ { bad = 1 }
	END { exit bad }' "$T/d.tsv" || fail "DDP: seq numbers are not 0..n-1 in call order"
[ "$(ops_per_rank "$T/d.tsv" cudaStreamSynchronize | awk '{ print $2 }' | sort -u)" = $S ] ||
	fail "DDP --sync-every 1: not one sync per step"
[ "$(ops_per_rank "$T/d.tsv" kernel:ncclDevKernel_AllReduce | awk '{ print $2 }' | sort -u)" = \
  $((S * B)) ] || fail "DDP: the device did not run every collective kernel"
# each rank's globaltimer is its own: offsets of a few hundred us, not all equal
offs=$(awk -F'\t' '$4 == "globaltimer" { print $7 }' "$T/d.tsv" | sort -u)
[ "$(echo "$offs" | wc -l)" -ge 2 ] || fail "every rank has the same GPU clock offset"
echo "$offs" | awk '$1 < 100000 || $1 > 1000000 { bad = 1 } END { exit bad }' ||
	fail "GPU clock offsets out of range: $offs"

# --data-us: every step of the main thread waits that long for its batch
"$FQ_WORKLOAD" --ranks 2 --steps 5 --shape ddp --buckets 2 --step-us 100 --kernel-us 100 \
	--data-us 4000 --report "$T/data.tsv" 2>"$T/err" || fail "DDP --data-us exited $?"
[ "$(col "$T/data.tsv" 0 step dur | awk '$1 >= 4000000' | wc -l)" = 5 ] ||
	fail "--data-us 4000: not every step took 4 ms"

# sync every 20 steps: with a GPU-bound step the host runs ahead until the launch queue is
# full, so with a short queue the host's last sync waits far less than with a long one
for q in 8 100000; do
	"$FQ_WORKLOAD" --ranks 2 --steps 20 --shape ddp --buckets 4 --sync-every 20 \
		--step-us 100 --kernel-us 3000 --launch-queue $q --report "$T/q$q.tsv" \
		2>"$T/err" || fail "DDP --launch-queue $q exited $?"
done
short=$(sync_wait "$T/q8.tsv" 0) long=$(sync_wait "$T/q100000.tsv" 0)
[ $((short * 2)) -lt "$long" ] ||
	fail "launch queue 8: final sync waited $short ns, not well under $long ns with no limit"
[ "$(ops_per_rank "$T/q8.tsv" cudaStreamSynchronize)" = "$(printf '0 1\n1 1')" ] ||
	fail "--sync-every 20 over 20 steps: not one sync per rank"

# a slower GPU on rank 1: its compute kernels take 50% longer, its collective kernels (the
# wait for the others) are the shortest. The device model is what is checked, so its
# threads ask for the CPU first (FQ_STANDIN_DEVICE_PRIO=rt, as a GPU waits for no core):
# with the launching threads' priority, a device thread woken late behind this suite's other
# tests made a peer's kernels the shortest (a fresh clone's full run; 8 of 20 runs under four
# CPU hogs on 2 cores, none of 20 with rt)
FQ_STANDIN_DEVICE_PRIO=rt \
"$FQ_WORKLOAD" --ranks 3 --steps 12 --shape ddp --buckets 4 --step-us 200 --kernel-us 3000 \
	--slow-rank 1 --slow-pct 50 --slow-kind gpu --report "$T/g.tsv" 2>"$T/err" ||
	fail "slow-gpu job exited $?"
f0=$(col "$T/g.tsv" 0 kernel:fq_forward dur | median)
f1=$(col "$T/g.tsv" 1 kernel:fq_forward dur | median)
[ $((f1 * 10)) -ge $((f0 * 14)) ] && [ $((f1 * 10)) -le $((f0 * 16)) ] ||
	fail "slow GPU: rank 1's forward kernels take $f1 ns, not 1.5x rank 0's $f0 ns"
w1=$(col "$T/g.tsv" 1 kernel:ncclDevKernel_AllReduce wait | sum)
for r in 0 2; do
	w=$(col "$T/g.tsv" $r kernel:ncclDevKernel_AllReduce wait | sum)
	[ "$w1" -lt "$w" ] ||
		fail "slow GPU: rank 1's kernels waited $w1 ns, not less than rank $r's $w"
done

# a stalled main thread on rank 2: its collective kernels wait least. (Its stall is a 5 ms
# step: with 1 ms, two CPU hogs on 2 cores made a peer's wait the least in 3 of 6 runs, the
# other ranks' main threads delayed by as much; with 5 ms, 0 of 6)
"$FQ_WORKLOAD" --ranks 3 --steps 12 --shape ddp --buckets 4 --step-us 5000 --kernel-us 600 \
	--slow-rank 2 --slow-pct 100 --slow-kind stall --report "$T/s.tsv" 2>"$T/err" ||
	fail "stall job exited $?"
w2=$(col "$T/s.tsv" 2 kernel:ncclDevKernel_AllReduce wait | sum)
for r in 0 1; do
	w=$(col "$T/s.tsv" $r kernel:ncclDevKernel_AllReduce wait | sum)
	[ "$w2" -lt "$w" ] ||
		fail "stall: rank 2's kernels waited $w2 ns, not less than rank $r's $w"
done

# --blocking: the wait is in the collective call; the stalled rank's calls are the shortest
"$FQ_WORKLOAD" --ranks 3 --steps 10 --shape ddp --buckets 2 --blocking --sync-every 0 \
	--step-us 1000 --kernel-us 300 --slow-rank 0 --slow-pct 200 --slow-kind stall \
	--report "$T/b.tsv" 2>"$T/err" || fail "blocking job exited $?"
[ "$(ops_per_rank "$T/b.tsv" cudaStreamSynchronize | awk '{ print $2 }' | sort -u)" = 1 ] ||
	fail "--sync-every 0: not one final sync per rank"
c0=$(col "$T/b.tsv" 0 ncclAllReduce dur | sum)
for r in 1 2; do
	c=$(col "$T/b.tsv" $r ncclAllReduce dur | sum)
	[ "$c0" -lt "$c" ] || fail "blocking: rank 0's calls took $c0 ns, rank $r's only $c"
done

# FSDP: per layer 2 all-gathers and a reduce-scatter a step, the same sequence on every rank
L=3
"$FQ_WORKLOAD" --ranks 3 --steps 4 --shape fsdp --layers $L --step-us 300 --kernel-us 600 \
	--report "$T/f.tsv" 2>"$T/err" || fail "FSDP job exited $?"
for r in 0 1 2; do
	awk -F'\t' -v r=$r 'NR > 1 && $1 == r && $4 ~ /^nccl[A-Z]/ && $5 >= 0 { print $4, $5 }' \
		"$T/f.tsv" >"$T/fops.$r"
done
cmp -s "$T/fops.0" "$T/fops.1" && cmp -s "$T/fops.0" "$T/fops.2" ||
	fail "FSDP: ranks issued different operation sequences"
[ "$(grep -c '^ncclAllGather ' "$T/fops.0")" = $((4 * 2 * L)) ] &&
	[ "$(grep -c '^ncclReduceScatter ' "$T/fops.0")" = $((4 * L)) ] ||
	fail "FSDP: not 2 all-gathers and 1 reduce-scatter per layer and step"

# pipeline: 2 stages x 2; sends of one side match receives of the other per pair; one
# all-reduce per step among the ranks of a stage
"$FQ_WORKLOAD" --ranks 4 --steps 3 --shape pipeline --stages 2 --micro 2 --step-us 200 \
	--kernel-us 300 --report "$T/p.tsv" 2>"$T/err" || fail "pipeline job exited $?"
for r in 0 1; do
	[ "$(col "$T/p.tsv" $r ncclSend dur | wc -l)" = 6 ] && \
	[ "$(col "$T/p.tsv" $((r + 2)) ncclRecv dur | wc -l)" = 6 ] ||
		fail "pipeline: rank $r and $((r + 2)) did not exchange 3 x 2 activations"
done
[ "$(ops_per_rank "$T/p.tsv" ncclAllReduce | awk '{ print $2 }' | sort -u)" = 3 ] ||
	fail "pipeline: not one data-parallel all-reduce per step"
# a rank of a DDP job that stops issuing: the peers' devices time out naming it, their next
# synchronize fails, the job exits non-zero
if FQ_STANDIN_TIMEOUT_S=2 FQ_WORKLOAD_GRACE_S=2 timeout 60 "$FQ_WORKLOAD" --ranks 3 --steps 10 \
	--shape ddp --buckets 2 --step-us 200 --hang-rank 1 --hang-at 5 2>"$T/err"; then
	fail "DDP job with a hung rank exited 0"
fi
grep -q 'AllReduce seq 5 timed out after 2 s waiting for rank(s) 1 ' "$T/err" ||
	fail "DDP hang: no timeout message naming rank 1 at seq 5"
grep -q 'cudaStreamSynchronize failed at step 2 .*the launch timed out' "$T/err" ||
	fail "DDP hang: no rank reported its failed synchronize"

# the loop's mixed and grouped ops on device threads: every rank the same numbered sequence
for ops in mixed grouped; do
	"$FQ_WORKLOAD" --ranks 3 --steps 4 --step-us 200 --ops $ops --device thread \
		--watchdog-us 200 --report "$T/l.tsv" 2>"$T/err" ||
		fail "loop --ops $ops on devices exited $?"
	for r in 0 1 2; do
		awk -F'\t' -v r=$r 'NR > 1 && $1 == r && $4 ~ /^nccl[A-Z]/ && $5 >= 0 {
			print $4, $5 }' "$T/l.tsv" >"$T/lops.$r"
	done
	[ -s "$T/lops.0" ] && cmp -s "$T/lops.0" "$T/lops.1" && cmp -s "$T/lops.0" "$T/lops.2" ||
		fail "loop --ops $ops on devices: ranks issued different operation sequences"
	[ "$(ops_per_rank "$T/l.tsv" cudaStreamSynchronize | awk '{ print $2 }' | sort -u)" = 4 ] ||
		fail "loop --ops $ops on devices: not one sync per step"
done

# FQ_STANDIN_DEVICE_CLOCK=device: every rank's collective kernel ends at one device-clock
# instant (the last rank's start plus the transfer), however late each device thread woke;
# --slow-of measured: the slowed rank's compute kernels grow by P% of its measured step
N=4 S=40 B=4 K=4000
FQ_STANDIN_DEVICE_CLOCK=device "$FQ_WORKLOAD" --ranks $N --steps $S --shape ddp --buckets $B \
	--step-us 200 --kernel-us $K --sync-every 20 --slow-rank 2 --slow-pct 10 --slow-kind gpu \
	--slow-from 20 --slow-of measured --report "$T/dc.tsv" 2>"$T/err" ||
	fail "DDP on device clocks exited $?"
awk -F'\t' 'NR > 1 && $4 == "globaltimer" { off[$1] = $7 }
	NR > 1 && $4 == "kernel:ncclDevKernel_AllReduce" {
		split($8, kv, /[ =]/); e = kv[4] - off[$1]
		if (($5 in end) && end[$5] != e) bad++
		end[$5] = e; n++ }
	END { exit !(n == '$((N * S * B))' && !bad) }' "$T/dc.tsv" ||
	fail "device clocks: the ranks' all-reduce kernels do not end together"
x=$(sed -n 's/^fq-workload: rank 2: measured step \([0-9]*\) us, nominal.*/\1/p' "$T/err")
[ -n "$x" ] || fail "--slow-of measured: no measured step on stderr: $(cat "$T/err")"
want=$((K * 1000 / 3 / B * (100 + (x * 10 / 100 * 100 + K / 2) / K) / 100))
got=$(awk -F'\t' '$1 == 2 && $4 == "kernel:fq_forward" { print $7 }' "$T/dc.tsv" | sort -u |
      tail -n 1)
[ "$got" = "$want" ] || fail "--slow-of measured: slowed forward kernel ${got}ns, want ${want}ns (step ${x}us)"

# ... and a stream's wait for another's event ends on the device clock too: FSDP's compute
# kernels start where a kernel of that rank ended (its previous one, or the all-gather it
# waited for), or at their launch where the CPU launched them onto an idle stream, not when
# the device thread woke. (Idle box: 239 of 240 at a stop, 1 at its launch; with 2-4 CPU
# hogs 200-216 at a stop, 24-40 at their launch, 0-2 neither, likely a wait on an event the
# other stream recorded late. The default clock: 240 of 240 neither.)
FQ_STANDIN_DEVICE_CLOCK=device "$FQ_WORKLOAD" --ranks 3 --steps 20 --shape fsdp --layers 4 \
	--step-us 200 --kernel-us 3000 --sync-every 20 --report "$T/fc.tsv" 2>"$T/err" ||
	fail "FSDP on device clocks exited $?"
awk -F'\t' 'NR > 1 && $4 ~ /^kernel:/ { split($8, kv, /[ =]/)
		k[NR] = $1 " " kv[2] " " kv[4] " " $4 " " kv[6] }
	END { for (i in k) { split(k[i], a, " "); stop[a[1] " " a[3]] = 1 }
	      for (i in k) { split(k[i], a, " "); if (a[4] != "kernel:fq_forward") continue
			     n++; if ((a[1] " " a[2]) in stop) hit++; else if (a[2] != a[5]) off++ }
	      printf "FSDP forward kernels on device clocks: %d, %d at a stop, %d neither at a stop nor at their launch\n", n, hit, off
	      exit !(n == 3 * 20 * 4 && hit >= n / 2 && off <= n / 20) }' "$T/fc.tsv" ||
	fail "device clocks: FSDP compute kernels start off the device clock"

if "$FQ_WORKLOAD" --ranks 2 --steps 1 --shape ddp --device inline 2>"$T/err"; then
	fail "--shape ddp --device inline was accepted"
fi
if "$FQ_WORKLOAD" --ranks 4 --steps 1 --shape pipeline --stages 3 2>"$T/err"; then
	fail "--stages 3 over 4 ranks was accepted"
fi
grep -q 'not a multiple of --stages' "$T/err" || fail "no clear error for --stages 3"
if "$FQ_WORKLOAD" --ranks 2 --steps 1 --shape ring 2>"$T/err"; then
	fail "--shape ring was accepted"
fi
grep -q "invalid value 'ring' for --shape" "$T/err" || fail "no clear error for --shape ring"
echo "ok"
