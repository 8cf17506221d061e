#!/bin/bash
# SPDX-License-Identifier: MIT
# `fleetq stragglers` on the stand-in's job shapes with four live agents (the real tracer,
# fleetq's plugin; tests/standin/live-agents.sh): an 8-rank DDP-shaped fq-workload (four
# bucket all-reduces a step from a second thread), blocking and not, a sync every step or
# every 20, a slower GPU, a sleeping and a spinning rank; then clean jobs under load (one CPU
# hog per core outside the job's cgroups); then pipelines (--shape pipeline: 2 stages of 4
# data-parallel ranks, and 4 stages of 2; Send/Recv on a 2-rank communicator per link, an
# all-reduce per stage), faults on first, middle and last stages. One line per job: case,
# planted rank, fleetq's exit, the first named rank and its effect, the job's time from its
# first collective to its last (its loss: against the clean job of its shape, and as noisy as
# this machine: 8 ranks on 2 cores vary by 10 % and more from job to job). Not a test: it
# records hits, misses and false positives for BENCHMARKS.md.
# usage: bench/shapes.sh [ddp] [fsdp] [load] [pipe] [clean]   (default: the first four; as root;
#   clean: CLEAN_RUNS (20) rounds of a clean job of each of four shapes (DDP with a sync every
#   step and every 20, blocking, FSDP), every other round under two CPU hogs per core; env as ctest
#   gives stragglers_live-compute: FLEETQ, AGENTD, TRACEGEN, MKCERTS, STANDIN, PLUGIN, CUPTI,
#   FLEETQ_SQL_DIR; without CUPTI, no CUDA injection library;
#   e.g. from `ctest -R stragglers_live-ddp -V`); SHAPES_KEEP=DIR: the agents' trace files are
#   copied there at the end (job ids: CASE-<pid of this script>)
here=$(cd "$(dirname "$0")" && pwd)
export FQ_TESTS=$here/../tests
. "$here/../tests/e2e/lib.sh"
. "$here/../tests/standin/live-agents.sh"
live_agents fqshapes

sections=${*:-ddp fsdp load pipe}
hogs=()
hogs_on() {
	for _ in $(seq "$(nproc)") $(seq "$(nproc)"); do
		timeout 600 sh -c 'while :; do :; done' &
		hogs+=($!)
	done
}
hogs_off() {
	[ "${#hogs[@]}" = 0 ] || kill "${hogs[@]}" 2>/dev/null
	hogs=()
}
want() { case " $sections " in *" $1 "*) return 0 ;; esac; return 1; }

job() { # NAME PLANTED fq-workload-args... (a --shape among them replaces ddp)
	local case=$1 name=$1-$$ planted=$2 line rc ms
	shift 2
	CUDA_INJECTION64_PATH=${CUPTI:-} NCCL_PROFILER_PLUGIN=$PLUGIN \
		"$STANDIN/fq-workload" --ranks 8 --steps 120 --shape ddp \
		--buckets 4 --step-us 1000 --kernel-us 4000 --job-id "$name" --cgroup-parent "$CG" \
		--cgroups 4 "$@" >"$T/$name.log" 2>&1 || { echo "$name: fq-workload failed"; return; }
	sleep 2 # the agents store the job's last collectives
	fq -w "$HOSTS" stragglers --since 5m --job "$name"
	line=$(sed -n 's/^straggler: rank \([0-9]*\) .*(costs its \(peers\|job about\) \([0-9.]*%\) of the span.*)$/\1 (\3)/p' \
		"$T/out" | head -n 1)
	# (and the signals that name it)
	[ -z "$line" ] || line="$line $(sed -n 's/^  signals that name it: \([^ ]*\) .*/\1/p' "$T/out" | head -n 1)"
	# (no verdict: what fleetq said instead)
	[ "$RC" -le 1 ] || line="no verdict: $(head -n 1 "$T/out")"
	rc=$RC
	# the job's own time: its first collective to its last, over every rank (start-up and
	# exit left out)
	fq -w "$HOSTS" --format csv --merge "SELECT (max(hi) - min(lo)) / 1000000 FROM results" \
		"SELECT min(ts_ns) AS lo, max(ts_ns) AS hi FROM collectives
		 WHERE pid IN (SELECT pid FROM processes WHERE job_id = '$name')"
	ms=-
	[ "$RC" != 0 ] || ms=$(tail -n 1 "$T/out")
	printf '%s\t%s\t%s\t%s\t%s\n' "$case" "$planted" "$rc" "${line:--}" "$ms"
}
printf 'case\tplanted\texit\tnamed (effect)\tjob_ms\n'
want ddp && for b in "" --blocking; do
	tag=${b:+blk-}
	job "${tag}clean" - --sync-every 1 $b
	job "${tag}gpu50" 3 --sync-every 1 --slow-rank 3 --slow-pct 50 --slow-kind gpu $b
	job "${tag}stall100" 6 --sync-every 1 --slow-rank 6 --slow-pct 100 --slow-kind stall $b
	job "${tag}busy50" 2 --sync-every 1 --slow-rank 2 --slow-pct 50 --slow-kind busy $b
	job "${tag}gpu50s20" 5 --sync-every 20 --slow-rank 5 --slow-pct 50 --slow-kind gpu $b
	job "${tag}clean-s20" - --sync-every 20 $b
