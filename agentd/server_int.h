/* SPDX-License-Identifier: MIT */
/*
 * The server's insides, shared by its files (agentd/server.h is the interface):
 *   server.c       the listener and its limits (--max-conns, per source, handshakes),
 *                  signals and drain at shutdown, setup and teardown
 *   server_conn.c  one session: its state machine and timer, the TLS peer check,
 *                  the frames read and answered, the query beside it, close and linger
 */
#ifndef FLEETQ_AGENTD_SERVER_INT_H
#define FLEETQ_AGENTD_SERVER_INT_H

#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/listener.h>
#include <openssl/ssl.h>
#include <sqlite3.h>

#include "../wire/wire.h"
#include "query.h"
#include "server.h"
#include "tls.h"

/*
 * A session reads at most this much ahead of the frame it is on; a frame
 * larger than this (a QUERY with big parameters) first takes its size from
 * --frame-mem, shared by all sessions, and gives it back once read, so that
 * sessions that each send most of a 16 MiB frame cannot pile up gigabytes.
 */
#define FRAME_SMALL (64u << 10)

/*
 * A session moves HANDSHAKE -> READY -> CLOSING -> LINGER -> freed, or is
 * freed from any state when the client goes away. A query runs beside READY
 * (conn.q); while it runs, further QUERY frames wait in the input buffer.
 */
enum conn_state {
	CONN_HANDSHAKE, /* TLS handshake running; nothing sent yet */
	CONN_READY,	/* HELLO sent; frames are read and answered */
	CONN_CLOSING,	/* a last frame is queued; close once it is sent */
	CONN_LINGER,	/* all sent and write side shut; wait briefly for the client's FIN */
};

struct conn {
	TAILQ_ENTRY(conn) entry;
	struct server *srv;
	enum conn_state state;
	struct bufferevent *bev;
	SSL *ssl;		    /* owned by bev; NULL in plaintext */
	struct tls_verdict verdict; /* filled during the handshake */
	struct event timer;	    /* handshake, idle, closing and linger timeouts */
	struct event wake;	    /* the running query has frames for us */
	struct query *q;	    /* the running query, at most one */
	char addr[64];		    /* "ip:port" of the client */
	char id[256];		    /* verified client CN, "" in plaintext */
	const char *tls;	    /* "full" or "resumed" handshake, "none" in plaintext */
	int accepted;		    /* tls_peer_check() passed: its session may be resumed */
	int over_cap;		    /* accepted past --max-conns: refuse with BUSY */
	unsigned char src[8];	    /* address (IPv6: its /64) for --max-conns-per-source */
	size_t frame_held;	    /* bytes of --frame-mem held for a large frame */
};

struct server {
	const struct server_opts *o;
	struct event_base *base;
	struct evconnlistener *listener;
	SSL_CTX *ctx; /* for new sessions; NULL in plaintext */
	struct query_pool pool;
	struct event sig_hup, sig_term, sig_int;
	struct event reaped;	  /* a query worker exited */
	struct event drain_timer; /* SIGTERM: end of the grace period */
	int draining;		  /* 1: waiting for queries, 2: stopping them */
	TAILQ_HEAD(, conn) conns;
	int nconns;		   /* sessions in conns */
	int npending;		   /* of which in CONN_HANDSHAKE */
	int64_t frame_held;	   /* --frame-mem held by all sessions */
	int64_t shed_log_ns;	   /* last line about closed handshakes or sources */
	unsigned long shed_hs, shed_src;
	int64_t cap_log_ns;	   /* last "closed at once" line: at most one a second */
	unsigned long cap_closed; /* connections closed at once since that line */
	struct wire_buf scratch; /* loop-thread frames: HELLO, PONG, ERROR, END */
	sqlite3 *meta;		 /* HELLO's view of the meta table */
	sqlite3_stmt *meta_st;	 /* its query, kept prepared */
	dev_t meta_dev;		 /* the file meta was opened on */
	ino_t meta_ino;
	int64_t schema_version;
	char clock_source[128];
	char gpu_status[256]; /* meta 'gpu_status', "" when the trace has none */
};

/* server_conn.c */
void send_hello(struct conn *c);
void send_error(struct conn *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void arm_timer(struct conn *c, int seconds);
void check_drained(struct server *s);
void conn_free(struct conn *c);
void timer_cb(evutil_socket_t fd, short what, void *arg);
void wake_cb(evutil_socket_t fd, short what, void *arg);
void refuse_busy(struct conn *c);
void read_cb(struct bufferevent *bev, void *arg);
void write_cb(struct bufferevent *bev, void *arg);
void event_cb(struct bufferevent *bev, short what, void *arg);

#endif
