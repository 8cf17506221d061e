# SPDX-License-Identifier: MIT
"""Checks a trace written by agentd during bench/gpu/allreduce.py: every rank's
collectives recorded once, contiguous seq, one comm hash per communicator,
rank/nranks from ncclCommInitRank*, and the sync waits per rank."""
import json, sqlite3, sys

db, summary = sys.argv[1], json.load(open(sys.argv[2]))
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
q = lambda s, *a: c.execute(s, a).fetchall()
world = summary["world"]
print("meta:", dict(q("SELECT key, value FROM meta WHERE key IN "
                      "('clock_source','probes','probe_cost_ns','ring_drops','trace_events')")))
print("comms:", q("SELECT fn, comm_hash, rank, nranks, count(*) FROM comms GROUP BY 1,2,3,4 ORDER BY 2,3"))
ok = True
# collectives and p2p (Send/Recv) are numbered apart: each must count from 0 without gaps
rows = q("""SELECT comm_hash, rank, nranks, count(*), min(seq), max(seq), count(DISTINCT seq),
            sum(op='AllReduce') FROM collectives WHERE op NOT IN ('Send', 'Recv')
            GROUP BY comm_hash, rank ORDER BY comm_hash, rank""")
p2p = q("""SELECT comm_hash, rank, count(*), min(seq), max(seq), count(DISTINCT seq)
           FROM collectives WHERE op IN ('Send', 'Recv') GROUP BY comm_hash, rank""")
for h, rank, n, lo, hi, nd in p2p:
    contiguous = lo == 0 and hi == n - 1 and nd == n
    print(f"comm {h} rank {rank}: {n} Send/Recv, seq {lo}..{hi}",
          "contiguous" if contiguous else "NOT CONTIGUOUS")
    ok &= contiguous
for h, rank, nranks, n, lo, hi, nd, nar in rows:
    contiguous = lo == 0 and hi == n - 1 and nd == n
    print(f"comm {h} rank {rank}/{nranks}: {n} collectives ({nar} AllReduce), seq {lo}..{hi}",
          "contiguous" if contiguous else "NOT CONTIGUOUS")
    ok &= contiguous
main = [r for r in rows if r[2] == world]
ranks = sorted(r[1] for r in main)
counts = {r[3] for r in main}
ok &= ranks == list(range(world)) and len(counts) == 1
need = summary["warmup"] + summary["steps"]
ok &= all(r[7] >= need for r in main)
print(f"world communicator: ranks {ranks}, per-rank counts {sorted(counts)}, "
      f"AllReduce >= warmup+steps ({need}): {all(r[7] >= need for r in main)}")
print("sync wait per rank (ms):", q("""SELECT p.rank, c.api, count(*), round(sum(c.dur_ns)/1e6,1)
      FROM cuda_calls c JOIN processes p USING (pid) WHERE c.kind='sync'
      GROUP BY p.rank, c.api ORDER BY p.rank, c.api"""))
if "p2p_groups_per_rank" in summary and any(summary["p2p_groups_per_rank"]):
    # batch_isend_irecv: one ncclGroupStart/End holding an ncclSend and an ncclRecv
    g = q("""SELECT p.rank, count(*), sum(g.ncalls >= 2), max(g.ncalls),
             round(avg(g.end_dur_ns) / 1e3, 1) FROM nccl_groups g JOIN processes p USING (pid)
             WHERE p.rank IS NOT NULL GROUP BY p.rank ORDER BY p.rank""")
    print("nccl_groups per rank (rank, groups, groups with >= 2 calls, max ncalls, mean GroupEnd us):", g)
    want = summary["p2p_groups_per_rank"]
    got = {r[0]: r[2] for r in g}
    gok = all(got.get(r, 0) >= want[r] for r in range(world))
    print(f"p2p groups per rank wanted {want}: {'ok' if gok else 'MISSING'}")
    ok &= gok
print("null comm_hash collectives:", q("SELECT count(*) FROM collectives WHERE comm_hash IS NULL")[0][0])
print("CHECK", "PASS" if ok else "FAIL")
