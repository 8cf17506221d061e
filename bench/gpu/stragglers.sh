#!/bin/bash
# SPDX-License-Identifier: MIT
# On a machine with 2+ NVIDIA GPUs: one agentd per rank (each scoped to that rank's
# cgroup, as if each rank were its own node), a torchrun all-reduce job with one rank
# delayed by a CPU sleep per step, then `fleetq stragglers` over the agents.
# A clean run comes first (expect exit 0), then the delayed one (expect exit 1 naming it).
# usage: bench/gpu/stragglers.sh BINDIR OUTDIR [DELAY_RANK] [DELAY_MS] [STEPS]
set -eu
bin=$1 out=$2 slow=${3:-1} delay=${4:-10} steps=${5:-300}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
n=${NPROC:-$(nvidia-smi -L | wc -l)}
v2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$v2" ] || { echo "no cgroup2 mount" >&2; exit 1; }
cg=$v2/fleetq-gpu-$$
mkdir -p "$out"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for i in $(seq 0 $((n - 1))); do rmdir "$cg/node$i" 2>/dev/null || true; done
	rmdir "$cg" 2>/dev/null || true
}
trap cleanup EXIT
for i in $(seq 0 $((n - 1))); do mkdir -p "$cg/node$i"; done

run() { # name, allreduce.py options...
	local name=$1
	shift
	pids=()
	rm -f /tmp/fq-node*.db* /tmp/fq-node*.port
	for i in $(seq 0 $((n - 1))); do
		"$bin/agentd" --listen 127.0.0.1:0 --insecure --port-file "/tmp/fq-node$i.port" \
			--node "gpu-rank$i" --db "/tmp/fq-node$i.db" --cgroup "$cg/node$i" \
			2>"$out/$name-agent$i.log" &
		pids+=($!)
	done
	hosts=
	for i in $(seq 0 $((n - 1))); do
		for _ in $(seq 100); do [ -s "/tmp/fq-node$i.port" ] && break; sleep 0.1; done
		hosts=$hosts${hosts:+,}127.0.0.1:$(cat "/tmp/fq-node$i.port")
	done
	"$py" -m torch.distributed.run --standalone --nproc_per_node="$n" "$here/allreduce.py" \
		--cgroup-parent "$cg" --steps "$steps" --mm-size 4096 --mm-reps 2 "$@" \
		--out "$out/$name.json" >"$out/$name-torch.log" 2>&1
	sleep 1
	set +e
	"$bin/fleetq" -w "$hosts" --insecure "SELECT rank, count(*) AS collectives,
		(SELECT round(sum(dur_ns)/1e6,1) FROM cuda_calls k WHERE k.pid = c.pid
		  AND k.kind = 'sync') AS sync_ms FROM collectives c GROUP BY rank, pid" \
		--format table 2>&1 | tee "$out/$name-query.txt"
	"$bin/fleetq" -w "$hosts" --insecure stragglers --since 10m --format table 2>&1 |
		tee "$out/$name-stragglers.txt"
	rc=${PIPESTATUS[0]}
	set -e
	echo "$name: fleetq stragglers exit $rc" | tee -a "$out/summary.txt"
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
run clean
run delayed --delay-rank "$slow" --delay-ms "$delay"
cat "$out/summary.txt"
