/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sqlite3.h>

#ifdef FLEETQ_HAVE_TRACE
#include "trace.h"
#endif
#include "../wire/wire.h"
#include "clock.h"
#include "log.h"
#include "query.h"
#include "server.h"
#include "tls.h"

#define CLOSING_TIMEOUT_S 10 /* a client that stops reading our last frame */
#define LINGER_TIMEOUT_S 2   /* waiting for the client's FIN after ours */
#define STOP_GRACE_S 5	     /* after stopping queries at shutdown, before giving up */
/*
 * Past --max-conns, this many more sessions are still accepted only to be
 * told "busy" in an ERROR frame (under TLS a client can read nothing else);
 * past that, new connections are closed at once, which costs us nothing.
 */
#define REFUSE_SLACK 64
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

static void conn_free(struct conn *c);
static void conn_closing(struct conn *c);
static void process_input(struct conn *c);

int server_parse_listen(const char *s, struct sockaddr_storage *ss, int *len)
{
	const char *colon = strrchr(s, ':');
	char host[INET6_ADDRSTRLEN + 2], *end;
	size_t hl;
	long port;

	/* By hand: evutil_parse_sockaddr_port() refuses port 0, which tests need. */
	if (!colon || !colon[1])
		return -EINVAL;
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || *end || port < 0 || port > 65535)
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
		s++;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		((struct sockaddr_in *)ss)->sin_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		*len = sizeof(struct sockaddr_in);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
		*len = sizeof(struct sockaddr_in6);
		return 0;
	}
	return -EINVAL;
}

int server_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			return 1;
		return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
	}
	return 0;
}

static void format_addr(const struct sockaddr *sa, char *out, size_t n)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		snprintf(out, n, "%s:%u", ip, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		snprintf(out, n, "[%s]:%u", ip, ntohs(in6->sin6_port));
	} else {
		snprintf(out, n, "?");
	}
}

/* ---- frames the loop itself sends ---- */

static void conn_send(struct conn *c, struct wire_buf *b)
{
	if (b->len && bufferevent_write(c->bev, b->data, b->len))
		log_line("client %s: cannot queue %zu bytes", c->addr, b->len);
	wire_buf_reset(b);
}

/* Reads schema_version, clock_source, gpu_status from meta; keeps the last good values. */
static void refresh_meta(struct server *s)
{
	static const char sql[] =
		"SELECT key, value FROM meta WHERE key IN ('schema_version', 'clock_source', "
		"'gpu_status')";
	sqlite3_stmt *st;
	struct stat sb;

	/* The trace file renamed away and recreated (log rotation): read the new one. */
	if (s->meta && !stat(s->o->db_path, &sb) &&
	    (sb.st_dev != s->meta_dev || sb.st_ino != s->meta_ino)) {
		sqlite3_finalize(s->meta_st);
		s->meta_st = NULL;
		sqlite3_close(s->meta);
		s->meta = NULL;
	}
	if (!s->meta) {
		if (!stat(s->o->db_path, &sb)) {
			s->meta_dev = sb.st_dev;
			s->meta_ino = sb.st_ino;
		}
		if (sqlite3_open_v2(s->o->db_path, &s->meta,
				    SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
				    NULL) != SQLITE_OK) {
			sqlite3_close(s->meta);
			s->meta = NULL;
			return;
		}
		/* The loop must not wait on the writer: a busy read keeps the cached values. */
		sqlite3_busy_timeout(s->meta, 0);
	}
	if (!s->meta_st &&
	    sqlite3_prepare_v3(s->meta, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->meta_st, NULL) !=
		    SQLITE_OK)
		return;
	st = s->meta_st;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(st, 0);

		if (!k)
			continue;
		if (!strcmp(k, "schema_version")) {
			s->schema_version = sqlite3_column_int64(st, 1);
		} else if (!strcmp(k, "clock_source") && sqlite3_column_text(st, 1)) {
			snprintf(s->clock_source, sizeof(s->clock_source), "%s",
				 (const char *)sqlite3_column_text(st, 1));
		} else if (!strcmp(k, "gpu_status") && sqlite3_column_text(st, 1)) {
			snprintf(s->gpu_status, sizeof(s->gpu_status), "%s",
				 (const char *)sqlite3_column_text(st, 1));
		}
	}
	sqlite3_reset(st);
}

