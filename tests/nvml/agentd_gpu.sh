#!/bin/bash
# SPDX-License-Identifier: MIT
# agentd with the real tracer and the fake libnvidia-ml (a test double, fakenvml.c): every
# fake GPU sampled at --gpu-interval; a 4-rank stand-in job whose ranks the driver lists on
# GPU (LOCAL_RANK+1)%4 and whose CUDA_VISIBLE_DEVICES is 3,2,1,0, so that the two sources map
# each rank to a different GPU; GPU 2 throttled (SM 1410 MHz, sw thermal slowdown) and named
# by the example query of docs/schema.md; fleetq ping showing what is sampled, and why
# nothing is when the library is missing.
# Env (CMake): FLEETQ AGENTD TRACEGEN MKCERTS STANDIN FAKENVML EXAMPLES.
. "$(dirname "$0")/../e2e/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root to load BPF programs"
[ -r /sys/kernel/btf/vmlinux ] || skip "no kernel BTF at /sys/kernel/btf/vmlinux"
[ -x "$STANDIN/fq-workload" ] || fail "no stand-in workload at '$STANDIN' (target standin)"
[ -f "$FAKENVML" ] || fail "no fake NVML at '$FAKENVML'"
V2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$V2" ] || skip "no cgroup v2 mount"
CG=$V2/fqgpu-$$
mkdir "$CG" 2>/dev/null || skip "cannot create a cgroup under $V2"
mkdir "$CG/node0" || fail "cannot create $CG/node0"
cleanup_cg() {
	cleanup
	rmdir "$CG/node0" "$CG" 2>/dev/null
}
trap cleanup_cg EXIT

export FAKE_NVML_CONFIG=$T/fakenvml.conf
BASE="gpus 4
gpu 2 sm_clock 1410
gpu 2 reasons 0x20
gpu 2 temp 88"
echo "$BASE" >"$FAKE_NVML_CONFIG"
LIBS="lib:$STANDIN/libnccl.so.2,lib:$STANDIN/libcudart.so.13,lib:$STANDIN/libcuda.so.1"
certs ca 127.0.0.1

# agent NAME NVML_LIB: a tracing agent scoped to the job's cgroup; sets PORT and PID
agent() {
	rm -f "$T/$1.port"
	"$AGENTD" --listen 127.0.0.1:0 --db "$T/$1.db" --node "$1" \
		--ca "$T/ca/ca.crt" --cert "$T/ca/127.0.0.1.crt" --key "$T/ca/127.0.0.1.key" \
		--cgroup "$CG/node0" --probes "nccl,sync,sched,proc,$LIBS" --ib-interval 0 \
		--gpu-interval 0.2 --nvml-lib "$2" \
		--port-file "$T/$1.port" --log "$T/$1.log" &
	PID=$!
	PIDS="$PIDS $PID"
	await_port "agentd $1" "$T/$1.port" "$PID" 600
}

agent gpu "$FAKENVML"
APID=$PID
HOST=127.0.0.1:$PORT
fq -w "$HOST" ping --format csv
expect_rc 0 "ping"
python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = "4 GPUs (driver fake-999.1, NVML fake-13.999), every 200 ms"
assert len(rows) == 1 and rows[0]["gpu"] == want, rows
' "$T/out" || fail "ping gpu column: $(cat "$T/out")"

# the job: while it runs, the fake driver lists each rank on GPU (LOCAL_RANK+1)%4
JOB=fqgpu-$$
CUDA_VISIBLE_DEVICES=3,2,1,0 "$STANDIN/fq-workload" --ranks 4 --steps 400 --step-us 5000 \
	--job-id "$JOB" --cgroup-parent "$CG" --cgroups 1 >"$T/workload.log" 2>&1 &
WPID=$!
PIDS="$PIDS $WPID"
i=0
while :; do
	CONF=$BASE
	n=0
	for p in $(pgrep -P "$WPID"); do
		lr=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^LOCAL_RANK=//p')
		[ -n "$lr" ] || continue
		CONF="$CONF
proc $p $(((lr + 1) % 4))"
		n=$((n + 1))
	done
	[ $n = 4 ] && break
	i=$((i + 1))
	[ $i -lt 200 ] || fail "the job's 4 ranks did not start: $(cat "$T/workload.log")"
	sleep 0.02
done
echo "$CONF" >"$FAKE_NVML_CONFIG.tmp" && mv "$FAKE_NVML_CONFIG.tmp" "$FAKE_NVML_CONFIG"
wait $WPID || fail "fq-workload: $(tail -n 3 "$T/workload.log")"
# a few more samples after the job, then every row committed (the store batches)
sleep 1

