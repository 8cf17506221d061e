/* SPDX-License-Identifier: MIT */
/*
 * Inside agentd's queries (query.h), one concern a file:
 * - query.c: a query's life (start, hand-over to the loop, stop) and its worker thread;
 * - query_pool.c: the pool's slots and its idle read-only connections;
 * - query_run.c: one statement run under its budgets, rows streamed as frames;
 * - query_relay.c: a QUERY with peers, the rows of the nodes behind this one.
 */
#ifndef FLEETQ_AGENTD_QUERY_INT_H
#define FLEETQ_AGENTD_QUERY_INT_H

#include <pthread.h>
#include <stdint.h>

#include <sqlite3.h>

#include "fqsql.h"
#include "query.h"

struct query {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* the worker waits here for room in the output */
	int refs;	   /* the connection and the worker */
	struct query_pool *pool;
	struct event *wake;	/* the connection's; NULL once it let go */
	struct evbuffer *ready; /* whole frames the loop has not taken yet */
	size_t unsent;		/* bytes waiting in the connection's output */
	int stop;		/* enum query_stop; read without the lock in the step loop */
	int ended;		/* END is in ready */
	sqlite3 *db;		/* while open, for sqlite3_interrupt() from the loop */
	struct fqsql_budget *budget; /* while open: query_stop() ends a prepare with it */

	/* The request, owned. */
	uint64_t id;
	char *sql;
	size_t nparams;
	struct wire_value *params; /* text/blob bytes live in the same allocation */
	int64_t max_rows, max_bytes, timeout_ms;
	int64_t start_ns, deadline_ns;
	char peer[256];
	char addr[64];
	const char *tls; /* a literal: how the session began */

	/* Relay: forward to these peers; own rows labelled with label. */
	size_t npeers;
	char **peers;
	int64_t tree_width, clock_param, pings, connect_ms;
	char *label;	/* NULL: not relaying */
	char *on_behalf; /* QUERY "for": the client a relay asks for; NULL when none */
	char **cols;	/* relay: the columns sent up (without "node"), NULL until sent */
	size_t ncols;
};

struct result {
	int64_t rows, bytes;
	int status;
	int truncated;
	char *msg;
};

/* query_pool.c */
void query_pool_free_slot(struct query_pool *p);
int query_pool_take_db(struct query_pool *p, const struct fqsql_limits *lim, struct query_db *d,
		       char **cause);
void query_pool_give_db(struct query_pool *p, struct query_db *d);
/* Closes d and zeroes it (a connection not worth keeping). */
void query_db_close(struct query_db *d);

/* query_run.c */
void query_set_msg(struct result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int query_hand_over(struct query *q, struct wire_buf *b, int is_end);
int query_stop_status(struct query *q);
int query_run(struct query *q, struct wire_buf *b, struct result *r);

/* query_relay.c */
int query_relay(struct query *q, struct wire_buf *b, struct result *r);

#endif