static void send_hello(struct conn *c)
{
	struct server *s = c->srv;
	struct wire_hello h = {
		.agent_version = FLEETQ_VERSION,
		.node = s->o->node,
		.proto_min = WIRE_VERSION,
		.proto_max = WIRE_VERSION,
		.peer_identity = c->id[0] ? c->id : NULL,
	};

	refresh_meta(s);
	h.schema_version = s->schema_version;
	h.clock_source = s->clock_source;
	h.gpu_status = s->gpu_status[0] ? s->gpu_status : NULL;
#ifdef FLEETQ_HAVE_TRACE
	if (s->o->tracer) {
		struct trace_stats ts;

		tracer_get_stats(s->o->tracer, &ts);
		h.ring_drops = ts.ring_drops;
		h.store_lag_ns = ts.store_lag_ns;
	}
#endif
	h.realtime_ns = clock_ns(CLOCK_REALTIME);
	h.monotonic_ns = clock_ns(CLOCK_MONOTONIC);
	if (wire_put_hello(&s->scratch, &h)) {
		log_line("client %s: cannot encode HELLO", c->addr);
		wire_buf_reset(&s->scratch);
		conn_closing(c);
		return;
	}
	conn_send(c, &s->scratch);
}

static void send_error(struct conn *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Sends ERROR and closes the session once it is out. */
static void send_error(struct conn *c, int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (wire_put_error(&c->srv->scratch, code, msg) == 0)
		conn_send(c, &c->srv->scratch);
	wire_buf_reset(&c->srv->scratch);
	conn_closing(c);
}

/* An END for a query that never reached a worker. */
static void send_end(struct conn *c, uint64_t id, int status, const char *msg)
{
	struct wire_end e = { .id = id, .status = status, .message = msg };

	if (wire_put_end(&c->srv->scratch, &e) == 0)
		conn_send(c, &c->srv->scratch);
	wire_buf_reset(&c->srv->scratch);
}

/* ---- session life ---- */

static void arm_timer(struct conn *c, int seconds)
{
	struct timeval tv = { .tv_sec = seconds };

	evtimer_add(&c->timer, &tv);
}

static void check_drained(struct server *s)
{
	if (s->draining && TAILQ_EMPTY(&s->conns) && query_pool_threads(&s->pool) == 0)
		event_base_loopbreak(s->base);
}

/* Gives back what c holds of --frame-mem and reads small frames again. */
static void frame_release(struct conn *c)
{
	struct server *s = c->srv;

	if (!c->frame_held)
		return;
	s->frame_held -= (int64_t)c->frame_held;
	c->frame_held = 0;
	bufferevent_setwatermark(c->bev, EV_READ, 0, FRAME_SMALL);
	/* The frame's buffers are free now; hand their pages back rather than keep them. */
	if (!s->frame_held)
		malloc_trim(0);
}

static void conn_free(struct conn *c)
{
	struct server *s = c->srv;

	if (c->q) {
		query_stop(c->q, QUERY_STOP_CANCEL);
		query_release(c->q);
		c->q = NULL;
	}
	event_del(&c->timer);
	event_del(&c->wake);
	if (c->state == CONN_HANDSHAKE)
		s->npending--;
	frame_release(c);
	/*
	 * SSL_free() drops the session of a connection that did not send
	 * close_notify from the cache, so that it cannot be resumed; a client
	 * that just closes after END (fleetq) would never resume. Its secrets
	 * are as good as after a clean close: keep it.
	 */
	if (c->ssl && c->accepted)
		SSL_set_shutdown(c->ssl, SSL_get_shutdown(c->ssl) | SSL_SENT_SHUTDOWN);
	if (c->bev)
		bufferevent_free(c->bev); /* closes the socket and frees the SSL */
	TAILQ_REMOVE(&s->conns, c, entry);
	s->nconns--;
	free(c);
	check_drained(s);
}

/* No more frames in; close once the output is sent (or a client that never reads times out). */
static void conn_closing(struct conn *c)
{
	if (c->state == CONN_CLOSING || c->state == CONN_LINGER)
		return;
	c->state = CONN_CLOSING;
	if (c->q) {
		query_stop(c->q, QUERY_STOP_CANCEL);
		query_release(c->q);
		c->q = NULL;
	}
	evbuffer_drain(bufferevent_get_input(c->bev),
		       evbuffer_get_length(bufferevent_get_input(c->bev)));
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		event_active(&c->timer, EV_TIMEOUT, 0); /* not from here: callers still hold c */
	else
		arm_timer(c, CLOSING_TIMEOUT_S);
}

/*
 * Everything is sent: shut our side and wait a moment for the client's FIN,
 * reading and dropping what it still sends. Closing at once could turn unread
 * client bytes into a reset that destroys our last frame in flight.
 */
static void conn_linger(struct conn *c)
{
	c->state = CONN_LINGER;
	if (c->ssl)
		SSL_shutdown(c->ssl);
	shutdown(bufferevent_getfd(c->bev), SHUT_WR);
	bufferevent_enable(c->bev, EV_READ);
	arm_timer(c, LINGER_TIMEOUT_S);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	switch (c->state) {
	case CONN_HANDSHAKE:
		log_line("client %s: tls handshake timed out after %d s", c->addr,
			 c->srv->o->handshake_timeout_s);
		conn_free(c);
		break;
	case CONN_READY:
		if (c->q) {
			arm_timer(c, c->srv->o->idle_timeout_s);
			break;
		}
		log_line("client %s (%s): idle for %d s, closing", c->addr, c->id[0] ? c->id : "-",
			 c->srv->o->idle_timeout_s);
		conn_closing(c);
		break;
	case CONN_CLOSING:
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
			conn_linger(c);
		else
			conn_free(c); /* the client stopped reading */
		break;
	case CONN_LINGER:
		conn_free(c);
		break;
	}
}

static void query_ended(struct conn *c)
{
	struct server *s = c->srv;

	if (s->draining) {
		send_error(c, WIRE_E_SHUTDOWN, "agent is shutting down; retry later");
		return;
	}
	bufferevent_enable(c->bev, EV_READ);
	arm_timer(c, s->o->idle_timeout_s);
	process_input(c); /* a QUERY may be waiting */
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	if (!c->q)
		return;
	if (query_take(c->q, bufferevent_get_output(c->bev))) {
		query_release(c->q);
		c->q = NULL;
		if (c->state == CONN_READY)
			query_ended(c);
	}
}

/* --allow-client for a client that reaches us through a relay (QUERY "for"). */
static int for_allowed(const struct server *s, const char *who)
{
	for (size_t i = 0; i < s->o->nallow; i++)
		if (!fnmatch(s->o->allow[i], who, 0))
			return 1;
	return !s->o->nallow;
}

static void start_query(struct conn *c, const struct wire_query *m)
{
	struct server *s = c->srv;
	char msg[640], esc[256];
	int running;

	/*
	 * A relay says whom it asks for: that client must pass --allow-client as
	 * if it had come to us directly (its certificate name; the relay's own
	 * certificate passed at the handshake). A direct client naming someone
	 * else only narrows what it may do.
	 */
	if (m->on_behalf && !for_allowed(s, m->on_behalf)) {
		log_escape(esc, sizeof(esc), m->on_behalf, 200);
		log_line("query peer=%s for=%s addr=%s tls=%s id=%llu rows=0 bytes=0 ms=0 "
			 "status=auth error=\"client not allowed here (--allow-client)\"",
			 c->id[0] ? c->id : "-", esc, c->addr, c->tls, (unsigned long long)m->id);
		snprintf(msg, sizeof(msg), "client '%s', through relay '%s', is not allowed by "
			 "this agent's --allow-client", esc, c->id[0] ? c->id : "-");
		send_end(c, m->id, WIRE_E_AUTH, msg);
		return;
	}
	if (s->draining) {
		log_line("query peer=%s addr=%s tls=%s id=%llu rows=0 bytes=0 ms=0 status=shutdown",
			 c->id[0] ? c->id : "-", c->addr, c->tls, (unsigned long long)m->id);
		send_end(c, m->id, WIRE_E_SHUTDOWN, "agent is shutting down; retry later");
		return;
	}
	c->q = query_start(&s->pool, m, c->id, c->addr, c->tls, &c->wake, &running);
	if (c->q)
		return;
	if (errno == EBUSY) {
		snprintf(msg, sizeof(msg), "agent busy: %d queries running, retry", running);
		log_line("query peer=%s addr=%s tls=%s id=%llu rows=0 bytes=0 ms=0 status=busy",
			 c->id[0] ? c->id : "-", c->addr, c->tls, (unsigned long long)m->id);
		send_end(c, m->id, WIRE_E_BUSY, msg);
	} else {
		snprintf(msg, sizeof(msg), "cannot start a query worker: %s", strerror(errno));
		log_line("client %s: %s", c->addr, msg);
		send_end(c, m->id, WIRE_E_INTERNAL, msg);
	}
}

/* Reads whole frames while READY; a QUERY that arrives while one runs waits its turn. */
static void process_input(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	while (c->state == CONN_READY) {
		size_t avail = evbuffer_get_length(in), need, flen = 0;
		const unsigned char *p;
		struct wire_msg msg;
		char *cause = NULL;
		int rc, type;

		if (avail < WIRE_HDR_LEN)
			break;
		p = evbuffer_pullup(in, WIRE_HDR_LEN);
		if (wire_frame_check(p, WIRE_HDR_LEN, WIRE_FRAME_MAX, &flen) == -EMSGSIZE) {
			uint32_t n = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | p[2] << 8 | p[3];

			log_line("client %s (%s): frame of %u bytes is over the %u-byte limit; "
				 "closing",
				 c->addr, c->id[0] ? c->id : "-", n, WIRE_FRAME_MAX);
			send_error(c, WIRE_E_PROTO, "frame of %u bytes is over the %u-byte limit",
				   n, WIRE_FRAME_MAX);
			return;
		}
		need = WIRE_HDR_LEN +
		       ((size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3]);
		if (need > FRAME_SMALL && need > c->frame_held) {
			struct server *s = c->srv;
			int64_t more = (int64_t)(need - c->frame_held);

			if (s->frame_held + more > s->o->frame_mem) {
				log_line("client %s (%s): frame of %zu bytes refused: %lld of "
					 "--frame-mem %lld bytes held by other sessions' frames",
					 c->addr, c->id[0] ? c->id : "-", need,
					 (long long)s->frame_held, (long long)s->o->frame_mem);
				send_error(c, WIRE_E_BUSY,
					   "agent busy: its memory for large frames is taken by "
					   "other sessions (--frame-mem %lld MiB); retry later",
					   (long long)(s->o->frame_mem >> 20));
				return;
			}
			s->frame_held += more;
			c->frame_held = need;
			bufferevent_setwatermark(c->bev, EV_READ, 0, need);
		}
		if (avail < need) {
			/* Wait for the rest; the read watermark keeps anything after it out. */
			break;
		}
		p = evbuffer_pullup(in, (ev_ssize_t)need);
		if (!p || wire_frame_check(p, need, WIRE_FRAME_MAX, &flen) != 1) {
			send_error(c, WIRE_E_PROTO, "malformed frame header");
			return;
		}
		memset(&msg, 0, sizeof(msg));
		rc = wire_decode(&msg, p, flen, &cause);
		if (rc == -EPROTONOSUPPORT) {
			log_line("client %s (%s): speaks protocol version %d; closing", c->addr,
				 c->id[0] ? c->id : "-", msg.version);
			send_error(
				c, WIRE_E_VERSION,
				"protocol version %d not supported; this agent speaks version %d",
				msg.version, WIRE_VERSION);
			wire_msg_release(&msg);
			free(cause);
			return;
		}
		if (rc) {
			log_line("client %s (%s): bad frame: %s; closing", c->addr,
				 c->id[0] ? c->id : "-", cause ? cause : strerror(-rc));
			send_error(c, WIRE_E_PROTO, "bad frame: %s", cause ? cause : strerror(-rc));
			wire_msg_release(&msg);
			free(cause);
			return;
		}
		type = msg.type;
		if (type == WIRE_QUERY && c->q) {
			wire_msg_release(&msg);
			if (avail > 2 * (size_t)WIRE_FRAME_MAX)
				bufferevent_disable(c->bev, EV_READ);
			break;
		}
		arm_timer(c, c->srv->o->idle_timeout_s);
		switch (type) {
		case WIRE_PING: {
			struct wire_ping pong = { .t1_ns = msg.u.ping.t1_ns,
						  .t2_ns = clock_ns(CLOCK_REALTIME) };

			if (wire_put_ping(&c->srv->scratch, WIRE_PONG, &pong) == 0)
				conn_send(c, &c->srv->scratch);
			wire_buf_reset(&c->srv->scratch);
			break;
		}
		case WIRE_QUERY:
			start_query(c, &msg.u.query);
			break;
		case WIRE_ERROR:
			/* The client says goodbye (or gives up): nothing to answer. */
			conn_closing(c);
			break;
		default:
			log_line("client %s (%s): unexpected %s frame; closing", c->addr,
				 c->id[0] ? c->id : "-", wire_type_name(type));
			send_error(c, WIRE_E_PROTO, "unexpected %s frame from a client",
				   wire_type_name(type));
			break;
		}
		wire_msg_release(&msg);
		if (c->state == CONN_READY) {
			evbuffer_drain(in, flen);
			frame_release(c);
		}
	}
}

/* A session past --max-conns: one line in the log, ERROR BUSY to the client. */
static void refuse_busy(struct conn *c)
{
	struct server *s = c->srv;

	log_line("refused client %s: %d sessions open (--max-conns %d)", c->addr, s->nconns - 1,
		 s->o->max_conns);
	c->state = CONN_READY; /* so that send_error's close path runs */
	send_error(c, WIRE_E_BUSY,
		   "agent busy: %d sessions open (--max-conns %d); retry later", s->nconns - 1,
		   s->o->max_conns);
}

static void on_handshake(struct conn *c)
{
	struct server *s = c->srv;
	char *cause = NULL;

	if (tls_peer_check(c->ssl, &c->verdict, s->o->allow, s->o->nallow, c->id, sizeof(c->id),
			   &cause)) {
		char esc[300];

		log_line("refused client %s: %s", c->addr,
			 log_escape(esc, sizeof(esc), cause ? cause : "not allowed", 250));
		/* Its ticket is out already: no session of a refused client stays resumable. */
		SSL_CTX_remove_session(SSL_get_SSL_CTX(c->ssl), SSL_get0_session(c->ssl));
		c->id[0] = '\0';
		c->state = CONN_READY; /* so that send_error's close path runs */
		send_error(c, WIRE_E_AUTH, "%s", cause ? cause : "client certificate refused");
		free(cause);
		return;
	}
	c->tls = SSL_session_reused(c->ssl) ? "resumed" : "full";
	c->accepted = 1;
	/* Counted now, not at accept: handshakes in flight must not fill the sessions. */
	c->over_cap = s->nconns - s->npending > s->o->max_conns;
	if (c->over_cap) {
		refuse_busy(c);
		return;
	}
	c->state = CONN_READY;
	send_hello(c);
	arm_timer(c, s->o->idle_timeout_s);
	process_input(c);
}

/* Leaves CONN_HANDSHAKE (whatever comes next). */
static void handshake_done(struct conn *c)
{
	if (c->state == CONN_HANDSHAKE) {
		c->srv->npending--;
		c->state = CONN_READY;
	}
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	if (c->state == CONN_READY)
		process_input(c);
	else
		evbuffer_drain(in, evbuffer_get_length(in));
}

static void write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	size_t left = evbuffer_get_length(bufferevent_get_output(bev));

	if (c->q)
		query_sink_drained(c->q, left);
	if (c->state == CONN_CLOSING && left == 0)
		conn_linger(c);
}

