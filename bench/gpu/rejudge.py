#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Judges kept GPU runs again with the analysis SQL of this tree, offline: for every phase of
# every run (a folder bench/gpu/detect.sh wrote for one job: fq-JOBn.db per rank and
# JOB-phases.jsonl), the verdict over the whole phase and over sliding windows, next to what
# fleetq said live (summary.tsv) and the job's own throughput loss (against the mean of the
# run's clean phases of the same sync regime). Then a tally by class: clean, and faults by
# the loss they caused. A phase is the span of rank 0's collectives between two gaps of
# --gap or more (detect.sh pauses the job while fleetq answers); the first also holds the
# job's warm-up. Where the job wrote each phase's start and end (train.py does since round
# 12), those; where it also wrote each rank's wait in its own synchronize, the rank that
# waited least (the job's pacer, and how far ahead of the others' median, % of the step) is
# shown, and a clean phase's name is checked against it.
# usage: bench/gpu/rejudge.py [--an-run PATH] [--sql DIR] [--max-seqs N] [--win S --step S]
#                             RUN_DIR...
#   --max-seqs: 0 (every seq, as detect.sh asks live) unless given; windows use 1000 (the
#   CLI's default) unless given. --win 0: whole phases only. -m KEY=V: a merge parameter, as
#   an-run takes it (e.g. -m min_effect=0.045: what --min-effect 4.5 would have said).
#   --gap S: the pause between phases, at least (0.2; a job whose steps are that far apart,
#   e.g. gradient accumulation, needs more: 0.5)
import argparse, collections, glob, json, os, shutil, sqlite3, statistics, subprocess, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))
top = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)
import window  # noqa: E402  (the same window cut as the test cases')
ap = argparse.ArgumentParser()
ap.add_argument("--an-run", default=os.path.join(top, "build/tests/analysis/an-run"))
ap.add_argument("--sql", default=os.path.join(top, "sql/analysis"))
ap.add_argument("--max-seqs", type=int, default=None)
ap.add_argument("--win", type=float, default=3.0)
ap.add_argument("--step", type=float, default=1.0)
ap.add_argument("--gap", type=float, default=0.2)
ap.add_argument("-m", dest="merge", action="append", default=[], metavar="KEY=V")
ap.add_argument("runs", nargs="+")
a = ap.parse_args()
schema = open(os.path.join(top, "sql/schema.sql")).read()
tmp = tempfile.mkdtemp(prefix="rejudge.")


def phases(run, job):
    names = [json.loads(l) for l in open(os.path.join(run, job + "-phases.jsonl"))]
    if all("start_ns" in n for n in names):
        # (the job wrote each phase's wall-clock span: no gaps to find)
        return [(n, (n["start_ns"], n["end_ns"])) for n in names]
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(run, "fq-%s0.db" % job), uri=True)
    ts = [r[0] for r in db.execute("SELECT ts_ns FROM collectives ORDER BY ts_ns")]
    spans, s, p = [], ts[0], ts[0]
    for t in ts[1:]:
        if t - p >= a.gap * 1e9:
            spans.append((s, p))
            s = t
        p = t
    spans.append((s, p))
    spans = [x for x in spans if x[1] - x[0] > 1e9][-len(names):]
    return list(zip(names, spans))


def judge(srcs, t0, t1, max_seqs):
    files = []
    for i, s in enumerate(srcs):
        path = os.path.join(tmp, "n%d.db" % i)
        if os.path.exists(path):
            os.unlink(path)
        window.write(path, schema, window.cut(s, t0, t1))
        files.append(path)
    r = subprocess.run([a.an_run, os.path.join(a.sql, "stragglers.node.sql"),
                        os.path.join(a.sql, "stragglers.merge.sql"), "-p", "since_ns=%d" % t0,
                        "-p", "now_ns=%d" % t1, "-p", "max_seqs=%d" % max_seqs]
                       + [x for m in a.merge for x in ("-m", m)] + files,
                       capture_output=True, text=True)
    if r.returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit("rejudge: an-run: %s" % r.stderr.strip())
    lines = r.stdout.splitlines()
    if len(lines) < 2:
        return None, ""
    head = lines[0].split("\t")
    x = dict(zip(head, lines[1].split("\t")))
    who = x["job_rank"] if x.get("job_rank") not in (None, "", "NULL") else x["rank"]
    return int(who), x["effect_pct"]


