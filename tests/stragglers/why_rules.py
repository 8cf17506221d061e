#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Each rule of sql/analysis/why.merge.sql on hand-made traces (one rank a node, run by an-run
# behind agentd's read-only guard, as fleetq runs the pair): the rule fires on the node that
# differs past its threshold, and on no other; a GPU idle in most samples (clocked down for
# want of work) and a blocked interval inside a synchronize call are the rank's effect, not a
# cause, as is one in which another of its threads entered a collective (waiting for
# backward()); a rank like its peers gets "none measured"; a rank past the margin among ranks that
# spread as widely (a loaded host) is no outlier; a GPU less busy than its peers' by the margin
# points at its host; a GPU whose SMs (GPM) were busier than its peers' by the margin did more
# GPU work than they did; one as much less busy is not a GPU cause; a process mapped to
# GPUs on its launcher's environment (before its exec), then on its own, uses the latter; a
# GPU that ran its compute kernels less of the window than its peers' (fleetq's CUDA
# injection library) points at its host, more of it at the GPU, each only past the margin,
# and settles the NVML case that is ambiguous otherwise.
# usage: why_rules.py AN_RUN SQL_DIR SCHEMA_SQL WORKDIR
import csv
import os
import sqlite3
import subprocess
import sys

an_run, sql_dir, schema, work = sys.argv[1:5]
os.makedirs(work, exist_ok=True)
T0 = 1_700_000_000_000_000_000
MS = 1_000_000
COMM = "00000000000000aa"

# node k: its pid is 100 + k, its rank k, 10 collectives 100 ms apart (a 901 ms window)
NODES = {
    "clean": {},
    "power": {"sm": 1500, "reasons": 0x4},
    "tcp": {"retrans": 50},
    "ib": {"ib": 7},
    "idle": {"sm": 1000, "reasons": 0x1},
    "blocked": {"blocked_ms": 300},
    # as long, but another thread of its process enters a collective in each interval: the
    # main thread waits for backward(), whose autograd thread issues DDP's collectives
    "backward": {"blocked_ms": 300, "helper": [60, 160, 260]},
    # as long, another thread's collectives outside those intervals: its sleep is its own
    "sleepaside": {"blocked_ms": 300, "helper": [545, 645, 745]},
    # as "blocked", each interval written again inside itself (one thread's never overlap):
    # the second is not counted
    "overlap": {"blocked_ms": 300, "dup": True},
    "insync": {"insync_ms": 300},
    "preempt": {"preempted_ms": 200},
    "host": {"util": 72},
    # as busy as "host", but its peers' collective kernels ran 26 points of the window more
    # than its own (spinning in wait for it, which NVML counts as busy): host or GPU
    "spun": {"util": 72, "coll_ms": 2},
    # GPM: its SMs busy 91 % of the time against 77.5 (a neighbour on its GPU), or 64 %; or
    # 3.5 points above the median, an outlier (z 4.7) but under the 5-point gap
    "work": {"sm_busy": 910},
    "starved": {"sm_busy": 640},
    "near": {"sm_busy": 810},
    # its compute kernels (gpu_busy): its GPU idle 30 % of the window against about 20 %
    # (waiting for its host), or 14 % (slower at its work); 22.5 % is an outlier (z ~5) but
    # under the 3-point gap; no slices at all (no injection library): nothing to compare
    "cpuwait": {"cidle": 30},
    "slowgpu": {"cidle": 14},
    "cnear": {"cidle": 22.5},
    "nolib": {"cidle": None},
    # idle as its peers in its slices, but none in 300 ms of its window (a slice with no
    # kernel has no row): its GPU idle 47 % of it; and one whose CUPTI dropped records in
    # the window, idle 30 % by what came: not measured
    "gapidle": {"gap": (3, 4, 5)},
    "drops": {"cidle": 30, "dropped_from": 5},
    # the NVML case "spun", which NVML alone cannot settle, told by the compute kernels
    "spunhost": {"util": 72, "coll_ms": 2, "cidle": 30},
    "spungpu": {"util": 72, "coll_ms": 2, "cidle": 14},
}


