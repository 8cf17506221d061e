#!/bin/bash
# SPDX-License-Identifier: MIT
# `fleetq stragglers` on real training jobs (bench/gpu/train.py), on a machine with 2+ GPUs:
# one agentd per rank, each scoped to that rank's cgroup (as if each rank were its own
# node), fleetq's NCCL profiler plugin named in NCCL_PROFILER_PLUGIN, then for each shape
# (DDP, FSDP) one torchrun job that goes through its phases (clean, stall, busy, slower GPU;
# sync every step or every 20) and asks fleetq after each phase. Writes OUT/summary.tsv
# (phase, planted rank, fleetq's exit and first named rank, signals, effect), OUT/phases.tgz
# (every phase's report and --all TSV) and the agents' logs.
# usage: bench/gpu/detect.sh BINDIR OUT [ddp|fsdp|overhead]...
#   BINDIR holds agentd, fleetq (static builds carried) and libfleetq-nccl-profiler.so
set -u
bin=$(cd "$1" && pwd) out=$2
shift 2
what=${*:-ddp fsdp}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
n=${NPROC:-$(nvidia-smi -L | wc -l)}
steps=${STEPS:-300}
v2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$v2" ] || { echo "no cgroup2 mount" >&2; exit 1; }
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
cg=$v2/fleetq-detect-$$
mkdir -p "$out/p"
pids=()
stop_agents() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	wait "${pids[@]}" 2>/dev/null
	pids=()
}
cleanup() {
	stop_agents
	for i in $(seq 0 $((n - 1))); do rmdir "$cg/node$i" 2>/dev/null; done
	rmdir "$cg" 2>/dev/null
}
trap cleanup EXIT
for i in $(seq 0 $((n - 1))); do mkdir -p "$cg/node$i"; done

start_agents() { # tag
	local tag=$1 i
	pids=()
	for i in $(seq 0 $((n - 1))); do
		rm -f "/tmp/fq-$tag$i.db"* "/tmp/fq-$tag$i.port"
		"$bin/agentd" --listen 127.0.0.1:0 --insecure --port-file "/tmp/fq-$tag$i.port" \
			--node "rank$i" --db "/tmp/fq-$tag$i.db" --cgroup "$cg/node$i" \
			2>"$out/$tag-agent$i.log" &
		pids+=($!)
	done
	HOSTS=
	for i in $(seq 0 $((n - 1))); do
		for _ in $(seq 100); do [ -s "/tmp/fq-$tag$i.port" ] && break; sleep 0.1; done
		HOSTS=$HOSTS${HOSTS:+,}127.0.0.1:$(cat "/tmp/fq-$tag$i.port")
	done
	export HOSTS
}

# what fleetq says after each phase: the report, and every rank as TSV
export FQ_ANALYZE='
	"$FQ_BIN/fleetq" -w "$HOSTS" --insecure stragglers --since "${FQ_SINCE}s" --max-seqs 0 \
		>"$FQ_OUT/p/$FQ_PHASE.txt" 2>&1
	rc=$?
	"$FQ_BIN/fleetq" -w "$HOSTS" --insecure stragglers --since "${FQ_SINCE}s" --max-seqs 0 \
		--all --format tsv >"$FQ_OUT/p/$FQ_PHASE.tsv" 2>/dev/null
	first=$(sed -n "1s/^\(straggler\|hung\): rank \([0-9]*\) .*(\(.*\))$/\2 \3/p" "$FQ_OUT/p/$FQ_PHASE.txt")
	sig=$(sed -n "s/^  signals that name it: \([^ ]*\).*/\1/p" "$FQ_OUT/p/$FQ_PHASE.txt" | head -n 1)
	printf "%s\t%s\t%s\t%s\t%s\n" "$FQ_PHASE" "$FQ_TARGET" "$rc" "${first:--}" "${sig:--}" \
		>>"$FQ_OUT/summary.tsv"
	head -n 12 "$FQ_OUT/p/$FQ_PHASE.txt"
	exit $rc'
