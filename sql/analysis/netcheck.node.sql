-- SPDX-License-Identifier: MIT
-- netcheck.node.sql: what every node sends for `fleetq netcheck` (DESIGN.md section 4).
-- Network trouble slows collectives: count TCP retransmits and InfiniBand error counter
-- deltas inside this node's slowest collectives versus outside them. The join happens
-- here, on the node, where collectives and counters share one clock.
-- docs/analysis.md explains the columns, the parameters and how to adapt this.
--
-- Parameters (all optional; unbound = NULL = the default):
--   :since_ns, :job, :comm, :max_seqs   as in stragglers.node.sql
--   :slow_frac  the slowest fraction of each communicator's collectives on this node that
--               count as slow windows (0.1: the top decile of wait = dur_ns + sync_ns)
--
-- A collective's window runs from its enqueue to its process's next collective on the
-- same communicator (the newest, whose sync wait is still open, is in no window).
-- Columns:
--   source    'span':     one row per (comm_hash, rank, pid): in_n/out_n = slow/other
--                         collectives, in_s/out_s = seconds inside/outside slow windows
--             'tcp':      tcp_retransmits of this rank's process
--             'tcp_host': tcp_retransmits with no process (pid NULL), on this host
--             'ib':       sum of ib_counters.delta of one error counter on one port
--   comm_hash, rank, nranks, pid,
--   counter   'retransmits' or the IB counter name (NULL for span)
--   detail    tcp: the flow with most retransmits in slow windows ('saddr:sport>daddr:dport');
--             ib: 'device/port'
--   windows   slow windows of this rank
--   in_n, out_n   events (or counter increments) inside / outside slow windows
--   in_s, out_s   seconds inside / outside slow windows
--   Event rows only appear when in_n + out_n > 0.
WITH
prm AS (
	SELECT coalesce(:since_ns, 0) AS since_ns, :job AS job, :comm AS comm,
	       CASE WHEN :max_seqs > 0 THEN :max_seqs END AS max_seqs,
	       100 * (1 - coalesce(:slow_frac, 0.1)) AS pct
),
-- the job's processes, each over its own life, not its pid (pids are reused)
-- include: jobproc.sql
-- include: collkeys.sql
-- include: wincut.sql
win AS (
	SELECT c.ts_ns, c.dur_ns, c.pid, c.tid, c.comm_hash, c.rank, c.nranks, c.seq, c.sync_ns
	FROM prm CROSS JOIN coll c CROSS JOIN cut u
	WHERE prm.since_ns > 0
	  AND c.ts_ns >= prm.since_ns
	  AND u.comm_hash = c.comm_hash AND NOT u.by_seq
	  AND c.seq > coalesce(u.seq, -1)
	UNION ALL
	SELECT c.ts_ns, c.dur_ns, c.pid, c.tid, c.comm_hash, c.rank, c.nranks, c.seq, c.sync_ns
	FROM prm CROSS JOIN cut u CROSS JOIN coll c
	WHERE u.by_seq
	  AND c.comm_hash = u.comm_hash
	  AND c.seq > coalesce(u.seq, -1)
	  AND c.ts_ns >= prm.since_ns
),
-- windows: wait = enqueue call + sync wait; the window ends at the next collective
-- (sync wait as in stragglers.node.sql: the next collective's collectives.sync_ns; the
-- newest one's wait is still open, so it is in neither kind of window)
w0 AS (
	SELECT comm_hash, rank, nranks, pid, seq, ts_ns, dur_ns + sync_ns AS wait_ns,
	       coalesce(next_ts, ts_ns + dur_ns + sync_ns) AS end_ns
	FROM (
		SELECT comm_hash, rank, nranks, pid, seq, ts_ns, dur_ns,
		       lead(sync_ns) OVER w AS sync_ns,
		       lead(ts_ns) OVER w AS next_ts
		FROM win
		WINDOW w AS (PARTITION BY pid, comm_hash ORDER BY seq)
	)
),
wins AS (
	SELECT w0.*, wait_ns >= percentile(wait_ns, prm.pct) OVER (PARTITION BY comm_hash)
		       AS slow
	FROM w0, prm
),
span AS (
	SELECT comm_hash, rank, max(nranks) AS nranks, pid, sum(slow) AS windows,
	       sum(slow) AS in_n, sum(NOT slow) AS out_n,
	       sum(iif(slow, end_ns - ts_ns, 0)) / 1e9 AS in_s,
	       sum(iif(slow, 0, end_ns - ts_ns)) / 1e9 AS out_s
	FROM wins GROUP BY comm_hash, rank, pid
),
-- retransmits by flow and window kind; each window is a range of the table's key ts_ns
tcp_flow AS (
	SELECT w.comm_hash, w.rank, w.pid, iif(t.pid IS NULL, 'tcp_host', 'tcp') AS source,
	       t.saddr || ':' || t.sport || '>' || t.daddr || ':' || t.dport AS flow,
	       sum(w.slow) AS in_n, sum(NOT w.slow) AS out_n
	FROM wins w JOIN tcp_retransmits t
		ON t.ts_ns >= w.ts_ns AND t.ts_ns < w.end_ns AND (t.pid = w.pid OR t.pid IS NULL)
	GROUP BY 1, 2, 3, 4, 5
),
-- SQLite takes the bare column flow from the row holding max(in_n)
tcp AS (
	SELECT comm_hash, rank, pid, source, 'retransmits' AS counter, flow AS detail,
	       max(in_n) AS top_in, sum(in_n) AS in_n, sum(out_n) AS out_n
	FROM tcp_flow GROUP BY comm_hash, rank, pid, source
),
ib AS (
	SELECT w.comm_hash, w.rank, w.pid, 'ib' AS source, i.counter,
	       i.device || '/' || i.port AS detail,
	       sum(iif(w.slow, i.delta, 0)) AS in_n, sum(iif(w.slow, 0, i.delta)) AS out_n
	FROM wins w JOIN ib_counters i ON i.ts_ns >= w.ts_ns AND i.ts_ns < w.end_ns
	WHERE i.delta > 0
	  AND i.counter IN ('port_rcv_errors', 'symbol_error', 'link_downed',
			    'port_xmit_discards', 'local_link_integrity_errors',
			    'excessive_buffer_overrun_errors', 'port_rcv_remote_physical_errors',
			    'link_error_recovery', 'local_ack_timeout_err', 'packet_seq_err',
			    'out_of_sequence', 'rnr_nak_retry_err', 'req_transport_retries_exceeded',
			    'rx_icrc_encapsulated')
	GROUP BY 1, 2, 3, 5, 6
)
SELECT 'span' AS source, comm_hash, rank, nranks, pid, NULL AS counter, NULL AS detail,
       windows, in_n, out_n, in_s, out_s
FROM span
UNION ALL
SELECT e.source, e.comm_hash, e.rank, s.nranks, e.pid, e.counter, e.detail, s.windows,
       e.in_n, e.out_n, s.in_s, s.out_s
FROM (SELECT comm_hash, rank, pid, source, counter, detail, in_n, out_n FROM tcp
      UNION ALL
      SELECT comm_hash, rank, pid, source, counter, detail, in_n, out_n FROM ib) e
JOIN span s ON s.comm_hash = e.comm_hash AND s.rank IS e.rank AND s.pid = e.pid
