-- SPDX-License-Identifier: MIT
-- timeline.merge.sql: `fleetq timeline`, run over the merged rows of timeline.node.sql
-- (table results: node, then that file's columns) and the table clock(node, offset_ns,
-- rtt_ns, samples), offset = node clock minus coordinator clock.
--
-- One row per Chrome/Perfetto trace event (the JSON trace-event format); fleetq writes each
-- row as one object of "traceEvents", its non-NULL columns as members, and the column args
-- (JSON text) as an object. The order of the rows is no promise: viewers sort by ts.
--
-- Tracks: one Chrome process per (communicator, rank, node, pid), named for its rank, node
-- and communicator, sorted by communicator then rank; in it these lanes (Chrome threads),
-- in this order:
--   collectives        tid 1: NCCL collective calls, enqueue to return (args: seq, comm,
--                      bytes, and late_us: after the first rank of the communicator to
--                      enqueue that seq) and TCP retransmits as instant events
--   sync waits (tid N) tid 10 N + 2: the synchronize calls of the process's thread N
--   off-CPU (tid N)    tid 10 N + 3: thread N's off-CPU intervals (one lane per thread:
--                      the threads' intervals overlap, a lane's slices must nest)
--   GPU                tid 4: its collective kernels on the GPU (fleetq's NCCL plugin), on
--                  the host's clock as placed below (args: seq, gpu_start_ns on the GPU's
--                  own clock, moved_us: how far the line-up below moved them)
-- A process in several communicators shows its sync waits, off-CPU and retransmits on each.
--
-- Times: ts and dur in microseconds (3 decimals: ns), on the coordinator's clock (each
-- node's corrected by its measured offset: the offset of its host's best-sampled node, as
-- stragglers.merge.sql takes it), from t0, the earliest event; the metadata event
-- 'fleetq_clock' gives t0 in ns since the epoch.
WITH
nowr AS (
	SELECT node, coalesce(max(host), node) AS host
	FROM results WHERE kind = 'now' GROUP BY node
),
koff AS (
	SELECT k.node,
	       coalesce((SELECT k2.offset_ns FROM nowr w2 JOIN clock k2 ON k2.node = w2.node
			 WHERE w2.host = w.host ORDER BY k2.rtt_ns, k2.node LIMIT 1),
			k.offset_ns) AS offset_ns
	FROM clock k LEFT JOIN nowr w ON w.node = k.node
),
ev AS (
	SELECT r.*, r.ts_ns - coalesce(k.offset_ns, 0) AS t
	FROM results r LEFT JOIN koff k ON k.node = r.node
	WHERE r.kind <> 'now'
),
t0 AS (
	SELECT coalesce(min(t), 0) AS t0 FROM ev
),
-- GPU clocks: the node placed each process's kernels at its launch latency (its soonest
-- start after an enqueue). A collective's kernels end together on every rank (the transfer
-- finishes once the last rank's kernel started): each process's kernels move by the median
-- of their ends' distance to the median end of their (communicator, op, seq), so that the
-- ends line up and each start shows when its GPU arrived
kend AS (
	SELECT node, pid, comm_hash, op, seq, t + dur_ns AS te FROM ev WHERE kind = 'kern'
),
kmed AS (
	SELECT comm_hash, op, seq, median(te) AS m FROM kend GROUP BY comm_hash, op, seq
),
kshift AS (
	SELECT k.node, k.pid, k.comm_hash, median(k.te - x.m) AS d
	FROM kend k JOIN kmed x ON x.comm_hash = k.comm_hash AND x.op IS k.op AND x.seq = k.seq
	GROUP BY k.node, k.pid, k.comm_hash
),
tr AS (
	SELECT comm_hash, node, rank, pid, max(nranks) AS nranks,
	       dense_rank() OVER (ORDER BY comm_hash, rank, node, pid) AS tp
	FROM results WHERE kind IN ('coll', 'kern') GROUP BY comm_hash, node, rank, pid
),
lanes AS (
	SELECT tp, 1 AS tid, 'collectives' AS name, 1 AS o FROM tr
	UNION ALL
	SELECT tp, 4, 'GPU', 4 FROM tr
	UNION ALL
	SELECT DISTINCT tr.tp, 10 * e.tid + iif(e.kind = 'sync', 2, 3),
	       iif(e.kind = 'sync', 'sync waits', 'off-CPU') || ' (tid ' || e.tid || ')',
	       iif(e.kind = 'sync', 2, 3)
	FROM results e JOIN tr ON tr.node = e.node AND tr.pid = e.pid
	WHERE e.kind IN ('sync', 'off')
)
SELECT 'M' AS ph, 'fleetq_clock' AS name, NULL AS cat, 0 AS pid, NULL AS tid, NULL AS ts,
       NULL AS dur, NULL AS s,
       json_object('t0_ns', t0.t0, 'clock', 'coordinator, nodes corrected by measured offsets',
		   'nodes', (SELECT count(DISTINCT node) FROM results)) AS args
