/* SPDX-License-Identifier: MIT */
/*
 * fleetq's side of a fan-out (transport/fanout.h): the column set most hosts
 * sent wins, rows go in hostlist order to the plain query's output or to the
 * merge database, each node's outcome to the coverage, each clock to the
 * merge's clock table.
 */
#ifndef FLEETQ_GATHER_H
#define FLEETQ_GATHER_H

#include "coverage.h"
#include "direct.h"
#include "fanout.h"
#include "merge.h"

/*
 * Runs fo (made from p) into m and cov. direct NULL: rows go to m's results
 * table, in hostlist order through a writer thread of gather_run()'s own
 * (direct_new_merge()). Else rows go to this direct output (fleetq's plain
 * query) and m only makes the results table, from the winning column set,
 * which names the columns (and fails as it would). Per-node failures land in
 * cov; returns 0, or -errno with *cause for local failures (the merge database).
 */
int gather_run(struct fanout *fo, const struct fanout_params *p, struct merge *m,
	       struct coverage *cov, struct direct *direct, char **cause);

#endif