def trace(k, name, o, n=len(NODES)):
    path = os.path.join(work, name + ".db")
    if os.path.exists(path):
        os.unlink(path)
    db = sqlite3.connect(path)
    db.executescript(open(schema).read())
    pid = 100 + k
    db.execute("INSERT INTO processes (pid, start_ns, comm, rank, job_id) VALUES (?,?,?,?,?)",
               (pid, T0 - 1000 * MS, "python", k, "7"))
    if o.get("preexec"):
        # no driver list; its environment read first between its launcher's fork and its
        # exec (the launcher's CUDA_VISIBLE_DEVICES: GPU 1, power-capped), then after it
        # (LOCAL_RANK: GPU 0)
        db.execute("INSERT INTO process_gpus VALUES (?,?,?,?,?,?)",
                   (pid, T0 - 1000 * MS, 1, "GPU-L%d" % k, "cuda_visible_devices", T0 - 900 * MS))
        db.execute("INSERT INTO process_gpus VALUES (?,?,?,?,?,?)",
                   (pid, T0 - 1000 * MS, 0, "GPU-%d" % k, "local_rank", T0 - 800 * MS))
        for i in range(10):
            db.execute("INSERT INTO gpu_samples (ts_ns, gpu_index, gpu_uuid, sm_clock_mhz, "
                       "sm_clock_max_mhz, clock_reasons, util_gpu_pct, temp_c) "
                       "VALUES (?,?,?,?,?,?,?,?)",
                       (T0 + i * 100 * MS + 5 * MS, 1, "GPU-L%d" % k, 1000 + 10 * k, 1980,
                        0x4, 90, 45))
    else:
        db.execute("INSERT INTO process_gpus VALUES (?,?,?,?,?,?)",
                   (pid, T0 - 1000 * MS, 0, "GPU-%d" % k, "nvml", T0))
    for i in range(10):
        db.execute("INSERT INTO collectives (ts_ns, dur_ns, pid, tid, comm_hash, rank, nranks, "
                   "seq, op, count) VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (T0 + i * 100 * MS, 1 * MS, pid, pid, COMM, k, n, i, "AllReduce",
                    1024))
        # GPM's interval ending at that sample (the first sample has none)
        if i:
            db.execute("INSERT INTO gpu_activity (ts_ns, dur_ns, gpu_index, gpu_uuid, "
                       "sm_active_pm) VALUES (?,?,?,?,?)",
                       (T0 + i * 100 * MS + 5 * MS, 100 * MS, 0, "GPU-%d" % k,
                        o.get("sm_busy", 770 + 5 * (k % 3))))
        db.execute("INSERT INTO gpu_samples (ts_ns, gpu_index, gpu_uuid, sm_clock_mhz, "
                   "sm_clock_max_mhz, clock_reasons, util_gpu_pct, temp_c) "
                   "VALUES (?,?,?,?,?,?,?,?)",
                   (T0 + i * 100 * MS + 5 * MS, 0, "GPU-%d" % k, o.get("sm", 1980), 1980,
                    o.get("reasons", 0), o.get("util", 90), 45))
        # the plugin's row of that collective: its kernel's GPU time (25 % of the window)
        db.execute("INSERT INTO nccl_kernels (ts_ns, pid, rank, nranks, nccl_comm, comm_hash, "
                   "op, seq, gpu_start_ns, gpu_dur_ns) VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (T0 + i * 100 * MS + 1000, pid, k, n, "0123456789abcdef", COMM,
                    "AllReduce", i, i * 100 * MS, o.get("coll_ms", 25) * MS))
        # its compute kernels in that 100 ms (CUDA injection library): idle about 20 %
        cidle = o.get("cidle", 20 + 0.3 * (k % 3))
        if cidle is not None and i not in o.get("gap", ()):
            db.execute("INSERT INTO gpu_busy (ts_ns, dur_ns, pid, device, busy_ns, nccl_ns, "
                       "kernels, nccl_kernels, dropped, late_ns) VALUES (?,?,?,?,?,?,?,?,?,?)",
                       (T0 + i * 100 * MS, 100 * MS, pid, 0, int((100 - cidle) * MS),
                        o.get("coll_ms", 25) * MS, 40, 1,
                        10 if i >= o.get("dropped_from", 99) else 0, 0))
        # every rank: a little of both, as on any host
        db.execute("INSERT INTO offcpu VALUES (?,?,?,?,?)",
                   (T0 + i * 100 * MS + 20 * MS, 1 * MS, pid, pid, "preempted"))
        db.execute("INSERT INTO offcpu VALUES (?,?,?,?,?)",
                   (T0 + i * 100 * MS + 40 * MS, 2 * MS, pid, pid, "blocked"))
        # a helper thread, blocked all the time, on every rank: not counted
        db.execute("INSERT INTO offcpu VALUES (?,?,?,?,?)",
                   (T0 + i * 100 * MS + 2 * MS, 95 * MS, pid, pid + 1, "blocked"))
    if "blocked_ms" in o:  # sleeping outside any wait: 3 intervals
        for i in range(3):
            for dup in range(2 if o.get("dup") else 1):
                db.execute("INSERT INTO offcpu VALUES (?,?,?,?,?)",
                           (T0 + i * 100 * MS + 50 * MS + dup * 1000,
                            o["blocked_ms"] // 3 * MS - dup * 2000, pid, pid, "blocked"))
    for i, at in enumerate(o.get("helper", [])):
        db.execute("INSERT INTO collectives (ts_ns, dur_ns, pid, tid, comm_hash, rank, "
                   "nranks, seq, op, count) VALUES (?,?,?,?,?,?,?,?,?,?)",
                   (T0 + at * MS, 1 * MS, pid, pid + 2, COMM, k, n, 100 + i, "AllReduce",
                    1024))
    if "insync_ms" in o:  # the same, inside synchronize calls: waiting on the GPU
        for i in range(3):
            t = T0 + i * 100 * MS + 50 * MS
            db.execute("INSERT INTO cuda_calls (ts_ns, dur_ns, pid, tid, api, kind) "
                       "VALUES (?,?,?,?,?,?)",
                       (t - 1000, o["insync_ms"] // 3 * MS + 1 * MS, pid, pid,
                        "cudaStreamSynchronize", "sync"))
            db.execute("INSERT INTO offcpu VALUES (?,?,?,?,?)",
                       (t, o["insync_ms"] // 3 * MS, pid, pid, "blocked"))
    if "preempted_ms" in o:
        for i in range(4):
            db.execute("INSERT INTO offcpu VALUES (?,?,?,?,?)",
                       (T0 + i * 100 * MS + 60 * MS, o["preempted_ms"] // 4 * MS, pid, pid,
                        "preempted"))
    for i in range(o.get("retrans", 0)):
        db.execute("INSERT INTO tcp_retransmits (ts_ns, pid) VALUES (?, NULL)",
                   (T0 + 300 * MS + i * 1000,))
    # its own sockets' (the owner's agent knows it), most on one flow
    for i in range(o.get("own_retrans", 0)):
        db.execute("INSERT INTO tcp_retransmits VALUES (?,?,?,?,?,?,?)",
                   (T0 + 300 * MS + i * 1000 + 500, pid, "10.0.0.%d" % (k + 1),
                    40000 + (i % 5 == 4), "10.0.0.%d" % (k + 2), 29500, "ESTABLISHED"))
    if o.get("ib"):
        db.execute("INSERT INTO ib_counters VALUES (?,?,?,?,?,?)",
                   (T0 + 500 * MS, "mlx5_0", 1, "symbol_error", o["ib"], o["ib"]))
        # a data counter grows everywhere: not an error
    db.execute("INSERT INTO ib_counters VALUES (?,?,?,?,?,?)",
               (T0 + 500 * MS, "mlx5_0", 1, "port_xmit_data", 10 ** 9, 10 ** 6))
    db.commit()
    db.close()
    return path




def run(paths):
    out = subprocess.run([an_run, os.path.join(sql_dir, "why.node.sql"),
                          os.path.join(sql_dir, "why.merge.sql"), "-g", "-p", "job=7"] + paths,
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit("an-run: " + out.stderr)
    return {int(r["rank"]): r for r in csv.DictReader(out.stdout.splitlines(), delimiter="\t")}


rows = run([trace(k, name, o) for k, name in enumerate(NODES) for o in [NODES[name]]])
by = {name: rows[k] for k, name in enumerate(NODES)}
for name, r in by.items():
    print(name, r["cause"], "|", r["likely_cause"])
# (an-run prints NULL as NULL)
want = {"clean": "NULL", "power": "gpu_clock", "tcp": "tcp", "ib": "ib", "idle": "NULL",
        "blocked": "blocked", "backward": "NULL", "insync": "NULL", "preempt": "preempted", "host": "host",
        "spun": "host", "work": "gpu_work", "starved": "NULL", "near": "NULL",
        "cpuwait": "host", "slowgpu": "gpu_compute", "cnear": "NULL", "nolib": "NULL",
        "gapidle": "host", "drops": "NULL", "sleepaside": "blocked", "overlap": "blocked",
        "spunhost": "host", "spungpu": "gpu_compute"}
bad = {n: by[n]["cause"] for n in want if by[n]["cause"] != want[n]}
assert not bad, bad
assert by["power"]["likely_cause"] == "GPU 0 at 1,500 MHz vs 1,980 median (power cap)", by["power"]
assert by["tcp"]["likely_cause"] == "50 TCP retransmits on its node vs 0 median (network)", by["tcp"]
assert by["ib"]["likely_cause"] == \
    "7 InfiniBand errors on its node (mlx5_0/1 symbol_error) vs 0 median (network)", by["ib"]
assert by["blocked"]["likely_cause"].startswith("blocked 3") and \
    by["blocked"]["likely_cause"].endswith("of the window outside GPU waits vs 2% median "
                                           "(I/O or sleep)"), by["blocked"]
assert by["preempt"]["likely_cause"].startswith("preempted 2"), by["preempt"]
assert by["host"]["likely_cause"] == (
    "GPU 0 busy 72% of the time vs 90% median: its work reached the GPU late from its host "
    "(CPU work, data, or a process slower on its cores: check where it runs; a virtual "
    "machine's vCPU can run slower unseen)"), by["host"]
assert by["spun"]["likely_cause"] == (
    "GPU 0 busy 72% of the time vs 90% median, but its peers' collective kernels ran 26 "
    "points more (waiting on it is busy to NVML): its host held its work back, or its GPU "
    "was slower (the two look alike here)"), by["spun"]
assert (float(by["spun"]["coll_gpu_pct"]), float(by["spun"]["peer_coll_gpu_pct"])) == \
    (2.2, 27.7), by["spun"]
assert by["work"]["likely_cause"] == (
    "GPU 0's SMs busy 91% of the time vs 78% median: more GPU work than its peers, or the "
    "same work slower (a process sharing the GPU, uneven work, a slower GPU)"), by["work"]
assert (float(by["work"]["sm_busy_pct"]), float(by["work"]["peer_sm_busy_pct"])) == \
    (91.0, 77.5), by["work"]
assert float(by["starved"]["sm_busy_pct"]) == 64.0, by["starved"]
assert by["cpuwait"]["likely_cause"] == (
    "GPU 0 ran no compute kernel 30% of the window vs 20% median: its work reached the GPU "
    "late from its host (CPU work, launches, data, or a process slower on its cores: check "
    "where it runs; a virtual machine's vCPU can run slower unseen), not a slower GPU"), \
    by["cpuwait"]
assert by["slowgpu"]["likely_cause"] == (
    "GPU 0 ran no compute kernel 14% of the window vs 20% median: it took longer over its "
    "work than its peers' GPUs, or had more of it (a slower or shared GPU, uneven work), not "
    "its host"), by["slowgpu"]
assert by["spunhost"]["likely_cause"] == by["cpuwait"]["likely_cause"], by["spunhost"]
assert by["spungpu"]["likely_cause"] == by["slowgpu"]["likely_cause"], by["spungpu"]
assert (float(by["cpuwait"]["compute_idle_pct"]),
        round(float(by["cpuwait"]["peer_compute_idle_pct"]))) == (30.0, 20), by["cpuwait"]
assert float(by["cnear"]["compute_idle_pct"]) == 22.5, by["cnear"]
assert by["nolib"]["compute_idle_pct"] == "NULL", by["nolib"]
assert by["drops"]["compute_idle_pct"] == "NULL", by["drops"]
assert round(float(by["gapidle"]["compute_idle_pct"])) == 47, by["gapidle"]
for n in ("clean", "idle", "insync", "starved", "near", "cnear", "nolib", "drops", "backward"):
    assert by[n]["likely_cause"] == "none measured (GPU clocks, off-CPU, network equal to peers)", \
        by[n]
assert float(by["backward"]["blocked_pct"]) < 3, by["backward"]
assert by["overlap"]["blocked_pct"] == by["blocked"]["blocked_pct"], by["overlap"]
# the helper thread's 95 ms of every 100 are not the rank's
assert float(by["clean"]["blocked_pct"]) < 3, by["clean"]
# idle is no clock-event reason of the rule's
assert by["idle"]["gpu_reason"] == "NULL" and float(by["idle"]["sm_mhz"]) == 1000, by["idle"]

# five ranks blocked 0, 3, 7, 10 and 13 % of the window more than a base: the last is 7 points
# above the median (past :offcpu_gap) but the ranks spread as widely (z 1.3): no cause
spread = run([trace(k, "spread%d" % k, {"blocked_ms": 30 * k}, 5) for k in range(5)])
for k, r in spread.items():
    print("spread", k, r["blocked_pct"], r["peer_blocked_pct"], "|", r["likely_cause"])
top = spread[4]
assert float(top["blocked_pct"]) - float(top["peer_blocked_pct"]) >= 5, top
assert all(r["cause"] == "NULL" for r in spread.values()), spread

# five GPUs' SMs busy 70, 75, 80, 85 and 90 % of the time: the last is 10 points above the
# median, past :sm_gap, but they spread as widely (z 1.3): no cause
spread = run([trace(k, "smspread%d" % k, {"sm_busy": 700 + 50 * k}, 5) for k in range(5)])
top = spread[4]
assert (float(top["sm_busy_pct"]), float(top["peer_sm_busy_pct"])) == (90.0, 80.0), top
assert all(r["cause"] == "NULL" for r in spread.values()), spread
# mapped on its launcher's environment before its exec, then on its own: the latter counts
# (the launcher's GPU, power-capped and of the lowest clock, would be picked otherwise)
pre = run([trace(k, "preexec%d" % k, {"preexec": 1}, 3) for k in range(3)])
for k, r in pre.items():
    assert (r["gpu_index"], float(r["sm_mhz"]), r["gpu_reason"]) == ("0", 1980, "NULL"), r
    assert r["cause"] == "NULL", r

# ranks sharing a host, rank 2's link lossy: every agent sees each retransmit (one
# tracepoint for the host), only rank 2's knows the socket (the others record pid NULL), so
# the node's counts are equal and only the owner's stand out. Rank 2 gets its own sockets;
# ranks with nothing of their own get rank 2's link (round a ring its next rank, done last,
# waits least and is the one a verdict names); a rank with a cause of its own keeps it
link = run([trace(k, "link%d" % k, {"own_retrans": 40} if k == 2 else
                  {"retrans": 40, "preempted_ms": 200} if k == 4 else {"retrans": 40}, 6)
            for k in range(6)])
for k, r in link.items():
    print("link", k, r["cause"], r["causes"], "|", r["likely_cause"])
assert all(r["tcp_retrans"] == "40" for r in link.values()), link
assert (link[2]["cause"], link[2]["tcp_own"], link[2]["tcp_flow"]) == \
    ("tcp", "40", "10.0.0.3:40000>10.0.0.4:29500"), link[2]
assert link[2]["likely_cause"] == \
    "40 TCP retransmits of its own sockets vs 0 median (flow 10.0.0.3:40000>10.0.0.4:29500; " \
    "network)", link[2]
for k in (0, 1, 3, 5):
    assert (link[k]["cause"], link[k]["causes"]) == ("tcp_peer", "tcp_peer"), link[k]
    assert link[k]["likely_cause"] == (
        "none of its own; rank 2's sockets (%s) retransmitted 40 TCP segments vs 0 median "
        "(flow 10.0.0.3:40000>10.0.0.4:29500): a lossy link delays the ranks its data reaches "
        "(network; fleetq netcheck)" % link[2]["node"]), link[k]
assert (link[4]["cause"], link[4]["causes"]) == ("preempted", "preempted,tcp_peer"), link[4]
# the same retransmits spread over every rank's sockets: nobody's link stands out
even = run([trace(k, "even%d" % k, {"own_retrans": 40}, 5) for k in range(5)])
assert all(r["cause"] == "NULL" for r in even.values()), even
print("PASS")
