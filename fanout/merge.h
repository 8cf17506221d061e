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
 * Column sets one fan-out keeps apart: more is no schema mix-up but a hostile
 * fleet. Fixed, so that the writer thread never reads an array being moved.
 */
#define MERGE_SETS_MAX 64

/* Before a fan-out: the number of hosts whose rows may come. 0 or -ENOMEM. */
int merge_hosts(struct merge *m, size_t n);
/*
 * Hosts first .. first + count - 1 (a relay's connection answers for several)
 * answered with these columns: returns the column set they belong to (0, 1,
 * ... in the order sets first came), a new one if no host had them before.
 * Each set has a table of its own, made by the writer at its first row (names
 * quoted, duplicates made unique: "x", "x_2"; a query column named "node"
 * becomes "node_2"), until merge_choose() keeps one as results. -EINVAL with
 * *cause: more columns than a table holds, or past MERGE_SETS_MAX sets.
 */
int merge_columns(struct merge *m, size_t first, size_t count, size_t ncols,
		  const char *const *names, char **cause);
/* Host h's column set, or -1. */
int merge_set_of(const struct merge *m, size_t host);
size_t merge_sets(const struct merge *m);
/* Set k's table columns (node first, made unique; *n with node) and names as sent. */
const char *const *merge_set_columns(const struct merge *m, int k, size_t *n);
const char *const *merge_set_names(const struct merge *m, int k, size_t *n);
/*
 * After the writer has stopped: set k's table becomes results (made if no row
 * came), the other sets' tables are dropped. 0, or -EIO with *cause.
 */
int merge_choose(struct merge *m, int k, char **cause);
int merge_has_table(const struct merge *m);
/*
 * The results table's column names as SELECT * FROM results gives them: "node", then the
 * chosen set's names made unique (before merge_choose(): the first set's). *n = their
 * count; NULL (and 0) when no host sent columns. Owned by m, valid until
 * merge_rename() or merge_free().
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
 * After src's fan-out to some of m's hosts (its host j is m's host[j], n of them): its
 * rows join m's results in their hosts' places (m takes src's columns where no host
 * answered m's own fan-out) and its clock rows replace m's. -EINVAL with *cause: src's
 * columns are not results'; -EIO with *cause: the merge database failed.
 */
int merge_absorb(struct merge *m, struct merge *src, const size_t *host, size_t n,
		 char **cause);

/*
 * Renames table results to name (a plain identifier) and forgets its columns, so the
 * next fan-out into m makes a new results table: several fan-outs, one database
 * (fleetq gate fetches one trace table per fan-out). 0 when there was no results
 * table; -EIO with *cause when the rename failed.
 */
int merge_rename(struct merge *m, const char *name, char **cause);

sqlite3 *merge_db(struct merge *m);

#endif