tally = collections.defaultdict(lambda: [0] * 7)
paced = [0, 0]  # clean phases named whose job recorded its pacer; of them, named the pacer
for run in a.runs:
    run = run.rstrip("/")
    dbs = sorted(glob.glob(os.path.join(run, "fq-*[0-9].db")))
    job = os.path.basename(dbs[0])[3:-4].rstrip("0123456789")
    srcs = [sqlite3.connect("file:%s?mode=ro" % p, uri=True)
            for p in sorted(glob.glob(os.path.join(run, "fq-%s[0-9]*.db" % job)))]
    live = {}
    if os.path.exists(os.path.join(run, "summary.tsv")):
        for l in open(os.path.join(run, "summary.tsv")):
            c = l.rstrip("\n").split("\t")
            if len(c) >= 4 and c[0] != "phase":
                live[c[0]] = None if c[2] == "0" else (c[3].split()[0] if c[3] != "-" else "?")
    ph = phases(run, job)
    for p, (t0, t1) in ph:
        clean = [q["steps_per_s"] for q, _ in ph if q["kind"] == "clean" and q["sync"] == p["sync"]]
        loss = None if p["kind"] == "clean" or not clean else \
            100 * (1 - p["steps_per_s"] / statistics.mean(clean))
        target = p["target"]
        if target < 0:
            k = "clean"
        elif loss is None:
            k = "fault, no clean phase to measure its loss"
        else:
            k = "fault, loss >= 10 %" if loss >= 10 else "fault, loss 5-10 %" if loss >= 5 \
                else "fault, loss < 5 % (nobody or its rank)"
        # right: nobody for a clean phase, the planted rank first for a fault (under 5 %,
        # nobody is right too)
        def right(who):
            return who is None if target < 0 else (who == target or (
                who is None and loss is not None and loss < 5))
        w = judge(srcs, t0, t1, a.max_seqs if a.max_seqs is not None else 0)
        wins = []
        if a.win > 0:
            t, W = t0, int(a.win * 1e9)
            while t + W <= t1 + 1:
                wins.append(judge(srcs, t, t + W, a.max_seqs if a.max_seqs is not None else 1000))
                t += int(a.step * 1e9)
        lv = live.get(p["name"], "n/a")
        c = tally[k]
        c[0] += 1
        if lv != "n/a":
            c[1] += right(None if lv is None else int(lv) if lv.isdigit() else -2)
            c[2] += 1
        c[3] += right(w[0])
        c[4] += 1
        c[5] += sum(right(x[0]) for x in wins)
        c[6] += len(wins)
        show = lambda x: "-" if x[0] is None else "%d:%s" % x
        # the job's own pacer (train.py since round 12: each rank's wait in its synchronize;
        # the least waits least) and whether a clean phase's name is it
        pace = ""
        waits = p.get("sync_ms_per_step")
        if waits and len(waits) > 2:
            i = min(range(len(waits)), key=lambda r: waits[r])
            o = sorted(waits[:i] + waits[i + 1:])
            pace = "  pacer %d (%.1f %%)" % (i, 100 * (o[len(o) // 2] - waits[i]) * p["steps_per_s"] / 1e3)
            if target < 0 and w[0] is not None:
                paced[0] += 1
                paced[1] += w[0] == i
        print("%s %-12s planted %2d  loss %5s  live %-4s  whole %-8s  windows %d/%d  %s%s" % (
            os.path.basename(os.path.dirname(run)) + "/" + job, p["name"], target,
            "-" if loss is None else "%.1f" % loss, "-" if lv is None else lv, show(w),
            sum(right(x[0]) for x in wins), len(wins), " ".join(show(x) for x in wins), pace))
print()
for k, c in sorted(tally.items()):
    print("%-42s phases %3d  live right %3d/%3d  whole right %3d/%3d  windows right %4d/%4d"
          % (k, c[0], c[1], c[2], c[3], c[4], c[5], c[6]))
if paced[0]:
    print("clean phases named (whole) where the job recorded who paced it: %d, the pacer in %d"
          % tuple(paced))
shutil.rmtree(tmp, ignore_errors=True)
