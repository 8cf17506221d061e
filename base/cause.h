/* SPDX-License-Identifier: MIT */
/*
 * The error path's one helper. A function that fails says why in *cause
 * (malloc'd, the caller frees; callers start it at NULL), and the first cause
 * wins: the failure that started it all is what the user reads, not a later,
 * vaguer one on the way out, and no cause is overwritten and leaked.
 */
#ifndef FLEETQ_CAUSE_H
#define FLEETQ_CAUSE_H

/*
 * Unless cause is NULL or *cause already says why: *cause = the formatted
 * message (NULL when it cannot be allocated). Returns err.
 */
int fq_fail(char **cause, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
