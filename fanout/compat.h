/* SPDX-License-Identifier: MIT */
/*
 * Agents older than this fleetq. The trace schema gains tables without a new version
 * (gpu_samples, process_gpus, gpu_busy, gpu_activity: sql/schema.sql), and an agent that
 * predates one serves a file without it: an analysis's node SQL that reads it fails there
 * with "no such table", and during a rolling upgrade every such node would drop out of the
 * verdict. Such a node is asked again with the table read as empty (a common table
 * expression of its columns and no rows, ahead of the query's own), so it counts with what
 * it has and the evidence it lacks reads "not measured".
 */
#ifndef FLEETQ_COMPAT_H
#define FLEETQ_COMPAT_H

#include <stddef.h>

#include "coverage.h"
#include "fanout.h"
#include "merge.h"

/*
 * The table of this build's trace schema that message ("no such table: gpu_busy", as
 * SQLite words it, "main." allowed) names, copied into buf; NULL when it names none or a
 * table the schema does not have (a user's own mistake stays one).
 */
const char *compat_missing_table(const char *message, char *buf, size_t len);

/*
 * sql with each of the n tables of this build's trace schema read as empty: malloc'd, or
 * NULL and -errno in *err (-ENOENT: a name the schema lacks; -ENOMEM). The query's own
 * WITH clause (after any comments, RECURSIVE or not) takes the tables first.
 */
char *compat_sql(const char *sql, const char *const *tables, size_t n, int *err);

/*
 * After a fan-out of fp into m and cov: each node whose answer was "no such table" for a
 * table of the schema is asked again (the same parameters) with it read as empty, up to
 * COMPAT_ROUNDS times (one missing table named per answer); its rows join m's results in
 * its hostlist place, its outcome replaces the first in cov. *note (malloc'd, or NULL):
 * "2 nodes' agents predate table gpu_busy: read as empty there (...)" for the user. The
 * second fan-outs share the first one's time: they end by started_ns (CLOCK_MONOTONIC, when
 * the first began) plus fp->timeout_ms, each group of nodes (those lacking the same tables)
 * with an equal share of what is left, and none starts with under COMPAT_MIN_MS; the first
 * fan-out's columns win (gather_run_want), and nothing is asked after Ctrl-C. 0, or
 * -errno with *cause for local failures (the merge database).
 */
#define COMPAT_ROUNDS 6
#define COMPAT_MIN_MS 200
int compat_retry(const struct fanout_params *fp, int64_t started_ns, struct merge *m,
		 struct coverage *cov, char **note, char **cause);

#endif