static const char *bev_error(struct bufferevent *bev, int plain, char *buf, size_t n)
{
	unsigned long e = plain ? 0 : bufferevent_get_openssl_error(bev);

	if (e) {
		const char *r = ERR_reason_error_string(e);

		snprintf(buf, n, "%s", r ? r : "tls error");
		while (bufferevent_get_openssl_error(bev))
			;
	} else if (EVUTIL_SOCKET_ERROR()) {
		snprintf(buf, n, "%s", evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
	} else {
		snprintf(buf, n, "connection closed");
	}
	return buf;
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	char why[256];

	if (what & BEV_EVENT_CONNECTED) {
		if (c->state == CONN_HANDSHAKE) {
			handshake_done(c);
			on_handshake(c);
		}
		return;
	}
	if (c->state == CONN_HANDSHAKE) {
		if (what & BEV_EVENT_EOF)
			log_line("refused client %s: closed during the tls handshake", c->addr);
		else
			log_line("refused client %s: tls handshake failed: %s", c->addr,
				 bev_error(bev, !c->ssl, why, sizeof(why)));
	} else if ((what & BEV_EVENT_ERROR) && c->state == CONN_READY) {
		log_line("client %s (%s): %s", c->addr, c->id[0] ? c->id : "-",
			 bev_error(bev, !c->ssl, why, sizeof(why)));
	}
	conn_free(c);
}

/* What --max-conns-per-source counts as one source: an IPv4 address, an IPv6 /64. */
static void source_key(const struct sockaddr *sa, unsigned char key[8])
{
	memset(key, 0, 8);
	if (sa->sa_family == AF_INET) {
		memcpy(key, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a))
			memcpy(key, a->s6_addr + 12, 4);
		else
			memcpy(key, a->s6_addr, 8);
	}
}

