-- SPDX-License-Identifier: MIT
-- timeline.node.sql: what every node sends for `fleetq timeline`: the events of its ranks in
-- the window, one row each, on this node's clock (the merge corrects it).
-- The window is the one of stragglers.node.sql (the same parameters, the same bounded way
-- in): each communicator's collectives newer than :since_ns among its newest :max_seqs
-- seqs; the other events of a process are those inside the span of its collectives there
-- (its first enqueue to its last collective's return), so --max-seqs bounds them too.
--
-- Parameters (all optional; unbound = NULL = the default):
--   :since_ns, :job, :comm, :max_seqs, :now_ns   as in stragglers.node.sql
--
-- Columns, the same for every row:
--   kind     'coll': a collective call (enqueue to return, collectives.dur_ns)
--            'sync': a synchronize call of the process (cuda_calls kind 'sync')
--            'off':  a thread of the process off the CPU (offcpu; detail = reason)
--            'retx': a TCP retransmit of the process, or of no process (pid NULL: host-wide)
--                    (detail = 'saddr:sport>daddr:dport state')
--            'kern': a collective kernel on the GPU (nccl_kernels, fleetq's NCCL plugin):
--                    ts_ns = its start moved onto this node's clock, gpu_ns = the start on
--                    the GPU's own clock (see below)
--            'now':  one row, ts_ns = this node's current time, host = meta 'host_id'
--   comm_hash (kern: fleetq's, else 'nccl:' || NCCL's), rank, nranks, pid, tid, seq, op,
--   ts_ns, dur_ns, gpu_ns, detail, host
--
-- A GPU's clock (globaltimer) is not the host's. Per process, the kernel that started
-- soonest after its enqueue is taken to have started at its enqueue: every kernel moves by
-- that one difference, so the kernels keep their order and lengths, and show at most the
-- launch latency early.
WITH
prm AS (
	SELECT coalesce(:since_ns, 0) AS since_ns, :job AS job, :comm AS comm,
	       CASE WHEN :max_seqs > 0 THEN :max_seqs END AS max_seqs,
	       coalesce(:now_ns, CAST((julianday('now') - 2440587.5) * 86400e9 AS INTEGER)) AS now_ns
),
-- the job's processes, each over its own life, not its pid (pids are reused)
-- include: jobproc.sql
-- collectives of the job and communicator asked for, over all time
-- (collectives only: Send/Recv number their own seqs, apart from the collectives of the
-- same communicator, so they never line up across ranks by seq; every 'last', newest
-- and cut probe below skips them too)
coll AS NOT MATERIALIZED (
	SELECT c.* FROM collectives c, prm
	WHERE c.op NOT IN ('Send', 'Recv')
	  AND (prm.comm IS NULL OR c.comm_hash = prm.comm)
	  AND (prm.job IS NULL OR c.pid IN (SELECT pid FROM jobproc WHERE sole)
	       OR EXISTS (SELECT 1 FROM jobproc j
			  WHERE j.pid = c.pid AND c.ts_ns BETWEEN j.lo AND j.hi))
),
-- one collective (its rowid) of every distinct (pid, comm_hash, rank), found by skipping
-- through the partial index collectives_key (pid, comm_hash, rank, seq) WHERE seq % 64 = 0
-- one key at a time: an index probe per key instead of a scan of every collective. Each
-- step takes the next rank of the same (pid, comm_hash), else the next comm_hash of the
-- pid, else the next pid. Every communicator whose init agentd saw has seq 0 (and a known
-- comm_hash); the coalesce() steps past a NULL rank (ranks are >= 0).
keys(id) AS (
	SELECT (SELECT rowid FROM collectives WHERE seq % 64 = 0
		ORDER BY pid, comm_hash, rank LIMIT 1)
	UNION ALL
	SELECT coalesce(
		(SELECT c.rowid FROM collectives c
		 WHERE c.seq % 64 = 0 AND c.pid = k.pid AND c.comm_hash = k.comm_hash
		   AND c.rank > coalesce(k.rank, -1)
		 ORDER BY c.rank LIMIT 1),
		(SELECT c.rowid FROM collectives c
		 WHERE c.seq % 64 = 0 AND c.pid = k.pid AND c.comm_hash > k.comm_hash
		 ORDER BY c.comm_hash, c.rank LIMIT 1),
		(SELECT c.rowid FROM collectives c
		 WHERE c.seq % 64 = 0 AND c.pid > k.pid
		 ORDER BY c.pid, c.comm_hash, c.rank LIMIT 1))
	FROM keys JOIN collectives k ON k.rowid = keys.id
),
-- per key, its newest multiple of 64 (the index again), then its newest seq among the
-- next 64 through collectives_comm_seq
mark AS (
	SELECT k.pid, k.comm_hash, k.rank,
	       (SELECT x.seq FROM collectives x
		WHERE x.seq % 64 = 0 AND x.pid = k.pid AND x.comm_hash = k.comm_hash
		  AND x.rank IS k.rank AND x.op NOT IN ('Send', 'Recv')
		ORDER BY x.seq DESC LIMIT 1) AS seq
	FROM keys CROSS JOIN collectives k CROSS JOIN prm
	WHERE k.rowid = keys.id
	  AND (prm.comm IS NULL OR k.comm_hash = prm.comm)
	  AND (prm.job IS NULL OR k.pid IN (SELECT pid FROM jobproc WHERE sole)
	       OR EXISTS (SELECT 1 FROM jobproc j
			  WHERE j.pid = k.pid AND k.ts_ns BETWEEN j.lo AND j.hi))
),
-- newest collective (max seq) of every (communicator, rank, process) of the job and
-- communicator asked for
last AS (
	SELECT c.comm_hash, c.rank, c.nranks, c.pid, c.tid, c.seq, c.op, c.ts_ns
	FROM mark m CROSS JOIN collectives c
	WHERE c.rowid = (SELECT y.rowid FROM collectives y
			 WHERE y.comm_hash = m.comm_hash AND y.seq >= m.seq AND y.seq < m.seq + 64
			   AND y.pid = m.pid AND y.rank IS m.rank AND y.op NOT IN ('Send', 'Recv')
			 ORDER BY y.seq DESC LIMIT 1)
),
newest AS (
	SELECT comm_hash, max(seq) AS seq FROM last GROUP BY comm_hash
),
-- per communicator, how to read its window (newer than :since_ns and among its newest
-- :max_seqs seqs): by_seq when :max_seqs binds inside the time window (its cut seq is
-- newer than :since_ns, one probe through collectives_comm_seq) or there is no time window;
-- else by time. Both ways apply both bounds: the choice only picks the cheaper access path.
cut AS (
	SELECT n.comm_hash, n.seq - prm.max_seqs AS seq,
	       prm.since_ns <= 0
	       OR (prm.max_seqs IS NOT NULL
		   AND coalesce((SELECT y.ts_ns FROM collectives y
				 WHERE y.comm_hash = n.comm_hash AND y.seq = n.seq - prm.max_seqs
				   AND y.op NOT IN ('Send', 'Recv')
				 LIMIT 1), 0) >= prm.since_ns) AS by_seq
	FROM prm CROSS JOIN newest n
),
-- the window, two ways in, so that neither reads more than it keeps: by time through a range
-- of the table's key ts_ns from :since_ns on; by seq through collectives_comm_seq from the cut on
-- (materialized: the seq and rank rows below both read it)
win AS MATERIALIZED (
	SELECT c.ts_ns, c.pid, c.tid, c.comm_hash, c.rank, c.nranks, c.seq, c.op, c.count,
	       c.bytes, c.dur_ns
	FROM prm CROSS JOIN coll c CROSS JOIN cut u
	WHERE prm.since_ns > 0
	  AND c.ts_ns >= prm.since_ns
	  AND u.comm_hash = c.comm_hash AND NOT u.by_seq
	  AND c.seq > coalesce(u.seq, -1)
	UNION ALL
	SELECT c.ts_ns, c.pid, c.tid, c.comm_hash, c.rank, c.nranks, c.seq, c.op, c.count,
	       c.bytes, c.dur_ns
	FROM prm CROSS JOIN cut u CROSS JOIN coll c
	WHERE u.by_seq
	  AND c.comm_hash = u.comm_hash
	  AND c.seq > coalesce(u.seq, -1)
	  AND c.ts_ns >= prm.since_ns
),
-- per process, the span of its collectives in the window: its other events are read there
rng AS MATERIALIZED (
	SELECT pid, min(ts_ns) AS lo, max(ts_ns + dur_ns) AS hi FROM win GROUP BY pid
),
-- one range of the tables' key ts_ns over every process's span
allr AS (
	SELECT min(lo) AS lo, max(hi) AS hi FROM rng
),
kw AS MATERIALIZED (
	SELECT k.ts_ns, k.pid, k.rank, k.nranks, k.op, k.seq,
	       coalesce(k.comm_hash, 'nccl:' || k.nccl_comm) AS comm_hash, k.gpu_start_ns,
	       k.gpu_dur_ns
	FROM allr a CROSS JOIN nccl_kernels k JOIN rng r ON r.pid = k.pid
	WHERE k.ts_ns >= a.lo AND k.ts_ns <= a.hi AND k.ts_ns >= r.lo AND k.ts_ns <= r.hi
	  AND k.gpu_start_ns IS NOT NULL AND k.gpu_dur_ns IS NOT NULL
),
gpuoff AS (
	SELECT pid, min(gpu_start_ns - ts_ns) AS off FROM kw GROUP BY pid
)
SELECT 'coll' AS kind, comm_hash, rank, nranks, pid, tid, seq, op, ts_ns, dur_ns,
       NULL AS gpu_ns, bytes AS detail, NULL AS host
FROM win
UNION ALL
SELECT 'sync', NULL, NULL, NULL, c.pid, c.tid, NULL, c.api, c.ts_ns, c.dur_ns, NULL, NULL, NULL
FROM allr a CROSS JOIN cuda_calls c JOIN rng r ON r.pid = c.pid
WHERE c.ts_ns >= a.lo AND c.ts_ns <= a.hi AND c.ts_ns >= r.lo AND c.ts_ns <= r.hi
  AND c.kind = 'sync'
UNION ALL
SELECT 'off', NULL, NULL, NULL, o.pid, o.tid, NULL, NULL, o.ts_ns, o.dur_ns, NULL, o.reason, NULL
FROM allr a CROSS JOIN offcpu o JOIN rng r ON r.pid = o.pid
WHERE o.ts_ns >= a.lo AND o.ts_ns <= a.hi AND o.ts_ns >= r.lo AND o.ts_ns <= r.hi
UNION ALL
SELECT 'retx', NULL, NULL, NULL, t.pid, NULL, NULL, NULL, t.ts_ns, NULL, NULL,
       t.saddr || ':' || t.sport || '>' || t.daddr || ':' || t.dport || ' ' ||
	       coalesce(t.state, ''), NULL
FROM allr a CROSS JOIN tcp_retransmits t
WHERE t.ts_ns >= a.lo AND t.ts_ns <= a.hi
  AND (t.pid IS NULL OR t.pid IN (SELECT pid FROM rng))
UNION ALL
SELECT 'kern', k.comm_hash, k.rank, k.nranks, k.pid, NULL, k.seq, k.op,
       k.gpu_start_ns - g.off, k.gpu_dur_ns, k.gpu_start_ns, NULL, NULL
FROM kw k JOIN gpuoff g ON g.pid = k.pid
UNION ALL
SELECT 'now', NULL, NULL, NULL, NULL, NULL, NULL, NULL, now_ns, NULL, NULL, NULL,
       (SELECT value FROM meta WHERE key = 'host_id')
FROM prm
