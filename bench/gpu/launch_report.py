#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# How long each rank's kernel launches took, phase by phase (an experiment beside fleetq, not
# part of it): from the agents' trace files of a detect.sh run with the launch probe
# (AGENTD_ARGS="--probes nccl,sync,malloc,sched,tcp,proc,launch"), for every rank and each of
# its two step threads (main: the training loop's; other: the thread that launched most
# besides it, the autograd thread under DDP) the launches in the phase, their median and 90th
# percentile (us) and their share of the phase; and the job's own pacer (the rank with the
# least wait in its synchronize calls, train.py's sync_ms_per_step), with its median launch
# against its peers' median. Every rank runs the same launches with the same code, so a rank
# whose launches take longer ran the same CPU work slower.
# usage: launch_report.py PHASES.jsonl TRACE.db... (one trace a rank, in rank order)
import json, sqlite3, sys


def pct(xs, q):
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0


phases = [json.loads(line) for line in open(sys.argv[1])]
dbs = [sqlite3.connect("file:%s?mode=ro" % p, uri=True) for p in sys.argv[2:]]
slowest = total = 0
for p in phases:
    s, e, w = p["start_ns"], p["end_ns"], p["sync_ms_per_step"]
    pacer = w.index(min(w))
    print("%s (%s, planted rank %s, sync every %s): %.2f steps/s, sync ms a step %s, pacer "
          "rank %d" % (p["name"], p["kind"], p["target"], p["sync"], p["steps_per_s"], w, pacer))
    med = {}
    for rank, db in enumerate(dbs):
        rows = db.execute("SELECT pid, tid, dur_ns FROM cuda_calls WHERE kind = 'launch' "
                          "AND ts_ns BETWEEN ? AND ?", (s, e)).fetchall()
        by = {}
        for pid, tid, d in rows:
            by.setdefault((pid, tid), []).append(d)
        if not by:
            print("  rank %d: no launches (was the launch probe on?)" % rank)
            continue
        pid = max(by, key=lambda k: len(by[k]))[0]
        main = by.get((pid, pid), [])
        others = [k for k in by if k[0] == pid and k[1] != pid]
        other = by[max(others, key=lambda k: len(by[k]))] if others else []
        for name, xs in (("main", main), ("other", other)):
            xs.sort()
            med[(rank, name)] = pct(xs, 0.5)
            print("  rank %d %-5s %7d launches, median %5.1f us, p90 %5.1f us, %4.1f%% of the "
                  "phase%s" % (rank, name, len(xs), pct(xs, 0.5) / 1e3, pct(xs, 0.9) / 1e3,
                               100.0 * sum(xs) / (e - s), " (pacer)" if rank == pacer else ""))
    for name in ("main", "other"):
        peers = sorted(v for (r, n), v in med.items() if n == name and r != pacer and v)
        mine = med.get((pacer, name))
        if peers and mine:
            m = peers[len(peers) // 2] if len(peers) % 2 else (
                peers[len(peers) // 2 - 1] + peers[len(peers) // 2]) / 2
            top = mine > max(peers)
            print("  pacer's %-5s launches: %+.1f%% against its peers' median%s" % (
                name, 100.0 * (mine / m - 1), ", the slowest of all" if top else ""))
            if name == "other" and p["kind"] == "clean":
                slowest += top
                total += 1
print("clean phases whose pacer's other thread launched slowest of all: %d of %d" % (slowest, total))
