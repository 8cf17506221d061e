#!/bin/bash
# SPDX-License-Identifier: MIT
# A DDP-shaped job on the real path: four agentd processes with the real eBPF tracer, each
# scoped to one "node" cgroup of an 8-rank stand-in job (fq-workload --shape ddp: four bucket
# all-reduces a step from a second thread, queued on a device thread, one synchronize a step),
# with fleetq's NCCL profiler plugin loaded through NCCL_PROFILER_PLUGIN as NCCL loads it, so
# its records reach the agents through the uprobe on its hand-over function.
#   clean: exit 0;
#   rank 3's GPU 50% slower (only its kernels' device time grows): exit 1, rank 3 named first,
#     by the GPU-side signal (the CPU side of a job that syncs every step cannot see it);
#   rank 6's main thread sleeping a whole step more (100%): exit 1, rank 6 named first;
#   a pipeline (2 stages of 4 data-parallel ranks, --shape pipeline) whose rank 6 sleeps:
#     named first as rank 6, the job's rank (RANK), not by its rank in its stage's
#     communicator (2, numbered from 0: the stage's communicator came from ncclCommSplit,
#     whose rank NCCL decides inside the call, and the plugin's rows, joined to it, say it);
#   the same pipeline whose rank 0 (stage 0) has a GPU slower by a whole step (100%), over
#     300 steps: named first as rank 0 (at 50% it was named at 11.7% here; at 100% over 120
#     steps, 12-21% in 11 of 12 runs with one or two CPU hogs beside it, and once nobody: its
#     kernels 0.37 ms against its three stage-0 peers' 4.1-6.0, z 3.14, under the threshold.
#     The peers' own spread, the host's scheduling of 8 ranks' threads on 2 cores, shrinks
#     with the span: over 300 steps 6 of 6 named, z 5.9-23).
#     Every stage-0 rank waits more on its Send/Recv than its stage-1 peer (the schedule), so
#     the send/recv rule clears the culprit unless it weighs each rank's Send/Recv
#     kernels against its stage siblings' (round 8's rule named it in 1 of 2 runs here;
#     analysis_real holds real cases it missed).
# The fault is large on purpose: this is the path's test; bench/accuracy measures accuracy.
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/../standin/live-agents.sh"
[ -r "${PLUGIN:-}" ] || fail "no NCCL profiler plugin at '${PLUGIN:-}' (target fleetq_nccl_profiler)"
live_agents fqddp
echo "agents up after ${SECONDS}s"

STEPS=120
run() {
	job=$1
	shift
	NCCL_PROFILER_PLUGIN=$PLUGIN "$STANDIN/fq-workload" --ranks 8 --steps $STEPS \
		--shape "${SHAPE:-ddp}" --buckets 4 --step-us 1000 --kernel-us 4000 --sync-every 1 --job-id "$job" \
		--cgroup-parent "$CG" --cgroups 4 --report "$T/$job.tsv" "$@" >"$T/$job.log" 2>&1 ||
		fail "fq-workload $job: $(tail -n 3 "$T/$job.log")"
	[ "${SHAPE:-ddp}" = ddp ] || { sleep 2; return; }
	i=0
	while :; do
		fq -w "$HOSTS" --format csv --merge "SELECT sum(n) || ',' || sum(k) FROM results" \
			"SELECT count(*) AS n, (SELECT count(*) FROM nccl_kernels k WHERE k.pid IN
			 (SELECT pid FROM processes WHERE job_id = '$job')) AS k FROM collectives
			 WHERE pid IN (SELECT pid FROM processes WHERE job_id = '$job')"
		# every collective; every kernel but the first few of each rank, which finish before
		# agentd has found the plugin NCCL loaded at the communicator's init
		got=$(tail -n 1 "$T/out" | tr -d '"')
		[ "$RC" = 0 ] && [ "${got%,*}" = $((8 * 4 * STEPS)) ] &&
			[ "${got#*,}" -ge $((8 * 4 * STEPS - 8 * 8)) ] && break
		i=$((i + 1))
		[ $i -lt 100 ] || fail "$job: collectives,kernels traced $got, want $((8 * 4 * STEPS)) and at most 64 kernels fewer"
		sleep 0.1
	done
}
# node of rank R in job J, from the workload's report
agent_of() {
	local cg
	cg=$(awk -F'\t' -v r="$2" '$1 == r && $4 == "cgroup" { print $8 }' "$T/$1.tsv")
	echo "127.0.0.1:${PORT[${cg##*/node}]}"
}
# expect_first JOB RANK WHAT: fleetq exits 1 and names RANK of JOB first (its whole table
# printed when it does not exit 1)
expect_first() {
	local rc
	fq -w "$HOSTS" stragglers --since 5m --job "$1"
	cat "$T/out"
	rc=$RC
	[ "$rc" = 1 ] || { fq -w "$HOSTS" stragglers --since 5m --job "$1" --all --format tsv; cat "$T/out"; RC=$rc; }
	expect_rc 1 "$3"
	head -n 1 "$T/out" | grep -q "^straggler: rank $2 on $(agent_of "$1" "$2") " ||
		fail "$3: want rank $2 first: $(cat "$T/out")"
}

