-- SPDX-License-Identifier: MIT
-- why.node.sql: what every node sends so that `fleetq stragglers` can say why a rank is
-- slow. fleetq runs it as a second fan-out, after stragglers.merge.sql named a rank.
-- docs/analysis.md ("Why: the evidence") explains the columns and the rules.
--
-- Parameters (the same as stragglers.node.sql; unbound = NULL = the default):
--   :since_ns  window start, wall-clock ns on this node (NULL or 0 = all time)
--   :job       processes.job_id to keep (NULL = any process)
--   :comm      comm_hash to keep (NULL = every communicator)
--   :max_seqs  per communicator, only the newest N sequence numbers (NULL or <= 0 = all)
--
-- One row per (comm_hash, rank, pid) with collectives in the window. Its window is its own
-- first to last collective there (t0_ns, t1_ns, this node's clock): every value below is
-- measured over it, on this node, so that the merge compares ranks over about the same time.
--   comm_hash, rank, pid, t0_ns, t1_ns
--   gpu_index, gpu_source  the GPU it uses (process_gpus: the driver's list first, else the
--                          environment's latest mapping; of several, the one with the lowest
--                          SM clock); NULL when none is known
--   gpu_samples            gpu_samples rows of that GPU in the window
--   sm_mhz, sm_max_mhz     mean SM clock, the GPU's maximum
--   util_pct, temp_c       mean utilization, highest temperature
--   idle_pct, thermal_pct, power_pct, hwslow_pct, appclk_pct
--                          share of its samples (%) with that clock-event reason: GPU idle
--                          (0x1), thermal slowdown (sw 0x20, hw 0x40), power cap or brake
--                          (0x4, 0x80), hardware slowdown (0x8), applications clocks (0x2)
--   xid_new                XID events during the window (last minus first count)
--   sm_busy_pct            that GPU's SMs busy, % of the window (gpu_activity: NVML's GPM,
--                          Hopper and later; NULL without it), every process on the GPU
--   preempted_ns           off-CPU time of its main thread (tid = pid: the training loop's)
--                          while runnable (CPU contention)
--   blocked_ns             off-CPU time of its main thread while blocked (I/O, sleep, locks),
--                          outside its synchronize and collective calls: waiting on the GPU
--                          or on its peers is the straggler's effect, not its cause; and
--                          outside intervals in which another of its threads entered a
--                          collective (waiting on backward(), whose autograd thread issues
--                          DDP's and FSDP's collectives, is the step's work). Other
--                          threads (NCCL's proxy, a watchdog, autograd) block by design, as
--                          much on every rank: their sum only adds noise
--   tcp_retrans            TCP retransmits on this node in the window (any process)
--   tcp_own, tcp_flow      those of its own sockets (tcp_retransmits.pid: the socket's
--                          owner), and the flow with most of them (saddr:sport>daddr:dport);
--                          on a host shared by several ranks only these tell them apart
--   ib_errors              increments of InfiniBand error counters on this node in the window
--   ib_worst               the counter (device/port counter) that grew most, or NULL
--   coll_gpu_ns            GPU time of its collective and send/recv kernels in the window
--                          (fleetq's NCCL profiler plugin: nccl_kernels.gpu_dur_ns); NULL
--                          without the plugin's rows. NVML counts a kernel that spins
--                          waiting for its peers as busy, so a straggler's peers look busy
--                          (their collective kernels run longer)
--   compute_idle_pct       share (%) of the window its GPU ran none of its compute kernels
--                          (gpu_busy: fleetq's CUDA injection library, every stream but
--                          NCCL's, late records included, each slice's at most its length),
--                          from its first slice inside the window to its last (a slice with
--                          no kernel has no row: idle); of several devices, the busiest.
--                          NULL without slices, where they span under half the window, or
--                          where CUPTI dropped records in it. A GPU that waits for its host
--                          idles more than its peers'; one slower at the same work (or with
--                          more of it) idles less
WITH
prm AS (
	SELECT coalesce(:since_ns, 0) AS since_ns, :job AS job, :comm AS comm,
	       CASE WHEN :max_seqs > 0 THEN :max_seqs END AS max_seqs
),
-- the job's processes, each over its own life, not its pid (pids are reused)
-- include: jobproc.sql
-- the newest :max_seqs seqs of each communicator, read through collectives_comm_seq (its
-- newest seq, then that range) rather than the whole window: this query runs on every node
-- after each verdict
-- (every comm_hash, one index probe each: the next one after the last)
hk(comm_hash) AS (
	SELECT (SELECT min(comm_hash) FROM collectives WHERE comm_hash IS NOT NULL)
	UNION ALL
	SELECT (SELECT min(c.comm_hash) FROM collectives c WHERE c.comm_hash > hk.comm_hash)
	FROM hk WHERE hk.comm_hash IS NOT NULL
),
cut AS (
	SELECT k.comm_hash,
	       (SELECT max(c.seq) FROM collectives c
		WHERE c.comm_hash = k.comm_hash AND c.op NOT IN ('Send', 'Recv')) - prm.max_seqs AS seq
	FROM hk k, prm
	WHERE k.comm_hash IS NOT NULL AND (prm.comm IS NULL OR k.comm_hash = prm.comm)
),
coll AS MATERIALIZED (
	SELECT c.ts_ns, c.dur_ns, c.pid, c.comm_hash, c.rank, c.seq
	FROM prm CROSS JOIN cut u CROSS JOIN collectives c
	WHERE c.comm_hash = u.comm_hash AND c.seq > coalesce(u.seq, -1)
	  AND c.ts_ns >= prm.since_ns AND c.op NOT IN ('Send', 'Recv')
	  AND (prm.job IS NULL OR c.pid IN (SELECT pid FROM jobproc WHERE sole)
	       OR EXISTS (SELECT 1 FROM jobproc j
			  WHERE j.pid = c.pid AND c.ts_ns BETWEEN j.lo AND j.hi))
),
rw AS MATERIALIZED (
	SELECT c.comm_hash, c.rank, c.pid, min(c.ts_ns) AS t0, max(c.ts_ns + c.dur_ns) AS t1,
	       (SELECT max(p.start_ns) FROM processes p
		WHERE p.pid = c.pid AND p.start_ns <= min(c.ts_ns)) AS start_ns
	FROM coll c
	GROUP BY c.comm_hash, c.rank, c.pid
),
pgpu AS (
	SELECT r.comm_hash, r.rank, r.pid, pg.gpu_uuid, pg.gpu_index, pg.source
	FROM rw r JOIN process_gpus pg ON pg.pid = r.pid AND pg.start_ns = r.start_ns
	WHERE pg.source = 'nvml' OR (NOT EXISTS (
		SELECT 1 FROM process_gpus q
		WHERE q.pid = pg.pid AND q.start_ns = pg.start_ns AND q.source = 'nvml')
	-- of the environment's, the last read: a process seen between its fork and its exec
	-- was mapped on its launcher's environment first
	AND pg.ts_ns = (SELECT max(q.ts_ns) FROM process_gpus q
			WHERE q.pid = pg.pid AND q.start_ns = pg.start_ns AND q.source != 'nvml'))
),
gs AS (
	SELECT g.comm_hash, g.rank, g.pid, g.gpu_index, g.gpu_uuid, max(g.source) AS source,
	       count(s.ts_ns) AS n, avg(s.sm_clock_mhz) AS sm, max(s.sm_clock_max_mhz) AS sm_max,
	       avg(s.util_gpu_pct) AS util, max(s.temp_c) AS temp,
	       100.0 * avg((s.clock_reasons & 1) != 0) AS idle,
	       100.0 * avg((s.clock_reasons & 96) != 0) AS thermal,
	       100.0 * avg((s.clock_reasons & 132) != 0) AS power,
	       100.0 * avg((s.clock_reasons & 8) != 0) AS hwslow,
	       100.0 * avg((s.clock_reasons & 2) != 0) AS appclk,
	       max(s.xid_count) - min(s.xid_count) AS xid_new
	FROM pgpu g JOIN rw r USING (comm_hash, rank, pid)
	LEFT JOIN gpu_samples s ON +s.gpu_uuid = g.gpu_uuid AND s.ts_ns BETWEEN r.t0 AND r.t1
	GROUP BY g.comm_hash, g.rank, g.pid, g.gpu_uuid
),
-- GPM's intervals that end in the window, each weighted by its length (a sane one: a share
-- in per mille, a positive length under an hour)
ga AS (
	SELECT g.comm_hash, g.rank, g.pid, g.gpu_uuid,
	       sum(a.sm_active_pm * a.dur_ns) / 10.0 / sum(a.dur_ns) AS sm_busy
	FROM pgpu g JOIN rw r USING (comm_hash, rank, pid)
	JOIN gpu_activity a ON +a.gpu_uuid = g.gpu_uuid AND a.ts_ns BETWEEN r.t0 AND r.t1
	WHERE a.sm_active_pm BETWEEN 0 AND 1000 AND a.dur_ns BETWEEN 1 AND 3600000000000
	GROUP BY g.comm_hash, g.rank, g.pid, g.gpu_uuid
),
gb AS (
	SELECT * FROM (SELECT gs.*, row_number() OVER (PARTITION BY comm_hash, rank, pid
						       ORDER BY n > 0 DESC, sm) AS o FROM gs)
	WHERE o = 1
),
-- off-CPU intervals of its main thread in the window, and that thread's calls that wait
-- (synchronize, collectives): an interval that starts inside such a call is waiting. Each
-- read as a range of the table's key (the unary + keeps SQLite from indexing the whole
-- table by pid first: a node's trace holds days of other processes)
ev AS (
	SELECT r.comm_hash, r.rank, r.pid, o.ts_ns, min(o.dur_ns, r.t1 - o.ts_ns) AS d,
	       o.reason, 0 AS call
	FROM rw r CROSS JOIN offcpu o
	WHERE o.ts_ns BETWEEN r.t0 AND r.t1 AND +o.pid = r.pid AND +o.tid = r.pid
	UNION ALL
	SELECT r.comm_hash, r.rank, r.pid, k.ts_ns, k.dur_ns, NULL, 1
	FROM rw r CROSS JOIN cuda_calls k
	WHERE k.ts_ns BETWEEN r.t0 AND r.t1 AND +k.pid = r.pid AND +k.tid = r.pid
	  AND +k.kind = 'sync'
	UNION ALL
	SELECT r.comm_hash, r.rank, r.pid, c.ts_ns, c.dur_ns, NULL, 1
	FROM rw r CROSS JOIN collectives c
	WHERE c.ts_ns BETWEEN r.t0 AND r.t1 AND +c.pid = r.pid AND +c.tid = r.pid
),
-- (call_end: the latest end of its waiting calls so far; off_end: of its earlier off-CPU
-- intervals, which one thread's never overlap: an interval that starts before it is not
-- counted, so that a file's overlapping rows cannot make the probe below cost their square)
evm AS (
	SELECT ev.*, max(iif(call, ts_ns + d, NULL)) OVER (w ROWS UNBOUNDED PRECEDING) AS call_end,
	       max(iif(call, NULL, ts_ns + d)) OVER (
		w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS off_end
	FROM ev
	WINDOW w AS (PARTITION BY comm_hash, rank, pid ORDER BY ts_ns, call DESC)
),
-- a blocked interval in which another thread of the process entered a collective: the main
-- thread waited for it (PyTorch's backward() blocks the main thread while the autograd
-- thread runs the backward and DDP's or FSDP's collectives): the step's work, not I/O or a
-- sleep. On 4 H200s the main thread of every rank of a DDP transformer was blocked half to
-- two thirds of its window so; what stayed was a planted sleep's time (394 ms for a 5 %
-- sleep of about 380, 719 for a 10 % one of 763), 41-81 ms on ranks sharing their GPU with
-- a neighbour thread, at most 1 ms on the others
evh AS (
	SELECT evm.*,
	       iif(NOT call AND reason = 'blocked' AND ts_ns >= coalesce(off_end, ts_ns)
		   AND (call_end IS NULL OR ts_ns >= call_end),
		   NOT EXISTS (SELECT 1 FROM collectives c
			       WHERE c.ts_ns BETWEEN evm.ts_ns AND evm.ts_ns + evm.d
				 AND +c.pid = evm.pid AND +c.tid != evm.pid), 0) AS own
	FROM evm
),
off AS (
	SELECT comm_hash, rank, pid,
	       coalesce(sum(d) FILTER (WHERE NOT call AND reason = 'preempted'), 0) AS preempted,
	       coalesce(sum(d) FILTER (WHERE own), 0) AS blocked
	FROM evh GROUP BY comm_hash, rank, pid
),
ib AS (
	SELECT r.comm_hash, r.rank, r.pid, i.device || '/' || i.port || ' ' || i.counter AS what,
	       sum(i.delta) AS n
	FROM rw r CROSS JOIN ib_counters i
	WHERE i.ts_ns BETWEEN r.t0 AND r.t1 AND i.delta > 0
	  AND i.counter IN ('port_rcv_errors', 'symbol_error', 'link_downed',
			    'port_xmit_discards', 'local_link_integrity_errors',
			    'excessive_buffer_overrun_errors', 'port_rcv_remote_physical_errors',
			    'link_error_recovery', 'local_ack_timeout_err', 'packet_seq_err',
			    'out_of_sequence', 'rnr_nak_retry_err', 'req_transport_retries_exceeded',
			    'rx_icrc_encapsulated')
	GROUP BY 1, 2, 3, 4
)
SELECT r.comm_hash, r.rank, r.pid, r.t0 AS t0_ns, r.t1 AS t1_ns,
       g.gpu_index, g.source AS gpu_source, g.n AS gpu_samples, g.sm AS sm_mhz,
       g.sm_max AS sm_max_mhz, g.util AS util_pct, g.temp AS temp_c, g.idle AS idle_pct,
       g.thermal AS thermal_pct, g.power AS power_pct, g.hwslow AS hwslow_pct,
       g.appclk AS appclk_pct, g.xid_new,
       (SELECT a.sm_busy FROM ga a WHERE a.comm_hash = r.comm_hash AND a.rank IS r.rank
	  AND a.pid = r.pid AND a.gpu_uuid = g.gpu_uuid) AS sm_busy_pct,
       coalesce(o.preempted, 0) AS preempted_ns, coalesce(o.blocked, 0) AS blocked_ns,
       (SELECT count(*) FROM tcp_retransmits t WHERE t.ts_ns BETWEEN r.t0 AND r.t1)
	       AS tcp_retrans,
       (SELECT count(*) FROM tcp_retransmits t
	WHERE t.ts_ns BETWEEN r.t0 AND r.t1 AND t.pid = r.pid) AS tcp_own,
       (SELECT t.saddr || ':' || t.sport || '>' || t.daddr || ':' || t.dport
	FROM tcp_retransmits t WHERE t.ts_ns BETWEEN r.t0 AND r.t1 AND t.pid = r.pid
	GROUP BY t.saddr, t.sport, t.daddr, t.dport ORDER BY count(*) DESC LIMIT 1) AS tcp_flow,
       (SELECT coalesce(sum(n), 0) FROM ib i
	WHERE i.comm_hash = r.comm_hash AND i.rank IS r.rank AND i.pid = r.pid) AS ib_errors,
       (SELECT what FROM ib i
	WHERE i.comm_hash = r.comm_hash AND i.rank IS r.rank AND i.pid = r.pid
	ORDER BY n DESC LIMIT 1) AS ib_worst,
       -- (a range of the table's key, as the off-CPU rows are read)
       (SELECT sum(k.gpu_dur_ns) FROM nccl_kernels k
	WHERE k.ts_ns BETWEEN r.t0 AND r.t1 AND +k.pid = r.pid) AS coll_gpu_ns,
       (SELECT max(0.0, min(100.0, 100.0 - 100.0 * u.busy / u.span))
	FROM (SELECT sum(b.busy_ns + min(max(coalesce(b.late_ns, 0), 0), b.dur_ns)) AS busy,
		     max(b.ts_ns + b.dur_ns) - min(b.ts_ns) AS span,
		     max(coalesce(b.dropped, 0)) - min(coalesce(b.dropped, 0)) AS lost
	      FROM gpu_busy b
	      WHERE b.ts_ns BETWEEN r.t0 AND r.t1 AND b.ts_ns + b.dur_ns <= r.t1
		AND +b.pid = r.pid AND b.dur_ns BETWEEN 1 AND 3600000000000
		AND b.busy_ns BETWEEN 0 AND b.dur_ns
	      GROUP BY b.device) u
	WHERE u.lost = 0 AND u.span >= (r.t1 - r.t0) / 2
	ORDER BY u.busy DESC LIMIT 1) AS compute_idle_pct
FROM rw r
LEFT JOIN gb g ON g.comm_hash = r.comm_hash AND g.rank IS r.rank AND g.pid = r.pid
LEFT JOIN off o ON o.comm_hash = r.comm_hash AND o.rank IS r.rank AND o.pid = r.pid
