#!/bin/bash
# SPDX-License-Identifier: MIT
# Clean jobs of the stand-in under load: how far does a rank stand out when nothing is
# planted? N rounds of two clean 8-rank DDP-shaped fq-workload jobs (120 steps, a sync every
# step and every 20), with `load` two CPU hogs a core outside the job's cgroups, four live
# agents (tests/standin/live-agents.sh). One line per job: the rank with the largest kernel
# z (z_gpu) of `fleetq stragglers --all`, its effect, its kernels against its peers', and
# the ranks named (rank:signals:effect:z_wait:z_cpu:z_late). Not a test: it measures the
# false-positive side for BENCHMARKS.md (e.g. the default against FQ_STANDIN_DEVICE_PRIO=rt).
# usage: bench/cleanload.sh N [load]   (as root; env as for bench/shapes.sh; CLEANLOAD_ARGS:
#   more fq-workload options, e.g. '--step-us 250' for less CPU work a step)
here=$(cd "$(dirname "$0")" && pwd)
export FQ_TESTS=$here/../tests
. "$here/../tests/e2e/lib.sh"
. "$here/../tests/standin/live-agents.sh"
live_agents fqcleanload
N=${1:?usage: bench/cleanload.sh N [load]}
hogs=()
if [ "${2:-}" = load ]; then
	for _ in $(seq "$(nproc)") $(seq "$(nproc)"); do
		timeout 600 sh -c 'while :; do :; done' &
		hogs+=($!)
	done
fi
for i in $(seq "$N"); do
	for s in 1 20; do
		name=clean$i-s$s-$$
		NCCL_PROFILER_PLUGIN=$PLUGIN "$STANDIN/fq-workload" --ranks 8 --steps 120 --shape ddp \
			--buckets 4 --step-us 1000 --kernel-us 4000 --job-id "$name" \
			--cgroup-parent "$CG" --cgroups 4 --sync-every $s ${CLEANLOAD_ARGS:-} \
			>"$T/$name.log" 2>&1 ||
			{ echo "$name: fq-workload failed"; continue; }
		sleep 2 # the agents store the job's last collectives
		fq -w "$HOSTS" stragglers --since 5m --job "$name" --all --format csv
		python3 - "$T/out" "$name" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]))
        if r.get("comm_hash") and not r["comm_hash"].startswith("nccl:")]
if not rows:
    sys.exit(print(sys.argv[2], "no rows"))
top = max(rows, key=lambda r: float(r["z_gpu"] or -99))
named = [":".join((r["rank"], r["signals"], r["effect_pct"], "zw" + r["z_wait"],
                   "zc" + r["z_cpu"], "zl" + r["z_late"])) for r in rows if r["verdict"] != "ok"]
print(sys.argv[2], "top_z_gpu", top["z_gpu"], "rank", top["rank"], "effect", top["effect_pct"],
      "gpu_ms", top["gpu_ms"], "peers", top["peer_gpu_ms"], "named", ",".join(named) or "-")
PY
	done
done
[ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null
exit 0
