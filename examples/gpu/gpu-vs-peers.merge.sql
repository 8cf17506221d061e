-- SPDX-License-Identifier: MIT
-- Over every node's rows ('results'): each rank's SM clock against the median of its peers
-- (every other rank of the job), slowest first, with the throttle reasons seen.
SELECT rank, gpu_index, round(sm_mhz) AS sm_mhz,
	round((SELECT median(o.sm_mhz) FROM results o WHERE o.rank != r.rank)) AS peers_mhz,
	round(sm_mhz - (SELECT median(o.sm_mhz) FROM results o WHERE o.rank != r.rank)) AS vs_peers_mhz,
	round(util_pct) AS util_pct, temp_max_c,
	round(thermal_pct) AS thermal_pct, round(power_pct) AS power_pct,
	round(hw_slowdown_pct) AS hw_slowdown_pct, samples, source
FROM results r
ORDER BY vs_peers_mhz, rank