run clean-$$
echo "clean job traced after ${SECONDS}s"
fq -w "$HOSTS" --format csv --merge "SELECT sum(n) FROM results" "SELECT count(*) AS n
	FROM nccl_kernels WHERE comm_hash IS NULL
	OR comm_hash <> (SELECT comm_hash FROM comms ORDER BY ts_ns DESC LIMIT 1)"
expect_rc 0 "kernels joined"
grep -qx "0" <(tail -n 1 "$T/out") || fail "kernels not joined to the communicator: $(cat "$T/out")"
# The clean job shares 2 cores with 8 ranks' 24 threads and 4 agents: now and then the
# scheduler alone keeps one rank behind for the whole job, by up to 5 % of the span (seen: 3.1,
# 4.1, 4.4 and 5.0 %; the 4.4 % rank's kernels were short in every quarter of its job). That is
# a straggler, which the default 3 % floor names; the clean check asks for nothing of 6 % or
# more. (The DDP faults below are stated at 10-24 %.)
fq -w "$HOSTS" stragglers --since 5m --job clean-$$ --min-effect 6
cat "$T/out"
expect_rc 0 "live DDP clean job"

run gpu-$$ --slow-rank 3 --slow-pct 50 --slow-kind gpu
echo "gpu job traced after ${SECONDS}s"
expect_first gpu-$$ 3 "live DDP slow GPU"
grep -m 1 "signals that name it:" "$T/out" | grep -q "gpu" || fail "no gpu signal: $(cat "$T/out")"

run stall-$$ --slow-rank 6 --slow-pct 100 --slow-kind stall
echo "stall job traced after ${SECONDS}s"
expect_first stall-$$ 6 "live DDP stalled rank"

SHAPE=pipeline run pipe-$$ --stages 2 --slow-rank 6 --slow-pct 100 --slow-kind stall
echo "pipeline job traced after ${SECONDS}s"
expect_first pipe-$$ 6 "live pipeline stalled rank"
sed -n 2p "$T/out" | grep -q ", rank 2 in communicator " ||
	fail "want its rank in the stage's communicator: $(sed -n 2p "$T/out")"
# the pipeline's Send/Recv on the GPU side: each with its peer in its pair communicator,
# joined to that communicator (made by ncclCommSplit: NCCL's hash of the split)
fq -w "$HOSTS" --format csv --merge "SELECT sum(n) || ',' || sum(bad) FROM results" \
	"SELECT count(*) AS n, sum(peer IS NULL OR peer NOT IN (0, 1) OR comm_hash IS NULL) AS bad
	 FROM nccl_kernels
	 WHERE op IN ('Send', 'Recv') AND pid IN (SELECT pid FROM processes WHERE job_id = 'pipe-$$')"
got=$(tail -n 1 "$T/out" | tr -d '"')
[ "$RC" = 0 ] && [ "${got%,*}" -gt $((8 * STEPS)) ] && [ "${got#*,}" = 0 ] ||
	fail "pipeline: Send/Recv kernel rows, rows without a peer: $got"
STEPS=300 SHAPE=pipeline run pipegpu-$$ --stages 2 --slow-rank 0 --slow-pct 100 --slow-kind gpu
echo "pipeline slow GPU job traced after ${SECONDS}s"
expect_first pipegpu-$$ 0 "live pipeline slow GPU on stage 0"
echo "PASS after ${SECONDS}s"