sed "s/@JOB@/$JOB/" "$EXAMPLES/gpu/gpu-vs-peers.node.sql" >"$T/node.sql"
fq -w "$HOST" --format csv --merge "$(cat "$EXAMPLES/gpu/gpu-vs-peers.merge.sql")" - <"$T/node.sql"
expect_rc 0 "the example query of docs/schema.md"
cat "$T/out"
python3 - "$T/out" <<'EOF' || fail "example query: $(cat "$T/out")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, rows
# the driver's list wins: rank r (LOCAL_RANK r) on GPU (r+1)%4
assert all(int(r["gpu_index"]) == (int(r["rank"]) + 1) % 4 and r["source"] == "nvml"
           for r in rows), rows
slow = rows[0]
assert slow["rank"] == "1" and slow["gpu_index"] == "2", rows
assert float(slow["sm_mhz"]) == 1410 and float(slow["peers_mhz"]) == 1980, slow
assert float(slow["vs_peers_mhz"]) == -570 and float(slow["thermal_pct"]) == 100, slow
assert slow["temp_max_c"] == "88", slow
assert all(float(r["vs_peers_mhz"]) == 0 and float(r["thermal_pct"]) == 0
           for r in rows[1:]), rows
assert all(int(r["samples"]) >= 3 for r in rows), rows
EOF

kill "$APID"
wait "$APID" || fail "agentd did not stop cleanly"
python3 - "$T/gpu.db" <<'EOF' || fail "trace file"
import sqlite3, sys, statistics
db = sqlite3.connect(sys.argv[1])
q = lambda sql: db.execute(sql).fetchall()
# every fake GPU in every sample, at the interval
per = dict(q("SELECT gpu_index, count(*) FROM gpu_samples GROUP BY gpu_index"))
assert sorted(per) == [0, 1, 2, 3] and len(set(per.values())) == 1 and per[0] >= 10, per
ts = [t for (t,) in q("SELECT DISTINCT ts_ns FROM gpu_samples ORDER BY ts_ns")]
gap = statistics.median(b - a for a, b in zip(ts, ts[1:]))
assert 150e6 <= gap <= 300e6, gap
# both sources for each rank: the driver's GPU, and CUDA_VISIBLE_DEVICES[LOCAL_RANK]
m = q("""SELECT p.local_rank, pg.source, pg.gpu_index FROM process_gpus pg
         JOIN processes p ON p.pid = pg.pid AND p.start_ns = pg.start_ns
         ORDER BY p.local_rank, pg.source""")
want = []
for lr in range(4):
    want += [(lr, "local_rank", 3 - lr), (lr, "nvml", (lr + 1) % 4)]
assert m == want, m
# GPM (the fake's 90 % of SMs busy): an interval per GPU per sample after its first, ending
# at that sample, its length the interval's
act = q("""SELECT a.gpu_index, count(*), min(a.sm_active_pm), max(a.sm_active_pm),
                  min(a.dur_ns), max(a.dur_ns) FROM gpu_activity a
           JOIN gpu_samples s USING (ts_ns, gpu_index, gpu_uuid) GROUP BY a.gpu_index""")
assert [(g, n) for g, n, *_ in act] == [(g, per[g] - 1) for g in range(4)], (act, per)
assert all(lo == hi == 900 and 100e6 <= d0 and d1 <= 1e9 for _, _, lo, hi, d0, d1 in act), act
meta = dict(q("SELECT key, value FROM meta WHERE key LIKE 'gpu%'"))
assert meta["gpu_sample_ns"] > 0 and meta["gpu_samples"] == per[0], meta
print("gpu_samples per GPU:", per, "median gap ms:", gap / 1e6,
      "sample cost ns (fake):", meta["gpu_sample_ns"])
EOF

# no library: the agent traces as before, samples nothing, and ping says why
agent nolib /nonexistent/libnvidia-ml.so.1
fq -w "127.0.0.1:$PORT" ping --format csv
expect_rc 0 "ping without NVML"
python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1 and rows[0]["gpu"].startswith(
    "off: cannot load '"'"'/nonexistent/libnvidia-ml.so.1'"'"'"), rows
' "$T/out" || fail "ping without NVML: $(cat "$T/out")"
# seven intervals of 0.2 s, committed (the store's batches are 200 ms)
sleep 1.5
n=$(python3 -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM gpu_samples").fetchone()[0])' \
	"$T/nolib.db")
[ "$n" = 0 ] || fail "$n gpu_samples rows written without NVML"
echo "PASS after ${SECONDS}s"
