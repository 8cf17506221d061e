/* SPDX-License-Identifier: MIT */
/*
 * The fan-out's insides, shared by its files (transport/fanout.h is the interface):
 *   fanout.c          the bounded engine: setup, the window, the deadline, progress and
 *                     cancel timers, and each host's one outcome handed to the sink
 *   fanout_conn.c     one connection: resolving, TCP connect, TLS, reading frames, its loss
 *   fanout_session.c  one session's frames: HELLO, PING, QUERY, COLUMNS, ROWS, END, ERROR
 */
#ifndef FLEETQ_TRANSPORT_FANOUT_INT_H
#define FLEETQ_TRANSPORT_FANOUT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <openssl/ssl.h>

#include "fanout.h"
#include "session.h"
#include "wire.h"

enum node_state {
	N_IDLE, /* not started yet (window full) */
	N_RESOLVING,
	N_CONNECTING, /* TCP */
	N_HANDSHAKE,  /* TLS */
	N_HELLO,      /* connected, waiting for the agent's HELLO */
	N_PING,	      /* a PING sent, waiting for its PONG */
	N_COLUMNS,    /* QUERY sent */
	N_ROWS,
	N_DONE,
};

struct node {
	struct fanout *fo;
	size_t idx;
	const char *name; /* as the user wrote it */
	char *host;
	int port;
	int is_ip;
	char *skey; /* "SCOPE host:port": its TLS session's key (session.h) */
	enum node_state state;
	struct evdns_getaddrinfo_request *dns;
	struct evutil_addrinfo *ai, *ai_next;
	evutil_socket_t fd;
	struct event ev_connect; /* TCP connect finished */
	struct event ev_timer;	 /* connect timeout, until HELLO */
	int timer_set;
	int connect_set;
	struct bufferevent *bev;
	SSL *ssl;
	int64_t rows;
	int64_t bytes; /* ROWS frame bytes accepted, against p->max_bytes */
	size_t ncols;
	char *last_error;
	int64_t t_lo;	/* CLOCK_REALTIME before the agent could have built its HELLO */
	int pings_sent;
	struct fanout_node_info *info; /* the head host's */
	size_t first, count;	       /* the hosts this connection answers for */
	size_t last_leaf;	       /* cache for the row -> host lookup */
	size_t off;		       /* 1 when rows carry a leading node column */
	int end_status;		       /* the END's status, for the sink */
};

/* One host: what reached the sink for it. */
struct leaf {
	int64_t rows;
	int done;
	size_t conn; /* the connection that answers for it */
};

struct fanout {
	const struct fanout_params *p;
	struct event_base *base;
	struct evdns_base *dns;
	SSL_CTX *ctx;
	char scope[SESSION_SCOPE_LEN + 1]; /* of ctx's certificate and CAs */
	struct event ev_deadline;
	struct event ev_kick;
	struct event ev_progress;
	struct event ev_cancel;
	struct event ev_interrupt;
	int progress_shown;
	int cancelled;
	struct node *nodes;
	size_t n, next, inflight, done; /* connections */
	size_t nh;			/* hosts */
	struct leaf *leaves;
	struct fanout_node_info *infos;
	const struct fanout_sink *sink;
	struct wire_value *vals;
	size_t vals_cap;
	struct wire_buf out;
	struct wire_value *params; /* per-node copy of p->params (the clock one shifted) */
	int64_t start_ms;
	int64_t rows_total;
	int64_t bytes_total; /* ROWS frame bytes accepted, against p->max_bytes */
	char *fatal; /* a local failure that stops the fan-out */
};

static inline struct timeval ms_tv(int64_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	return tv;
}

/* fanout.c */
const char *ssl_reason(void);
void set_fatal(struct fanout *fo, char *cause);
const char *oname(const struct fanout *fo, int outcome);
/* the sink's step, if it has one (named so as not to meet libc's step()) */
void sink_step(struct fanout *fo);
void leaf_finish(struct fanout *fo, size_t h, int outcome, const char *msg, int status);
void node_finish(struct node *n, int outcome, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void node_error_text(struct node *n, const char *what, int err);

/* fanout_conn.c */
void node_start(struct node *n);

/* fanout_session.c: 1 when the connection is finished or the fan-out stops */
int on_frame(struct node *n, const void *frame, size_t len);

#endif
