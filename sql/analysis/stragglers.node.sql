-- SPDX-License-Identifier: MIT
-- stragglers.node.sql: what every node sends for `fleetq stragglers`.
-- docs/analysis.md explains the columns, the parameters and how to adapt this.
--
-- Parameters (all optional; unbound = NULL = the default):
--   :since_ns  window start, wall-clock ns on this node (NULL or 0 = all time)
--   :job       processes.job_id to keep (NULL = any process)
--   :comm      comm_hash to keep (NULL = every communicator)
--   :max_seqs  per communicator, keep only the newest N sequence numbers (NULL or <= 0 = all)
--   :now_ns    this node's current time in ns, if the agent supplies it
--              (default: SQLite's clock, to the millisecond)
--
-- Columns, the same for every row:
--   kind      'rank': one per (comm_hash, rank, pid) inside the window and block of 65536
--                     seqs (seq / 65536: a row has a size limit, 16 MiB in agentd): nranks,
--                     seq = its newest seq, n = its collectives, and those collectives
--                     themselves, as JSON (by_seq, gap_list)
--             'seq':  one per (comm_hash, seq) inside the window: op and count (elements),
--                     ts_ns = the earliest enqueue of this node's ranks, n = how many of its
--                     ranks enqueued it
--             'last': the newest collective of one (comm_hash, rank, pid), over ALL time,
--                     so the merge sees a rank that stopped even with no rows in the window
--                     (communicators with a known comm_hash, i.e. seq not NULL), unless it
--                     is older than this agentd (meta 'agent_start_ns') and its process has
--                     called collectives since on a communicator made before that (comms
--                     fn 'init-unseen': agentd restarted while the job ran)
--             'kern': one per (NCCL communicator, op, rank, pid) and block of 65536 seqs of
--                     nccl_kernels inside the window (fleetq's NCCL profiler plugin: GPU-side
--                     times), newest :max_seqs seqs of each: comm_hash (fleetq's, when agentd
--                     joined it), op, seq = newest, n = kernels, nccl_comm, by_seq, gpu_by_seq,
--                     gpu_span_ns
--             'p2p':  one per (comm_hash, rank, pid) with Send/Recv inside the window (from
--                     :since_ns, or from the window's first collective), of the processes
--                     of the 'rank' rows: n = its Send/Recv, ts_ns = the first one's enqueue,
--                     by_seq = [wait, span, p2p_gpu, gpu_span]: ns the process waited on
--                     the GPU over them (as below, summed), ns from its first to its last,
--                     and from fleetq's NCCL plugin (NULL without its Send/Recv rows) the
--                     ns its Send/Recv kernels took on the GPU (waiting for their peers) and
--                     their span on the GPU's clock; gap_list = JSON
--                     array of the peers it sent to or received from (ranks in comm_hash)
--             'busy': one per (pid, device) of the processes of the 'rank' or 'kern' rows
--                     that run no Send/Recv (a pipeline stage's GPU idles waiting on its
--                     neighbours too), with gpu_busy rows from :since_ns on (else from the
--                     first of their collectives kept): a time window, not :max_seqs (the
--                     newest 1000 seqs of an FSDP job are 1.3 s, fewer than the slices' own
--                     delay; fleetq's CUDA injection library): tid = the device, ts_ns = the
--                     first bucket's start, n = slices, count = records CUPTI dropped (the
--                     most any slice says: 0 or NULL: none), by_seq = JSON array of [start,
--                     length, busy_ns] per bucket (ns, node clock): from its first slice's
--                     start to its last one's end, and the time a compute kernel ran in
--                     them, their late_ns too (compute time whose record came after its
--                     slice, counted in a later one). A bucket is a slice, or whole slices
--                     where the process's slices span more than 128 (at most ~256 buckets a
--                     process whatever --since: the row and the merge's cost stay bounded)
--             'now':  one row, ts_ns = this node's current time, n = collectives in the
--                     window whose communicator agentd could not place (seq NULL: made
--                     before agentd started, and no plugin record adopted it), host = meta 'host_id'
--                     (the kernel's boot id: nodes with the same one share a clock), op =
--                     meta 'cpu_work' (which threads cpu_ns counts; NULL: an agent from
--                     before the key, which counted every thread, NCCL's too)
--   comm_hash, rank, nranks, pid, tid, seq, op, count, ts_ns (enqueue, node clock)
--   n            'seq', 'rank' and 'kern' rows: see above
--   by_seq       'rank' rows: JSON object, seq -> [enqueue, wait, cpu], one member per
--                collective of the rank in the window: enqueue time (node clock); ns the
--                process waited on the GPU up to this collective (its synchronize calls since
--                its previous collective on the communicator, cuda_calls kind = 'sync', a
--                driver call nested in a runtime call of the same thread counted once, plus
--                this collective call itself, dur_ns: a blocking implementation waits inside
--                it); cpu_ns, the process's CPU work (on-CPU time of every thread but
--                NCCL's own, outside synchronize and collective calls; 'now' row's op says
--                which threads) since its previous collective (null before trace schema 4,
--                and for a process with a communicator made before agentd started, comms
--                fn 'init-unseen': NCCL's threads started before agentd are not told apart)
--   gap_list     'rank' rows: JSON array of the same collectives' gap_ns (enqueue to
--                enqueue, clock-free), in no promised order
--   nccl_comm    'kern' rows: NCCL's communicator hash (nccl_kernels.nccl_comm)
--   by_seq       'kern' rows: JSON object, NCCL seq (per communicator and op) -> [idle,
--                ahead]: idle, the ns this GPU ran none of the process's collective kernels
--                kept (window, :comm, :max_seqs) before this one, where that is 50 us or
--                more (the compute before a step's first collective, where the step starts
--                with one; shorter idle times open no step the merge looks for, and most
--                kernels of a step follow another), from when every op of the process is
--                kept (kt below); ahead, the ns from the plugin's start of the collective
--                (its enqueue, host clock) to its kernel's start on the GPU, less the least
--                such of the process's kernels kept in the same 30 s of host time (the two
--                clocks' offset, and a launch's own latency, where the GPU had nothing
--                queued): how far the CPU ran ahead of its GPU when it enqueued this one.
--                None for a process that drives several GPUs or runs Send/Recv
--   gpu_by_seq   'kern' rows: JSON object, NCCL seq (per communicator and op) -> gpu_dur_ns,
--                the collective kernel's time on this GPU (earliest channel start to latest
--                channel stop): the rank that arrives last has the shortest
--   gpu_span_ns  'kern' rows: latest kernel end minus earliest kernel start of the row, on
--                this GPU's own clock
--   job_rank     'rank' and 'kern' rows: the process's rank in the job (processes.rank, the
--                RANK of its environment), NULL when unknown: a communicator's own rank is
--                the job's only in its world communicator (pipeline, tensor-parallel and
--                data-parallel groups number their ranks from 0)
--   wait, cpu and gap are agentd's columns of collectives (docs/schema.md): null for the
--   first collective agentd saw of a process on a communicator, and sync and gap for
--   collectives recorded before trace schema version 3.
--   One row per rank, not one per collective: the merge needs every (rank, seq) enqueue
--   time, but 131k rows from 256 nodes cost it more to decode, insert and sort than 2k rows
--   cost it to expand with json_each. Objects keyed by seq, not arrays to be matched by
--   position: looking up element i of a JSON array walks the i before it.
WITH
prm AS (
	SELECT coalesce(:since_ns, 0) AS since_ns, :job AS job, :comm AS comm,
	       CASE WHEN :max_seqs > 0 THEN :max_seqs END AS max_seqs,
	       coalesce(:now_ns, CAST((julianday('now') - 2440587.5) * 86400e9 AS INTEGER)) AS now_ns
),
-- the job's processes, each over its own life, not its pid (pids are reused)
-- include: jobproc.sql
-- include: collkeys.sql
-- include: wincut.sql
-- the window, two ways in, so that neither reads more than it keeps: by time through a range
-- of the table's key ts_ns from :since_ns on; by seq through collectives_comm_seq from the cut on
-- (materialized: the seq and rank rows below both read it)
win AS MATERIALIZED (
	SELECT c.ts_ns, c.pid, c.comm_hash, c.rank, c.nranks, c.seq, c.op, c.count, c.dur_ns,
	       c.sync_ns, c.gap_ns, c.cpu_ns
	FROM prm CROSS JOIN coll c CROSS JOIN cut u
	WHERE prm.since_ns > 0
	  AND c.ts_ns >= prm.since_ns
	  AND u.comm_hash = c.comm_hash AND NOT u.by_seq
	  AND c.seq > coalesce(u.seq, -1)
	UNION ALL
	SELECT c.ts_ns, c.pid, c.comm_hash, c.rank, c.nranks, c.seq, c.op, c.count, c.dur_ns,
	       c.sync_ns, c.gap_ns, c.cpu_ns
	FROM prm CROSS JOIN cut u CROSS JOIN coll c
	WHERE u.by_seq
	  AND c.comm_hash = u.comm_hash
	  AND c.seq > coalesce(u.seq, -1)
	  AND c.ts_ns >= prm.since_ns
),
-- the window's processes that agentd began tracing after their NCCL started (a communicator
-- made before the agent: comms 'init-unseen', since the process's start): no CPU work sent
-- for them, all of it (the merge sums a rank's over the seqs every rank has), as NCCL's
-- threads from before the agent are counted as the job's, and they spin while it waits
mj(pid) AS MATERIALIZED (
	SELECT w.pid FROM (SELECT DISTINCT pid FROM win) w
	WHERE EXISTS (SELECT 1 FROM comms u
		      WHERE u.pid = w.pid AND u.fn = 'init-unseen'
			AND u.ts_ns >= coalesce((SELECT max(p.start_ns) FROM processes p
						 WHERE p.pid = w.pid), 0) - 1000000000)
),
-- GPU-side: the plugin's kernels in the time window (read as a range of the table's key),
-- of the job and communicator asked for, then the newest :max_seqs seqs of each (NCCL
-- communicator, op): NCCL numbers each op apart. Collectives only: a Send/Recv (schema
-- version 5) is numbered per peer, and its ranks do not all take part in it
kw AS MATERIALIZED (
	SELECT k.nccl_comm, k.comm_hash, k.op, k.seq, k.rank, k.nranks, k.pid, k.gpu_start_ns,
	       k.gpu_dur_ns, k.ts_ns
	FROM prm CROSS JOIN nccl_kernels k
	WHERE k.ts_ns >= prm.since_ns AND k.gpu_dur_ns IS NOT NULL
	  AND k.op NOT IN ('Send', 'Recv')
	  AND (prm.comm IS NULL OR k.comm_hash = prm.comm OR k.nccl_comm = prm.comm)
	  AND (prm.job IS NULL OR k.pid IN (SELECT pid FROM jobproc WHERE sole)
	       OR EXISTS (SELECT 1 FROM jobproc j
			  WHERE j.pid = k.pid AND k.ts_ns BETWEEN j.lo AND j.hi))
),
kcut AS (
	SELECT kw.nccl_comm, kw.op, max(kw.seq) - prm.max_seqs AS seq
	FROM kw, prm GROUP BY kw.nccl_comm, kw.op
),
-- the kernels kept, each with the time its GPU ran none of the process's kept collective
-- kernels before it (the compute before a step's first collective: the merge's pace), and
-- how far its CPU had run ahead of its GPU when it enqueued it (the two clocks' offset and
-- a launch's latency taken off as the least of the process's in the same 30 s of host
-- time: the GPU's clock and the host's drift apart by a few ppm, tens of ms in a window of
-- hours. Right where its GPU had nothing queued once in those 30 s, as after any
-- synchronize; else it reads low)
kk AS (
	SELECT k.*,
	       max(0, k.gpu_start_ns - max(k.gpu_start_ns + k.gpu_dur_ns) OVER (
		       PARTITION BY k.pid ORDER BY k.gpu_start_ns
		       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS gpu_gap,
	       k.gpu_start_ns - k.ts_ns - min(k.gpu_start_ns - k.ts_ns) OVER (
		       PARTITION BY k.pid, k.ts_ns / 30000000000) AS ahead
	FROM kw k JOIN kcut u ON u.nccl_comm = k.nccl_comm AND u.op IS k.op
	WHERE k.seq > coalesce(u.seq, -1)
),
-- per process, from when every (communicator, op) it ran is kept: :max_seqs keeps more
-- of a rare op (a broadcast a step) than of a frequent one (the buckets), and before the
-- buckets' cut a kernel's idle time would span the buckets it no longer sees. A process
-- that is several ranks of one communicator drives several GPUs, whose clocks differ; one
-- with Send/Recv (a pipeline stage) idles before its collectives waiting on its neighbours
-- as well as computing: none of their idle times are sent (sends; pipelines have the
-- merge's Send/Recv rules)
kt AS (
	SELECT pid, max(t0) AS t, max(nr) = 1 AND pid NOT IN (SELECT pid FROM pw0) AS sends
	FROM (SELECT pid, min(ts_ns) AS t0, count(DISTINCT rank) AS nr FROM kk
	      GROUP BY pid, nccl_comm, op)
	GROUP BY pid
),
-- Send/Recv of the window's processes, read as a range of the table's key: from :since_ns,
-- else from the window's first collective (the merge weighs who waited on whom across them).
-- A window without a collective (a pipeline of one rank a stage) sends those of the job and
-- communicator asked for: fleetq then says that only send/recv ran, not that nothing did
-- (the start, shared with the plugin's Send/Recv rows below)
p2p_from AS (
	SELECT max(prm.since_ns, coalesce((SELECT min(ts_ns) FROM win), 0)) AS t FROM prm
),
pw0 AS MATERIALIZED (
	SELECT c.comm_hash, c.rank, max(c.nranks) AS nranks, c.pid, count(*) AS n,
	       min(c.ts_ns) AS ts_ns,
	       json_array(sum(coalesce(c.sync_ns, 0) + c.dur_ns), max(c.ts_ns) - min(c.ts_ns)) AS w,
	       json_group_array(DISTINCT c.peer) AS peers
	FROM prm CROSS JOIN p2p_from f CROSS JOIN collectives c
	WHERE c.ts_ns >= f.t
	  AND c.op IN ('Send', 'Recv') AND c.peer IS NOT NULL AND c.comm_hash IS NOT NULL
	  AND (c.pid IN (SELECT pid FROM win)
	       OR (NOT EXISTS (SELECT 1 FROM win)
		   AND (prm.comm IS NULL OR c.comm_hash = prm.comm)
		   AND (prm.job IS NULL OR c.pid IN (SELECT pid FROM jobproc WHERE sole)
			OR EXISTS (SELECT 1 FROM jobproc j
				   WHERE j.pid = c.pid AND c.ts_ns BETWEEN j.lo AND j.hi))))
	GROUP BY c.comm_hash, c.rank, c.pid
),
-- GPU side (fleetq's plugin, trace schema 5): per process and communicator, its Send/Recv
-- kernels' time on the GPU and their span on that GPU's clock, from the same start as pw0;
-- one pass over the window's kernels, however many processes. A Recv waits there for its
-- sender, and a Send for its receiver once its data outgrows NCCL's buffers (4 MiB a
-- channel by default): a pipeline's activations do (4 ranks of real NCCL over sockets, a
-- stage-1 rank's CPU busy 20 % of its step: its stage-0 peer's Sends took 4.64 s of 10.9
-- against its sibling's 2.77, their Recvs 4.13 and 4.20)
pk AS (
	SELECT k.pid, k.comm_hash, sum(k.gpu_dur_ns) AS rg,
	       max(k.gpu_start_ns + k.gpu_dur_ns) - min(k.gpu_start_ns) AS gs
	FROM p2p_from f CROSS JOIN nccl_kernels k
	WHERE k.ts_ns >= f.t
	  AND k.op IN ('Send', 'Recv') AND k.gpu_dur_ns IS NOT NULL AND k.comm_hash IS NOT NULL
	  AND k.pid IN (SELECT pid FROM pw0)
	GROUP BY k.pid, k.comm_hash
),
-- a communicator made by ncclCommSplit has no rank on the CPU side: the plugin's rows of
-- that process and communicator (its Send/Recv too, trace schema 5) carry it
pw AS (
	SELECT p.comm_hash,
	       coalesce(p.rank, (SELECT k.rank FROM nccl_kernels k
				 WHERE k.ts_ns >= p.ts_ns AND k.pid = p.pid
				   AND k.comm_hash = p.comm_hash LIMIT 1)) AS rank,
	       p.nranks, p.pid, p.n, p.ts_ns, p.peers,
	       json_insert(p.w, '$[#]', g.rg, '$[#]', g.gs) AS w
	FROM pw0 p LEFT JOIN pk g ON g.pid = p.pid AND g.comm_hash = p.comm_hash
)
SELECT 'seq' AS kind, comm_hash, NULL AS rank, NULL AS nranks, NULL AS pid, NULL AS tid, seq,
       max(op) AS op, max(count) AS count, min(ts_ns) AS ts_ns, count(*) AS n,
       NULL AS by_seq, NULL AS gap_list, NULL AS nccl_comm, NULL AS gpu_by_seq,
       NULL AS gpu_span_ns, NULL AS host, NULL AS job_rank
FROM win GROUP BY comm_hash, seq
UNION ALL
SELECT 'rank', comm_hash, rank, max(nranks), pid, NULL, max(seq), NULL, NULL, NULL, count(*),
       json_group_object(seq, json_array(ts_ns, coalesce(sync_ns, 0) + dur_ns,
					 iif(pid IN mj, NULL, cpu_ns))),
       json_group_array(gap_ns), NULL, NULL, NULL, NULL,
       (SELECT p.rank FROM processes p WHERE p.pid = win.pid
	  AND p.start_ns <= (SELECT min(win.ts_ns)) + 1000000000 ORDER BY p.start_ns DESC LIMIT 1)
FROM win GROUP BY comm_hash, rank, pid, seq / 65536
UNION ALL
SELECT 'kern', max(k.comm_hash), k.rank, max(k.nranks), k.pid, NULL, max(k.seq), k.op, NULL,
       NULL, count(*),
       json_group_object(k.seq, json_array(k.gpu_gap, k.ahead))
	       FILTER (WHERE t.sends AND k.gpu_gap >= 50000 AND k.ts_ns >= t.t),
       NULL, k.nccl_comm,
       json_group_object(k.seq, k.gpu_dur_ns), max(k.gpu_start_ns + k.gpu_dur_ns) - min(k.gpu_start_ns),
       NULL,
       (SELECT p.rank FROM processes p WHERE p.pid = k.pid
	  AND p.start_ns <= (SELECT min(k.ts_ns)) + 1000000000 ORDER BY p.start_ns DESC LIMIT 1)
FROM kk k JOIN kt t ON t.pid = k.pid
GROUP BY k.nccl_comm, k.op, k.rank, k.pid, k.seq / 65536
UNION ALL
SELECT 'last', comm_hash, rank, nranks, pid, tid, seq, op, NULL, ts_ns, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL
FROM last l
-- (not a rank's newest from before this agentd started where its process has called
-- collectives since on a communicator made before agentd: agentd restarted and renamed the
-- communicator, or cannot place its calls, so the old name's newest is no stop)
WHERE l.ts_ns >= coalesce((SELECT value FROM meta WHERE key = 'agent_start_ns'), 0)
   OR NOT EXISTS (SELECT 1 FROM comms m
		  WHERE m.pid = l.pid AND m.fn = 'init-unseen'
		    AND m.ts_ns >= (SELECT value FROM meta WHERE key = 'agent_start_ns'))
UNION ALL
SELECT 'p2p', comm_hash, rank, nranks, pid, NULL, NULL, NULL, NULL, ts_ns, n, w, peers, NULL,
       NULL, NULL, NULL, NULL
FROM pw
UNION ALL
SELECT 'busy', NULL, NULL, NULL, pid, device, NULL, NULL, max(dropped), min(t0), sum(n),
       json_group_array(json_array(t0, len, busy)), NULL, NULL, NULL, NULL, NULL, NULL
FROM (SELECT pid, device, min(ts_ns) AS t0, max(ts_ns + dur_ns) - min(ts_ns) AS len,
	     sum(busy_ns + coalesce(late_ns, 0)) AS busy, count(*) AS n,
	     max(coalesce(dropped, 0)) AS dropped
      FROM (SELECT b.pid, b.device, b.ts_ns, b.dur_ns, b.busy_ns, b.late_ns, b.dropped,
		   (b.ts_ns - min(b.ts_ns) OVER p) / (200000000 * max(1, (max(b.ts_ns) OVER p
				- min(b.ts_ns) OVER p) / 25600000000)) AS k
	    FROM (SELECT pid, iif(prm.since_ns > 0, prm.since_ns, min(ts_ns)) AS t
		  FROM (SELECT pid, ts_ns FROM win UNION ALL SELECT pid, ts_ns FROM kk), prm
		  WHERE pid NOT IN (SELECT pid FROM pw0)
		  GROUP BY pid) w
	    JOIN gpu_busy b ON b.pid = w.pid AND b.ts_ns >= w.t
	    WINDOW p AS (PARTITION BY b.pid))
      GROUP BY pid, device, k)
GROUP BY pid, device
UNION ALL
SELECT 'now', NULL, NULL, NULL, NULL, NULL, NULL,
       (SELECT value FROM meta WHERE key = 'cpu_work'), NULL, now_ns,
       -- collectives in the window that agentd could not place (seq NULL: a communicator
       -- made before it, and no plugin record to adopt it by), among its newest million
       (SELECT count(*) FROM (SELECT c.seq, c.op, c.pid FROM collectives c
			      WHERE c.ts_ns >= prm.since_ns ORDER BY c.ts_ns DESC LIMIT 1000000) c
	WHERE c.seq IS NULL AND c.op NOT IN ('Send', 'Recv')
	  AND (prm.job IS NULL OR c.pid IN (SELECT pid FROM jobproc))),
       NULL, NULL, NULL, NULL, NULL, (SELECT value FROM meta WHERE key = 'host_id'), NULL
FROM prm
