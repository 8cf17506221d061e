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
-- include: collkeys.sql
-- include: wincut.sql
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
