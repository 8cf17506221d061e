# SPDX-License-Identifier: MIT
# (c) a rank that stops issuing collectives: its peers' synchronize times out with an error
# naming it, the job exits non-zero, and the report shows where it stopped.
. "$(dirname "$0")/lib.sh"

# timeout(1): should the peers not block on the hung rank, the job would never end
if FQ_STANDIN_TIMEOUT_S=2 FQ_WORKLOAD_GRACE_S=3 timeout 120 "$FQ_WORKLOAD" --ranks 4 --steps 10 \
	--step-us 200 --hang-rank 1 --hang-at 3 --report "$T/r.tsv" 2>"$T/err"; then
	fail "job with a hung rank exited 0"
fi
grep -q 'AllReduce seq 3 timed out after 2 s waiting for rank(s) 1 ' "$T/err" ||
	fail "no timeout message naming rank 1 at seq 3"
grep -q 'cudaStreamSynchronize failed at step 3 .*the launch timed out' "$T/err" ||
	fail "no rank reported its failed cudaStreamSynchronize"
grep -q '^fq-workload: job .* failed: rank [023] failed first' "$T/err" ||
	fail "no one-line job failure naming a peer"
grep -q '^fq-workload: rank 1 pid [0-9]*: 3 collectives issued, .*while hung$' "$T/err" ||
	fail "summary does not show rank 1 hung after 3 collectives"
got=$(ops_per_rank "$T/r.tsv" ncclAllReduce | tr '\n' ' ')
[ "$got" = "0 4 1 3 2 4 3 4 " ] || fail "report: allreduce per rank should be 0 4 1 3 2 4 3 4, is $got"
check_shm_gone "$T/r.tsv"
echo "ok"