static void shed_log(struct server *s)
{
	int64_t now = clock_ns(CLOCK_MONOTONIC);

	if (now - s->shed_log_ns < 1000000000)
		return;
	if (s->shed_src)
		log_line("closed %lu connections at once: over --max-conns-per-source %d",
			 s->shed_src, s->o->max_per_source);
	if (s->shed_hs)
		log_line("closed %lu unfinished tls handshakes to make room: over "
			 "--max-handshakes %d",
			 s->shed_hs, s->o->max_handshakes);
	s->shed_log_ns = now;
	s->shed_src = s->shed_hs = 0;
}

/*
 * Before a new connection is accepted: 1 when its source has
 * --max-conns-per-source open already (close it); else, when every handshake
 * slot is taken, makes one by closing the oldest unfinished handshake of the
 * source that holds the most, so that connections which never finish theirs
 * cannot lock real clients out: a client's own handshake is evicted only by
 * sources that hold no more than it does.
 */
static int shed(struct server *s, const unsigned char src[8])
{
	struct conn *c, *d, *victim = NULL;
	int same = 0, most = 0;

	TAILQ_FOREACH(c, &s->conns, entry)
		same += !memcmp(c->src, src, sizeof(c->src));
	if (same >= s->o->max_per_source) {
		s->shed_src++;
		shed_log(s);
		return 1;
	}
	if (!s->ctx || s->npending < s->o->max_handshakes)
		return 0;
	/* At most --max-handshakes pending: quadratic in that, not in sessions. */
	TAILQ_FOREACH(c, &s->conns, entry) {
		int n = 0;

		if (c->state != CONN_HANDSHAKE)
			continue;
		for (d = c; d; d = TAILQ_NEXT(d, entry))
			n += d->state == CONN_HANDSHAKE && !memcmp(d->src, c->src, sizeof(c->src));
		if (n > most) {
			most = n;
			victim = c;
		}
	}
	if (victim) {
		s->shed_hs++;
		shed_log(s);
		conn_free(victim);
	}
	return 0;
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		      void *arg)
{
	struct server *s = arg;
	struct conn *c = NULL;
	SSL *ssl = NULL;
	unsigned char src[8];
	int one = 1;

	if (s->draining)
		goto fail;
	source_key(sa, src);
	if (shed(s, src))
		goto fail;
	if (s->nconns - s->npending >= s->o->max_conns + REFUSE_SLACK) {
		int64_t now = clock_ns(CLOCK_MONOTONIC);

		s->cap_closed++;
		if (now - s->cap_log_ns >= 1000000000) {
			log_line("closed %lu connections at once: %d sessions open, over "
				 "--max-conns %d by %d",
				 s->cap_closed, s->nconns, s->o->max_conns, REFUSE_SLACK);
			s->cap_log_ns = now;
			s->cap_closed = 0;
		}
		goto fail;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		goto fail;
	c->srv = s;
	c->tls = s->ctx ? "full" : "none";
	c->over_cap = s->nconns - s->npending >= s->o->max_conns;
	memcpy(c->src, src, sizeof(c->src));
	format_addr(sa, c->addr, sizeof(c->addr));
	/* Small frames (HELLO, PONG) carry clock samples: send them at once. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (s->ctx) {
		ssl = SSL_new(s->ctx);
		if (!ssl)
			goto fail;
		tls_verdict_attach(ssl, &c->verdict);
		c->bev = bufferevent_openssl_socket_new(s->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
							BEV_OPT_CLOSE_ON_FREE);
		if (!c->bev)
			goto fail;
		/* A client that just closes TCP is not an error worth a log line. */
		bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
		c->ssl = ssl;
		c->state = CONN_HANDSHAKE;
	} else {
		c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
		if (!c->bev)
			goto fail;
		c->state = CONN_READY;
	}
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	bufferevent_setwatermark(c->bev, EV_WRITE, QUERY_LOW_WATER, 0);
	bufferevent_setwatermark(c->bev, EV_READ, 0, FRAME_SMALL);
	evtimer_assign(&c->timer, s->base, timer_cb, c);
	event_assign(&c->wake, s->base, -1, 0, wake_cb, c);
	TAILQ_INSERT_TAIL(&s->conns, c, entry);
	s->nconns++;
	if (c->state == CONN_HANDSHAKE)
		s->npending++;
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	if (c->state == CONN_HANDSHAKE) {
		arm_timer(c, s->o->handshake_timeout_s);
	} else if (c->over_cap) {
		refuse_busy(c);
	} else {
		send_hello(c);
		arm_timer(c, s->o->idle_timeout_s);
	}
	return;
fail:
	if (c && c->bev) {
		bufferevent_free(c->bev);
	} else {
		SSL_free(ssl);
		evutil_closesocket(fd);
	}
	free(c);
}