done
# FSDP-shaped (an all-gather and a reduce-scatter per layer): with CUPTI set (fleetq's CUDA
# injection library) each rank's compute stream too
want fsdp && {
	job fsdp-clean - --shape fsdp --sync-every 1
	job fsdp-gpu30 1 --shape fsdp --sync-every 1 --slow-rank 1 --slow-pct 30 --slow-kind gpu
	job fsdp-stall50 4 --shape fsdp --sync-every 1 --slow-rank 4 --slow-pct 50 --slow-kind stall
	job fsdp-clean-s20 - --shape fsdp --sync-every 20
}
want load && {
	hogs_on
	for i in 1 2 3; do
		job "load-clean$i" - --sync-every 1
		job "load-clean-s20-$i" - --sync-every 20
	done
	hogs_off
}
# pipelines: ranks are stage * dp + d
want pipe && for P in 2 4; do
	p=(--shape pipeline --stages $P)
	job "pipe$P-clean" - "${p[@]}" --sync-every 1
	job "pipe$P-clean-s20" - "${p[@]}" --sync-every 20
	job "pipe$P-gpu50-r0" 0 "${p[@]}" --sync-every 1 --slow-rank 0 --slow-pct 50 --slow-kind gpu
	job "pipe$P-stall100-r1" 1 "${p[@]}" --sync-every 1 --slow-rank 1 --slow-pct 100 --slow-kind stall
	job "pipe$P-gpu50-r5" 5 "${p[@]}" --sync-every 1 --slow-rank 5 --slow-pct 50 --slow-kind gpu
	job "pipe$P-busy50-r3" 3 "${p[@]}" --sync-every 1 --slow-rank 3 --slow-pct 50 --slow-kind busy
	job "pipe$P-stall100-r7" 7 "${p[@]}" --sync-every 1 --slow-rank 7 --slow-pct 100 --slow-kind stall
done
# clean jobs, many: what a CI gate or an epilog check sees when nothing is wrong
want clean && for i in $(seq "${CLEAN_RUNS:-20}"); do
	l=
	[ $((i % 2)) = 1 ] || { l=load-; hogs_on; }
	job "${l}c$i-ddp" - --sync-every 1
	job "${l}c$i-ddp-s20" - --sync-every 20
	job "${l}c$i-blk" - --sync-every 1 --blocking
	job "${l}c$i-fsdp" - --shape fsdp --sync-every 1
	hogs_off
done
if [ -n "${SHAPES_KEEP:-}" ]; then
	sleep 1
	mkdir -p "$SHAPES_KEEP" && for k in 0 1 2 3; do
		sqlite3 "$T/node$k.db" ".backup '$SHAPES_KEEP/node$k.db'"
	done
fi
