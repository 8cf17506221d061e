/* SPDX-License-Identifier: MIT */
/*
 * Rows in hostlist order, then each node's row order, off the fan-out's thread.
 * A node's rows wait, as the ROWS frames they came in, until it has ended and
 * every node before it has finished; the rows of a node that failed are dropped
 * unseen. A writer thread then hands them to one of two consumers:
 * - the output: a plain query (no --merge, no --fail-if) prints without the
 *   merge database, yet as SELECT * FROM results would print, values as
 *   SQLite's round trip leaves them; a slow reader of stdout never holds up the
 *   fan-out (its deadline, the agents);
 * - the merge database: fanout_run() fills it so. In order, every insert
 *   appends to the table's b-tree (row ids are node index, row number), where
 *   rows inserted as they arrive, nodes interleaved, landed mid-tree; and the
 *   decoding and inserting run beside the fan-out's TLS and network work. The
 *   frames waiting are capped (direct_new_merge()).
 */
#ifndef FLEETQ_DIRECT_H
#define FLEETQ_DIRECT_H

#include <stddef.h>

#include "output.h"
#include "wire.h"

struct direct;
struct merge;

/*
 * Rows of hosts[0..n) (the names outlive d) go to out, which d uses until
 * direct_end() and the caller owns. hold: print nothing before direct_end()
 * (stdout is the terminal the progress line is drawn on). NULL and errno on failure.
 */
struct direct *direct_new(struct output *out, size_t n, const char *const *hosts, int hold);
/*
 * Rows of hosts[0..n) go into m's results table (merge_row(): created by
 * merge_columns() before direct_begin()), which only d's writer may use until
 * direct_drain(). Frames wait for their turn only while they hold at most
 * held_max bytes (DIRECT_HELD_MAX): past that, every frame goes to the writer as
 * it comes (still under its row id: the table's order stays, inserts stop being
 * appends), and the writer drops the rows of a host that then fails.
 * NULL and errno on failure.
 */
#define DIRECT_HELD_MAX (32u << 20)
struct direct *direct_new_merge(struct merge *m, size_t n, const char *const *hosts,
				size_t held_max);
/* Stops the writer (rows not printed yet are dropped) and frees d. */
void direct_free(struct direct *d);

/*
 * The results table's columns, node first (merge_table_columns()): begins the
 * output. Calls after the first do nothing. 0 or -ENOMEM.
 */
int direct_begin(struct direct *d, size_t ncols, const char *const *names);
/*
 * Keeps a ROWS frame of host h as it arrived (wire_decode() accepted it; its rows
 * hold the table's columns but node). 0 or -ENOMEM.
 */
int direct_frame(struct direct *d, size_t h, const void *frame, size_t len);
/*
 * Keeps one row of host h, a relay's with its node column left out (ncols
 * values: before direct_begin() the table's columns are not known yet).
 * 0 or -errno.
 */
int direct_row(struct direct *d, size_t h, size_t ncols, const struct wire_value *vals);
/*
 * Host h has finished: its rows are kept (keep: it ended ok or truncated) or
 * dropped, and what is now in order goes to the writer. 0 or -errno.
 */
int direct_done(struct direct *d, size_t h, int keep);
/* Nonzero once the consumer has failed (while the writer runs too). */
int direct_failed(struct direct *d);
/*
 * After the fan-out: hands what is left to the consumer (rows of hosts not
 * finished are dropped) and stops the writer. 0 or the first error of the
 * consumer (-EPIPE, ...; a merge's with *cause, the caller's to free).
 */
int direct_drain(struct direct *d, char **cause);
/*
 * The output's direct_drain(), then ends the output with coverage_json (NULL:
 * none). 0 or the first output error.
 */
int direct_end(struct direct *d, const char *coverage_json);

#endif