static void accept_error_cb(struct evconnlistener *l, void *arg)
{
	int err = EVUTIL_SOCKET_ERROR();

	log_line("cannot accept a connection: %s", evutil_socket_error_to_string(err));
}

/* ---- signals ---- */

static void on_hup(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;
	SSL_CTX *ctx;
	char *cause = NULL;

	log_reopen();
	if (!s->ctx) {
		log_line("SIGHUP: serving plaintext (--insecure), no certificates to reload");
		return;
	}
	ctx = tls_ctx_new(s->o->ca, s->o->cert, s->o->key, &cause);
	if (!ctx) {
		log_line("SIGHUP: certificate reload failed, still using the old ones: %s",
			 cause ? cause : "unknown error");
		free(cause);
		return;
	}
	/* Sessions keep a reference to the context they started with. */
	SSL_CTX_free(s->ctx);
	s->ctx = ctx;
	log_line("SIGHUP: reloaded CA '%s', certificate '%s' and key '%s' for new sessions",
		 s->o->ca, s->o->cert, s->o->key);
}

static void stop_queries(struct server *s)
{
	struct conn *c;
	struct timeval tv = { .tv_sec = STOP_GRACE_S };

	if (s->draining == 2)
		return;
	s->draining = 2;
	TAILQ_FOREACH(c, &s->conns, entry)
	if (c->q)
		query_stop(c->q, QUERY_STOP_SHUTDOWN);
	/* Past this, give up on clients that do not read their END. */
	evtimer_add(&s->drain_timer, &tv);
}

