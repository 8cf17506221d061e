-- SPDX-License-Identifier: MIT
-- collkeys.sql: CTEs of the WITH list of stragglers.node.sql, timeline.node.sql and
-- netcheck.node.sql (the same rule in all three), put in place of their line
-- "-- include: collkeys.sql" as jobproc.sql is. Needs the CTEs prm (since_ns, job, comm,
-- max_seqs) and jobproc before it. Defines coll (the collectives of the job and
-- communicator asked for), keys and mark (an index skip over them: per (pid, comm_hash,
-- rank), its newest multiple of 64).
-- collectives of the job and communicator asked for, over all time
-- (collectives only: Send/Recv number their own seqs, apart from the collectives of the
-- same communicator, so they never line up across ranks by seq; every 'last', newest
-- and cut probe below skips them too)
coll AS NOT MATERIALIZED (
	SELECT c.* FROM collectives c, prm
	WHERE c.op NOT IN ('Send', 'Recv')
	  AND (prm.comm IS NULL OR c.comm_hash = prm.comm)
	  AND (prm.job IS NULL OR c.pid IN (SELECT pid FROM jobproc WHERE sole)
	       OR EXISTS (SELECT 1 FROM jobproc j
			  WHERE j.pid = c.pid AND c.ts_ns BETWEEN j.lo AND j.hi))
),
-- one collective (its rowid) of every distinct (pid, comm_hash, rank), found by skipping
-- through the partial index collectives_key (pid, comm_hash, rank, seq) WHERE seq % 64 = 0
-- one key at a time: an index probe per key instead of a scan of every collective. Each
-- step takes the next rank of the same (pid, comm_hash), else the next comm_hash of the
-- pid, else the next pid. Every communicator whose init agentd saw has seq 0 (and a known
-- comm_hash); the coalesce() steps past a NULL rank (ranks are >= 0).
keys(id) AS (
	SELECT (SELECT rowid FROM collectives WHERE seq % 64 = 0
		ORDER BY pid, comm_hash, rank LIMIT 1)
	UNION ALL
	SELECT coalesce(
		(SELECT c.rowid FROM collectives c
		 WHERE c.seq % 64 = 0 AND c.pid = k.pid AND c.comm_hash = k.comm_hash
		   AND c.rank > coalesce(k.rank, -1)
		 ORDER BY c.rank LIMIT 1),
		(SELECT c.rowid FROM collectives c
		 WHERE c.seq % 64 = 0 AND c.pid = k.pid AND c.comm_hash > k.comm_hash
		 ORDER BY c.comm_hash, c.rank LIMIT 1),
		(SELECT c.rowid FROM collectives c
		 WHERE c.seq % 64 = 0 AND c.pid > k.pid
		 ORDER BY c.pid, c.comm_hash, c.rank LIMIT 1))
	FROM keys JOIN collectives k ON k.rowid = keys.id
),
-- per key, its newest multiple of 64 (the index again), then its newest seq among the
-- next 64 through collectives_comm_seq
mark AS (
	SELECT k.pid, k.comm_hash, k.rank,
	       (SELECT x.seq FROM collectives x
		WHERE x.seq % 64 = 0 AND x.pid = k.pid AND x.comm_hash = k.comm_hash
		  AND x.rank IS k.rank AND x.op NOT IN ('Send', 'Recv')
		ORDER BY x.seq DESC LIMIT 1) AS seq
	FROM keys CROSS JOIN collectives k CROSS JOIN prm
	WHERE k.rowid = keys.id
	  AND (prm.comm IS NULL OR k.comm_hash = prm.comm)
	  AND (prm.job IS NULL OR k.pid IN (SELECT pid FROM jobproc WHERE sole)
	       OR EXISTS (SELECT 1 FROM jobproc j
			  WHERE j.pid = k.pid AND k.ts_ns BETWEEN j.lo AND j.hi))
),
