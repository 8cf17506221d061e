-- SPDX-License-Identifier: MIT
-- why.merge.sql: the evidence for `fleetq stragglers`, run over the merged rows of
-- why.node.sql (table results: node, then that file's columns). Each rank against its
-- peers (the other ranks of its communicator) and one "likely cause" when a rule fires.
-- fleetq joins these rows to the verdict's by (comm_hash, node, rank, pid).
-- docs/analysis.md ("Why: the evidence") explains every rule and its threshold.
--
-- Parameters (all optional; unbound = NULL = the default):
--   :clock_drop    the GPU rule: its mean SM clock at least this share below its peers'
--                  median (0.10), over at least 2 samples, its GPU not idle most of them
--   :offcpu_gap    the off-CPU rules: its main thread preempted (or blocked outside waits)
--                  at least this share of its window more than its peers' median (0.05)
--   :retrans_min   the TCP rule: at least this many retransmits on its node (or of its own
--                  sockets) more than its peers' median, and at least twice it (10)
--   :ib_min        the InfiniBand rule: at least this many error counter increments on its
--                  node more than its peers' median, and at least twice it (1)
--   :util_gap      the host rule: its GPU busy (NVML utilization, %) at least this many
--                  points below its peers' median, over at least 2 samples (10): its GPU had
--                  less to do, the work reached it late from its host
--   :sm_gap        the GPU-work rule: its GPU's SMs busy (GPM) at least this many points
--                  above its peers' median (5)
--   :idle_gap      the compute rules: its GPU ran none of its compute kernels (fleetq's CUDA
--                  injection library) at least this many points of the window more than its
--                  peers' median (the host rule: its GPU waited for its host), or as many
--                  less (the GPU-compute rule: its GPU took longer over its work) (3)
--   :threshold     with 3 ranks or more, every rule also needs the rank to be an outlier:
--                  robust z (0.6745 (x - median) / MAD, as the verdict's) above this (3.5);
--                  a loaded host spreads every rank's off-CPU time, and the largest of 8
--                  equal ranks is always some points above their median
--
-- Peers' value: the median over the communicator's ranks (with 2 ranks, the other rank's).
-- One row per (comm_hash, node, rank, pid):
--   gpu_index, gpu_samples, sm_mhz, peer_sm_mhz, sm_max_mhz, gpu_reason (the clock-event
--   reason in most of its samples, NULL: none), util_pct, peer_util_pct, temp_c,
--   preempted_pct, peer_preempted_pct, blocked_pct, peer_blocked_pct (off-CPU time of its
--   main thread, % of its window), tcp_retrans,
--   peer_tcp_retrans, tcp_own, peer_tcp_own, tcp_flow (its own sockets' retransmits and
--   their busiest flow), ib_errors, peer_ib_errors, ib_worst, coll_gpu_pct, peer_coll_gpu_pct
--   (its collective kernels' GPU time, % of its window; NULL without the plugin), cause
--   (the rule that gives the likely cause: 'gpu_clock', 'gpu_work', 'gpu_compute',
--   'preempted', 'blocked', 'ib', 'tcp', 'host', then 'tcp_peer': nothing of its own, but
--   a peer's sockets passed the TCP rule; NULL: none fired),
--   causes (every rule that fired, in that order), likely_cause (the line a person reads),
--   sm_busy_pct, peer_sm_busy_pct (its GPU's SMs busy, % of its window: GPM; NULL without),
--   compute_idle_pct, peer_compute_idle_pct (its GPU ran none of its compute kernels, % of
--   its window: fleetq's CUDA injection library; NULL without).
WITH
prm AS (
	SELECT coalesce(:clock_drop, 0.10) AS clock_drop, coalesce(:offcpu_gap, 0.05) AS offcpu_gap,
	       coalesce(:retrans_min, 10) AS retrans_min, coalesce(:ib_min, 1) AS ib_min,
	       coalesce(:util_gap, 10) AS util_gap, coalesce(:sm_gap, 5) AS sm_gap,
	       max(coalesce(:idle_gap, 3), 0.1) AS idle_gap,
	       coalesce(:threshold, 3.5) AS thr
),
r AS (
	SELECT node, comm_hash, rank, pid, gpu_index, gpu_samples, util_pct, temp_c, sm_max_mhz,
	       iif(gpu_index IS NULL, 'its GPU', 'GPU ' || gpu_index) AS gpu_name,
	       iif(gpu_samples > 0, sm_mhz, NULL) AS sm,
	       100.0 * preempted_ns / nullif(t1_ns - t0_ns, 0) AS pre,
	       100.0 * blocked_ns / nullif(t1_ns - t0_ns, 0) AS blk,
	       tcp_retrans AS tcp, tcp_own AS tcpo, tcp_flow, ib_errors AS ib, ib_worst, idle_pct,
	       iif(sm_busy_pct BETWEEN 0 AND 100, sm_busy_pct, NULL) AS smb,
	       iif(compute_idle_pct BETWEEN 0 AND 100, compute_idle_pct, NULL) AS cid,
	       100.0 * coll_gpu_ns / nullif(t1_ns - t0_ns, 0) AS coll,
	       CASE max(coalesce(hwslow_pct, 0), coalesce(thermal_pct, 0),
			coalesce(power_pct, 0), coalesce(appclk_pct, 0))
		    WHEN 0 THEN NULL
		    WHEN coalesce(hwslow_pct, 0) THEN 'hardware slowdown'
		    WHEN coalesce(thermal_pct, 0) THEN 'thermal slowdown'
		    WHEN coalesce(power_pct, 0) THEN 'power cap'
		    ELSE 'applications clocks' END AS reason
	FROM results
),
c AS (
	SELECT comm_hash,
	       count(sm) AS n_sm, median(sm) AS m_sm, sum(sm) AS s_sm, mad(sm) AS d_sm,
	       count(util_pct) AS n_ut, median(util_pct) AS m_ut, sum(util_pct) AS s_ut,
	       mad(util_pct) AS d_ut,
	       count(pre) AS n_pre, median(pre) AS m_pre, sum(pre) AS s_pre, mad(pre) AS d_pre,
	       count(blk) AS n_blk, median(blk) AS m_blk, sum(blk) AS s_blk, mad(blk) AS d_blk,
	       count(tcp) AS n_tcp, median(tcp) AS m_tcp, sum(tcp) AS s_tcp, mad(tcp) AS d_tcp,
	       count(tcpo) AS n_tcpo, median(tcpo) AS m_tcpo, sum(tcpo) AS s_tcpo,
	       mad(tcpo) AS d_tcpo,
	       count(ib) AS n_ib, median(ib) AS m_ib, sum(ib) AS s_ib, mad(ib) AS d_ib,
	       count(coll) AS n_coll, median(coll) AS m_coll, sum(coll) AS s_coll,
	       count(smb) AS n_smb, median(smb) AS m_smb, sum(smb) AS s_smb, mad(smb) AS d_smb,
	       count(cid) AS n_cid, median(cid) AS m_cid, sum(cid) AS s_cid, mad(cid) AS d_cid
	FROM r GROUP BY comm_hash
),
p AS (
	SELECT r.*,
	       CASE WHEN r.sm IS NULL THEN NULL WHEN c.n_sm = 2 THEN c.s_sm - r.sm
		    WHEN c.n_sm > 2 THEN c.m_sm END AS p_sm,
	       CASE WHEN r.util_pct IS NULL THEN NULL WHEN c.n_ut = 2 THEN c.s_ut - r.util_pct
		    WHEN c.n_ut > 2 THEN c.m_ut END AS p_ut,
	       CASE WHEN r.pre IS NULL THEN NULL WHEN c.n_pre = 2 THEN c.s_pre - r.pre
		    WHEN c.n_pre > 2 THEN c.m_pre END AS p_pre,
	       CASE WHEN r.blk IS NULL THEN NULL WHEN c.n_blk = 2 THEN c.s_blk - r.blk
		    WHEN c.n_blk > 2 THEN c.m_blk END AS p_blk,
	       CASE WHEN r.tcp IS NULL THEN NULL WHEN c.n_tcp = 2 THEN c.s_tcp - r.tcp
		    WHEN c.n_tcp > 2 THEN c.m_tcp END AS p_tcp,
	       CASE WHEN r.tcpo IS NULL THEN NULL WHEN c.n_tcpo = 2 THEN c.s_tcpo - r.tcpo
		    WHEN c.n_tcpo > 2 THEN c.m_tcpo END AS p_tcpo,
	       CASE WHEN r.ib IS NULL THEN NULL WHEN c.n_ib = 2 THEN c.s_ib - r.ib
		    WHEN c.n_ib > 2 THEN c.m_ib END AS p_ib,
	       CASE WHEN r.coll IS NULL THEN NULL WHEN c.n_coll = 2 THEN c.s_coll - r.coll
		    WHEN c.n_coll > 2 THEN c.m_coll END AS p_coll,
	       CASE WHEN r.smb IS NULL THEN NULL WHEN c.n_smb = 2 THEN c.s_smb - r.smb
		    WHEN c.n_smb > 2 THEN c.m_smb END AS p_smb,
	       CASE WHEN r.cid IS NULL THEN NULL WHEN c.n_cid = 2 THEN c.s_cid - r.cid
		    WHEN c.n_cid > 2 THEN c.m_cid END AS p_cid,
	       -- outlier among 3 or more ranks (oriented: positive = the bad side); 2: no test
	       iif(c.n_sm > 2, -robust_z(r.sm, c.m_sm, c.d_sm), 1e9) AS z_sm,
	       iif(c.n_ut > 2, -robust_z(r.util_pct, c.m_ut, c.d_ut), 1e9) AS z_ut,
	       iif(c.n_pre > 2, robust_z(r.pre, c.m_pre, c.d_pre), 1e9) AS z_pre,
	       iif(c.n_blk > 2, robust_z(r.blk, c.m_blk, c.d_blk), 1e9) AS z_blk,
	       iif(c.n_tcp > 2, robust_z(r.tcp, c.m_tcp, c.d_tcp), 1e9) AS z_tcp,
	       iif(c.n_tcpo > 2, robust_z(r.tcpo, c.m_tcpo, c.d_tcpo), 1e9) AS z_tcpo,
	       iif(c.n_ib > 2, robust_z(r.ib, c.m_ib, c.d_ib), 1e9) AS z_ib,
	       iif(c.n_smb > 2, robust_z(r.smb, c.m_smb, c.d_smb), 1e9) AS z_smb,
	       -- (idling more: positive; the GPU-compute rule takes its negative)
	       iif(c.n_cid > 2, robust_z(r.cid, c.m_cid, c.d_cid), 1e9) AS z_cid,
	       iif(c.n_cid > 2, -robust_z(r.cid, c.m_cid, c.d_cid), 1e9) AS z_cidn
	FROM r JOIN c USING (comm_hash)
),
f AS MATERIALIZED (
	SELECT p.*,
	       -- a GPU idle most of the window clocks down because it has nothing to do: that
	       -- is the rank's effect (it waits on its host), not why it is slow
	       coalesce(p.gpu_samples >= 2 AND p.sm <= (1 - prm.clock_drop) * p.p_sm
			AND coalesce(p.idle_pct, 0) < 50 AND p.z_sm > prm.thr, 0) AS f_gpu,
	       -- its GPU's SMs busier than its peers' (GPM: the share of SMs with work, not
	       -- NVML's "a kernel ran", so a collective kernel spinning on a few SMs in wait
	       -- for it does not count as its peers' work): it had more GPU work, or did the
	       -- same slower. A neighbour sharing its GPU half the time on 4 H200s: 91 % against
	       -- 77 % (CNN, FSDP), 83 % against 60 % (transformer, DDP); clean phases of either
	       -- stayed within 2 points above their median
	       coalesce(p.smb - p.p_smb >= prm.sm_gap AND p.z_smb > prm.thr, 0) AS f_work,
	       -- its GPU ran its compute kernels more of the window than its peers' did theirs
	       -- (fleetq's CUDA injection library; NCCL's kernels not counted, so waiting for
	       -- a straggler is not work here): the same work took it longer, or it had more.
	       -- On 4 H200s a GPU slowed 10-20 % (a spin after every layer) or shared with a
	       -- neighbour idled 3-24 points less than its peers'; the ranks whose CPU held
	       -- them back (a sleep, a busy loop, a clean phase's pacer) idled 3-8 points more
	       coalesce(p.p_cid - p.cid >= prm.idle_gap AND p.z_cidn > prm.thr, 0) AS f_comp,
	       coalesce(p.pre - p.p_pre >= 100 * prm.offcpu_gap AND p.z_pre > prm.thr, 0) AS f_pre,
	       coalesce(p.blk - p.p_blk >= 100 * prm.offcpu_gap AND p.z_blk > prm.thr, 0) AS f_blk,
	       coalesce(p.ib - p.p_ib >= prm.ib_min AND p.ib >= 2 * p.p_ib AND p.z_ib > prm.thr,
			0) AS f_ib,
	       coalesce(p.tcp - p.p_tcp >= prm.retrans_min AND p.tcp >= 2 * p.p_tcp
			AND p.z_tcp > prm.thr, 0) AS f_tcp,
	       coalesce(p.tcpo - p.p_tcpo >= prm.retrans_min AND p.tcpo >= 2 * p.p_tcpo
			AND p.z_tcpo > prm.thr, 0) AS f_tcpo,
	       -- its GPU less busy than its peers': a straggler's GPU waits for its host (a CPU
	       -- loop, a sleep the off-CPU rules did not single out, data, or a CPU-bound process
	       -- that runs slower than its peers: where its threads run, its NUMA node). A rank
	       -- that is slow on its GPU is as busy as its peers or busier
	       -- (NVML counts a collective kernel spinning in wait for the straggler as busy, so
	       -- its peers look busier whatever slowed it; taking their excess collective time
	       -- off the gap cleared the host on a GPU 20 % slower under FSDP on 2 H200s, and on
	       -- all five CPU faults' ranks as well: the line below says so instead)
	       coalesce(p.gpu_samples >= 2 AND p.p_ut - p.util_pct >= prm.util_gap
			AND p.z_ut > prm.thr, 0) AS f_host,
	       -- the same told by its compute kernels: its GPU idled more than its peers' (not
	       -- fooled by collective kernels spinning in wait, which NVML counts as busy)
	       coalesce(p.cid - p.p_cid >= prm.idle_gap AND p.z_cid > prm.thr, 0) AS f_chost
	FROM p, prm
),
-- the rank whose own sockets retransmitted most, past the TCP rule: its link delays every
-- rank its data reaches (round a ring, the next rank is done last and so waits least of all:
-- the verdict names that rank, which has nothing of its own to show)
lk AS (
	SELECT comm_hash, node, rank, pid, tcpo, p_tcpo, tcp_flow,
	       row_number() OVER (PARTITION BY comm_hash ORDER BY tcpo DESC, node, rank) AS k
	FROM f WHERE f_tcpo
),
g AS (
	SELECT f.*, l.k IS NOT NULL AS f_link, l.rank AS l_rank, l.node AS l_node,
	       l.tcpo AS l_tcpo, l.p_tcpo AS l_p_tcpo, l.tcp_flow AS l_flow
	FROM f LEFT JOIN lk l ON l.comm_hash = f.comm_hash AND l.k = 1
		AND NOT (l.node IS f.node AND l.rank IS f.rank AND l.pid IS f.pid)
)
SELECT comm_hash, node, rank, pid, gpu_index, gpu_samples, round(sm) AS sm_mhz,
       round(p_sm) AS peer_sm_mhz, sm_max_mhz, reason AS gpu_reason,
       round(util_pct, 1) AS util_pct, round(p_ut, 1) AS peer_util_pct, temp_c,
       round(pre, 1) AS preempted_pct, round(p_pre, 1) AS peer_preempted_pct,
       round(blk, 1) AS blocked_pct, round(p_blk, 1) AS peer_blocked_pct,
       tcp AS tcp_retrans, p_tcp AS peer_tcp_retrans, tcpo AS tcp_own, p_tcpo AS peer_tcp_own,
       tcp_flow, ib AS ib_errors, p_ib AS peer_ib_errors,
       ib_worst, round(coll, 1) AS coll_gpu_pct, round(p_coll, 1) AS peer_coll_gpu_pct,
       CASE WHEN f_gpu THEN 'gpu_clock' WHEN f_work THEN 'gpu_work'
	    WHEN f_comp THEN 'gpu_compute' WHEN f_pre THEN 'preempted'
	    WHEN f_blk THEN 'blocked' WHEN f_ib THEN 'ib' WHEN f_tcp OR f_tcpo THEN 'tcp'
	    WHEN f_host OR f_chost THEN 'host' WHEN f_link THEN 'tcp_peer' END AS cause,
       nullif(substr(iif(f_gpu, ',gpu_clock', '') || iif(f_work, ',gpu_work', '') ||
		     iif(f_comp, ',gpu_compute', '') || iif(f_pre, ',preempted', '') ||
		     iif(f_blk, ',blocked', '') || iif(f_ib, ',ib', '') || iif(f_tcp OR f_tcpo, ',tcp', '') ||
		     iif(f_host OR f_chost, ',host', '') || iif(f_link, ',tcp_peer', ''), 2), '')
	       AS causes,
       CASE WHEN f_gpu THEN printf('GPU %d at %,d MHz vs %,d median (%s)', gpu_index,
				   CAST(round(sm) AS INTEGER), CAST(round(p_sm) AS INTEGER),
				   coalesce(reason, 'no clock-event reason reported'))
	    WHEN f_work THEN printf('GPU %d''s SMs busy %.0f%% of the time vs %.0f%% median: '
				    || 'more GPU work than its peers, or the same work slower (a '
				    || 'process sharing the GPU, uneven work, a slower GPU)',
				    gpu_index, smb, p_smb)
	    WHEN f_comp THEN printf('%s ran no compute kernel %.0f%% of the window vs %.0f%% '
				    || 'median: it took longer over its work than its peers'' '
				    || 'GPUs, or had more of it (a slower or shared GPU, uneven '
				    || 'work), not its host', gpu_name, cid, p_cid)
	    WHEN f_pre THEN printf('preempted %.0f%% of the window vs %.0f%% median '
				   || '(CPU contention)', pre, p_pre)
	    WHEN f_blk THEN printf('blocked %.0f%% of the window outside GPU waits '
				   || 'vs %.0f%% median (I/O or sleep)', blk, p_blk)
	    WHEN f_ib THEN printf('%,d InfiniBand errors on its node (%s) vs %,d median '
				  || '(network)', CAST(ib AS INTEGER), ib_worst,
				  CAST(round(p_ib) AS INTEGER))
	    WHEN f_tcpo THEN printf('%,d TCP retransmits of its own sockets vs %,d median (flow '
				    || '%s; network)', CAST(tcpo AS INTEGER),
				    CAST(round(p_tcpo) AS INTEGER), coalesce(tcp_flow, '?'))
	    WHEN f_tcp THEN printf('%,d TCP retransmits on its node vs %,d median (network)',
				   CAST(tcp AS INTEGER), CAST(round(p_tcp) AS INTEGER))
	    WHEN f_chost THEN printf('%s ran no compute kernel %.0f%% of the window vs %.0f%% '
				     || 'median: its work reached the GPU late from its host (CPU '
				     || 'work, launches, data, or a process slower on its cores: '
				     || 'check where it runs; a virtual machine''s vCPU can run slower '
				     || 'unseen), not a slower GPU', gpu_name, cid, p_cid)
	    -- the gap within what its peers' collective kernels spun beyond its own: either
	    WHEN f_host AND p_coll - coll >= p_ut - util_pct
		THEN printf('GPU %d busy %.0f%% of the time vs %.0f%% median, but its peers'' '
			    || 'collective kernels ran %.0f points more (waiting on it is busy '
			    || 'to NVML): its host held its work back, or its GPU was slower '
			    || '(the two look alike here)', gpu_index, util_pct, p_ut, p_coll - coll)
	    WHEN f_host THEN printf('GPU %d busy %.0f%% of the time vs %.0f%% median: its work '
				    || 'reached the GPU late from its host (CPU work, data, or a '
				    || 'process slower on its cores: check where it runs; a virtual '
				    || 'machine''s vCPU can run slower unseen)', gpu_index, util_pct,
				    p_ut)
	    WHEN f_link THEN printf('none of its own; rank %s''s sockets (%s) retransmitted %,d '
				    || 'TCP segments vs %,d median (flow %s): a lossy link delays '
				    || 'the ranks its data reaches (network; fleetq netcheck)',
				    coalesce(l_rank, '?'), l_node, CAST(l_tcpo AS INTEGER),
				    CAST(round(l_p_tcpo) AS INTEGER), coalesce(l_flow, '?'))
	    WHEN p_sm IS NULL AND p_pre IS NULL AND p_tcp IS NULL
		THEN 'none measured (no peer to compare with)'
	    WHEN p_sm IS NULL THEN 'none measured (off-CPU, network equal to peers; no GPU samples)'
	    ELSE 'none measured (GPU clocks, off-CPU, network equal to peers)' END AS likely_cause,
       round(smb, 1) AS sm_busy_pct, round(p_smb, 1) AS peer_sm_busy_pct,
       round(cid, 1) AS compute_idle_pct, round(p_cid, 1) AS peer_compute_idle_pct
FROM g
