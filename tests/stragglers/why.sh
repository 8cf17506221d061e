#!/bin/bash
# SPDX-License-Identifier: MIT
# fleetq stragglers says why (sql/analysis/why.*.sql), live: four agentd processes with the
# real eBPF tracer and the fake libnvidia-ml (tests/nvml, a test double: 2 GPUs a node, each
# rank on GPU LOCAL_RANK) over the 8-rank DDP-shaped stand-in job with the NCCL profiler plugin.
#   clean: nothing named at 6 % (see below); with --all, every rank's likely cause is
#     "none measured";
#   rank 3's GPU 50% slower and its fake GPU (node1 GPU 1) at 1410 MHz in thermal slowdown:
#     the GPU likely cause, its clock against the peers' 1,980;
#   rank 6 sleeping 50% of a step: no GPU cause;
#   rank 5 busy, pinned to one CPU with a CPU hog on it (bounded): named, with preempted as
#     its likely cause (its main thread preempted 5% of the window more than its peers').
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/../standin/live-agents.sh"
[ -r "${PLUGIN:-}" ] || fail "no NCCL profiler plugin at '${PLUGIN:-}' (target fleetq_nccl_profiler)"
[ -f "${FAKENVML:-}" ] || fail "no fake NVML at '${FAKENVML:-}' (target fakenvml)"
for k in 0 1 2 3; do echo "gpus 2" >"$T/nvml.node$k.conf"; done
live_agents fqwhy
echo "agents up after ${SECONDS}s"

STEPS=200
# start JOB ARGS...: the job in the background (WPID)
start() {
	job=$1
	shift
	NCCL_PROFILER_PLUGIN=$PLUGIN "$STANDIN/fq-workload" --ranks 8 --steps $STEPS --shape ddp \
		--buckets 4 --step-us 1000 --kernel-us 4000 --sync-every 1 --job-id "$job" \
		--cgroup-parent "$CG" --cgroups 4 --report "$T/$job.tsv" "$@" >"$T/$job.log" 2>&1 &
	WPID=$!
}
# finish JOB: waits for the job, then for the agents to have stored every collective
finish() {
	wait "$WPID" || fail "fq-workload $1: $(tail -n 3 "$T/$1.log")"
	i=0
	while :; do
		fq -w "$HOSTS" --format csv --merge "SELECT sum(n) FROM results" \
			"SELECT count(*) AS n FROM collectives
			 WHERE pid IN (SELECT pid FROM processes WHERE job_id = '$1')"
		got=$(tail -n 1 "$T/out" | tr -d '"')
		[ "$RC" = 0 ] && [ "$got" = $((8 * 4 * STEPS)) ] && break
		i=$((i + 1))
		[ $i -lt 100 ] || fail "$1: collectives traced $got, want $((8 * 4 * STEPS))"
		sleep 0.1
	done
	sleep 0.5 # the last GPU samples committed too
}
# pid of rank R of the running job (its RANK in the environment)
rank_pid() {
	for p in $(pgrep -P "$WPID"); do
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$1" && { echo "$p"; return; }
	done
}
# check JOB PYTHON: the --all csv of the job as rows (list of dicts), asserted by PYTHON
check() {
	fq -w "$HOSTS" stragglers --since 5m --job "$1" --all --format csv
	[ "$RC" = 0 ] || [ "$RC" = 1 ] || { cat "$T/err"; fail "$1: --all csv exit $RC"; }
	cp "$T/out" "$T/$1.csv"
	python3 -c "
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {int(r['rank']): r for r in rows if r['comm_hash'] and not r['comm_hash'].startswith('nccl:')}
$2
" "$T/$1.csv" || fail "$1: $(cat "$T/$1.csv")"
}

# clean: nothing stands out, and no rule fires. As in live-ddp.sh: 8 ranks and 4 agents on 2
# cores, the scheduler alone now and then keeps one rank behind for the whole job by up to 5 %
# of the span (CI saw rank 6 named by its kernels alone at 4.6 %, z 3.8: its peers did wait
# for it), a straggler the default 3 % floor names; the clean check asks for nothing of 6 % or
# more. The faults below cost 20-50 %.
start clean-$$
finish clean-$$
fq -w "$HOSTS" stragglers --since 5m --job clean-$$ --min-effect 6
cat "$T/out"
expect_rc 0 "clean job"
grep -q "likely cause" "$T/out" && fail "clean job: a likely cause: $(cat "$T/out")"
check clean-$$ '
assert sorted(by) == list(range(8)), rows
for r in by.values():
    assert r["cause"] == "" and r["likely_cause"].startswith("none measured (GPU clocks"), r
    assert int(r["gpu_samples"]) >= 2 and float(r["sm_mhz"]) == 1980, r
    assert r["gpu_index"] == str(int(r["rank"]) % 2), r
