/* SPDX-License-Identifier: MIT */
/*
 * One client session of the server: HANDSHAKE -> READY -> CLOSING -> LINGER, one timer
 * whose meaning follows the state, the TLS peer check, the frames read and answered
 * (HELLO, PING, QUERY, ERROR, END), the query that runs beside READY and the
 * backpressure between it and the socket, and a careful close.
 */
#include <errno.h>
#include <fnmatch.h>
#include <malloc.h>
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

#include "server_int.h"

#define CLOSING_TIMEOUT_S 10 /* a client that stops reading our last frame */
#define LINGER_TIMEOUT_S 2   /* waiting for the client's FIN after ours */

static void conn_closing(struct conn *c);
static void process_input(struct conn *c);

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

void send_hello(struct conn *c)
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

/* Sends ERROR and closes the session once it is out. */
void send_error(struct conn *c, int code, const char *fmt, ...)
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

void arm_timer(struct conn *c, int seconds)
{
	struct timeval tv = { .tv_sec = seconds };

	evtimer_add(&c->timer, &tv);
}

void check_drained(struct server *s)
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

void conn_free(struct conn *c)
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

void timer_cb(evutil_socket_t fd, short what, void *arg)
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

void wake_cb(evutil_socket_t fd, short what, void *arg)
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
void refuse_busy(struct conn *c)
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

void read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	if (c->state == CONN_READY)
		process_input(c);
	else
		evbuffer_drain(in, evbuffer_get_length(in));
}

void write_cb(struct bufferevent *bev, void *arg)
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

void event_cb(struct bufferevent *bev, short what, void *arg)
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