export FQ_BIN=$bin FQ_OUT=$out
export NCCL_PROFILER_PLUGIN=$bin/libfleetq-nccl-profiler.so

phases_ddp=${PHASES_DDP:-clean1=clean,stall20=stall:20,busy20=busy:20,gpu20=gpu:20,stall10=stall:10,busy10=busy:10,gpu10=gpu:10,clean2=clean,stall20s20=stall:20/s20,busy20s20=busy:20/s20,gpu20s20=gpu:20/s20,clean3=clean/s20,stall10s20=stall:10/s20,busy10s20=busy:10/s20,gpu10s20=gpu:10/s20,stall5=stall:5,gpu5=gpu:5,clean4=clean}
phases_fsdp=${PHASES_FSDP:-fclean1=clean,fstall20=stall:20,fgpu20=gpu:20,fbusy20=busy:20,fclean2=clean,fstall10=stall:10,fgpu10=gpu:10,fbusy10=busy:10,fstall20s20=stall:20/s20,fgpu20s20=gpu:20/s20,fclean3=clean}
printf "phase\tplanted\tfleetq_rc\tnamed (effect)\tsignals\n" >"$out/summary.tsv"

for w in $what; do
	case $w in
	ddp | fsdp)
		start_agents "$w"
		eval "ph=\$phases_$w"
		timeout 420 "$py" -m torch.distributed.run --standalone --nproc_per_node="$n" \
			"$here/train.py" --shape "$w" --cgroup-parent "$cg" --steps "$steps" \
			--phases "$ph" --out "$out/$w-phases.jsonl" >"$out/$w-torch.log" 2>&1
		echo "$w: torchrun exit $?"
		grep "^fq-train" "$out/$w-torch.log" | head -n 2
		sleep 1
		"$bin/fleetq" -w "$HOSTS" --insecure "SELECT (SELECT count(*) FROM nccl_kernels) AS kernels,
			(SELECT count(*) FROM collectives) AS colls,
			(SELECT count(*) FROM comms WHERE nccl_hash IS NOT NULL) AS comms_hashed,
			(SELECT count(*) FROM nccl_kernels WHERE comm_hash IS NOT NULL) AS kernels_joined,
			(SELECT value FROM meta WHERE key = 'ring_drops') AS ring_drops" --format tsv \
			>"$out/$w-counts.tsv" 2>&1
		cat "$out/$w-counts.tsv"
		stop_agents
		;;
	overhead)
		# alternating untraced and traced (agents + plugin) DDP runs of the same phases
		for round in 1 2; do
			for mode in off on; do
				if [ $mode = on ]; then
					start_agents ovh
					export NCCL_PROFILER_PLUGIN=$bin/libfleetq-nccl-profiler.so
				else
					unset NCCL_PROFILER_PLUGIN
				fi
				FQ_ANALYZE= timeout 200 "$py" -m torch.distributed.run --standalone \
					--nproc_per_node="$n" "$here/train.py" --shape ddp \
					--cgroup-parent "$cg" --steps 600 --phases "c1=clean,c2=clean/s20" \
					--out "$out/overhead-$mode-$round.jsonl" \
					>"$out/overhead-$mode-$round.log" 2>&1
				echo "overhead $mode round $round: $(cat "$out/overhead-$mode-$round.jsonl" 2>/dev/null | tr '\n' ' ')"
				[ $mode = on ] && stop_agents
			done
		done
		export NCCL_PROFILER_PLUGIN=$bin/libfleetq-nccl-profiler.so
		;;
	esac
done
tar -C "$out" -czf "$out/phases.tgz" p
rm -rf "$out/p"
(cd "$out" && tar -czf logs.tgz --exclude=phases.tgz --exclude=summary.tsv --exclude=logs.tgz \
	$(ls | grep -v '^\(phases.tgz\|summary.tsv\|logs.tgz\)$') && \
	ls | grep -v '^\(phases.tgz\|summary.tsv\|logs.tgz\)$' | xargs rm -rf)
cat "$out/summary.tsv"
