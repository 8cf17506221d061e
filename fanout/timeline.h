/* SPDX-License-Identifier: MIT */
/*
 * fleetq timeline: the merged events of a window (sql/analysis/timeline.*.sql) written as a
 * Chrome/Perfetto trace (JSON trace-event format), one event per row of the merge query,
 * streamed: nothing beyond the merge database holds them.
 */
#ifndef FLEETQ_TIMELINE_H
#define FLEETQ_TIMELINE_H

#include <stdio.h>
#include <sqlite3.h>

/* -o FILE, before the fan-out (a wrong path fails before any node is asked); NULL: stdout. */
FILE *timeline_open(const char *path, char **cause);

/*
 * Runs merge_sql over db and writes {"traceEvents":[...],...} to f, each row one event:
 * its non-NULL columns as members, column "args" (JSON text) as an object. window goes
 * into otherData. *events: how many were written. 0, or -EINVAL (the query failed) or
 * -EIO (a write failed) with *cause.
 */
int timeline_write(sqlite3 *db, const char *merge_sql, FILE *f, const char *window,
		   long long *events, char **cause);

/* Closes a file of timeline_open() (not stdout); -EIO with *cause when its data was lost. */
int timeline_close(FILE *f, const char *path, char **cause);

/*
 * The whole subcommand after the fan-out: db (NULL when no node answered: an empty trace)
 * through merge_sql to f, closed here. *short_of: why the trace holds no collective (for
 * the exit status 3), else NULL. 0 or -errno with *cause.
 */
int timeline_emit(sqlite3 *db, const char *merge_sql, FILE *f, const char *path,
		  const char *window, int quiet, char **short_of, char **cause);

#endif
