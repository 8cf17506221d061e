#!/bin/bash
# SPDX-License-Identifier: MIT
# On a machine with NVIDIA GPUs: agentd samples every GPU through NVML for SECONDS while the
# torchrun all-reduce job (allreduce.py, one rank per GPU) runs, then prints the rows per GPU,
# the sampling period achieved, each rank's GPU (process_gpus) and the measured cost of one
# sample of every GPU (meta gpu_sample_ns / gpu_sample_max_ns, timed by agentd around the
# NVML calls of a sample). STEPS 0: no job, the GPUs idle.
# usage: bench/gpu/nvml.sh BINDIR OUTDIR [SECONDS] [INTERVAL_S] [STEPS]
# NVML_LIB=PATH: another libnvidia-ml (agentd --nvml-lib; the default is the driver's).
# FLEETQ=PATH: the fleetq binary (default BINDIR/fleetq, else BINDIR/../fanout/fleetq).
set -eu
bin=$1 out=$2 secs=${3:-30} interval=${4:-1} steps=${5:-3000}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd)
fleetq=${FLEETQ:-$bin/fleetq}
[ -x "$fleetq" ] || fleetq=$bin/../fanout/fleetq # BINDIR = build/agentd of a build tree
py=${PYTHON:-python3}
ngpu=$(nvidia-smi -L | wc -l)
mkdir -p "$out"
db=$out/nvml.db
port=$out/agentd.port
agent_pid= job_pid=
cleanup() {
	[ -n "$job_pid" ] && kill -TERM "$job_pid" 2>/dev/null
	[ -n "$agent_pid" ] && kill -TERM "$agent_pid" 2>/dev/null
	wait 2>/dev/null || true
}
trap cleanup EXIT

rm -f "$db" "$db-wal" "$db-shm" "$port"
echo "gpus (nvidia-smi): $ngpu, seconds: $secs, interval: ${interval}s, job steps: $steps"
"$bin/agentd" --listen 127.0.0.1:0 --insecure --db "$db" --node gpu-node --port-file "$port" \
	--ib-interval 0 --gpu-interval "$interval" ${NVML_LIB:+--nvml-lib "$NVML_LIB"} \
	2>"$out/agentd.log" &
agent_pid=$!
for _ in $(seq 100); do [ -s "$port" ] && break; sleep 0.2; done
[ -s "$port" ] || { cat "$out/agentd.log"; echo "agentd did not start" >&2; exit 1; }
grep -i "gpu" "$out/agentd.log" || true
"$fleetq" --insecure -w "127.0.0.1:$(cat "$port")" ping --format csv | tee "$out/ping.csv" || true

if [ "$steps" -gt 0 ]; then
	$py -m torch.distributed.run --standalone --nproc_per_node="$ngpu" "$here/allreduce.py" \
		--steps "$steps" --out "$out/job.json" >"$out/job.log" 2>&1 &
	job_pid=$!
fi
sleep "$secs"
if [ -n "$job_pid" ]; then
	wait "$job_pid" || echo "the job failed: see $out/job.log" >&2
	job_pid=
fi
kill -TERM "$agent_pid"
wait "$agent_pid" || true
agent_pid=

"$py" - "$db" "$ngpu" <<'PY'
import sqlite3, statistics, sys
db = sqlite3.connect(sys.argv[1])
ngpu = int(sys.argv[2])
q = lambda sql, *a: db.execute(sql, a).fetchall()
meta = dict(q("SELECT key, value FROM meta WHERE key LIKE 'gpu%'"))
print("gpu_status:", meta.get("gpu_status"))
print("%-4s %-42s %-16s %6s %9s %9s %9s %6s %5s %s" % ("gpu", "uuid", "pci", "rows", "sm_min",
      "sm_max", "sm_maxclk", "util%", "temp", "reasons seen"))
for (i,) in q("SELECT DISTINCT gpu_index FROM gpu_samples ORDER BY 1"):
    r = q("""SELECT gpu_uuid, pci_bus_id, count(*), min(sm_clock_mhz), max(sm_clock_mhz),
                    max(sm_clock_max_mhz), round(avg(util_gpu_pct)), max(temp_c),
                    group_concat(DISTINCT printf('0x%x', clock_reasons))
             FROM gpu_samples WHERE gpu_index = ?""", i)[0]
    print("%-4d %-42s %-16s %6d %9s %9s %9s %6s %5s %s" % ((i,) + r))
nulls = q("""SELECT sum(power_mw IS NULL), sum(ecc_uncorrected IS NULL),
                    sum(remap_pending IS NULL), sum(xid_count IS NULL),
                    sum(pcie_replays IS NULL), sum(nvlink_replay IS NULL), count(*)
             FROM gpu_samples""")[0]
print("NULL of %d rows: power %s, ecc %s, remap %s, xid %s, pcie_replays %s, nvlink %s"
      % ((nulls[6],) + nulls[:6]))
ts = [t for (t,) in q("SELECT DISTINCT ts_ns FROM gpu_samples ORDER BY 1")]
if len(ts) > 1:
    print("samples: %d, median period %.1f ms" %
          (len(ts), statistics.median(b - a for a, b in zip(ts, ts[1:])) / 1e6))
n = len(q("SELECT DISTINCT gpu_index FROM gpu_samples"))
print("GPUs sampled: %d of %d (nvidia-smi)" % (n, ngpu))
print("rank -> GPU:")
for r in q("""SELECT p.rank, p.local_rank, p.pid, pg.source, pg.gpu_index
              FROM process_gpus pg JOIN processes p ON p.pid = pg.pid AND p.start_ns = pg.start_ns
              ORDER BY p.rank, pg.source"""):
    print("  rank %s (local %s, pid %s): %s -> GPU %s" % r)
print("cost of one sample of every GPU: mean %s ns, min %s ns, max %s ns over %s samples "
      "(%s NVML calls failed); one GPU's NVLink counters: %s ns"
      % (meta.get("gpu_sample_ns"), meta.get("gpu_sample_min_ns"), meta.get("gpu_sample_max_ns"),
         meta.get("gpu_samples"), meta.get("gpu_failed_calls"), meta.get("gpu_nvlink_read_ns")))
if n != ngpu:
    sys.exit("not every GPU was sampled")
PY