static void on_drain_timer(evutil_socket_t fd, short what, void *arg)
{
	struct server *s = arg;

	if (s->draining == 1) {
		log_line("stopping: grace period over, ending %d running queries",
			 query_pool_running(&s->pool));
		stop_queries(s);
	} else {
		log_line("stopping: giving up on %d sessions", query_pool_running(&s->pool));
		event_base_loopbreak(s->base);
	}
}

static void on_term(evutil_socket_t sig, short what, void *arg)
{
	struct server *s = arg;
	struct conn *c, *next;
	struct timeval tv = { .tv_sec = s->o->drain_timeout_s };

	if (s->draining) {
		log_line("stopping: signal %d again, ending running queries now", (int)sig);
		stop_queries(s);
		return;
	}
	s->draining = 1;
	log_line("stopping on signal %d: %d queries running, waiting up to %d s", (int)sig,
		 query_pool_running(&s->pool), s->o->drain_timeout_s);
	if (s->listener) {
		evconnlistener_free(s->listener);
		s->listener = NULL;
	}
	for (c = TAILQ_FIRST(&s->conns); c; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (c->state == CONN_HANDSHAKE)
			conn_free(c);
		else if (c->state == CONN_READY && !c->q)
			send_error(c, WIRE_E_SHUTDOWN, "agent is shutting down; retry later");
	}
	evtimer_add(&s->drain_timer, &tv);
	check_drained(s);
}

