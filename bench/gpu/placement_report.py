#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# What bench/gpu/placement.py saw, phase by phase (detect.sh's OUT/SHAPE-phases.jsonl): for
# every thread of every rank on a CPU 2 % of the phase or more, its share of a CPU, its
# run-queue wait, its switches and migrations a second, the CPUs it ran on, and the steal
# and interrupt time of the CPU it ran on most; and the job's own pacer (the rank with the
# least wait in its synchronize calls, train.py's sync_ms_per_step).
# usage: placement_report.py PLACEMENT.tsv.gz PHASES.jsonl
import collections, gzip, json, sys

threads = collections.defaultdict(list)  # tid: [(t, rank, pid, comm, cpu, run, wait, slices)]
cpus = collections.defaultdict(list)  # cpu: [(t, busy, steal, irq)] (ticks)
for line in gzip.open(sys.argv[1], "rt"):
    if line.startswith(("#", "t_ns")):
        continue
    f = line.rstrip("\n").split("\t")
    if len(f) < 10:
        continue
    if f[1] == "cpu":
        cpus[int(f[3])].append((int(f[0]), int(f[6]), int(f[7]), int(f[8])))
    else:
        threads[int(f[3])].append((int(f[0]), int(f[1]), int(f[2]), f[4], int(f[5]),
                                   int(f[7]), int(f[8]), int(f[9])))


def cpu_line(c, s, e):
    rs = [r for r in cpus.get(c, []) if s <= r[0] <= e]
    if len(rs) < 2:
        return ""
    ticks = (rs[-1][0] - rs[0][0]) / 1e7  # USER_HZ 100
    return "; cpu%d steal %.2f%% irq %.2f%%" % (c, 100 * (rs[-1][2] - rs[0][2]) / ticks,
                                                100 * (rs[-1][3] - rs[0][3]) / ticks)


for line in open(sys.argv[2]):
    p = json.loads(line)
    s, e, w = p["start_ns"], p["end_ns"], p["sync_ms_per_step"]
    print("%s (%s, planted rank %s): %.2f steps/s, sync ms a step %s, pacer rank %d" % (
        p["name"], p["kind"], p["target"], p["steps_per_s"], w, w.index(min(w))))
    for tid, rs in sorted(threads.items(), key=lambda kv: (kv[1][0][1], kv[0])):
        rs = [r for r in rs if s <= r[0] <= e]
        if len(rs) < 2:
            continue
        d = rs[-1][0] - rs[0][0]
        run = (rs[-1][5] - rs[0][5]) / d
        if run < 0.02:
            continue
        moves = sum(1 for a, b in zip(rs, rs[1:]) if a[4] != b[4])
        on = collections.Counter(r[4] for r in rs)
        print("  rank %d %-16s %6.1f%% of a CPU, run-queue %.2f%%, %4.0f switches/s, "
              "%.1f migrations/s, cpus %s%s" % (
                  rs[0][1], rs[0][3] + ("*" if tid == rs[0][2] else ""), 100 * run,
                  100 * (rs[-1][6] - rs[0][6]) / d, (rs[-1][7] - rs[0][7]) / d * 1e9,
                  moves / d * 1e9, ",".join(str(c) for c, _ in on.most_common(3)),
                  cpu_line(on.most_common(1)[0][0], s, e)))
