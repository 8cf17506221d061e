/* SPDX-License-Identifier: MIT */
/*
 * The merge database: an in-memory SQLite with table results(node,
 * <the query's columns>) and table clock. fanout_run() fills results in hostlist
 * order from a writer thread (direct_new_merge()). Row ids encode (node index, row
 * number), so a plain scan returns hostlist order then row order without sorting,
 * inserts in that order append, and a node's rows can be dropped as one range.
 */
#ifndef FLEETQ_MERGE_H
#define FLEETQ_MERGE_H

#include <stddef.h>
#include <stdint.h>
#include <sqlite3.h>

#include "wire.h"

struct merge;

struct merge *merge_new(char **cause);
void merge_free(struct merge *m);

/*
 * The columns of the first node to answer define the table (created here, names quoted,
 * duplicates made unique: "x", "x_2"; a query column named "node" becomes
 * "node_2"). Later calls compare: 0 when they match, -EINVAL with *cause
 * saying how they differ.
 */
int merge_columns(struct merge *m, size_t ncols, const char *const *names, char **cause);
int merge_has_table(const struct merge *m);
/*
 * The results table's column names as SELECT * FROM results gives them: "node", then the
 * first node's names made unique. *n = their count; NULL (and 0) before the table exists.
 * Owned by m, valid until merge_rename() or merge_free().
 */
const char *const *merge_table_columns(const struct merge *m, size_t *n);

/* Inserts row number seq (from 0) of node idx. vals has ncols values. */
int merge_row(struct merge *m, size_t idx, const char *node, int64_t seq,
	      const struct wire_value *vals, char **cause);
/* Removes every row of node idx (a node that failed after its rows went in). */
int merge_drop(struct merge *m, size_t idx, char **cause);
/* Commits what is pending. */
int merge_finish(struct merge *m, char **cause);

/*
 * Table clock(node, offset_ns, rtt_ns, samples) always exists; this adds or replaces
 * node's row (offset = node clock minus coordinator clock).
 */
int merge_clock(struct merge *m, const char *node, int64_t offset_ns, int64_t rtt_ns,
		int64_t samples, char **cause);

/*
 * Renames table results to name (a plain identifier) and forgets its columns, so the
 * next fan-out into m makes a new results table: several fan-outs, one database
 * (fleetq gate fetches one trace table per fan-out). 0 when there was no results
 * table; -EIO with *cause when the rename failed.
 */
int merge_rename(struct merge *m, const char *name, char **cause);

sqlite3 *merge_db(struct merge *m);

#endif
