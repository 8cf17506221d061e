/* SPDX-License-Identifier: MIT */
/*
 * Host lists: Slurm-style expressions ("gpu[01-16,20]", "r[1-2]n[01-02]",
 * "a,b[1-3],c", "[::1]:7077", "host:port") and hosts files, expanded into an
 * ordered list without duplicates, and folded back into the shortest
 * expression for messages.
 */
#ifndef FLEETQ_HOSTLIST_H
#define FLEETQ_HOSTLIST_H

#include <stddef.h>

/* One expression may expand to at most this many hosts (guards "x[0-999999999]"). */
#define HOSTLIST_MAX 1000000

struct hostlist;

struct hostlist *hostlist_new(void);
void hostlist_free(struct hostlist *hl);

/*
 * Expands expr and appends the hosts not already in the list (first one
 * wins). Returns 0, or -EINVAL with *cause (caller frees) naming the
 * expression, -E2BIG past HOSTLIST_MAX, -ENOMEM.
 */
int hostlist_push(struct hostlist *hl, const char *expr, char **cause);

/* Reads a hosts file: one expression per line, '#' comments, blank lines. */
int hostlist_read_file(struct hostlist *hl, const char *path, char **cause);

size_t hostlist_count(const struct hostlist *hl);
/* The i-th host as the user wrote it (after expansion); owned by hl. */
const char *hostlist_get(const struct hostlist *hl, size_t i);

/*
 * Splits "host", "host:port", "[v6]" or "[v6]:port" into a malloc'd host
 * (without brackets) and a port (default_port when none). 0 or -EINVAL.
 */
int hostlist_split(const char *entry, int default_port, char **host, int *port);

/*
 * Folds hosts into the shortest expression this parser reads back to the
 * same set: "gpu[03,07]", "gpu[01-04],login1". Groups keep the order of
 * their first host. Returns a malloc'd string, or NULL with errno set.
 */
char *hostlist_fold(const char *const *hosts, size_t n);

#endif
