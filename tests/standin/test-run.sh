# SPDX-License-Identifier: MIT
# (a) a 4-rank job completes and every rank issues exactly S collectives, numbered 0..S-1.
. "$(dirname "$0")/lib.sh"

S=25
"$FQ_WORKLOAD" --ranks 4 --steps $S --step-us 500 --report "$T/r.tsv" 2>"$T/err" ||
	fail "4-rank allreduce job exited $?"
head -n 1 "$T/r.tsv" | grep -q '^rank	pid	tid	op	seq	count	dur_ns	note$' ||
	fail "report header is wrong"
[ "$(ops_per_rank "$T/r.tsv" ncclAllReduce)" = "$(printf '0 %d\n1 %d\n2 %d\n3 %d' $S $S $S $S)" ] ||
	fail "allreduce count per rank is not $S: $(ops_per_rank "$T/r.tsv" ncclAllReduce | tr '\n' ' ')"
[ "$(ops_per_rank "$T/r.tsv" cudaStreamSynchronize | awk '{ print $2 }' | sort -u)" = $S ] ||
	fail "some rank did not synchronize $S times"
# sequence numbers: 0..S-1 in call order on every rank; 1M floats each
awk -F'\t' -v s=$S 'NR > 1 && $4 == "ncclAllReduce" {
		if ($5 != next_seq[$1]++ || $6 != 1048576) bad = 1
	} END { for (r = 0; r < 4; r++) if (next_seq[r] != s) bad = 1; exit bad }' "$T/r.tsv" ||
	fail "allreduce seq numbers or counts are not 0..$((S - 1)) x 1048576"
[ "$(awk -F'\t' 'NR > 1 { print $2 }' "$T/r.tsv" | sort -u | wc -l)" = 4 ] ||
	fail "expected 4 distinct rank pids"
for r in 0 1 2 3; do
	grep -q "^fq-workload: rank $r pid [0-9]*: $S collectives issued, $S syncs, .*exit 0\$" \
		"$T/err" || fail "no summary line for rank $r"
done
check_shm_gone "$T/r.tsv"

# mixed ops: the same operation sequence, numbered identically, on every rank
"$FQ_WORKLOAD" --ranks 3 --steps 4 --step-us 200 --ops mixed --watchdog-us 200 \
	--report "$T/m.tsv" 2>"$T/err" || fail "3-rank mixed job exited $?"
for r in 0 1 2; do
	awk -F'\t' -v r=$r 'NR > 1 && $1 == r && $4 ~ /^nccl[A-Z]/ && $5 >= 0 { print $4, $5 }' \
		"$T/m.tsv" >"$T/ops.$r"
done
[ "$(wc -l <"$T/ops.0")" = 24 ] || fail "mixed: rank 0 issued $(wc -l <"$T/ops.0") ops, not 24"
cmp -s "$T/ops.0" "$T/ops.1" && cmp -s "$T/ops.0" "$T/ops.2" ||
	fail "mixed: ranks issued different operation sequences"
for op in ncclAllReduce ncclAllGather ncclBroadcast ncclReduceScatter ncclSend ncclRecv; do
	[ "$(grep -c "^$op " "$T/ops.0")" = 4 ] || fail "mixed: $op not issued once per step"
done
check_shm_gone "$T/m.tsv"

# grouped ops: one group per step holding 4 calls (a nested group among them), launched at
# the outer ncclGroupEnd; the calls are numbered like any others
"$FQ_WORKLOAD" --ranks 3 --steps 5 --step-us 200 --ops grouped --report "$T/g.tsv" 2>"$T/err" ||
	fail "3-rank grouped job exited $?"
[ "$(ops_per_rank "$T/g.tsv" ncclGroupEnd)" = "$(printf '0 5\n1 5\n2 5')" ] ||
	fail "grouped: not 5 groups per rank: $(ops_per_rank "$T/g.tsv" ncclGroupEnd | tr '\n' ' ')"
awk -F'\t' 'NR > 1 && $4 == "ncclGroupEnd" && $6 != 4 { bad = 1 } END { exit bad }' "$T/g.tsv" ||
	fail "grouped: a group did not hold 4 calls"
[ "$(ops_per_rank "$T/g.tsv" ncclAllReduce | awk '{ print $2 }' | sort -u)" = 15 ] ||
	fail "grouped: not 3 all-reduces per step on every rank"
check_shm_gone "$T/g.tsv"

# a usage error is reported, not run
if "$FQ_WORKLOAD" --steps 3 2>"$T/err"; then fail "missing --ranks was accepted"; fi
grep -q 'ranks' "$T/err" || fail "usage error does not name --ranks"
echo "ok"
