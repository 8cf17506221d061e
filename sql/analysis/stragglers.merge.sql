-- SPDX-License-Identifier: MIT
-- stragglers.merge.sql: `fleetq stragglers`, run over the merged rows of
-- stragglers.node.sql (table results: node, then that file's columns) and the table
-- clock(node, offset_ns, rtt_ns, samples), offset = node clock minus coordinator clock.
-- docs/analysis.md explains the method; the short form is DESIGN.md section 2.
--
-- Every signal compares the ranks of one communicator over the SAME span: the seqs that
-- every answering rank reached (GPU-side: the (op, seq) every rank's plugin reported). A
-- step holds many collectives (gradient buckets, layers) and often one synchronize, so the
-- CPU-side signals are totals over that span, not medians of per-collective values.
--
-- Parameters (all optional; unbound = NULL = the default):
--   :threshold      robust z above which a signal counts (3.5, Iglewicz-Hoaglin)
--   :min_effect     a signal names a rank only when its effect is at least this share of
--                   the span (wait, GPU) or of the step (lateness): the peers' lost time
--                   (0.03; `fleetq stragglers --min-effect PCT`)
--   :floor          the MAD is floored at this share of the span (totals) or of the step
--                   (lateness): noise between equal ranks never scores; a rank that waited
--                   more than a peer of its Send/Recv by more than this share of the span
--                   is named by no communicator (0.005)
--   :min_effect_ns  the same floor in ns, for very short spans (20000)
--   :effect_steps   over a span of fewer steps than this, :min_effect and :pair_effect grow by
--                   sqrt(:effect_steps / steps): a short window averages fewer steps, and a
--                   clean rank's effect strays further (100; 0: a fixed bar; `fleetq
--                   stragglers --effect-steps N`)
--   :pair_effect    :min_effect where a communicator has two ranks (at least :min_effect):
--                   nothing measures a pair's noise, and two clean ranks of real jobs
--                   differed by up to 4.4 % of the span (docs/analysis.md) (0.05)
--   :clock_margin   lateness counts on its own only when it is this many times the clock
--                   offset's uncertainty (half the best ping's RTT per node; 0 on one node)
--                   (10)
--   :hang_ns        a rank behind its communicator's newest seq whose newest collective is
--                   older than max(:hang_ns, 10 step periods) is hung (1.5e9)
--   :all_ranks      1: one row per rank, 'ok' ones too; default: only hung and stragglers
--   :busy_idle      the compute stream names a rank only where its own GPU ran no compute
--                   kernel for at most this share of the span (0.15): a GPU that idles more
--                   is not what its job waits on, and GPUs that a CPU-bound job's launches
--                   keep waiting idle by different amounts from rank to rank; past it,
--                   only where its peers' kernels over every op waited for it and nothing
--                   else names it (a job bound by its network)
--
-- One row per (comm_hash, node, rank, pid), hung first, then stragglers, then by effect:
--   comm_hash (fleetq's; 'nccl:<hash>' for a communicator only the NCCL plugin saw), node,
--   rank, pid, nranks (declared), ranks (answering), verdict ('hung' | 'straggler' | 'ok'),
--   signals (those that name it: late, wait, gpu, pace; cpu when its CPU work also stands out),
--   method ('mad': robust z across ranks; 'pair': 2 ranks, the difference over the floor),
--   effect_pct (the largest naming signal's effect, a pair's kernels' alone where known: the
--   share of the span its peers lost, or its lateness as a share of the step; pace's uniform
--   estimate where it names the rank alone), z_late,
--   z_wait, z_gpu, z_cpu (oriented: positive = straggler-like), late_ms (median lateness per collective), wait_ms and
--   peer_wait_ms (wait on the GPU per step: this rank, the communicator's median),
--   gpu_op, gpu_ms and peer_gpu_ms (the collective kernel's median GPU time for the op that
--   stands out most: this rank, its peers), cpu_ms and peer_cpu_ms (CPU work per step),
--   peers_wait_s (GPU-seconds its peers waited on it in the span), clock_err_ms (the
--   lateness's uncertainty; NULL: unknown), span_s, step_ms, last_seq, stopped_at_seq,
--   stopped_op, stopped_s_ago, job_rank (the process's rank in the job, its RANK; NULL:
--   unknown; `rank` is its rank in this communicator), bar_pct (the effect a signal needed
--   to name a rank of this communicator: :min_effect, :pair_effect for a pair, grown for a
--   short span), bar_steps (the span's steps where the bar grew for it, else NULL),
--   near_signal, near_pct (a rank not named: of its signals past :threshold on their own z,
--   wait, gpu, cpu (a pair's kernels alone where known) or pace (where its kernels and the
--   job's pace would let it name: the uniform slowdown's estimate), the one whose effect is
--   largest,
--   and that effect; else NULL: what a clean verdict missed naming it by, against bar_pct),
--   z_pace, pace_ms and peer_pace_ms (its GPU's compute before a collective that opens a
--   step: oriented z, per such collective, its peers'; NULL where not measured: see ggap),
--   effect_model ('uniform' where effect_pct is pace's estimate alone, which assumes its GPU
--   is slower all through its step; else NULL: the peers' measured loss), peers_kern_pct
--   (its peers' collective kernels over every op of the communicator less its own, % of the
--   span: the most a rank whose kernels lean its way can cost; NULL for a pair or without
--   the GPU side), idle_pct and peer_idle_pct (fleetq's CUDA injection library: the share
--   of the span its GPU ran no compute kernel, i.e. none but NCCL's, and its communicator's
--   median; NULL without every rank's slices), z_compute (its idle share's oriented z).
WITH
-- each process's rank in the job, where its node knows it
jr AS (
	SELECT node, pid, max(job_rank) AS job_rank FROM results
	WHERE kind IN ('rank', 'kern') AND job_rank IS NOT NULL GROUP BY node, pid
),
prm AS (
	SELECT coalesce(:threshold, 3.5) AS thr, coalesce(:min_effect, 0.03) AS eff,
	       max(coalesce(:pair_effect, 0.05), coalesce(:min_effect, 0.03)) AS peff,
	       coalesce(:floor, 0.005) AS fl, coalesce(:min_effect_ns, 20000) AS fl_ns,
	       coalesce(:clock_margin, 10) AS ck, coalesce(:hang_ns, 1.5e9) AS hang_ns,
	       coalesce(:all_ranks, 0) AS all_ranks, coalesce(:effect_steps, 100) AS esteps,
	       coalesce(:busy_idle, 0.15) AS bidle
),
-- each rank's collectives in one piece: a node sends a 'rank' row per 65536 seqs (a row has
-- a size limit), mostly one; the objects and arrays of a rank's rows are spliced together
-- (a communicator made by ncclCommSplit has no rank or size on the CPU side, NCCL decides
-- them inside the call; the plugin's kernels of that process and communicator carry them,
-- so one process is one row, not a CPU one and a GPU one)
kr AS MATERIALIZED (
	SELECT node, pid, comm_hash, max(rank) AS rank, max(nranks) AS nranks FROM results
	WHERE kind = 'kern' AND comm_hash IS NOT NULL GROUP BY node, pid, comm_hash
),
rk AS (
	SELECT x.node, x.comm_hash, coalesce(x.rank, k.rank) AS rank, x.pid,
	       coalesce(max(x.nranks), max(k.nranks)) AS nranks,
	       '{' || group_concat(substr(x.by_seq, 2, length(x.by_seq) - 2)) || '}' AS by_seq,
	       '[' || group_concat(substr(x.gap_list, 2, length(x.gap_list) - 2)) || ']' AS gap_list
	FROM results x LEFT JOIN kr k ON x.rank IS NULL AND k.node = x.node AND k.pid = x.pid
					 AND k.comm_hash = x.comm_hash
	WHERE x.kind = 'rank'
	GROUP BY x.node, x.comm_hash, coalesce(x.rank, k.rank), x.pid
),
-- ranks answering in the window, per communicator
nr AS (
	SELECT comm_hash, count(*) AS n FROM rk GROUP BY comm_hash
),
-- each node's time and host, once per node (a subquery per 'last' row would scan results
-- each time); a node that tells no host is a host of its own; which threads its cpu_ns
-- counts: 'job' (NCCL's own left out), else 'all' (an agent that does not say, or could not
-- tell them apart, counted every thread)
nowr AS (
	SELECT node, max(ts_ns) AS now_ns, coalesce(max(host), node) AS host,
	       iif(max(op) LIKE 'every thread but %', 'job', 'all') AS cpu_work
	FROM results WHERE kind = 'now' GROUP BY node
),
-- the clock offset that applies to each node: nodes of one host read one clock, so they all
-- take the offset of its best-sampled node (no noise between them); a node without a clock
-- row keeps none (its lateness is then of unknown uncertainty: see cs.clock_err)
koff AS (
	SELECT k.node, k.rtt_ns,
	       coalesce((SELECT k2.offset_ns FROM nowr w2 JOIN clock k2 ON k2.node = w2.node
			 WHERE w2.host = w.host ORDER BY k2.rtt_ns, k2.node LIMIT 1),
			k.offset_ns) AS offset_ns
	FROM clock k LEFT JOIN nowr w ON w.node = k.node
),
-- seqs every answering rank of the communicator reached, who arrived first, and what ran
-- there, from the nodes' 'seq' rows (their earliest enqueue and how many ranks enqueued it)
full AS MATERIALIZED (
	SELECT g.comm_hash, g.seq, g.t_first, g.op, g.cnt,
	       g.seq = min(g.seq) OVER (PARTITION BY g.comm_hash) AS first
	FROM (SELECT s.comm_hash, s.seq, min(s.ts_ns - coalesce(k.offset_ns, 0)) AS t_first,
		     sum(s.n) AS k, max(s.op) AS op, max(s.count) AS cnt
	      FROM results s LEFT JOIN koff k ON k.node = s.node
	      WHERE s.kind = 'seq' GROUP BY s.comm_hash, s.seq) g
	JOIN nr ON nr.comm_hash = g.comm_hash AND nr.n = g.k
),
-- the step, learnt from the trace: the smallest period p (collectives a step) at which what
-- runs repeats: seq s and s + p ran the same op on as many elements, and the first arrival's
-- gap to the next seq is alike (within a quarter). Gradient buckets of one size still show
-- their step: the gap before the first bucket of a step is the forward pass. The smallest
-- period that matches for 90 % of the span, or about as well as the best one (a multiple of
-- the step matches as well as the step): within 5 points, or within 3 standard errors of the
-- best's share where that is wider (one collective a step with noisy gaps matches about as
-- well at every period, and the best of 64 is then a multiple by chance: a live stand-in
-- pipeline had 0.904 at 15 against 0.873 at 1), else 1 (the mean gap). The period found
-- must also beat the next seq by 3 of its standard errors (5 points at least), else 1: one
-- all-reduce a step whose steps vary by a third matches under half its pairs at every
-- period, and of 64 periods one passes half by chance (tests/analysis/period.py: the step
-- 2 to 22 times too long for 5 of 8 such jobs of 100 steps). Where that gives 1 but the ops
-- change from seq to seq (under 90 % of seqs match the next one's op and count), the
-- smallest period at which op and count alone repeat for 98 % of the span: FSDP's
-- all-gathers and reduce-scatters, enqueued by a CPU that runs ahead of its GPU as its
-- launch queue lets it, repeat at the step while their gaps do not (the stand-in's FSDP with
-- a sync every 20 steps: 1.1-1.7 ms a step read, 28.6-36.2 ms run)
pk(p) AS (SELECT 1 UNION ALL SELECT p + 1 FROM pk WHERE p < 64),
fg AS MATERIALIZED (
	SELECT a.comm_hash, a.seq, a.op, a.cnt, b.t_first - a.t_first AS gap
	FROM full a JOIN full b ON b.comm_hash = a.comm_hash AND b.seq = a.seq + 1
),
per AS (
	SELECT a.comm_hash, pk.p,
	       avg(a.op IS b.op AND a.cnt IS b.cnt
		   AND abs(a.gap - b.gap) <= 0.25 * max(a.gap, b.gap) + 20000) AS m,
	       avg(a.op IS b.op AND a.cnt IS b.cnt) AS ms,
	       count(*) AS k
	-- (the join order is the plan: each (seq, p) looks its partner up through an automatic
	-- index on fg)
	FROM fg a CROSS JOIN pk CROSS JOIN fg b
	WHERE b.comm_hash = a.comm_hash AND b.seq = a.seq + pk.p
	GROUP BY a.comm_hash, pk.p
),
pbest AS (
	-- (k: the pairs the best period was judged on, from the row max() picked)
	SELECT comm_hash, max(m) AS best, k FROM per WHERE k >= 2 * p GROUP BY comm_hash
),
period AS (
	SELECT c0.comm_hash,
	       CASE WHEN c.m >= o.m + max(0.05, 3 * sqrt(o.m * (1 - o.m) / o.k)) THEN c.p
		    -- the gaps tell nothing (a CPU that runs ahead of its GPU enqueues as its
		    -- launch queue lets it): the ops alone, where they change within a step
		    -- (FSDP's all-gathers and reduce-scatters) and repeat at p for 98 % of it
		    WHEN o.ms < 0.9 THEN coalesce((SELECT min(x.p) FROM per x
						   WHERE x.comm_hash = c0.comm_hash AND x.p > 1
						     AND x.ms >= 0.98 AND x.k >= 2 * x.p), 1)
		    ELSE 1 END AS p
	FROM (SELECT per.comm_hash,
		     coalesce(min(per.p) FILTER (WHERE per.m >= 0.5 AND per.k >= 2 * per.p
						 AND per.m >= min(0.9, b.best - max(0.05,
						      3 * sqrt(b.best * (1 - b.best) / b.k)))), 1) AS p
	      FROM per JOIN pbest b USING (comm_hash) GROUP BY per.comm_hash) c0
	JOIN per c ON c.comm_hash = c0.comm_hash AND c.p = c0.p
	JOIN per o ON o.comm_hash = c0.comm_hash AND o.p = 1
),
-- per host, who of its ranks arrived first: one clock, no offset
hfull AS (
	SELECT s.comm_hash, coalesce(w.host, s.node) AS host, s.seq, min(s.ts_ns) AS t_host
	FROM results s LEFT JOIN nowr w ON w.node = s.node
	WHERE s.kind = 'seq' GROUP BY s.comm_hash, coalesce(w.host, s.node), s.seq
),
-- per rank, one pass over its JSON (seq -> [enqueue, wait, cpu]) joined to the seqs every
-- rank reached: median lateness on the coordinator's clock, total wait, total CPU work, the
-- span on the rank's own clock, how many; the join order is the plan (each member looks
-- full up by (seq, comm_hash) through an automatic index)
ra AS (
	SELECT x.comm_hash, x.node, x.rank, x.pid, x.nranks, k.rtt_ns, k.node IS NOT NULL AS clocked,
	       coalesce(w.host, x.node) AS host, coalesce(w.cpu_work, 'all') AS cpu_work,
	       (SELECT json_array(median(j.value ->> 0 - coalesce(k.offset_ns, 0) - f.t_first),
				  sum(j.value ->> 1), sum(j.value ->> 2), count(j.value ->> 2),
				  max(j.value ->> 0) - min(j.value ->> 0), count(*))
		FROM json_each(x.by_seq) j CROSS JOIN full f
		-- (not the span's first seq: its wait and CPU work were summed since the rank's
		-- previous collective, before the window: a pause, a barrier, a checkpoint)
		WHERE f.seq = j.key + 0 AND f.comm_hash = x.comm_hash AND NOT f.first) AS a,
	       (SELECT median(value) FROM json_each(x.gap_list)) AS gap
	FROM rk x LEFT JOIN koff k ON k.node = x.node LEFT JOIN nowr w ON w.node = x.node
),
r AS (
	SELECT comm_hash, node, rank, pid, nranks, rtt_ns, clocked, gap, host,
	       a ->> 0 AS late, a ->> 1 AS wait,
	       -- (CPU work only where every rank's agent counts the same threads: one that
	       -- counts NCCL's spinning progress thread too is not comparable)
	       iif(a ->> 3 > 0 AND min(cpu_work) OVER (PARTITION BY comm_hash)
				    = max(cpu_work) OVER (PARTITION BY comm_hash), a ->> 2, NULL) AS cpu,
	       a ->> 4 AS span, a ->> 5 AS nfull,
	       count(*) OVER (PARTITION BY comm_hash, host) AS on_host
	FROM ra
),
-- per communicator: centre and spread of each signal, the span, the step, the clock error
cm AS (
	SELECT r.comm_hash, count(*) AS n, median(r.span) AS span, median(r.nfull) AS nfull,
	       median(r.gap) AS gap, count(DISTINCT r.host) AS hosts,
	       min(r.clocked) AS clocked, max(r.rtt_ns) AS rtt,
	       median(r.late) AS m_late, mad(r.late) AS d_late, sum(r.late) AS s_late,
	       median(r.wait) AS m_wait, mad(r.wait) AS d_wait, sum(r.wait) AS s_wait,
	       median(r.cpu) AS m_cpu, mad(r.cpu) AS d_cpu, sum(r.cpu) AS s_cpu, count(r.cpu) AS n_cpu
	FROM r GROUP BY r.comm_hash
),
cs AS (
	SELECT cm.*, coalesce(pe.p, 1) AS period,
	       -- collectives a step times the mean gap over the span
	       CASE WHEN cm.nfull > 1 AND cm.span > 0
		    THEN cm.span * coalesce(pe.p, 1) / (cm.nfull - 1) ELSE cm.gap END AS step,
	       -- the offset's uncertainty: a half RTT per node, two nodes apart; one host, none
	       CASE WHEN cm.hosts = 1 THEN 0 WHEN cm.clocked THEN cm.rtt END AS clock_err,
	       max(prm.fl * cm.span, prm.fl_ns) AS floor_span
	FROM cm LEFT JOIN period pe USING (comm_hash), prm
),
-- a span of few steps: its ranks' totals average fewer steps, so a clean rank's effect
-- strays further; the bar grows as the noise does, sqrt(:effect_steps / steps), never below
-- :min_effect
esc AS (
	SELECT cs.comm_hash,
	       max(1, coalesce(sqrt(prm.esteps * cs.step / nullif(cs.span, 0)), 1)) AS scale
	FROM cs, prm
),
-- oriented robust z per signal (with 2 ranks the other rank is the centre and the floor the
-- scale) and each signal's effect
z AS (
	SELECT r.*, cs.n, cs.step, cs.span AS cspan, cs.period, cs.nfull AS cnfull, cs.clock_err,
	       e.scale AS escale,
	       cs.m_wait, cs.m_cpu, iif(cs.n = 2, prm.peff, prm.eff) * e.scale AS eff_n,
	       max(prm.fl * cs.step, prm.fl_ns, coalesce(cs.clock_err, 0)) AS floor_late,
	       CASE WHEN cs.n = 2 THEN robust_z(r.late, cs.s_late - r.late,
					       max(prm.fl * cs.step, prm.fl_ns, coalesce(cs.clock_err, 0)))
		    ELSE robust_z(r.late, cs.m_late, max(cs.d_late, prm.fl * cs.step, prm.fl_ns,
							 coalesce(cs.clock_err, 0))) END AS z_late,
	       -CASE WHEN cs.n = 2 THEN robust_z(r.wait, cs.s_wait - r.wait, cs.floor_span)
		     ELSE robust_z(r.wait, cs.m_wait, max(cs.d_wait, cs.floor_span)) END AS z_wait,
	       CASE WHEN cs.n_cpu < cs.n THEN NULL
		    WHEN cs.n = 2 THEN robust_z(r.cpu, cs.s_cpu - r.cpu, cs.floor_span)
		    ELSE robust_z(r.cpu, cs.m_cpu, max(cs.d_cpu, cs.floor_span)) END AS z_cpu,
	       -- what its peers lost: their (median) wait beyond this rank's, a share of the span
	       ((CASE WHEN cs.n = 2 THEN cs.s_wait - r.wait ELSE cs.m_wait END) - r.wait)
		       / nullif(cs.span, 0) AS e_wait,
	       -- lateness beyond the communicator's usual (someone is always first)
	       (r.late - CASE WHEN cs.n = 2 THEN cs.s_late - r.late ELSE cs.m_late END)
		       / nullif(cs.step, 0) AS e_late,
	       (r.cpu - CASE WHEN cs.n = 2 THEN cs.s_cpu - r.cpu ELSE cs.m_cpu END)
		       / nullif(cs.span, 0) AS e_cpu,
	       -- GPU-seconds peers waited on this rank: sum over peers with a longer total wait
	       -- of (theirs - this rank's), over the seqs every rank reached
	       (sum(r.wait) OVER wd - count(r.wait) OVER wd * r.wait) / 1e9 AS peers_wait_s
	FROM r JOIN cs USING (comm_hash) JOIN esc e USING (comm_hash), prm
	WINDOW wd AS (PARTITION BY r.comm_hash ORDER BY r.wait DESC
		      RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
-- GPU side (fleetq's NCCL plugin): each rank's kernels per (NCCL communicator, op), spliced
gk AS (
	SELECT node, nccl_comm, op, rank, pid, max(nranks) AS nranks,
	       coalesce(max(comm_hash), 'nccl:' || nccl_comm) AS comm_hash,
	       '{' || group_concat(substr(gpu_by_seq, 2, length(gpu_by_seq) - 2)) || '}' AS g,
	       max(gpu_span_ns) AS gspan
	FROM results WHERE kind = 'kern'
	GROUP BY node, nccl_comm, op, rank, pid
),
gnr AS (
	SELECT nccl_comm, op, count(*) AS n FROM gk GROUP BY nccl_comm, op
),
-- the (op, seq) every rank's plugin reported
gfull AS (
	SELECT c.nccl_comm, c.op, c.seq
	FROM (SELECT x.nccl_comm, x.op, j.key + 0 AS seq, count(*) AS k
	      FROM gk x, json_each(x.g) j GROUP BY x.nccl_comm, x.op, j.key + 0) c
	JOIN gnr ON gnr.nccl_comm = c.nccl_comm AND gnr.op IS c.op AND gnr.n = c.k
),
-- each rank's kernel time per (op, seq) every rank reached: one pass over its JSON
gsq AS MATERIALIZED (
	SELECT x.node, x.nccl_comm, x.op, x.rank, x.pid, x.nranks, x.comm_hash, x.gspan,
	       j.key + 0 AS seq, j.value AS d
	-- the join order is the plan: each member looks gfull up through an automatic index
	FROM gk x CROSS JOIN json_each(x.g) j CROSS JOIN gfull f
	WHERE f.seq = j.key + 0 AND f.nccl_comm = x.nccl_comm AND f.op IS x.op
),
gt AS (
	SELECT node, nccl_comm, op, rank, pid, max(nranks) AS nranks, max(comm_hash) AS comm_hash,
	       max(gspan) AS gspan, sum(d) AS tot, median(d) AS med, count(*) AS nk
	FROM gsq GROUP BY node, nccl_comm, op, rank, pid
),
gcm AS (
	SELECT nccl_comm, op, count(*) AS n, median(med) AS m, mad(med) AS d, sum(med) AS s,
	       median(tot) AS mt, mad(tot) AS dt, sum(tot) AS st, median(gspan) AS gspan,
	       median(nk) AS nk, max(comm_hash) AS comm_hash
	FROM gt GROUP BY nccl_comm, op
),
-- what the peers lost, per step: a late rank makes every later kernel of the step wait as
-- well (gradient buckets, layers), so the sum of the kernels' waits counts one delay many
-- times over; the step's largest wait is the delay. The op's kernels a step: its kernels in
-- the span over the communicator's learnt step (1 where no step is known: each kernel)
gkps AS (
	SELECT c.nccl_comm, c.op,
	       max(1, CAST(round(c.nk * coalesce(s.step, 0) / nullif(c.gspan, 0)) AS INTEGER)) AS k
	FROM gcm c LEFT JOIN cs s ON s.comm_hash = c.comm_hash
),
-- the rank whose kernels are shortest arrived last: its peers' kernels waited for it. Two
-- views of one op, the larger z wins: each rank's total over the span (what its peers lost,
-- however it is spread) and its median kernel (the consistent departure, which a few long
-- outlier kernels do not move); the floors are :floor of the span, and of it per kernel
gzz AS (
	SELECT t.*, c.n AS gn, iif(c.n = 2, prm.peff, prm.eff) * coalesce(e.scale, 1) AS eff_n,
	       coalesce(e.scale, 1) AS gscale,
	       -- (the bar before a short span's growth: what the kernels must confirm of the
	       -- waits' or the CPU work's verdict, which has passed the grown bar itself.
	       -- Lateness measures no lost time, so the kernels stay its effect: the grown bar)
	       iif(c.n = 2, prm.peff, prm.eff) AS eff_b,
	       -CASE WHEN c.n = 2 THEN robust_z(t.tot, c.st - t.tot, max(prm.fl * c.gspan, prm.fl_ns))
		     ELSE robust_z(t.tot, c.mt, max(c.dt, prm.fl * c.gspan, prm.fl_ns)) END AS zt,
	       -CASE WHEN c.n = 2 THEN robust_z(t.med, c.s - t.med,
						max(prm.fl * c.gspan / c.nk, 2000))
		     ELSE robust_z(t.med, c.m, max(c.d, prm.fl * c.gspan / c.nk, 2000)) END AS zm,
	       CASE WHEN c.n = 2 THEN c.s - t.med ELSE c.m END AS peer_med, c.gspan AS cgspan,
	       (CASE WHEN c.n = 2 THEN c.st - t.tot ELSE c.mt END) - t.tot AS lost_tot
	FROM gt t JOIN gcm c USING (nccl_comm, op) LEFT JOIN esc e ON e.comm_hash = c.comm_hash, prm
	-- an op seen a few times (a barrier's all-reduce) says nothing on its own
	WHERE t.nk >= 16
),
-- the effect is asked only of a rank whose kernels lean its way, half as clearly as a
-- signal needs (the one pass below costs a sort of every kernel of the window otherwise):
-- where they do, they also bound what its synchronize waits may name (f_wait)
gcand AS MATERIALIZED (
	SELECT gzz.nccl_comm, gzz.op, gzz.node, gzz.rank, gzz.pid FROM gzz, prm
	WHERE max(gzz.zt, gzz.zm) > prm.thr / 2
),
gsm AS (
	SELECT q.nccl_comm, q.op, q.seq, median(q.d) AS md, sum(q.d) AS sd, count(*) AS c
	FROM gsq q WHERE (q.nccl_comm, q.op) IN (SELECT nccl_comm, op FROM gcand)
	GROUP BY q.nccl_comm, q.op, q.seq
),
glost AS (
	SELECT nccl_comm, op, node, rank, pid, sum(l) AS lost
	FROM (SELECT q.nccl_comm, q.op, q.node, q.rank, q.pid, q.seq / kk.k AS st,
		     max(0, max(CASE WHEN m.c = 2 THEN m.sd - 2 * q.d ELSE m.md - q.d END)) AS l
	      FROM gcand g CROSS JOIN gsq q CROSS JOIN gsm m CROSS JOIN gkps kk
	      WHERE q.nccl_comm = g.nccl_comm AND q.op IS g.op AND q.node IS g.node
		AND q.rank IS g.rank AND q.pid IS g.pid
		AND m.nccl_comm = q.nccl_comm AND m.op IS q.op AND m.seq = q.seq
		AND kk.nccl_comm = q.nccl_comm AND kk.op IS q.op
	      GROUP BY q.nccl_comm, q.op, q.node, q.rank, q.pid, st)
	GROUP BY nccl_comm, op, node, rank, pid
),
gz AS (
	-- (never more than the totals' difference: a step's largest wait also picks up the
	-- noise of a clean rank's kernels, which the totals average out)
	SELECT z.*, iif(z.zt >= z.zm, z.zt, z.zm) AS z_gpu,
	       max(0, min(l.lost, z.lost_tot)) / nullif(z.cgspan, 0) AS e_gpu
	FROM gzz z LEFT JOIN glost l ON l.nccl_comm = z.nccl_comm AND l.op IS z.op
				     AND l.node IS z.node AND l.rank IS z.rank AND l.pid IS z.pid
),
-- per rank, its kernels over every op of the communicator: a late rank's peers wait at
-- whichever collective comes next (a DDP job's buffer broadcast before the forward for some,
-- the first bucket's all-reduce for others), so one op alone may not show what they lost
gall AS (
	SELECT nccl_comm, node, rank, pid, sum(tot) AS tot, max(cgspan) AS gspan,
	       max(gn) AS gn FROM gzz GROUP BY nccl_comm, node, rank, pid
),
galle AS (
	SELECT a.nccl_comm, a.node, a.rank, a.pid, m.mt - a.tot AS lost, a.gspan,
	       -robust_z(a.tot, m.mt, max(m.dt, prm.fl * a.gspan, prm.fl_ns)) AS z_all
	FROM gall a JOIN (SELECT nccl_comm, median(tot) AS mt, mad(tot) AS dt FROM gall
			  GROUP BY nccl_comm) m USING (nccl_comm), prm
	WHERE a.gn >= 3
),
-- A GPU slower all through its step (a throttled one): its peers' kernels wait for each of
-- its buckets, but the step's largest wait is only its lead at the step's first collective,
-- about half what the job loses (BENCHMARKS.md, round 14). Where a step opens with a
-- collective after the compute of the forward pass (on every rank its GPU ran no collective
-- kernel for a quarter of the step before it), that compute is measured on each GPU, clock
-- free, and nobody waits inside it: the rank whose forward took longer than its peers' is
-- slower by that ratio, and a uniform slowdown costs the job that share of the rank's
-- compute, i.e. of its span outside its own collective kernels. Asked only of the
-- communicators where some rank's kernels lean its way (gcand), and only of the kernels
-- after a quarter step of idle GPU
gqs AS (
	SELECT c.nccl_comm, c.op, c.n, s.step / 4 AS q, s.m_wait >= 0.25 * s.span AS waits
	FROM gcm c JOIN cs s ON s.comm_hash = c.comm_hash
	WHERE c.nccl_comm IN (SELECT nccl_comm FROM gcand)
),
-- (each node row on its own: no splicing); k: how many ranks idled before that kernel;
-- fed: its CPU had enqueued it before its GPU began that idle time, so every kernel the GPU
-- ran in it was queued already: its GPU's own time, none of it waiting on its CPU; kf: how
-- many ranks were fed there. A node's rows are untrusted: numbers only, under a day
ggap AS (
	SELECT y.*, count(*) OVER s AS k, sum(y.fed) OVER s AS kf
	FROM (SELECT x.node, x.nccl_comm, x.op, x.rank, x.pid, g.n, g.waits, j.key + 0 AS seq,
		     j.value ->> 0 AS gp,
		     coalesce(json_type(j.value, '$[1]') IN ('integer', 'real')
			      AND j.value ->> 1 BETWEEN j.value ->> 0 AND 86400e9, 0) AS fed
	      FROM gqs g JOIN results x ON x.kind = 'kern' AND x.nccl_comm = g.nccl_comm
					AND x.op IS g.op
	      CROSS JOIN json_each(x.by_seq) j
	      WHERE j.type = 'array' AND json_type(j.value, '$[0]') IN ('integer', 'real')
		AND j.value ->> 0 > g.q AND j.value ->> 0 < 86400e9) y
	WINDOW s AS (PARTITION BY y.nccl_comm, y.op, y.seq)
),
-- over the collectives that open a step: every rank's GPU idle before them for a quarter
-- step (a seq every rank idled before is one every rank reached); of them, those where
-- every rank's CPU had queued that compute before its GPU began it (cf, nf)
gfw0 AS (
	SELECT nccl_comm, node, rank, pid, total(gp) AS c, count(*) AS nl,
	       total(iif(kf = n, gp, 0)) AS cf, sum(kf = n) AS nf, max(waits) AS waits
	FROM ggap WHERE k = n
	GROUP BY nccl_comm, node, rank, pid
),
-- Where the ranks' waits do not say the GPUs set the pace (the median rank waits on its
-- GPU under a quarter of the span): fed, 16 or more such collectives (each rank has the
-- same), the job's CPUs running ahead of their GPUs, whose pace is then the GPUs' own (with
-- a sync every K steps the CPU runs ahead and waits in its launches, which are not probed
-- by default); the GPU's compute is read over those alone, free of the CPU's latency. Else
-- over every collective that opens a step, as where the waits say it (a job that syncs
-- every step has its CPU ahead at some of them only: a CNN's last bucket, not its first)
-- paced: the GPUs set the job's pace, by the waits or (fed) by the plugin's rows
gfw AS (
	SELECT w.nccl_comm, w.node, w.rank, w.pid, iif(m.fed, w.cf, w.c) AS c,
	       iif(m.fed, w.nf, w.nl) AS nl, m.waits OR m.fed AS paced
	FROM gfw0 w
	JOIN (SELECT nccl_comm, max(waits) AS waits, NOT max(waits) AND min(nf) >= 16 AS fed
	      FROM gfw0 GROUP BY nccl_comm) m USING (nccl_comm)
),
gfc AS (
	SELECT nccl_comm, count(*) AS n, median(c) AS m, mad(c) AS d, sum(c) AS s
	FROM gfw GROUP BY nccl_comm
),
-- (peer: the other rank of a pair, else the median)
guni AS (
	SELECT w.nccl_comm, w.node, w.rank, w.pid, w.nl, w.c * 1.0 / w.nl AS pace,
	       w.peer * 1.0 / w.nl AS peer_pace, w.paced,
	       robust_z(w.c, w.peer, max(iif(w.n = 2, 0, w.d), prm.fl * w.m, prm.fl_ns)) AS z_fw,
	       (w.c - w.peer) * 1.0 / nullif(w.c, 0)
		       * max(0, 1 - a.tot * 1.0 / nullif(a.gspan, 0)) AS e_uni
	FROM (SELECT g.*, c.n, c.m, c.d, iif(c.n = 2, c.s - g.c, c.m) AS peer
	      FROM gfw g JOIN gfc c USING (nccl_comm)) w
	JOIN gall a ON a.nccl_comm = w.nccl_comm AND a.node IS w.node AND a.rank IS w.rank
		    AND a.pid IS w.pid, prm
	WHERE w.nl >= 16
),
-- The compute stream (fleetq's CUDA injection library, 'busy' rows): a GPU slower than its
-- peers idles least, while theirs idle in collectives waiting on it. Each process's buckets
-- of slices on the coordinator's clock (numbers only, under a day; a process that drives
-- several GPUs, or whose CUPTI dropped records, is left out: one pass over the 'busy'
-- rows, not a lookup of them per bucket)
bsl AS MATERIALIZED (
	SELECT b.node, b.pid, (j.value ->> 0) - coalesce(k.offset_ns, 0) AS t0, j.value ->> 1 AS d,
	       j.value ->> 2 AS busy
	FROM (SELECT node, pid, max(by_seq) AS by_seq FROM results WHERE kind = 'busy'
	      GROUP BY node, pid HAVING count(*) = 1 AND max(coalesce(count, 0)) = 0) b
	LEFT JOIN koff k ON k.node = b.node CROSS JOIN json_each(b.by_seq) j
	WHERE json_valid(b.by_seq)
	  AND typeof(j.value ->> 0) = 'integer' AND typeof(j.value ->> 1) = 'integer'
	  AND typeof(j.value ->> 2) = 'integer' AND j.value ->> 1 BETWEEN 1 AND 86400000000000
	  AND j.value ->> 2 BETWEEN 0 AND j.value ->> 1
),
-- the ranks of each communicator, CPU side or plugin side (a communicator whose init agentd
-- did not see has only the latter)
bm AS (
	SELECT comm_hash, node, rank, pid FROM r
	UNION SELECT comm_hash, node, rank, pid FROM gz
),
-- per communicator, the time every rank's slices cover (first start to last end), where
-- every rank has some and there are 3 or more: a pair has no population to say what is usual
bw AS (
	SELECT r.comm_hash, max(p.lo) AS t0, min(p.hi) AS t1
	FROM bm r LEFT JOIN (SELECT node, pid, min(t0) AS lo, max(t0 + d) AS hi FROM bsl
			  GROUP BY node, pid) p ON p.node = r.node AND p.pid = r.pid
	GROUP BY r.comm_hash
	HAVING count(*) >= 3 AND count(p.pid) = count(*) AND min(p.hi) - max(p.lo) >= 2000000000
),
-- per rank, the share of that time its GPU ran no compute kernel (a slice cut by the edge
-- counted pro rata), and the share its slices cover (a slice with no kernel has no row: a
-- GPU idle all through it, or CUPTI's records handed to another client, e.g. torch.profiler;
-- a rank with none in the stretch covers 0)
bi AS (
	SELECT r.comm_hash, r.node, r.rank, r.pid,
	       1 - coalesce(sum(s.busy * (min(s.t0 + s.d, w.t1) - max(s.t0, w.t0)) * 1.0 / s.d),
			    0) / (w.t1 - w.t0) AS idle,
	       coalesce(sum(min(s.t0 + s.d, w.t1) - max(s.t0, w.t0)), 0) * 1.0 / (w.t1 - w.t0)
		       AS cover
	FROM bm r JOIN bw w ON w.comm_hash = r.comm_hash
	LEFT JOIN bsl s ON s.node = r.node AND s.pid = r.pid AND s.t0 < w.t1
			AND s.t0 + s.d > w.t0
	GROUP BY r.comm_hash, r.node, r.rank, r.pid
),
-- per communicator: its ranks, those whose slices cover four fifths of the stretch and no
-- more than all of it (an agent that repeats a slice covers more) with a share between 0
-- and 1, and the centre and spread of the shares
bc AS (
	SELECT comm_hash, count(*) AS n,
	       count(*) FILTER (WHERE cover BETWEEN 0.8 AND 1.01 AND idle BETWEEN 0 AND 1) AS nv,
	       median(idle) AS m, mad(idle) AS dd
	FROM bi GROUP BY comm_hash
),
-- oriented z (least idle = straggler-like) and the effect: its communicator's median idle
-- share less its own, what the median peer's compute stream waited beyond its own; only
-- where every rank's share is sound
bz AS (
	SELECT b.comm_hash, b.node, b.rank, b.pid, b.idle, c.m AS peer_idle,
	       robust_z(-b.idle, -c.m, max(c.dd, prm.fl)) AS z_busy, c.m - b.idle AS e_busy
	FROM bi b JOIN bc c USING (comm_hash), prm
	WHERE c.nv = c.n
),
-- per rank, the op that stands out most
gb AS (
	SELECT x.*, ga.lost / nullif(ga.gspan, 0) AS e_all, ga.z_all, u.z_fw, u.e_uni, u.pace,
	       u.peer_pace, u.paced,
	       -- its kernels: the shortest at some op, clearly and by the bar, and its peers'
	       -- kernels over every op longer than its own by half the bar at least: a rank
	       -- shortest at one op and not over all of them cost its peers nothing (FSDP over
	       -- NCCL's sockets, each kernel waiting one transfer or two: a clean rank's
	       -- reduce-scatters sat on the short mode, z 7.9, 4.7 % of the span by the step's
	       -- largest wait, its peers' kernels over every op 0.0 % longer than its own)
	       (x.z_gpu > prm.thr AND x.e_gpu >= x.eff_n
		AND coalesce(ga.lost / nullif(ga.gspan, 0) >= x.eff_b / 2, 1)) AS kern
	FROM (SELECT gz.*, row_number() OVER (PARTITION BY comm_hash, node, rank, pid
					      ORDER BY z_gpu DESC) AS o FROM gz) x
	LEFT JOIN galle ga ON ga.nccl_comm = x.nccl_comm AND ga.node IS x.node
			   AND ga.rank IS x.rank AND ga.pid IS x.pid
	LEFT JOIN guni u ON u.nccl_comm = x.nccl_comm AND u.node IS x.node
			 AND u.rank IS x.rank AND u.pid IS x.pid, prm
	WHERE x.o = 1
),
flags AS (
	SELECT z.*,
	       -- lateness on its own: well past the clock's uncertainty, and not shared by the
	       -- other ranks of its host (a host whose clock is off makes all of them late)
	       (z.z_late > prm.thr AND z.e_late >= z.eff_n AND z.clock_err IS NOT NULL
		AND z.late >= prm.ck * z.clock_err
		-- (its lateness behind the first rank of its own host, on one clock: asked only of a
		-- rank whose lateness would count, one lookup per collective in hfull)
		AND (z.on_host = 1 OR CASE WHEN z.z_late > prm.thr AND z.e_late >= z.eff_n THEN
			(SELECT median(j.value ->> 0 - h.t_host)
			 FROM rk x CROSS JOIN json_each(x.by_seq) j CROSS JOIN hfull h
			 WHERE x.node = z.node AND x.comm_hash = z.comm_hash AND x.rank IS z.rank
			   AND x.pid = z.pid AND h.seq = j.key + 0 AND h.comm_hash = z.comm_hash
			   AND h.host = z.host)
			>= max(0.5 * z.e_late * z.step, z.eff_n * z.step) END)) AS f_late,
	       (z.z_wait > prm.thr AND z.e_wait >= z.eff_n) AS f_wait,
	       (z.z_cpu > prm.thr AND z.e_cpu >= z.eff_n) AS f_cpu
	FROM z, prm
),
-- progress: the newest collective of every rank over all time
lastr AS (
	SELECT l.node, l.comm_hash, coalesce(l.rank, r.rank) AS rank, l.pid,
	       coalesce(l.nranks, r.nranks) AS nranks, l.seq, l.ts_ns, w.now_ns,
	       l.ts_ns - coalesce(k.offset_ns, 0) AS t
	FROM results l LEFT JOIN nowr w ON w.node IS l.node LEFT JOIN koff k ON k.node = l.node
	LEFT JOIN kr r ON l.rank IS NULL AND r.node = l.node AND r.pid = l.pid
		       AND r.comm_hash = l.comm_hash
	WHERE l.kind = 'last'
),
lc AS (
	SELECT comm_hash, max(seq) AS maxseq, max(t) AS newest FROM lastr GROUP BY comm_hash
),
-- per communicator and newest seq, how long ago the last of its ranks got there
la AS MATERIALIZED (
	SELECT l.comm_hash, l.seq, min(coalesce(l.now_ns - l.ts_ns, lc.newest - l.t)) AS age
	FROM lastr l JOIN lc USING (comm_hash) GROUP BY l.comm_hash, l.seq
),
hang AS (
	SELECT l.node, l.comm_hash, l.rank, l.pid, l.nranks, l.seq AS last_seq,
	       -- on the rank's own clock when its node told us the time, else against the
	       -- newest collective of any rank of the communicator
	       coalesce(l.now_ns - l.ts_ns, lc.newest - l.t) AS age_ns,
	       l.seq < lc.maxseq AND coalesce(l.now_ns - l.ts_ns, lc.newest - l.t) >=
		       max(prm.hang_ns, 10 * coalesce(cs.step, 0))
	       -- and the ranks ahead have been waiting there a while: a communicator that idles
	       -- (a barrier's now and then) has ranks one seq apart for as long as the agents
	       -- take to store the newest (~0.2 s), with the last one long ago
	       AND (SELECT min(a.age) FROM la a WHERE a.comm_hash = l.comm_hash AND a.seq > l.seq)
		   >= max(prm.hang_ns, 10 * coalesce(cs.step, 0)) / 2 AS hung
	FROM lastr l JOIN lc USING (comm_hash) LEFT JOIN cs USING (comm_hash), prm
),
-- who waits on whom across Send/Recv (a pipeline's stages). A Recv waits on the GPU for its
-- sender, a Send for its receiver once its data outgrows NCCL's buffers, so a rank whose
-- Send/Recv kernels took more of its span than those of the ranks doing the same work took,
-- waited on its peers: it is downstream of
-- their delay, which reaches it through the Send/Recv and makes it late in its own
-- communicators too (a stage's all-reduce). "The same work": its siblings, the ranks of a
-- communicator it is in that holds none of its Send/Recv peers (a stage's data-parallel
-- group); the schedule makes every stage wait its own amount (in GPipe a stage-0 rank waits
-- more than a stage-1 rank), siblings alike. Per process: its Send/Recv share less the median
-- of its largest such communicator (a pair: the other rank's share), then per link the
-- peer's excess less its own (d). Where a process or a peer has no plugin rows or no
-- sibling: the CPU side's whole shares, its wait on the GPU (synchronize calls and the calls
-- themselves) over its Send/Recv's span, peer's less its own, schedule and all. Below
-- -:floor some peer waited less than it did
pp AS (
	SELECT node, pid, comm_hash, rank, gap_list AS peers,
	       (by_seq ->> 0) * 1.0 / nullif(by_seq ->> 1, 0) AS share,
	       by_seq ->> 2 AS rg, by_seq ->> 3 AS gs
	FROM results WHERE kind = 'p2p'
),
-- per process, over its Send/Recv communicators
pgs AS (
	SELECT node, pid, sum(rg) * 1.0 / nullif(max(gs), 0) AS rshare
	FROM pp GROUP BY node, pid HAVING count(rg) > 0
),
-- each Send/Recv link, from either end: the process, its peer, their CPU-side shares
lnk AS MATERIALIZED (
	SELECT a.node, a.pid, a.share, b.node AS pnode, b.pid AS ppid, b.share AS pshare
	FROM pp a CROSS JOIN json_each(a.peers) j
	JOIN pp b ON b.comm_hash = a.comm_hash AND b.rank = j.value
),
-- processes joined by a Send/Recv
plk AS (
	SELECT DISTINCT node, pid, pnode, ppid FROM lnk
),
-- the communicators each process takes part in, CPU side or plugin side
mem AS (
	SELECT DISTINCT node, pid, comm_hash FROM rk
	UNION SELECT node, pid, comm_hash FROM results WHERE kind = 'kern'
),
-- its role communicators: those it takes part in that hold none of its Send/Recv peers (one
-- lookup per peer, not a walk over every member)
rc AS (
	SELECT m.node, m.pid, m.comm_hash
	FROM pgs a JOIN mem m ON m.node = a.node AND m.pid = a.pid
	WHERE NOT EXISTS (SELECT 1 FROM plk l JOIN mem mc ON mc.node = l.pnode AND mc.pid = l.ppid
			  WHERE l.node = a.node AND l.pid = a.pid AND mc.comm_hash = m.comm_hash)
),
-- per role communicator, its members' Send/Recv shares: how many, the median, the sum
rcm AS (
	SELECT mb.comm_hash, count(*) AS n, median(b.rshare) AS med, sum(b.rshare) AS tot
	FROM (SELECT DISTINCT comm_hash FROM rc) r JOIN mem mb ON mb.comm_hash = r.comm_hash
	JOIN pgs b ON b.node = mb.node AND b.pid = mb.pid
	GROUP BY mb.comm_hash
),
-- per process, against its largest role communicator: the other rank of a pair, else the
-- median (its own share among them moves a median of 3 or more little)
pex AS (
	SELECT node, pid, ex FROM (
		SELECT a.node, a.pid,
		       a.rshare - iif(c.n = 2, c.tot - a.rshare, c.med) AS ex,
		       row_number() OVER (PARTITION BY a.node, a.pid ORDER BY c.n DESC,
					  c.comm_hash) AS o
		FROM pgs a JOIN rc r ON r.node = a.node AND r.pid = a.pid
		JOIN rcm c ON c.comm_hash = r.comm_hash
		WHERE c.n >= 2)
	WHERE o = 1
),
pl AS (
	SELECT l.node, l.pid,
	       coalesce(min(eb.ex - ea.ex) FILTER (WHERE ea.ex IS NOT NULL AND eb.ex IS NOT NULL),
			min(l.pshare - l.share)) AS d
	FROM lnk l
	LEFT JOIN pex ea ON ea.node = l.node AND ea.pid = l.pid
	LEFT JOIN pex eb ON eb.node = l.pnode AND eb.pid = l.ppid
	WHERE l.share IS NOT NULL AND l.pshare IS NOT NULL
	GROUP BY l.node, l.pid
),
ranks AS (
	SELECT comm_hash, node, rank, pid FROM flags
	UNION
	SELECT comm_hash, node, rank, pid FROM gb
	UNION
	SELECT comm_hash, node, rank, pid FROM hang
),
v AS (
	SELECT u.comm_hash, u.node, u.rank, u.pid,
	       coalesce(f.nranks, g.nranks, h.nranks) AS nranks, coalesce(f.n, g.gn, 0) AS ranks,
	       g.kern AS f_gpu,
	       -- a late enqueue counts only if its peers demonstrably waited for it: their
	       -- kernels (where the GPU side is known), else their waits at least half as clearly
	       -- (a CPU that runs ahead of its GPU enqueues late for free; a loaded host makes
	       -- some rank late by a little, at no one's cost)
	       f.f_late AND CASE WHEN g.z_gpu IS NOT NULL THEN g.kern
				 ELSE f.z_wait > prm.thr / 2 END AS f_late,
	       -- the same for its peers' synchronize waits, a proxy of what the kernels measure:
	       -- where the GPU side is known it must see the rank arrive last too (a clean job
	       -- on a loaded host has one rank's waits apart, its kernels like its peers'), and
	       -- the kernels measure the lost time themselves: the proxy names a rank only where
	       -- they say its peers lost what the communicator needs, :min_effect (:pair_effect
	       -- for a pair) (a clean FSDP job's rank, last to every all-gather by a little, had
	       -- its peers wait 6.6 % more in synchronize, 2.2 % in the kernels; a clean pipeline
	       -- stage's rank, 9.6 % and 3.9 %)
	       -- Where they lean its way only a little (four ranks are few for a MAD: a peer that
	       -- waits twice as long as the others widens it), its peers' kernels over every op
	       -- must have taken the bar more of the span than its own (a CNN's stall of 10 % of a
	       -- step: z_gpu 1.2, its peers waiting at the buffers' broadcast or the first bucket)
	       f.f_wait AND CASE WHEN g.z_gpu IS NULL THEN 1
				 WHEN g.z_gpu > prm.thr / 2 THEN coalesce(g.e_gpu >= g.eff_b, 1)
				 WHEN g.z_gpu > 0 THEN coalesce(g.e_all >= g.eff_b, 0)
				 ELSE 0 END AS f_wait,
	       f.f_cpu,
	       -- its GPU's pace (ggap above): its kernels say it arrives last, its forward
	       -- compute took longer than its peers', and the GPUs set the job's pace (paced,
	       -- gfw): the communicator's median rank waits on its GPU a quarter of the span or
	       -- more, or else every rank's CPU had queued the compute before 16 or more of the
	       -- collectives that open a step by the time its GPU began it (fed: pace is then
	       -- read over those alone). Where the CPU keeps its GPU waiting (a small model;
	       -- launches from Python) the GPU's idle time before a step holds the CPU's
	       -- latency too, which differs from rank to rank: clean transformer jobs on 4
	       -- GPUs, whose ranks waited 5-22 % of the span and had queued none of those
	       -- steps' compute, had a rank's forward up to 16 % longer than its peers'
	       (g.z_gpu > prm.thr AND g.z_fw > prm.thr AND g.e_uni >= g.eff_n AND g.paced)
		       AS f_pace,
	       -- its CPU work stands out and its peers did not wait less than it: where
	       -- contention blurs every wait, the work itself is the evidence (not for a pair:
	       -- one rank of two does some more CPU work in many clean jobs, rank 0 above all).
	       -- Where the GPU side is known it bounds this proxy as it does the waits: a clean
	       -- DDP phase on 4 H200s had a rank doing 4.8 % more CPU work with its kernels like
	       -- its peers' (z_gpu 0.6) and the job no slower
	       f.f_cpu AND f.z_wait > 0 AND coalesce(g.z_gpu, 0) >= 0 AND f.n <> 2
	       AND coalesce(g.z_gpu > prm.thr / 2, 1) AND coalesce(g.e_gpu >= g.eff_b, 1) AS f_cpuv,
	       -- its GPU's compute stream idled least, its peers' more by the bar, over a
	       -- stretch every rank's slices cover (bz), and its own GPU was busy all but
	       -- :busy_idle of it: a slower GPU (FSDP hides it from every collective's
	       -- timing: its peers keep a steady lead, docs/analysis.md). Where its kernels
	       -- are known they must lean its way, half as clearly as a signal needs: a GPU
	       -- that costs its peers arrives last. A neighbour filling a launch-bound job's
	       -- idle GPU (4 H200s: its compute stream 10 points busier, z_gpu 0.7) cost the
	       -- job nothing; under FSDP a slower GPU's kernels lean its way at z 25-46
	       (b.z_busy > prm.thr AND b.e_busy >= coalesce(f.eff_n, g.eff_n)
		AND b.idle <= prm.bidle AND coalesce(g.z_gpu > prm.thr / 2, 1)) AS f_busy0,
	       -- where its GPU idled more (a job bound by its network), its compute is on the
	       -- job's path only if its peers' kernels over every op waited for it, clearly
	       -- and by the bar; it names the rank only where nothing else does (below), and
	       -- neither measure is the loss alone (a neighbour on a launch-bound job's GPU
	       -- left it 20.7 points busier and its peers' kernels 38.5 % longer, for a loss of
	       -- 7.4 %). Real FSDP over NCCL's sockets, its GPU idle 85 % of the span against
	       -- its peers' 99 % with extra work 20 % of a step (the job 13.4 % slower): its
	       -- peers' kernels took 14.1 % of the span more than its own, no single op's
	       -- median apart (each op's kernels wait a transfer or two)
	       (b.z_busy > prm.thr AND b.e_busy >= coalesce(f.eff_n, g.eff_n)
		AND b.idle > prm.bidle AND g.z_all > prm.thr AND g.e_all >= g.eff_n) AS f_busyn,
	       b.z_busy, b.e_busy, b.idle AS busy_idle, b.peer_idle AS peer_busy_idle,
	       f.z_late, f.z_wait, f.z_cpu, g.z_gpu,
	       f.e_late, f.e_wait, g.e_gpu, f.e_cpu, f.late, f.wait, f.cpu, f.m_wait, f.m_cpu, f.step,
	       f.cspan, f.period, f.cnfull, f.clock_err, f.peers_wait_s, g.op AS gpu_op, g.med,
	       g.z_all,
	       coalesce(f.eff_n, g.eff_n) AS bar, coalesce(f.escale, g.gscale, 1) AS bscale,
	       g.peer_med, g.tot, g.gspan, g.z_fw, g.e_uni, g.pace, g.peer_pace, g.paced, g.e_all,
	       h.hung,
	       h.last_seq, h.age_ns, f.n AS fn, g.gn,
	       -- two ranks: no population says what is usual, so a pair's consistent asymmetry
	       -- (a pipeline stage's ranks wait on different neighbours) reads as a straggler on
	       -- whichever side measures it. A pair's verdict needs the rank to wait less than
	       -- the other, clearly (a rank that arrives last because it waited on someone else
	       -- does not), and no side it has to point the other way: its kernels not longer,
	       -- its enqueues not clearly earlier (lateness is often nil: a blocking or bucketed
	       -- job enqueues together after the first collective of a step). Its kernels may
	       -- stand in for its waits where its Send/Recv peers waited more than it did (a
	       -- pipeline stage's slower GPU waits for itself at its synchronize as long as its
	       -- peers do, while the stage after it waits on its sends)
	       coalesce(f.n, g.gn) <> 2 OR (coalesce(g.z_gpu, 1) > 0
					    AND coalesce(f.z_late, 0) > -prm.thr / 2
					    AND (coalesce(f.z_wait, prm.thr) > prm.thr / 2
						 OR (g.z_gpu > prm.thr AND g.e_gpu >= g.eff_n
						     AND coalesce(f.z_wait, 0) > -prm.thr / 2
						     AND p.d > prm.fl))) AS pair_ok,
	       -- a rank that waited more than a peer of its Send/Recv (by more than :floor of
	       -- the span) is named by no communicator: its lateness there is that peer's.
	       -- Nor is one whose Send/Recv kernels took :min_effect of the span more than its
	       -- siblings' did: it waited on its Send/Recv peers, downstream of a delay, however
	       -- much its peer waited in turn (every rank of a chain behind a slow stage waits
	       -- about as long as the one before it: on the stand-in's 4-stage pipeline the last
	       -- stage's rank, 21 % over its sibling, was named before the slow rank itself),
	       -- unless every peer of its waited :min_effect more still: it holds them (4 ranks
	       -- of real NCCL sharing one GPU, a stage-0 rank stalled 20 % of its step: its
	       -- kernels 4.9 % over its sibling's, its stage-1 peer's 22.4 %)
	       coalesce(p.d >= -prm.fl, 1)
	       AND coalesce(x.ex < prm.eff OR p.d >= prm.eff, 1) AS p2p_ok
	FROM ranks u
	LEFT JOIN flags f ON f.comm_hash = u.comm_hash AND f.node IS u.node
			  AND f.rank IS u.rank AND f.pid IS u.pid
	LEFT JOIN gb g ON g.comm_hash = u.comm_hash AND g.node IS u.node
		       AND g.rank IS u.rank AND g.pid IS u.pid
	LEFT JOIN hang h ON h.comm_hash = u.comm_hash AND h.node IS u.node
			 AND h.rank IS u.rank AND h.pid IS u.pid
	LEFT JOIN pl p ON p.node IS u.node AND p.pid IS u.pid
	LEFT JOIN pex x ON x.node IS u.node AND x.pid IS u.pid
	LEFT JOIN bz b ON b.comm_hash = u.comm_hash AND b.node IS u.node AND b.rank IS u.rank
		       AND b.pid IS u.pid,
	prm
),
w AS (
	SELECT v.*,
	       CASE WHEN v.hung THEN 'hung'
		    WHEN NOT v.pair_ok OR NOT v.p2p_ok THEN 'ok'
		    WHEN v.f_late OR v.f_wait OR v.f_gpu OR v.f_pace OR v.f_busy THEN 'straggler'
		    WHEN v.f_cpuv THEN 'straggler'
		    ELSE 'ok' END AS verdict,
	       coalesce(v.f_late, 0) + coalesce(v.f_wait, 0) + coalesce(v.f_gpu, 0) +
		       coalesce(v.f_cpuv, 0) + coalesce(v.f_pace, 0) + coalesce(v.f_busy, 0) AS nsig,
	       -- the effect is the peers' lost time: their kernels' wait where the GPU side is
	       -- known, their synchronize waits, their CPU work's excess; lateness only where
	       -- nothing else names the rank (a CPU running ahead of its GPU is late at no cost).
	       -- With a population, the largest of those that name it: the kernels' step-by-step
	       -- measure misses a GPU slower all through its backward (each bucket waits a
	       -- little; 3-5 % where the steps had doubled), the waits do not. A pair's waits
	       -- differ by the pair's own asymmetry too (a pipeline's stage pair: 2-3 times what
	       -- its kernels said, and the loss), so there the kernels alone, where known
	       -- Its GPU's pace alone: the uniform slowdown's estimate, which is right for a
	       -- GPU slower all through its step and up to three times the loss where the delay
	       -- sits in one place of it (a stall before the forward): it stands only where
	       -- nothing else names the rank
	       CASE WHEN v.pace_alone THEN v.e_uni
		    WHEN v.gn = 2 AND v.z_gpu IS NOT NULL AND (v.f_gpu OR v.f_wait OR v.f_late)
		    THEN coalesce(v.e_gpu, 0)
		    WHEN v.f_gpu OR v.f_wait OR v.f_cpuv OR v.f_busy
		    THEN max(iif(v.f_wait, v.e_wait, 0), iif(v.f_gpu, v.e_gpu, 0),
			     iif(v.f_cpuv, v.e_cpu, 0), iif(v.f_busy, v.e_busyv, 0))
		    ELSE iif(v.f_late, v.e_late, 0) END AS eff_on,
	       max(coalesce(v.e_late, 0), coalesce(v.e_wait, 0), coalesce(v.e_gpu, 0),
		   coalesce(v.e_busy, 0)) AS eff_any
	-- (pace_alone: its GPU's pace names it and nothing that measures lost time does;
	-- f_busy: its compute stream, on a GPU that idled more only where nothing else names
	-- it, its effect then the less of its compute's excess and its peers' kernels')
	FROM (SELECT v.*, (v.f_pace AND NOT (coalesce(v.f_gpu, 0) OR coalesce(v.f_wait, 0)
					     OR coalesce(v.f_cpuv, 0) OR coalesce(v.f_busy0, 0)))
				  AS pace_alone,
		     coalesce(v.f_busy0, 0) OR (v.f_busyn AND NOT (coalesce(v.f_gpu, 0)
				OR coalesce(v.f_wait, 0) OR coalesce(v.f_late, 0)
				OR coalesce(v.f_pace, 0) OR coalesce(v.f_cpuv, 0))) AS f_busy,
		     iif(coalesce(v.f_busy0, 0), v.e_busy, min(v.e_busy, v.e_all)) AS e_busyv
	      FROM v) v
)
SELECT comm_hash, node, rank, pid, nranks, ranks, verdict,
       iif(verdict = 'ok', NULL, nullif(substr(iif(f_late, ',late', '') || iif(f_wait, ',wait', '') ||
		     iif(f_gpu, ',gpu', '') || iif(f_pace, ',pace', '') || iif(f_busy, ',compute', '') ||
		     iif(f_cpu AND (f_late OR f_wait OR f_gpu OR f_cpuv OR f_pace OR f_busy),
			 ',cpu', ''), 2), ''))
	       AS signals,
       CASE WHEN coalesce(fn, gn) = 2 THEN 'pair' WHEN coalesce(fn, gn) >= 3 THEN 'mad' END
	       AS method,
       round(100 * iif(nsig > 0, eff_on, eff_any), 1) AS effect_pct,
       round(z_late, 2) AS z_late, round(z_wait, 2) AS z_wait, round(z_gpu, 2) AS z_gpu,
       round(z_cpu, 2) AS z_cpu,
       round(late / 1e6, 3) AS late_ms,
       round(wait * period / nullif(cnfull, 0) / 1e6, 3) AS wait_ms,
       round(m_wait * period / nullif(cnfull, 0) / 1e6, 3) AS peer_wait_ms,
       gpu_op, round(med / 1e6, 3) AS gpu_ms, round(peer_med / 1e6, 3) AS peer_gpu_ms,
       round(cpu * period / nullif(cnfull, 0) / 1e6, 3) AS cpu_ms,
       round(m_cpu * period / nullif(cnfull, 0) / 1e6, 3) AS peer_cpu_ms,
       round(peers_wait_s, 3) AS peers_wait_s, round(clock_err / 1e6, 3) AS clock_err_ms,
       round(cspan / 1e9, 3) AS span_s,
       round(coalesce(step, (SELECT step FROM cs WHERE cs.comm_hash = w.comm_hash)) / 1e6, 3)
	       AS step_ms,
       last_seq, iif(hung, last_seq + 1, NULL) AS stopped_at_seq,
       iif(hung, (SELECT x.op FROM results x WHERE x.kind IN ('last', 'seq')
		  AND x.comm_hash = w.comm_hash AND x.seq = w.last_seq + 1
		  ORDER BY x.kind LIMIT 1), NULL) AS stopped_op,
       iif(hung, round(age_ns / 1e9, 3), NULL) AS stopped_s_ago,
       (SELECT jr.job_rank FROM jr WHERE jr.node IS w.node AND jr.pid IS w.pid) AS job_rank,
       round(100 * bar, 1) AS bar_pct,
       iif(bscale > 1, CAST(round(cspan / nullif(step, 0)) AS INTEGER), NULL) AS bar_steps,
       -- (lateness is left out: a CPU running ahead of its GPU is late at no cost; a pair
       -- whose kernels are known has their effect alone, as its verdict has)
       iif(verdict = 'ok' AND near >= 0, CASE near WHEN nw THEN 'wait' WHEN ng THEN 'gpu'
						      WHEN nc THEN 'cpu' WHEN nb THEN 'compute'
						      ELSE 'pace' END, NULL)
	       AS near_signal,
       iif(verdict = 'ok' AND near >= 0, round(100 * near, 1), NULL) AS near_pct,
       round(z_fw, 2) AS z_pace, round(pace / 1e6, 3) AS pace_ms,
       round(peer_pace / 1e6, 3) AS peer_pace_ms,
       iif(verdict = 'straggler' AND pace_alone, 'uniform', NULL) AS effect_model,
       -- its peers' kernels over every op against its own, a share of the span: where a rank
       -- holds its peers at every layer (FSDP's all-gathers and reduce-scatters) their wait
       -- mostly overlaps their compute, and the kernels' effect (the step's largest wait)
       -- can be a fraction of what it costs; this is the most it can cost
       round(100 * e_all, 1) AS peers_kern_pct,
       round(100 * busy_idle, 1) AS idle_pct, round(100 * peer_busy_idle, 1) AS peer_idle_pct,
       round(z_busy, 2) AS z_compute
FROM (SELECT w.*, max(nw, ng, nc, np, nb) AS near
      FROM (SELECT w.*, iif(z_wait > prm.thr AND NOT (gn = 2 AND z_gpu IS NOT NULL),
			    coalesce(e_wait, 0), -1) AS nw,
		   iif(z_gpu > prm.thr, coalesce(e_gpu, 0), -1) AS ng,
		   iif(z_cpu > prm.thr AND NOT (gn = 2 AND z_gpu IS NOT NULL),
		       coalesce(e_cpu, 0), -1) AS nc,
		   -- (its GPU's pace: the uniform slowdown's estimate, where pace's other
		   -- conditions hold, its kernels and the GPUs setting the job's pace)
		   iif(z_fw > prm.thr AND z_gpu > prm.thr AND paced, coalesce(e_uni, 0), -1) AS np,
		   -- (its compute stream: where its own GPU idled no more than :busy_idle and
		   -- its kernels, where known, lean its way)
		   iif(z_busy > prm.thr AND busy_idle <= prm.bidle
		       AND coalesce(z_gpu > prm.thr / 2, 1), coalesce(e_busy, 0),
		       iif(z_busy > prm.thr AND z_all > prm.thr,
			   min(coalesce(e_busy, 0), coalesce(e_all, 0)), -1)) AS nb
	    FROM w, prm) w) w, prm
WHERE prm.all_ranks OR verdict <> 'ok'
ORDER BY CASE verdict WHEN 'hung' THEN 0 WHEN 'straggler' THEN 1 ELSE 2 END,
	 -- (pace's estimate alone sorts by what its kernels measured: it may overstate)
	 iif(nsig > 0, iif(pace_alone, coalesce(e_gpu, 0), eff_on), eff_any) DESC, nsig DESC,
	 comm_hash, rank
