#!/bin/bash
# SPDX-License-Identifier: MIT
# `fleetq stragglers` on the stand-in's job shapes with four live agents (the real tracer,
# fleetq's plugin; tests/standin/live-agents.sh): an 8-rank DDP-shaped fq-workload (four
# bucket all-reduces a step from a second thread), blocking and not, a sync every step or
# every 20, a slower GPU, a sleeping and a spinning rank; then clean jobs under load (one CPU
# hog per core outside the job's cgroups). One line per job: case, planted rank, fleetq's
# exit, the first named rank and its effect. Not a test: it records hits, misses and false
# positives for BENCHMARKS.md.
# usage: bench/shapes.sh   (as root; env as ctest gives stragglers_live-ddp: FLEETQ, AGENTD,
#   TRACEGEN, MKCERTS, STANDIN, PLUGIN, FLEETQ_SQL_DIR; e.g. from `ctest -R stragglers_live-ddp -V`)
here=$(cd "$(dirname "$0")" && pwd)
export FQ_TESTS=$here/../tests
. "$here/../tests/e2e/lib.sh"
. "$here/../tests/standin/live-agents.sh"
live_agents fqshapes

job() { # NAME PLANTED fq-workload-args...
	local case=$1 name=$1-$$ planted=$2 line
	shift 2
	NCCL_PROFILER_PLUGIN=$PLUGIN "$STANDIN/fq-workload" --ranks 8 --steps 120 --shape ddp \
		--buckets 4 --step-us 1000 --kernel-us 4000 --job-id "$name" --cgroup-parent "$CG" \
		--cgroups 4 "$@" >"$T/$name.log" 2>&1 || { echo "$name: fq-workload failed"; return; }
	sleep 2 # the agents store the job's last collectives
	fq -w "$HOSTS" stragglers --since 5m --job "$name"
	line=$(sed -n 's/^straggler: rank \([0-9]*\) .*(costs its peers \(.*\) of the span)$/\1 (\2)/p' \
		"$T/out" | head -n 1)
	printf '%s\t%s\t%s\t%s\n' "$case" "$planted" "$RC" "${line:--}"
}
printf 'case\tplanted\texit\tnamed (effect)\n'
for b in "" --blocking; do
	tag=${b:+blk-}
	job "${tag}clean" - --sync-every 1 $b
	job "${tag}gpu50" 3 --sync-every 1 --slow-rank 3 --slow-pct 50 --slow-kind gpu $b
	job "${tag}stall100" 6 --sync-every 1 --slow-rank 6 --slow-pct 100 --slow-kind stall $b
	job "${tag}busy50" 2 --sync-every 1 --slow-rank 2 --slow-pct 50 --slow-kind busy $b
	job "${tag}gpu50s20" 5 --sync-every 20 --slow-rank 5 --slow-pct 50 --slow-kind gpu $b
	job "${tag}clean-s20" - --sync-every 20 $b
done
hogs=()
for _ in $(seq "$(nproc)") $(seq "$(nproc)"); do
	timeout 300 sh -c 'while :; do :; done' &
	hogs+=($!)
done
for i in 1 2 3; do
	job "load-clean$i" - --sync-every 1
	job "load-clean-s20-$i" - --sync-every 20
done
kill "${hogs[@]}" 2>/dev/null