static void on_reaped(evutil_socket_t fd, short what, void *arg)
{
	check_drained(arg);
}

/* ---- life ---- */

static int write_port_file(const char *path, int port, char **cause)
{
	char tmp[4096];
	FILE *f;
	int err = 0;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%d\n", port) < 0)
		err = errno ? errno : EIO;
	if (f && fclose(f) && !err)
		err = errno;
	/* rename: a reader never sees a half-written port. */
	if (!err && rename(tmp, path))
		err = errno;
	if (err) {
		unlink(tmp);
		if (asprintf(cause, "cannot write port file '%s': %s", path, strerror(err)) < 0)
			*cause = NULL;
		return -err;
	}
	return 0;
}

struct server *server_new(const struct server_opts *o, char **cause)
{
	struct sockaddr_storage ss;
	struct server *s;
	socklen_t sl;
	int len, err, port;

	*cause = NULL;
	s = calloc(1, sizeof(*s));
	if (!s) {
		err = ENOMEM;
		goto fail;
	}
	s->o = o;
	TAILQ_INIT(&s->conns);
	wire_buf_init(&s->scratch);
	snprintf(s->clock_source, sizeof(s->clock_source), "unknown");
	err = -query_pool_init(&s->pool, o->max_queries);
	if (err)
		goto fail;
	s->pool.db_path = o->db_path;
	s->pool.max_rows = o->max_rows;
	s->pool.max_bytes = o->max_bytes;
	s->pool.timeout_ms = o->timeout_ms;
	s->pool.query_mem = o->query_mem;
	s->pool.query_mem_total = o->query_mem_total;
	s->pool.relay_ca = o->ca;
	s->pool.relay_cert = o->cert;
	s->pool.relay_key = o->key;
	s->pool.relay_node = o->node;
	s->pool.relay_max_dial = o->relay_max_dial;
	s->pool.relay_allow = o->relay_allow;
	s->pool.nrelay_allow = o->nrelay_allow;

