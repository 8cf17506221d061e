-- SPDX-License-Identifier: MIT
-- jobproc.sql: one CTE of the WITH list of every node query that takes :job (stragglers,
-- netcheck, timeline, why), put in place of its line "-- include: jobproc.sql" where the
-- files are read (fleetq, an-run). Needs the CTE prm (prm.job) before it. fleetq gate's
-- fetches use it too (fanout/gate_plan.c: prm.job is ?2 there, and this CTE ends the list).
--
-- the job's processes, each over its own life, not its pid: pids are reused. From its start
-- (less a second: start_ns is its fork, read on CLOCK_BOOTTIME, while events are read on
-- another clock; never before the previous process of the pid ended) to its exit (unrecorded:
-- until the next process of the pid began). A process without a job_id is no job's. sole: no
-- process outside the job had the pid, so its rows are the job's by pid alone (an IN probe per
-- row, where the time check costs a subquery: kw reads every kernel of an all-time window).
jobproc AS MATERIALIZED (
	SELECT p.pid,
	       coalesce(max(p.start_ns - 1000000000,
			    (SELECT max(coalesce(q.exit_ns, p.start_ns - 1)) + 1 FROM processes q
			     WHERE q.pid = p.pid AND q.start_ns < p.start_ns)),
			p.start_ns - 1000000000) AS lo,
	       coalesce(p.exit_ns, (SELECT min(q.start_ns) - 1 FROM processes q
				    WHERE q.pid = p.pid AND q.start_ns > p.start_ns),
			9223372036854775807) AS hi,
	       NOT EXISTS (SELECT 1 FROM processes q
			   WHERE q.pid = p.pid AND q.job_id IS NOT p.job_id) AS sole
	FROM processes p, prm WHERE p.job_id = prm.job
),
