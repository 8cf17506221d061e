-- SPDX-License-Identifier: MIT
-- wincut.sql: CTEs of the WITH list of stragglers.node.sql, timeline.node.sql and
-- netcheck.node.sql (the same rule in all three), put in place of their line
-- "-- include: wincut.sql" as jobproc.sql is.
-- Needs prm (since_ns, job, comm, max_seqs), jobproc and collkeys.sql's coll, keys and
-- mark before it. Defines last (the newest collective of every communicator, rank and
-- process), newest and cut (per communicator, the seq after which its window starts, and
-- which way to read the window); the file's own win reads them with the columns it needs.
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