FROM t0
UNION ALL
SELECT 'M', 'process_name', NULL, tp, NULL, NULL, NULL, NULL,
       json_object('name', 'rank ' || coalesce(rank, '?') || ' ' || node || ' pid ' || pid ||
		   ' comm ' || substr(comm_hash, 1, 16))
FROM tr
UNION ALL
SELECT 'M', 'process_sort_index', NULL, tp, NULL, NULL, NULL, NULL,
       json_object('sort_index', tp)
FROM tr
UNION ALL
SELECT 'M', 'process_labels', NULL, tp, NULL, NULL, NULL, NULL,
       json_object('labels', 'node ' || node || ', rank ' || coalesce(rank, '?') || ' of ' ||
		   coalesce(nranks, '?') || ', communicator ' || comm_hash)
FROM tr
UNION ALL
SELECT 'M', 'thread_name', NULL, tp, tid, NULL, NULL, NULL, json_object('name', name)
FROM lanes
UNION ALL
SELECT 'M', 'thread_sort_index', NULL, tp, tid, NULL, NULL, NULL, json_object('sort_index', o)
FROM lanes
UNION ALL
SELECT 'X', e.op, 'collective', tr.tp, 1, round((e.t - t0.t0) / 1e3, 3),
       round(e.dur_ns / 1e3, 3), NULL,
       json_object('seq', e.seq, 'comm', e.comm_hash, 'bytes', e.detail, 'tid', e.tid,
		   'late_us', round((e.t - min(e.t) OVER (PARTITION BY e.comm_hash, e.seq)) / 1e3,
				    3))
FROM ev e JOIN tr ON tr.comm_hash = e.comm_hash AND tr.node = e.node AND tr.rank IS e.rank
		  AND tr.pid = e.pid, t0
WHERE e.kind = 'coll'
UNION ALL
SELECT 'X', e.op || ' (GPU)', 'gpu', tr.tp, 4,
       round((e.t - coalesce(k.d, 0) - t0.t0) / 1e3, 3), round(e.dur_ns / 1e3, 3), NULL,
       json_object('seq', e.seq, 'comm', e.comm_hash, 'gpu_start_ns', e.gpu_ns,
		   'moved_us', round(-coalesce(k.d, 0) / 1e3, 3))
FROM ev e JOIN tr ON tr.comm_hash = e.comm_hash AND tr.node = e.node AND tr.rank IS e.rank
		  AND tr.pid = e.pid
     LEFT JOIN kshift k ON k.node = e.node AND k.pid = e.pid AND k.comm_hash = e.comm_hash, t0
WHERE e.kind = 'kern'
UNION ALL
SELECT 'X', e.op, 'sync', tr.tp, 10 * e.tid + 2, round((e.t - t0.t0) / 1e3, 3), round(e.dur_ns / 1e3, 3),
       NULL, json_object('tid', e.tid)
FROM ev e JOIN tr ON tr.node = e.node AND tr.pid = e.pid, t0
WHERE e.kind = 'sync'
UNION ALL
SELECT 'X', e.detail, 'offcpu', tr.tp, 10 * e.tid + 3, round((e.t - t0.t0) / 1e3, 3),
       round(e.dur_ns / 1e3, 3), NULL, json_object('tid', e.tid)
FROM ev e JOIN tr ON tr.node = e.node AND tr.pid = e.pid, t0
WHERE e.kind = 'off'
UNION ALL
-- a retransmit of no process shows on every track of its node
SELECT 'i', 'TCP retransmit', 'net', tr.tp, 1, round((e.t - t0.t0) / 1e3, 3), NULL, 't',
       json_object('flow', e.detail, 'host_wide', e.pid IS NULL)
FROM ev e JOIN tr ON tr.node = e.node AND (tr.pid = e.pid OR e.pid IS NULL), t0
WHERE e.kind = 'retx'
