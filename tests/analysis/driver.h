/* SPDX-License-Identifier: MIT */
/*
 * What `fleetq` will do with the built-in analyses, without the network: run a
 * node-side .sql file on every trace file (read-only, named parameters bound),
 * load the rows into an in-memory table results(node, ...) with no declared
 * types, create clock(node, offset_ns, rtt_ns), and run the merge-side file.
 */
#ifndef FLEETQ_TESTS_ANALYSIS_DRIVER_H
#define FLEETQ_TESTS_ANALYSIS_DRIVER_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

struct an_node {
	const char *path;  /* trace file */
	const char *name;  /* NULL: the file's meta.node */
	int64_t offset_ns; /* clock.offset_ns for this node */
};

/* The merge's answer, every cell as text (NULL stays NULL). */
struct an_rows {
	size_t ncols, nrows;
	char **names;
	char **cells; /* nrows * ncols */
};

/*
 * Parameters are "name=value" strings (name without the colon); a value that
 * parses as an integer or a real is bound as one, "NULL" as NULL, anything else
 * as text. Unbound parameters stay NULL. guarded: open the trace files with
 * fqsql_open_readonly() and prepare with fqsql_prepare(), as agentd does.
 * Returns 0, or -1 with *cause (caller frees).
 */
int an_run(const char *node_sql, const char *merge_sql, const struct an_node *nodes, size_t n,
	   const char *const *node_params, const char *const *merge_params, int guarded,
	   struct an_rows *out, char **cause);

/* Cell of row r in column col; NULL when NULL or no such column. */
const char *an_get(const struct an_rows *rows, size_t r, const char *col);
void an_rows_release(struct an_rows *rows);
void an_rows_print(const struct an_rows *rows, FILE *f);

/* Whole file, NUL-terminated, or NULL. Caller frees. */
char *an_slurp(const char *path);

/* Runs sql on path opened read-write (for planting fixtures). 0 or -1. */
int an_exec(const char *path, const char *sql);

#endif