	if (o->cert) {
		s->ctx = tls_ctx_new(o->ca, o->cert, o->key, cause);
		if (!s->ctx) {
			err = errno;
			goto fail;
		}
	}
	s->base = event_base_new();
	if (!s->base) {
		err = ENOMEM;
		goto fail;
	}
	evsignal_assign(&s->sig_hup, s->base, SIGHUP, on_hup, s);
	evsignal_assign(&s->sig_term, s->base, SIGTERM, on_term, s);
	evsignal_assign(&s->sig_int, s->base, SIGINT, on_term, s);
	evtimer_assign(&s->drain_timer, s->base, on_drain_timer, s);
	event_assign(&s->reaped, s->base, -1, 0, on_reaped, s);
	s->pool.reaped = &s->reaped;
	evsignal_add(&s->sig_hup, NULL);
	evsignal_add(&s->sig_term, NULL);
	evsignal_add(&s->sig_int, NULL);

	if (server_parse_listen(o->listen, &ss, &len)) {
		err = EINVAL;
		if (asprintf(cause,
			     "cannot parse --listen '%s'; use ADDR:PORT, e.g. 0.0.0.0:7077 "
			     "or [::]:7077",
			     o->listen) < 0)
			*cause = NULL;
		goto fail;
	}
	/* Relay peers named without a port are dialled on ours. */
	s->pool.relay_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (!s->pool.relay_port)
		s->pool.relay_port = 7077;
	s->listener = evconnlistener_new_bind(s->base, accept_cb, s,
					      LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
						      LEV_OPT_CLOSE_ON_EXEC,
					      128, (struct sockaddr *)&ss, len);
	if (!s->listener) {
		err = errno ? errno : EADDRINUSE;
		if (asprintf(cause, "cannot listen on '%s': %s", o->listen, strerror(err)) < 0)
			*cause = NULL;
		goto fail;
	}
	evconnlistener_set_error_cb(s->listener, accept_error_cb);
	sl = sizeof(ss);
	getsockname(evconnlistener_get_fd(s->listener), (struct sockaddr *)&ss, &sl);
	port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					      : ((struct sockaddr_in *)&ss)->sin_port);
	s->pool.self_port = port;
	if (o->port_file) {
		err = -write_port_file(o->port_file, port, cause);
		if (err)
			goto fail;
	}
	log_line("agentd %s serving '%s' on port %d (%s), node %s", FLEETQ_VERSION, o->db_path,
		 port, s->ctx ? "mutual tls" : "PLAINTEXT, --insecure", o->node);
	return s;
fail:
	server_free(s);
	errno = err;
	return NULL;
}

int server_run(struct server *s)
{
	return event_base_dispatch(s->base) < 0 ? -EIO : 0;
}

void server_free(struct server *s)
{
	struct conn *c;
	int i;

	if (!s)
		return;
	while ((c = TAILQ_FIRST(&s->conns)))
		conn_free(c);
	/* Workers report to the loop; wait for them before the base goes away. */
	for (i = 0; i < 100 && query_pool_threads(&s->pool); i++)
		usleep(20000);
	if (query_pool_threads(&s->pool)) {
		log_line("stopping: %d query workers still running; exiting without cleanup",
			 query_pool_threads(&s->pool));
		return;
	}
	if (s->listener)
		evconnlistener_free(s->listener);
	if (s->base) {
		event_del(&s->sig_hup);
		event_del(&s->sig_term);
		event_del(&s->sig_int);
		event_del(&s->drain_timer);
		event_del(&s->reaped);
		event_base_free(s->base);
	}
	SSL_CTX_free(s->ctx);
	sqlite3_finalize(s->meta_st);
	sqlite3_close(s->meta);
	wire_buf_release(&s->scratch);
	query_pool_release(&s->pool);
	free(s);
}
