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

/*
 * The same into m's results table, where the column set named by want (nwant names, as
 * nodes send them) wins whenever a host sends it, whatever the others' count: nodes asked
 * again for the rows of an earlier fan-out (compat.c) must answer its columns, and a node
 * that does not fails alone ("columns differ"). want NULL: gather_run's vote.
 */
int gather_run_want(struct fanout *fo, const struct fanout_params *p, struct merge *m,
		    struct coverage *cov, const char *const *want, size_t nwant, char **cause);

#endif
