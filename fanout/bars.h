/* SPDX-License-Identifier: MIT */
/*
 * The straggler report's picture: per rank, a bar for each signal's robust z (late, wait,
 * gpu, cpu), so the rank that stands out is seen before it is read. ASCII, for it is pasted
 * into tickets and chats as often as it is read on a terminal.
 */
#ifndef FLEETQ_BARS_H
#define FLEETQ_BARS_H

#include <sqlite3.h>

enum { BARS_AUTO, BARS_ALWAYS, BARS_NEVER };

/* "auto", "always", "never" (NULL: always, as git's --color alone) -> BARS_*, or -1. */
int bars_parse(const char *when);

/*
 * Draws the bars of every rank in temp.fq_analysis (the merge ran with :all_ranks) into
 * a malloc'd text, then, unless keep_ok, deletes the 'ok' rows so that the report reads
 * what it would have without bars. threshold: the z that counts. NULL when there is no
 * rank to draw (or no memory).
 */
char *bars_take(sqlite3 *db, double threshold, int keep_ok);

#endif
