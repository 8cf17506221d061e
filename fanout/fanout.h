/* SPDX-License-Identifier: MIT */
/*
 * The fan-out: one libevent loop, at most `window` connections in flight,
 * one overall deadline. Each node goes resolving -> connecting -> TLS
 * handshake -> HELLO -> QUERY -> COLUMNS -> ROWS* -> END; rows stream into
 * the merge database, every node's outcome into the coverage.
 */
#ifndef FLEETQ_FANOUT_H
#define FLEETQ_FANOUT_H

#include <stddef.h>
#include <stdint.h>

#include "coverage.h"
#include "merge.h"

struct fanout_params {
	const char *const *hosts; /* "host", "host:port", "[v6]:port"; outlive the fanout */
	size_t nhosts;
	int port; /* when an entry names none */
	const char *ca, *cert, *key;
	int insecure;		    /* plaintext, loopback agents only */
	int window;		    /* connections in flight */
	int64_t connect_timeout_ms; /* until HELLO */
	int64_t timeout_ms;	    /* the whole fan-out */
	const char *sql;
	int64_t max_rows; /* per node, 0 = agent default */
	int progress;	  /* progress line on stderr */
};

struct fanout;

/*
 * Checks the hosts and loads the TLS material. Returns NULL with errno
 * (EINVAL: bad host or certificate; *cause says which and what to do).
 */
struct fanout *fanout_new(const struct fanout_params *p, char **cause);
void fanout_free(struct fanout *fo);

/*
 * Runs the query on every host. Per-node failures land in cov; returns
 * 0, or -errno with *cause for local failures (the merge database).
 */
int fanout_run(struct fanout *fo, struct merge *m, struct coverage *cov, char **cause);

#endif
