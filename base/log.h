/* SPDX-License-Identifier: MIT */
/*
 * The daemon's log: one line per event, on stderr or the --log file, from
 * every part of it (server, queries, store, tracer), so that --log and its
 * reopen on SIGHUP hold for all. Lines are written with a single write(2) so
 * worker threads never interleave.
 */
#ifndef FLEETQ_LOG_H
#define FLEETQ_LOG_H

#include <stddef.h>

/* Sends lines to path (appending) instead of stderr. 0 or -errno with *cause. */
int log_open(const char *path, char **cause);
/* Reopens the --log file (after rotation); no-op on stderr. */
int log_reopen(void);

/* The name each line carries; the program's own until set. ident outlives the log. */
void log_set_ident(const char *ident);

/* "2025-01-02T03:04:05.678Z agentd: " + the formatted text + "\n". */
void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Copies s into dst (size n) with newlines, tabs, quotes, backslashes and
 * other control bytes escaped, cut at max input bytes ("..." appended), so
 * SQL and certificate names stay on one log line. Returns dst.
 */
char *log_escape(char *dst, size_t n, const char *s, size_t max);

#endif
