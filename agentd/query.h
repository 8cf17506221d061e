/* SPDX-License-Identifier: MIT */
/*
 * One query, run on a worker thread off the event loop, streaming frames to
 * the connection that asked for it.
 *
 * The worker encodes COLUMNS, ROWS and END into its own buffer and hands
 * whole frames over; the event loop moves them into the connection's output
 * (query_take) and reports how much of that output is still unsent
 * (query_sink_drained). The worker waits while more than QUERY_HIGH_WATER
 * bytes are unsent, so a slow client holds back its own query and nothing
 * buffers a whole result. Exactly one END is the last frame of every query.
 */
#ifndef FLEETQ_AGENTD_QUERY_H
#define FLEETQ_AGENTD_QUERY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../wire/wire.h"

#define QUERY_HIGH_WATER (1u << 20)
#define QUERY_LOW_WATER (256u << 10)

struct event;
struct evbuffer;
struct sqlite3;
struct sqlite3_stmt;

/*
 * Read-only connections kept open between queries (warm page cache, no
 * re-open), each with its last statement, reset, for the same SQL next time
 * (a fleet asks every agent the same analysis again and again; preparing it
 * costs more than running it on a small window).
 */
#define QUERY_IDLE_DBS 4
struct query_db {
	struct sqlite3 *db;
	struct sqlite3_stmt *st; /* NULL, or prepared from sql and reset */
	char *sql;
	/* The file db_path named when db was opened: a file renamed away and
	 * recreated (log rotation) is noticed by its new inode, and reopened. */
	dev_t dev;
	ino_t ino;
};

/* Bounds the number of workers; shared by all connections of a server. */
struct query_pool {
	pthread_mutex_t mu;
	int running; /* queries holding a slot; a slot is freed just before END goes out */
	int threads; /* workers alive (a worker ends just after its END) */
	int max;
	const char *db_path;
	int64_t max_rows, max_bytes, timeout_ms; /* agent limits; clients may ask lower */
	int64_t query_mem, query_mem_total;	 /* bytes; fqsql_mem_install() has the total */
	struct event *reaped; /* activated (in the loop) each time a worker exits */
	/* Relay (QUERY with peers): the client side of the tree fan-out uses the
	 * agent's own certificate against the same CA (all NULL: plaintext,
	 * loopback only); peers without a port get relay_port. */
	const char *relay_ca, *relay_cert, *relay_key;
	int relay_port;
	/* A relay dials at most relay_max_dial peers itself per query (more go
	 * through sub-relays), never itself (relay_node, the host name, a local
	 * address on relay_port) nor a peer twice, and with patterns only hosts
	 * matching one of them (--relay-peer). */
	const char *relay_node;
	int self_port; /* the port this agent listens on */
	int relay_max_dial;
	const char *const *relay_allow;
	size_t nrelay_allow;
	/* Idle read-only connections, under mu; query_pool_release() closes them. */
	struct query_db idle[QUERY_IDLE_DBS];
	int nidle;
};

int query_pool_init(struct query_pool *p, int max);
void query_pool_release(struct query_pool *p);
int query_pool_running(struct query_pool *p);
int query_pool_threads(struct query_pool *p);

struct query;

/*
 * Starts a worker for msg (a decoded QUERY; everything is copied). wake is
 * activated whenever frames are ready or the query is done; it must stay
 * valid until query_release(). peer/addr name the client in the log line,
 * tls (a string literal: full, resumed, none) how its TLS session began.
 * Returns NULL with errno EBUSY when the pool is full (*running says how
 * many run), or another errno.
 */
struct query *query_start(struct query_pool *p, const struct wire_query *msg, const char *peer,
			  const char *addr, const char *tls, struct event *wake, int *running);

/* Loop side: moves ready frames to dst; returns 1 once END has been moved. */
int query_take(struct query *q, struct evbuffer *dst);
/* Loop side: dst (the connection's output) now holds len unsent bytes. */
void query_sink_drained(struct query *q, size_t len);

enum query_stop { QUERY_STOP_CANCEL = 1, QUERY_STOP_SHUTDOWN };
/* Loop side: interrupts the worker; SHUTDOWN still sends END WIRE_E_SHUTDOWN. */
void query_stop(struct query *q, int why);
/* Loop side: the connection lets go of q (the worker may still run, then frees it). */
void query_release(struct query *q);

#endif
