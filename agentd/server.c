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

#include "server_int.h"

#define STOP_GRACE_S 5	     /* after stopping queries at shutdown, before giving up */
/*
 * Past --max-conns, this many more sessions are still accepted only to be
 * told "busy" in an ERROR frame (under TLS a client can read nothing else);
 * past that, new connections are closed at once, which costs us nothing.
 */
#define REFUSE_SLACK 64

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