'

# rank 3 (node1, LOCAL_RANK 1) on a GPU at 1410 MHz in thermal slowdown, and slower by half
printf 'gpus 2\ngpu 1 sm_clock 1410\ngpu 1 reasons 0x20\ngpu 1 temp 88\n' >"$T/nvml.node1.conf"
start gpu-$$ --slow-rank 3 --slow-pct 50 --slow-kind gpu
finish gpu-$$
echo "gpus 2" >"$T/nvml.node1.conf"
fq -w "$HOSTS" stragglers --since 5m --job gpu-$$
cat "$T/out"
expect_rc 1 "slow GPU"
head -n 1 "$T/out" | grep -q "^straggler: rank 3 on " || fail "want rank 3 first: $(cat "$T/out")"
grep -m 1 "likely cause:" "$T/out" |
	grep -qx "  likely cause: GPU 1 at 1,410 MHz vs 1,980 median (thermal slowdown)" ||
	fail "slow GPU: no GPU cause: $(cat "$T/out")"
grep -q "^  why: GPU 1 at 1,410 MHz (max 1,980), peers 1,980; thermal slowdown; " "$T/out" ||
	fail "slow GPU: evidence line: $(cat "$T/out")"
check gpu-$$ '
r = by[3]
assert r["cause"] == "gpu_clock" and r["gpu_reason"] == "thermal slowdown", r
assert float(r["sm_mhz"]) == 1410 and float(r["peer_sm_mhz"]) == 1980, r
assert all(by[k]["cause"] != "gpu_clock" for k in by if k != 3), rows
'

# rank 6 sleeping: named, and nothing about its GPU
start stall-$$ --slow-rank 6 --slow-pct 50 --slow-kind stall
finish stall-$$
fq -w "$HOSTS" stragglers --since 5m --job stall-$$
cat "$T/out"
expect_rc 1 "stalled rank"
head -n 1 "$T/out" | grep -q "^straggler: rank 6 on " || fail "want rank 6 first: $(cat "$T/out")"
cause=$(grep -m 1 "likely cause:" "$T/out")
[ -n "$cause" ] || fail "stalled rank: no likely-cause line: $(cat "$T/out")"
case $cause in *"likely cause: GPU"*) fail "stalled rank: a GPU cause: $cause" ;; esac
check stall-$$ '
assert by[6]["cause"] != "gpu_clock", by[6]
print("stalled rank 6:", by[6]["likely_cause"], "blocked", by[6]["blocked_pct"],
      "peers", by[6]["peer_blocked_pct"])
'

# rank 5 busy, pinned to the last CPU with a CPU hog there for the job's length (at most 60 s)
cpu=$(($(nproc) - 1))
start busy-$$ --slow-rank 5 --slow-pct 50 --slow-kind busy
i=0
until p=$(rank_pid 5) && [ -n "$p" ]; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "busy job: rank 5 did not start"
	sleep 0.02
done
taskset -a -p -c "$cpu" "$p" >/dev/null || fail "cannot pin rank 5 (pid $p) to CPU $cpu"
taskset -c "$cpu" timeout 60 sh -c 'while :; do :; done' &
HOG=$!
PIDS="$PIDS $HOG"
finish busy-$$
kill "$HOG" 2>/dev/null
fq -w "$HOSTS" stragglers --since 5m --job busy-$$
cat "$T/out"
expect_rc 1 "busy rank under contention"
head -n 1 "$T/out" | grep -q "^straggler: rank 5 on " || fail "want rank 5 first: $(cat "$T/out")"
grep -m 1 "likely cause:" "$T/out" |
	grep -q "^  likely cause: preempted [0-9]*% of the window vs [0-9]*% median (CPU contention)$" ||
	fail "busy rank: no preempted line: $(cat "$T/out")"
check busy-$$ '
r = by[5]
pre, peer = float(r["preempted_pct"]), float(r["peer_preempted_pct"])
print("busy rank 5: preempted %.1f%% of its window, peers %.1f%%:" % (pre, peer), r["likely_cause"])
# the rule: 5 points of the window past the peers, and an outlier among them
assert pre - peer >= 5 and r["cause"] == "preempted", r
'
echo "PASS after ${SECONDS}s"
