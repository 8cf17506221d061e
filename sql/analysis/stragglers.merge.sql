-- SPDX-License-Identifier: MIT
-- stragglers.merge.sql: `fleetq stragglers`, run over the merged rows of
-- stragglers.node.sql (table results: node, then that file's columns) and the table
-- clock(node, offset_ns, rtt_ns), offset = node clock minus coordinator clock.
-- docs/analysis.md explains the method; the short form is DESIGN.md section 2.
--
-- Parameters (all optional; unbound = NULL = the default):
--   :threshold      robust z above which a signal counts (3.5, Iglewicz-Hoaglin)
--   :min_effect     a deviation below this fraction of the communicator's step period is
--                   never flagged: the MAD is floored at it (0.005)
--   :min_effect_ns  the same floor in ns, for communicators with very short periods (20000)
--   :ratio          2-3 ranks: a peer sync wait this many times this rank's marks this
--                   rank slow (3)
--   :hang_ns        a rank behind its communicator's newest seq whose newest collective is
--                   older than max(:hang_ns, 10 step periods) is hung (1.5e9)
--   :all_ranks      1: one row per rank, 'ok' ones too; default: only hung and stragglers
--
-- One row per (comm_hash, node, rank, pid), hung first, then stragglers, then by the
-- number of agreeing signals and the largest z:
--   comm_hash, node, rank, pid, nranks (declared), ranks (answering in the window),
--   verdict ('hung' | 'straggler' | 'ok'), signals ('late,busy,sync', plus 'ratio' when
--   the 2-3 rank ratio rule fired), method ('mad': z against median/MAD across ranks;
--   'pair': 2 ranks, z of the difference to the other rank over the floor),
--   z_late, z_busy, z_sync (all oriented so that positive = straggler-like; z_sync is
--   negated because the straggler waits least), late_ms, busy_ms, sync_ms (per-rank
--   medians per collective), peers_wait_s (GPU-seconds peers waited on this rank in the
--   window), step_ms (communicator's median step period), last_seq, stopped_at_seq (the
--   seq a hung rank never entered), stopped_op (what its peers ran there), stopped_s_ago.
WITH
prm AS (
	SELECT coalesce(:threshold, 3.5) AS thr, coalesce(:min_effect, 0.005) AS eff,
	       coalesce(:min_effect_ns, 20000) AS eff_ns, coalesce(:ratio, 3.0) AS ratio,
	       coalesce(:hang_ns, 1.5e9) AS hang_ns, coalesce(:all_ranks, 0) AS all_ranks
),
-- each rank's collectives in one piece: a node sends a 'rank' row per 65536 seqs (a row has
-- a size limit), mostly one; the objects and arrays of a rank's rows are spliced together
rk AS (
	SELECT node, comm_hash, rank, pid, max(nranks) AS nranks,
	       '{' || group_concat(substr(ts_by_seq, 2, length(ts_by_seq) - 2)) || '}' AS ts_by_seq,
	       '{' || group_concat(substr(sync_by_seq, 2, length(sync_by_seq) - 2)) || '}'
		       AS sync_by_seq,
	       '[' || group_concat(substr(busy_list, 2, length(busy_list) - 2)) || ']' AS busy_list,
	       '[' || group_concat(substr(gap_list, 2, length(gap_list) - 2)) || ']' AS gap_list
	FROM results WHERE kind = 'rank'
	GROUP BY node, comm_hash, rank, pid
),
-- ranks answering in the window, per communicator
nr AS (
	SELECT comm_hash, count(*) AS n FROM rk GROUP BY comm_hash
),
-- seqs every answering rank of the communicator reached, and who arrived first, from the
-- nodes' 'seq' rows (their earliest enqueue and how many ranks enqueued it)
full AS (
	SELECT g.comm_hash, g.seq, g.t_first
	FROM (SELECT s.comm_hash, s.seq, min(s.ts_ns - coalesce(k.offset_ns, 0)) AS t_first,
		     sum(s.n) AS k
	      FROM results s LEFT JOIN clock k ON k.node = s.node
	      WHERE s.kind = 'seq' GROUP BY s.comm_hash, s.seq) g
	JOIN nr ON nr.comm_hash = g.comm_hash AND nr.n = g.k
),
-- per rank, from its JSON: busy gap, sync wait and step period (clock-free: gap is the
-- node's own difference); over the seqs every rank reached, arrival lateness on the
-- coordinator's clock and total sync wait. Each is a subquery over one rank's JSON (no
-- grouping of the expanded members: a sort of every collective); in the lateness and sync
-- ones the join order is the plan, each member looking full up by (seq, comm_hash) through
-- an automatic index. (json_each's key is the seq as text.)
r AS (
	SELECT x.comm_hash, x.node, x.rank, x.pid, x.nranks,
	       (SELECT median(value) FROM json_each(x.busy_list)) AS busy,
	       (SELECT median(value) FROM json_each(x.sync_by_seq)) AS sync,
	       (SELECT median(value) FROM json_each(x.gap_list)) AS step,
	       (SELECT median(j.value - coalesce(k.offset_ns, 0) - f.t_first)
		FROM json_each(x.ts_by_seq) j CROSS JOIN full f
		WHERE f.seq = j.key + 0 AND f.comm_hash = x.comm_hash) AS late,
	       (SELECT sum(s.value) FROM json_each(x.sync_by_seq) s CROSS JOIN full g
		WHERE g.seq = s.key + 0 AND g.comm_hash = x.comm_hash) AS sync_total
	FROM rk x LEFT JOIN clock k ON k.node = x.node
),
-- per communicator: centre and spread of each signal; the MAD floor
cm AS (
	SELECT r.comm_hash, count(*) AS n, median(r.step) AS step,
	       max(prm.eff * coalesce(median(r.step), 0), prm.eff_ns) AS floor,
	       median(r.late) AS m_late, mad(r.late) AS d_late, sum(r.late) AS s_late,
	       median(r.busy) AS m_busy, mad(r.busy) AS d_busy, sum(r.busy) AS s_busy,
	       median(r.sync) AS m_sync, mad(r.sync) AS d_sync, sum(r.sync) AS s_sync
	FROM r, prm GROUP BY r.comm_hash
),
-- robust z per signal; with 2 ranks the MAD is half their difference whatever it is,
-- so the other rank is the centre and the floor the scale
z AS (
	SELECT r.*, cm.n, cm.step AS cstep, cm.floor,
	       CASE WHEN cm.n = 2 THEN robust_z(r.late, cm.s_late - r.late, cm.floor)
		    ELSE robust_z(r.late, cm.m_late, max(cm.d_late, cm.floor)) END AS z_late,
	       CASE WHEN cm.n = 2 THEN robust_z(r.busy, cm.s_busy - r.busy, cm.floor)
		    ELSE robust_z(r.busy, cm.m_busy, max(cm.d_busy, cm.floor)) END AS z_busy,
	       -CASE WHEN cm.n = 2 THEN robust_z(r.sync, cm.s_sync - r.sync, cm.floor)
		     ELSE robust_z(r.sync, cm.m_sync, max(cm.d_sync, cm.floor)) END AS z_sync,
	       -- 2-3 ranks: every peer waits >= :ratio times as long, by more than the floor
	       CASE WHEN cm.n BETWEEN 2 AND 3 THEN
		       (SELECT min(p.sync) FROM r p
			WHERE p.comm_hash = r.comm_hash
			  AND NOT (p.node IS r.node AND p.rank IS r.rank AND p.pid IS r.pid))
	       END AS peer_sync,
	       -- GPU-seconds peers waited on this rank: sum over peers with a longer total sync
	       -- wait of (theirs - this rank's), over the seqs every rank reached
	       (sum(r.sync_total) OVER wd - count(r.sync_total) OVER wd * r.sync_total) / 1e9
		       AS peers_wait_s
	FROM r JOIN cm USING (comm_hash)
	WINDOW wd AS (PARTITION BY r.comm_hash ORDER BY r.sync_total DESC
		      RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
flags AS (
	SELECT z.*,
	       (z_late > prm.thr) AS f_late, (z_busy > prm.thr) AS f_busy,
	       (z_sync > prm.thr) AS f_sync,
	       coalesce(peer_sync >= prm.ratio * sync AND peer_sync - sync >= floor, 0) AS f_ratio,
	       max(coalesce(z_late, 0), coalesce(z_busy, 0), coalesce(z_sync, 0)) AS zmax
	FROM z, prm
),
-- each node's time, once per node (a subquery per 'last' row would scan results each time)
nowr AS (
	SELECT node, max(ts_ns) AS now_ns FROM results WHERE kind = 'now' GROUP BY node
),
-- progress: the newest collective of every rank over all time
lastr AS (
	SELECT l.node, l.comm_hash, l.rank, l.pid, l.nranks, l.seq, l.ts_ns, w.now_ns,
	       l.ts_ns - coalesce(k.offset_ns, 0) AS t
	FROM results l LEFT JOIN nowr w ON w.node IS l.node LEFT JOIN clock k ON k.node = l.node
	WHERE l.kind = 'last'
),
lc AS (
	SELECT comm_hash, max(seq) AS maxseq, max(t) AS newest FROM lastr GROUP BY comm_hash
),
hang AS (
	SELECT l.node, l.comm_hash, l.rank, l.pid, l.nranks, l.seq AS last_seq,
	       -- on the rank's own clock when its node told us the time, else against the
	       -- newest collective of any rank of the communicator
	       coalesce(l.now_ns - l.ts_ns, lc.newest - l.t) AS age_ns,
	       l.seq < lc.maxseq AND coalesce(l.now_ns - l.ts_ns, lc.newest - l.t) >=
		       max(prm.hang_ns, 10 * coalesce(cm.step, 0)) AS hung
	FROM lastr l JOIN lc USING (comm_hash) LEFT JOIN cm USING (comm_hash), prm
),
ranks AS (
	SELECT comm_hash, node, rank, pid FROM flags
	UNION
	SELECT comm_hash, node, rank, pid FROM hang
),
v AS (
	SELECT u.comm_hash, u.node, u.rank, u.pid,
	       coalesce(f.nranks, h.nranks) AS nranks, coalesce(f.n, 0) AS ranks,
	       CASE WHEN h.hung THEN 'hung'
		    WHEN f.f_late + f.f_busy + f.f_sync >= 2
			 OR max(coalesce(f.z_busy, 0), coalesce(f.z_sync, 0)) >= 2 * prm.thr
			 OR f.f_ratio THEN 'straggler'
		    ELSE 'ok' END AS verdict,
	       coalesce(f.f_late + f.f_busy + f.f_sync, 0) AS nsig,
	       nullif(substr(iif(f.f_late, ',late', '') || iif(f.f_busy, ',busy', '') ||
			     iif(f.f_sync, ',sync', '') || iif(f.f_ratio, ',ratio', ''), 2), '')
		       AS signals,
	       CASE WHEN f.n = 2 THEN 'pair' WHEN f.n >= 3 THEN 'mad' END AS method,
	       round(f.z_late, 2) AS z_late, round(f.z_busy, 2) AS z_busy,
	       round(f.z_sync, 2) AS z_sync, coalesce(f.zmax, 0) AS zmax,
	       round(f.late / 1e6, 3) AS late_ms, round(f.busy / 1e6, 3) AS busy_ms,
	       round(f.sync / 1e6, 3) AS sync_ms, round(f.peers_wait_s, 3) AS peers_wait_s,
	       round(coalesce(f.cstep, (SELECT step FROM cm WHERE cm.comm_hash = u.comm_hash))
		     / 1e6, 3) AS step_ms,
	       h.last_seq, iif(h.hung, h.last_seq + 1, NULL) AS stopped_at_seq,
	       iif(h.hung, (SELECT x.op FROM results x WHERE x.kind IN ('last', 'seq')
			AND x.comm_hash = u.comm_hash AND x.seq = h.last_seq + 1
			ORDER BY x.kind LIMIT 1), NULL)
		       AS stopped_op,
	       iif(h.hung, round(h.age_ns / 1e9, 3), NULL) AS stopped_s_ago
	FROM ranks u
	LEFT JOIN flags f ON f.comm_hash = u.comm_hash AND f.node IS u.node
			  AND f.rank IS u.rank AND f.pid IS u.pid
	LEFT JOIN hang h ON h.comm_hash = u.comm_hash AND h.node IS u.node
			 AND h.rank IS u.rank AND h.pid IS u.pid,
	prm
)
SELECT comm_hash, node, rank, pid, nranks, ranks, verdict, signals, method, z_late, z_busy,
       z_sync, late_ms, busy_ms, sync_ms, peers_wait_s, step_ms, last_seq, stopped_at_seq,
       stopped_op, stopped_s_ago
FROM v, prm
WHERE prm.all_ranks OR verdict <> 'ok'
ORDER BY CASE verdict WHEN 'hung' THEN 0 WHEN 'straggler' THEN 1 ELSE 2 END, nsig DESC,
	 zmax DESC, comm_hash, rank
