-- SPDX-License-Identifier: MIT
-- netcheck.merge.sql: `fleetq netcheck`, run over the merged rows of netcheck.node.sql
-- (table results: node, then that file's columns). No clock correction is needed: every
-- count was joined to its windows on its own node.
-- docs/analysis.md explains the method.
--
-- Parameters (all optional; unbound = NULL = the default):
--   :threshold   robust z of the in-window rate across the communicator's ranks, and
--                conc_z of the events' concentration in slow windows, must exceed it (3.5)
--   :ratio       in-window rate must be at least this many times the out-of-window rate (2)
--   :min_events  at least this many events (counter increments) in slow windows (3)
--   :min_per_coll  the second rule, loss throughout: at least this many events per collective
--               of the rank (0.5)
--   :all_rows    1: every (rank, source, counter) with events, flagged or not
--
-- One row per flagged (comm_hash, node, rank, pid, source, counter), grouped by node, most
-- extreme first:
--   node, comm_hash, rank, pid, source ('tcp' | 'tcp_host' | 'ib'), counter, detail (flow or
--   device/port), flagged (1/0), in_n, in_per_s, out_n, out_per_s (events per second inside
--   and outside this rank's slow windows), ratio (in_per_s / out_per_s, NULL when out is 0),
--   conc_z (how many standard deviations more events fell in slow windows than if they
--   fell uniformly in time: binomial, normal approximation),
--   z (robust z of in_per_s across the communicator's ranks; 1e9 when most ranks have none),
--   windows (slow windows of the rank), ranks (answering in the communicator),
--   node_ranks_flagged (ranks of this node flagged for the same source and counter),
--   per_coll (events per collective of the rank, in and out of slow windows), all_per_s (its
--   events per second over all its windows), rate_z (robust z of all_per_s across the
--   communicator's ranks), rule ('slow':
--   the events crowd its slow windows; 'throughout': not, but the rank has them all through
--   the run, far above its peers, as a lossy link that slows every collective gives; NULL
--   when not flagged)
WITH
prm AS (
	SELECT coalesce(:threshold, 3.5) AS thr, coalesce(:ratio, 2.0) AS min_ratio,
	       coalesce(:min_events, 3) AS min_events, coalesce(:all_rows, 0) AS all_rows,
	       coalesce(:min_per_coll, 0.5) AS min_per_coll
),
span AS (
	SELECT node, comm_hash, rank, pid, windows, in_s, out_s, in_n + out_n AS colls
	FROM results WHERE source = 'span'
),
nr AS (
	SELECT comm_hash, count(*) AS n FROM span GROUP BY comm_hash
),
-- every (source, counter) seen in a communicator, for every rank of it (0 when it had none)
keys AS (
	SELECT DISTINCT comm_hash, source, counter FROM results WHERE source <> 'span'
),
ev AS (
	SELECT s.node, s.comm_hash, s.rank, s.pid, k.source, k.counter, s.windows, s.in_s,
	       s.out_s, s.colls, e.detail, coalesce(e.in_n, 0) AS in_n,
	       coalesce(e.out_n, 0) AS out_n,
	       coalesce(e.in_n, 0) / nullif(s.in_s, 0) AS in_rate,
	       coalesce(e.out_n, 0) / nullif(s.out_s, 0) AS out_rate,
	       (coalesce(e.in_n, 0) + coalesce(e.out_n, 0)) / nullif(s.in_s + s.out_s, 0)
		       AS all_rate
	FROM span s JOIN keys k ON k.comm_hash = s.comm_hash
	LEFT JOIN (SELECT node, comm_hash, rank, pid, source, counter, max(detail) AS detail,
			  sum(in_n) AS in_n, sum(out_n) AS out_n
		   FROM results WHERE source <> 'span'
		   GROUP BY node, comm_hash, rank, pid, source, counter) e
		ON e.node = s.node AND e.comm_hash = s.comm_hash AND e.rank IS s.rank
		   AND e.pid = s.pid AND e.source = k.source AND e.counter IS k.counter
),
st AS (
	SELECT comm_hash, source, counter, median(in_rate) AS m, mad(in_rate) AS d,
	       median(all_rate) AS am, mad(all_rate) AS ad
	FROM ev GROUP BY comm_hash, source, counter
),
z AS (
	SELECT ev.*, nr.n AS ranks, robust_z(ev.in_rate, st.m, st.d) AS z,
	       robust_z(ev.all_rate, st.am, st.ad) AS rate_z,
	       1.0 * (ev.in_n + ev.out_n) / nullif(ev.colls, 0) AS per_coll,
	       ev.in_rate / nullif(ev.out_rate, 0) AS ratio,
	       -- if events fell anywhere in time, in_n would be Binomial(in_n + out_n, q) with
	       -- q = the slow windows' share of the time: how many sd above that it is
	       (ev.in_n - (ev.in_n + ev.out_n) * ev.in_s / (ev.in_s + ev.out_s)) /
		       sqrt(max((ev.in_n + ev.out_n) * ev.in_s * ev.out_s /
				((ev.in_s + ev.out_s) * (ev.in_s + ev.out_s)), 1e-9))
		       AS conc_z
	FROM ev JOIN st USING (comm_hash, source, counter) JOIN nr USING (comm_hash)
),
f0 AS (
	SELECT z.*,
	       (z.in_n >= prm.min_events
		AND (z.out_rate IS NULL OR z.out_rate = 0 OR z.ratio >= prm.min_ratio)
		AND z.conc_z > prm.thr
		AND (z.ranks < 4 OR z.z > prm.thr)) AS slow_rule,
	       -- a link that loses packets all the time slows every collective alike: its
	       -- slowest ones are the retransmit timeouts, long windows with few events, so the
	       -- events do not crowd them; what stands out is the rank against its peers
	       (z.in_n + z.out_n >= prm.min_events
		AND z.per_coll >= prm.min_per_coll
		AND z.ranks >= 4 AND z.rate_z > prm.thr) AS thru_rule
	FROM z, prm
),
f AS (
	SELECT f0.*, (slow_rule OR thru_rule) AS flagged,
	       CASE WHEN slow_rule THEN 'slow' WHEN thru_rule THEN 'throughout' END AS rule
	FROM f0
)
SELECT node, comm_hash, rank, pid, source, counter, detail, flagged, in_n,
       round(in_rate, 3) AS in_per_s, out_n, round(out_rate, 3) AS out_per_s,
       round(ratio, 2) AS ratio, round(conc_z, 2) AS conc_z, round(z, 2) AS z, windows, ranks,
       sum(flagged) OVER (PARTITION BY node, comm_hash, source, counter) AS node_ranks_flagged,
       round(per_coll, 3) AS per_coll, round(all_rate, 3) AS all_per_s, round(rate_z, 2) AS rate_z,
       rule
FROM f, prm
WHERE flagged OR (prm.all_rows AND in_n + out_n > 0)
ORDER BY node_ranks_flagged DESC, node, source, counter, z DESC, rank
