# SPDX-License-Identifier: MIT
"""Checks a trace written by agentd during bench/gpu/allreduce.py: every rank's
collectives recorded once, contiguous seq, one comm hash per communicator,
rank/nranks from ncclCommInitRank*, the sync waits per rank, and collectives.sync_ns and
gap_ns (trace schema 3) against cuda_calls."""
import json, sqlite3, sys

db, summary = sys.argv[1], json.load(open(sys.argv[2]))
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
q = lambda s, *a: c.execute(s, a).fetchall()
world = summary["world"]
print("meta:", dict(q("SELECT key, value FROM meta WHERE key IN "
                      "('clock_source','probes','probe_cost_ns','ring_drops','trace_events',"
                      "'ts_nudged')")))
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
# schema v3: collectives.sync_ns (the process's top-level sync wait since its previous
# collective on the communicator, counted by agentd as calls return) must equal the same sum
# taken from cuda_calls; gap_ns the enqueue-to-enqueue time. Checked on the world communicator
# of each rank (Send/Recv have their own marks and are left out).
top = """SELECT pid, ts_ns, dur_ns FROM (SELECT pid, ts_ns, dur_ns,
           lag(ends) OVER (PARTITION BY pid, tid ORDER BY ts_ns, dur_ns DESC) AS open_until
           FROM (SELECT pid, tid, ts_ns, dur_ns, max(ts_ns + dur_ns) OVER (PARTITION BY pid, tid
                 ORDER BY ts_ns, dur_ns DESC ROWS UNBOUNDED PRECEDING) AS ends
                 FROM cuda_calls WHERE kind = 'sync'))
         WHERE open_until IS NULL OR ts_ns >= open_until"""
cs = """SELECT pid, comm_hash, seq, ts_ns, sync_ns, gap_ns,
          lag(ts_ns) OVER (PARTITION BY pid, comm_hash ORDER BY seq) AS prev
        FROM collectives WHERE op NOT IN ('Send', 'Recv') AND nranks = ?"""
v = q(f"""WITH t AS ({top}), c AS ({cs}),
          d AS (SELECT c.*, (SELECT coalesce(sum(t.dur_ns), 0) FROM t WHERE t.pid = c.pid
                             AND t.ts_ns >= c.prev AND t.ts_ns < c.ts_ns) AS want FROM c
                WHERE prev IS NOT NULL)
        SELECT count(*), count(sync_ns), sum(sync_ns = want), sum(abs(sync_ns - want)),
               sum(abs(gap_ns - (ts_ns - prev)) <= 10), sum(sync_ns), sum(want),
               sum(gap_ns = ts_ns - prev), max(abs(gap_ns - (ts_ns - prev))) FROM d""",
      world)[0]
n, nset, same, absdiff, gapok, got, want, gapexact, gapmax = v
print(f"sync_ns (v3): {n} collectives after each rank's first, {nset} with sync_ns, "
      f"{same} equal to the cuda_calls sum (total {got} vs {want} ns, |diff| {absdiff} ns), "
      f"gap_ns right on {gapok} (exactly on {gapexact}, largest difference {gapmax} ns; to 10 ns: "
      f"the store moves a ts_ns that another row of the table already has to the next free ns)")
# a sync call that starts before a collective's enqueue and returns after it (another
# thread) is counted where it returns: allow 1% of collectives to differ
sok = n > 0 and nset == n and gapok == n and same >= 0.99 * n
print("sync_ns/gap_ns check:", "ok" if sok else "MISMATCH")
ok &= sok
print("null comm_hash collectives:", q("SELECT count(*) FROM collectives WHERE comm_hash IS NULL")[0][0])
print("CHECK", "PASS" if ok else "FAIL")
