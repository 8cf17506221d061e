#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# The step rule of sql/analysis/stragglers.merge.sql (CTEs per, pbest, period), simulated on
# made-up gaps between a communicator's collectives: how often it finds the true period,
# before round 14 and now (a period found must beat p = 1 by 3 standard errors, else 1).
# One all-reduce a step whose step varies (lognormal), and 8 equal buckets a step whose gaps
# vary. Prints, per case, the jobs (of 300, or 100) whose step came out right (or read as
# one collective a step). usage: bench/period-sim.py
import math
import random


def share(gaps, p):
    pairs = [(gaps[i], gaps[i + p]) for i in range(len(gaps) - p)]
    return (sum(abs(a - b) <= 0.25 * max(a, b) + 20000 for a, b in pairs) / len(pairs),
            len(pairs))


def period(gaps, margin):
    per = {p: share(gaps, p) for p in range(1, 65) if len(gaps) - p >= 2 * p}
    best, k = max(per.values())
    ok = [p for p, (m, n) in per.items()
          if m >= 0.5 and m >= min(0.9, best - max(0.05, 3 * math.sqrt(best * (1 - best) / k)))]
    p = min(ok) if ok else 1
    if margin and p != 1:
        m1, k1 = per[1]
        if per[p][0] < m1 + max(0.05, margin * math.sqrt(m1 * (1 - m1) / k1)):
            p = 1
    return p


print("case\tjobs\tbefore\tnow")
for sigma, steps in ((0.2, 100), (0.35, 100), (0.35, 400)):
    got = [0, 0]
    for seed in range(300):
        r = random.Random(seed)
        gaps = [int(23e6 * r.lognormvariate(0, sigma)) for _ in range(steps)]
        for i, margin in enumerate((0, 3)):
            got[i] += period(gaps, margin) == 1
    print("one a step, sigma %.2f, %d steps: step right\t300\t%d\t%d" % (sigma, steps, *got))
for noise, steps in ((0.15, 8), (0.25, 8), (0.15, 20), (0.25, 20)):
    got = [0, 0]
    for seed in range(100):
        r = random.Random(seed)
        gaps = [int((12e6 if i % 8 == 7 else 1.2e6) * r.lognormvariate(0, noise))
                for i in range(8 * steps)]
        for i, margin in enumerate((0, 3)):
            got[i] += period(gaps, margin) == 1
    print("8 equal buckets, gaps sigma %.2f, %d steps: read as one a step\t100\t%d\t%d" % (
        noise, steps, *got))
