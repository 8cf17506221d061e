-- SPDX-License-Identifier: MIT
-- Each rank's GPU over its job's collectives, on every node (docs/schema.md, "Joining
-- collectives to GPU samples"), for job 1234:
--   sed s/@JOB@/1234/ gpu-vs-peers.node.sql |
--   fleetq -w NODES --merge "$(cat gpu-vs-peers.merge.sql)" -
-- The window: each rank's first to last collective (on the node's own clock: the join stays
-- on the node).
WITH ranks AS (
	SELECT p.pid, p.start_ns, p.exit_ns, p.rank
	FROM processes p
	WHERE p.job_id = '@JOB@' AND p.rank IS NOT NULL
),
-- (the process's collectives, not its pid's: a pid is reused; its start is taken from
-- /proc on another clock than the events', hence the second of slack)
win AS (
	SELECT r.pid, r.start_ns, r.rank, min(c.ts_ns) AS t0, max(c.ts_ns + c.dur_ns) AS t1
	FROM ranks r JOIN collectives c ON c.pid = r.pid AND c.ts_ns >= r.start_ns - 1000000000
					AND (r.exit_ns IS NULL OR c.ts_ns <= r.exit_ns)
	GROUP BY r.pid, r.start_ns
),
-- the GPU the driver saw the process use; the environment's guess only without it
gpu AS (
	SELECT w.*, pg.gpu_uuid, pg.gpu_index, pg.source
	FROM win w JOIN process_gpus pg ON pg.pid = w.pid AND pg.start_ns = w.start_ns
	WHERE pg.source = 'nvml' OR NOT EXISTS (
		SELECT 1 FROM process_gpus q
		WHERE q.pid = pg.pid AND q.start_ns = pg.start_ns AND q.source = 'nvml')
)
SELECT g.rank, g.gpu_index, g.source,
	count(s.ts_ns) AS samples,
	avg(s.sm_clock_mhz) AS sm_mhz,
	max(s.sm_clock_max_mhz) AS sm_max_mhz,
	avg(s.util_gpu_pct) AS util_pct,
	max(s.temp_c) AS temp_max_c,
	-- share of samples with a reason bit set: thermal (sw 0x20, hw 0x40), power (sw cap 0x4,
	-- hw power brake 0x80), hw slowdown (0x8)
	100.0 * sum((s.clock_reasons & 96) != 0) / count(s.ts_ns) AS thermal_pct,
	100.0 * sum((s.clock_reasons & 132) != 0) / count(s.ts_ns) AS power_pct,
	100.0 * sum((s.clock_reasons & 8) != 0) / count(s.ts_ns) AS hw_slowdown_pct
FROM gpu g JOIN gpu_samples s ON s.gpu_uuid = g.gpu_uuid AND s.ts_ns BETWEEN g.t0 AND g.t1
GROUP BY g.rank, g.gpu_uuid
