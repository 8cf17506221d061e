#!/bin/bash
# SPDX-License-Identifier: MIT
# On a machine with 2+ NVIDIA GPUs: run the torchrun all-reduce loop without and
# with agentd tracing (alternating, same run), check the trace holds every
# collective of every rank, and print the throughput ratio.
# usage: bench/gpu/trace-overhead.sh BINDIR OUTDIR [STEPS] [ROUNDS] [allreduce.py options...]
set -eu
bin=$1 out=$2 steps=${3:-2000} rounds=${4:-2}
shift 4 || shift $#
extra=("$@")
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
ngpu=$(nvidia-smi -L | wc -l)
nproc=${NPROC:-$ngpu}
torchrun=(${py} -m torch.distributed.run --standalone --nproc_per_node="$nproc")
mkdir -p "$out"
db=/tmp/fq-gpu-trace.db
agent_pid=
cleanup() { [ -n "$agent_pid" ] && kill -TERM "$agent_pid" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

echo "gpus: $ngpu, ranks: $nproc, steps: $steps, rounds: $rounds"
for r in $(seq 1 "$rounds"); do
	"${torchrun[@]}" "$here/allreduce.py" --steps "$steps" "${extra[@]}" --out "$out/base$r.json" >"$out/base$r.log" 2>&1
	rm -f "$db" "$db-wal" "$db-shm"
	"$bin/agentd" --listen 127.0.0.1:0 --insecure --db "$db" --node gpu-node \
		--port-file /tmp/fq-port --ib-interval 5 2>"$out/agentd$r.log" &
	agent_pid=$!
	for _ in $(seq 50); do [ -s /tmp/fq-port ] && break; sleep 0.2; done
	"${torchrun[@]}" "$here/allreduce.py" --steps "$steps" "${extra[@]}" --out "$out/traced$r.json" >"$out/traced$r.log" 2>&1
	sleep 2
	kill -TERM "$agent_pid"; wait "$agent_pid" || true; agent_pid=
	cp "$db" "$out/trace$r.db" 2>/dev/null || true
	"$py" "$here/check-trace.py" "$db" "$out/traced$r.json" | tee "$out/check$r.txt"
done
"$py" - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
b = [json.load(open(f"{out}/base{r}.json"))["steps_per_s"] for r in range(1, rounds + 1)]
t = [json.load(open(f"{out}/traced{r}.json"))["steps_per_s"] for r in range(1, rounds + 1)]
print("untraced steps/s:", ["%.1f" % x for x in b])
print("traced   steps/s:", ["%.1f" % x for x in t])
print("traced/untraced: %.4f (mean of rounds)" % (sum(t) / sum(b)))
PY
