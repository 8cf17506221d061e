#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Where a planted rank's main thread spent its time off-CPU, phase by phase of kept GPU runs
# (folders bench/gpu/detect.sh wrote: fq-JOBn.db per rank, JOB-phases.jsonl with each phase's
# kind, target rank and start/end, since round 12): why.node.sql over each phase's rows, its `blocked_ns`
# (the main thread off-CPU while blocked, outside its synchronize and collective calls) and
# `preempted_ns` as shares of the rank's window, the target's against the median of its
# peers' in the job's largest communicator. Then, per kind of fault, the target's excess.
# Does a stall show where a slower GPU does not? (BENCHMARKS.md, round 15.)
# usage: bench/gpu/offcpu.py [--an-run PATH] RUN_DIR...
import argparse, collections, csv, io, json, os, sqlite3, statistics, subprocess, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))
top = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)
import window  # noqa: E402  (the same window cut as rejudge.py's, and the off-CPU rows)
ap = argparse.ArgumentParser()
ap.add_argument("--an-run", default=os.path.join(top, "build/tests/analysis/an-run"))
ap.add_argument("runs", nargs="+")
a = ap.parse_args()
schema = open(os.path.join(top, "sql/schema.sql")).read()
tmp = tempfile.mkdtemp(prefix="offcpu.")
merge = os.path.join(tmp, "rows.sql")
open(merge, "w").write("SELECT * FROM results")
excess = collections.defaultdict(list)


def share(x, k):
    span = float(x["t1_ns"]) - float(x["t0_ns"])
    return 100.0 * float(x[k] or 0) / span if span > 0 else float("nan")


for d in a.runs:
    job = os.path.basename(d.rstrip("/"))
    phases = os.path.join(d, job + "-phases.jsonl")
    dbs = sorted(f for f in (os.path.join(d, "fq-%s%d.db" % (job, i)) for i in range(64))
                 if os.path.exists(f))
    if not os.path.exists(phases) or not dbs:
        continue
    srcs = [sqlite3.connect("file:%s?mode=ro" % f, uri=True) for f in dbs]
    pid_rank = {}
    for s in srcs:
        for pid, rank in s.execute("SELECT pid, rank FROM processes WHERE rank IS NOT NULL"):
            pid_rank[str(pid)] = rank
    for line in open(phases):
        p = json.loads(line)
        if p.get("kind") not in ("stall", "busy", "gpu", "slow") or p.get("target", -1) < 0:
            continue
        if "start_ns" not in p:  # runs before round 12 wrote no phase bounds
            print("%s %s: no start_ns/end_ns in its phases file, left out" % (d, p["name"]))
            continue
        t0, t1 = p["start_ns"], p["end_ns"]
        files = []
        for i, s in enumerate(srcs):
            f = os.path.join(tmp, "n%d.db" % i)
            if os.path.exists(f):
                os.unlink(f)
            window.write(f, schema, window.cut(s, t0, t1, more=("cuda_calls", "offcpu")))
            files.append(f)
        r = subprocess.run([a.an_run, os.path.join(top, "sql/analysis/why.node.sql"), merge,
                            "-p", "since_ns=%d" % t0, "-p", "max_seqs=0"] + files,
                           capture_output=True, text=True)
        rows = [x for x in csv.DictReader(io.StringIO(r.stdout), delimiter="\t")
                if x.get("t1_ns") not in (None, "", "NULL")]
        comms = collections.defaultdict(list)
        for x in rows:
            comms[x["comm_hash"]].append(x)
        if not comms:
            print("%s %s: no rows (%s)" % (job, p["name"], r.stderr.strip()[:120]))
            continue
        ranks = max(comms.values(), key=len)
        tgt = [x for x in ranks if pid_rank.get(x["pid"]) == p["target"]]
        peers = [x for x in ranks if pid_rank.get(x["pid"]) != p["target"]]
        if not tgt or not peers:
            continue
        b = share(tgt[0], "blocked_ns") - statistics.median(share(x, "blocked_ns") for x in peers)
        q = share(tgt[0], "preempted_ns") - statistics.median(share(x, "preempted_ns")
                                                              for x in peers)
        kind = "%s/%s" % (p.get("shape", job), p["kind"])
        excess[kind].append((p["name"], b))
        print("%-28s %-14s %-6s %4.0f%% sync %-3s rank %d: blocked %+5.1f, preempted %+5.1f "
              "points over its peers' median" % (d.rstrip("/")[-28:], p["name"], p["kind"],
                                                 p.get("pct", 0), p.get("sync"), p["target"], b, q))
print()
for kind in sorted(excess):
    v = [b for _, b in excess[kind]]
    print("%-14s %d phases: blocked excess %+.1f to %+.1f (%s)" % (
        kind, len(v), min(v), max(v), " ".join("%s %+.1f" % nb for nb in excess[kind])))
