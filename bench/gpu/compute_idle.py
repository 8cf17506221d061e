#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# What each rank's GPU did outside NCCL, from train.py --kernels-dir (the last steps of each
# phase through torch.profiler): over the window every rank's profile covers, the share of
# time no non-NCCL kernel ran on the GPU (compute idle, any stream) and the share some NCCL
# kernel ran. A GPU slower all through its step idles least and its peers' idle more by
# about what the job lost; a rank that is only last to the collectives (short NCCL kernels)
# and idles as much as its peers or more is not the one the step waits on. Loss: the phase's
# steps/s against the mean of the job's clean phases of its sync regime.
# usage: compute_idle.py KERNELS_DIR PHASES.jsonl
import glob, gzip, json, os, statistics, sys

kdir, pj = sys.argv[1:3]
phases = [json.loads(l) for l in open(pj)]


def union(iv):
    tot, cs, ce = 0, None, None
    for s, e in sorted(iv):
        if cs is None or s > ce:
            if cs is not None:
                tot += ce - cs
            cs, ce = s, e
        else:
            ce = max(ce, e)
    return tot + (ce - cs if cs is not None else 0)


def clip(iv, a, b):
    return [(max(s, a), min(e, b)) for s, e in iv if e > a and s < b]


clean = {}
for p in phases:
    if p["kind"] == "clean":
        clean.setdefault(p["sync"], []).append(p["steps_per_s"])
for p in phases:
    ranks = {}
    for f in glob.glob(os.path.join(kdir, p["name"] + ".rank*.json.gz")):
        j = json.load(gzip.open(f, "rt"))
        ranks[int(f.split(".rank")[1].split(".")[0])] = [
            (j["t0_us"] + k[0], j["t0_us"] + k[0] + k[1], k[3]) for k in j["kernels"]]
    if len(ranks) < 2:
        print(p["name"], "no profiles")
        continue
    a = max(min(k[0] for k in v) for v in ranks.values())
    b = min(max(k[1] for k in v) for v in ranks.values())
    idle, nccl = {}, {}
    for r, ks in ranks.items():
        idle[r] = 100 * (1 - union(clip([(s, e) for s, e, n in ks if not n], a, b)) / (b - a))
        nccl[r] = 100 * union(clip([(s, e) for s, e, n in ks if n], a, b)) / (b - a)
    base = statistics.mean(clean.get(p["sync"], [p["steps_per_s"]]))
    least = min(idle, key=idle.get)
    gap = statistics.median(v for r, v in idle.items() if r != least) - idle[least]
    print("%-10s planted %-2s loss %5.1f%%  window %.2f s  least idle: rank %d, peers +%.1f "
          "points | %s" % (p["name"], p["target"] if p["target"] >= 0 else "-",
                           100 * (1 - p["steps_per_s"] / base), (b - a) / 1e6, least, gap,
                           "  ".join("r%d idle %.1f%% nccl %.1f%%" % (r, idle[r], nccl[r])
                                     for r in sorted(idle))))
