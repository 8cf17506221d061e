/* SPDX-License-Identifier: MIT */
#include "fanout.h"
#include "strbuf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "clock.h"
#include "hostlist.h"
#include "session.h"
#include "tlsfiles.h"
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

/* The progress line names the hosts in flight when there are at most this many. */
#define PROGRESS_NAMED 16

static struct timeval ms_tv(int64_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	return tv;
}


static const char *ssl_reason(void)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	return r ? r : "unknown error";
}

static int is_loopback_name(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (!strcmp(host, "localhost"))
		return 1;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return 0;
}

static int load_tls(struct fanout *fo, char **cause)
{
	const struct fanout_params *p = fo->p;

	if (!p->ca)
		return fq_fail(cause, -EINVAL,
			    "no CA certificate: pass --ca FILE or set 'ca' in the "
			    "config file (or --insecure for loopback agents)");
	if (!p->cert || !p->key)
		return fq_fail(cause, -EINVAL,
			    "no client certificate: pass --cert FILE and --key FILE "
			    "or set 'cert' and 'key' in the config file");
	fo->ctx = SSL_CTX_new(TLS_client_method());
	if (!fo->ctx)
		return fq_fail(cause, -ENOMEM, "cannot create TLS context: %s", ssl_reason());
	SSL_CTX_set_min_proto_version(fo->ctx, TLS1_2_VERSION);
	if (tlsfile_readable("CA certificate", "ca", p->ca, cause) ||
	    tlsfile_readable("client certificate", "cert", p->cert, cause) ||
	    tlsfile_readable("key", "key", p->key, cause))
		return -EINVAL;
	if (SSL_CTX_load_verify_locations(fo->ctx, p->ca, NULL) != 1)
		return fq_fail(cause, -EINVAL, "cannot load CA certificate '%s': %s: check --ca",
			    p->ca, ssl_reason());
	if (SSL_CTX_use_certificate_chain_file(fo->ctx, p->cert) != 1)
		return fq_fail(cause, -EINVAL,
			       "cannot load client certificate '%s': %s: check --cert", p->cert,
			       ssl_reason());
	if (SSL_CTX_use_PrivateKey_file(fo->ctx, p->key, SSL_FILETYPE_PEM) != 1)
		return tlsfile_key_cause(p->key, p->cert, cause);
	if (SSL_CTX_check_private_key(fo->ctx) != 1)
		return fq_fail(cause, -EINVAL,
			       "key '%s' does not match certificate '%s': check --key", p->key,
			       p->cert);
	SSL_CTX_set_verify(fo->ctx, SSL_VERIFY_PEER, NULL);
	session_setup(fo->ctx);
	if (session_scope(fo->ctx, fo->scope))
		return fq_fail(cause, -ENOMEM, "cannot fingerprint the client certificate '%s'",
			       p->cert);
	if (p->session_dir)
		session_load(p->session_dir, fo->scope);
	return 0;
}

struct fanout *fanout_new(const struct fanout_params *p, char **cause)
{
	struct fanout *fo = calloc(1, sizeof(*fo));
	size_t *starts = NULL;
	int err = -ENOMEM;

	*cause = NULL;
	if (!fo)
		return NULL;
	fo->p = p;
	fo->nh = p->nhosts;
	wire_buf_init(&fo->out);
	fo->nodes = calloc(fo->nh ? fo->nh : 1, sizeof(*fo->nodes));
	fo->leaves = calloc(fo->nh ? fo->nh : 1, sizeof(*fo->leaves));
	fo->infos = calloc(fo->nh ? fo->nh : 1, sizeof(*fo->infos));
	starts = calloc(fo->nh + 1, sizeof(*starts));
	fo->params = calloc(p->nparams ? p->nparams : 1, sizeof(*fo->params));
	if (!fo->nodes || !fo->params || !fo->leaves || !fo->infos || !starts)
		goto fail;
	if (p->nparams)
		memcpy(fo->params, p->params, p->nparams * sizeof(*fo->params));
	for (size_t i = 0; i < fo->nh; i++) {
		char *h = NULL;
		int port;

		err = hostlist_split(p->hosts[i], p->port, &h, &port);
		free(h);
		if (err) {
			fq_fail(cause, err, "invalid host '%s': use host, host:port or [ipv6]:port",
			     p->hosts[i]);
			goto fail;
		}
	}
	/* Without a query (fleetq ping) there is nothing to relay: flat. */
	fo->n = fanout_groups(fo->nh, p->sql ? p->tree_width : 0, starts);
	for (size_t i = 0; i < fo->n; i++) {
		struct node *n = &fo->nodes[i];
		struct in6_addr a;

		n->fo = fo;
		n->first = starts[i];
		n->count = starts[i + 1] - starts[i];
		n->last_leaf = n->first;
		n->off = n->count > 1;
		n->idx = n->first;
		n->info = &fo->infos[n->first];
		n->name = p->hosts[n->first];
		n->fd = -1;
		for (size_t h = n->first; h < n->first + n->count; h++)
			fo->leaves[h].conn = i;
		err = hostlist_split(n->name, p->port, &n->host, &n->port);
		if (err)
			goto fail;
		n->is_ip = inet_pton(AF_INET, n->host, &a) == 1 ||
			   inet_pton(AF_INET6, n->host, &a) == 1;
		if (p->insecure && !is_loopback_name(n->host)) {
			err = fq_fail(cause, -EINVAL,
				   "--insecure talks plaintext to loopback agents only: "
				   "'%s' is not a loopback address",
				   n->name);
			goto fail;
		}
	}
	if (!p->insecure) {
		err = load_tls(fo, cause);
		if (err)
			goto fail;
		for (size_t i = 0; i < fo->n; i++) {
			struct node *n = &fo->nodes[i];

			err = -ENOMEM;
			if (asprintf(&n->skey, strchr(n->host, ':') ? "%s [%s]:%d" : "%s %s:%d",
				     fo->scope, n->host, n->port) < 0) {
				n->skey = NULL;
				goto fail;
			}
		}
	}
	free(starts);
	return fo;
fail:
	free(starts);
	fanout_free(fo);
	errno = -err;
	return NULL;
}

size_t fanout_groups(size_t n, int w, size_t *starts)
{
	size_t g = w <= 0 || n <= (size_t)w ? n : (size_t)w;

	/* Near-equal contiguous groups: the first n % g get one host more. */
	for (size_t i = 0, at = 0; i <= g; i++) {
		starts[i] = at;
		if (i < g)
			at += n / g + (i < n % g);
	}
	return g;
}

static void node_release(struct node *n)
{
	if (n->dns) {
		struct evdns_getaddrinfo_request *r = n->dns;

		n->dns = NULL;
		evdns_getaddrinfo_cancel(r);
	}
	if (n->timer_set) {
		event_del(&n->ev_timer);
		n->timer_set = 0;
	}
	if (n->connect_set) {
		event_del(&n->ev_connect);
		n->connect_set = 0;
	}
	if (n->bev) {
		/* BEV_OPT_CLOSE_ON_FREE: frees the SSL and closes the socket. */
		bufferevent_free(n->bev);
		n->bev = NULL;
		n->ssl = NULL;
		n->fd = -1;
	}
	if (n->fd >= 0) {
		close(n->fd);
		n->fd = -1;
	}
	if (n->ai) {
		evutil_freeaddrinfo(n->ai);
		n->ai = n->ai_next = NULL;
	}
}

void fanout_free(struct fanout *fo)
{
	if (!fo)
		return;
	for (size_t i = 0; i < fo->n; i++) {
		node_release(&fo->nodes[i]);
		free(fo->nodes[i].host);
		free(fo->nodes[i].skey);
		free(fo->nodes[i].last_error);
	}
	for (size_t i = 0; fo->infos && i < fo->nh; i++) {
		struct fanout_node_info *in = &fo->infos[i];

		free(in->agent_version);
		free(in->node);
		free(in->clock_source);
		free(in->peer);
		free(in->gpu_status);
	}
	free(fo->infos);
	free(fo->leaves);
	free(fo->nodes);
	free(fo->params);
	free(fo->vals);
	free(fo->fatal);
	wire_buf_release(&fo->out);
	if (fo->ctx)
		SSL_CTX_free(fo->ctx);
	free(fo);
}

static void set_fatal(struct fanout *fo, char *cause)
{
	if (!fo->fatal)
		fo->fatal = cause ? cause : strdup("out of memory");
	else
		free(cause);
	event_base_loopbreak(fo->base);
}

/* An outcome in the sink's words. */
static const char *oname(const struct fanout *fo, int outcome)
{
	return fo->sink->outcome_name ? fo->sink->outcome_name(outcome)
				      : wire_outcome_name(outcome);
}

static void step(struct fanout *fo)
{
	char *cause = NULL;

	if (fo->sink->step && fo->sink->step(fo->sink->ctx, &cause))
		set_fatal(fo, cause);
}

/* Hands host h's outcome to the sink, once. */
static void leaf_finish(struct fanout *fo, size_t h, int outcome, const char *msg, int status)
{
	struct leaf *l = &fo->leaves[h];
	char *cause = NULL;

	if (l->done)
		return;
	l->done = 1;
	if (outcome != WIRE_OUT_OK && outcome != WIRE_OUT_TRUNCATED)
		fo->rows_total -= l->rows;
	if (fo->sink->done(fo->sink->ctx, h, outcome, l->rows, msg, status, &cause))
		set_fatal(fo, cause);
}

/*
 * Records the outcome of every host of the connection not yet reported
 * (behind a relay: those it has not ended), frees the connection and makes
 * room for the next.
 */
static void node_finish(struct node *n, int outcome, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void node_finish(struct node *n, int outcome, const char *fmt, ...)
{
	struct fanout *fo = n->fo;
	char *msg = NULL, *via = NULL;
	va_list ap;

	if (n->state == N_DONE)
		return;
	if (fmt) {
		va_start(ap, fmt);
		if (vasprintf(&msg, fmt, ap) < 0)
			msg = NULL;
		va_end(ap);
	}
	leaf_finish(fo, n->first, outcome, msg, n->end_status);
	if (n->count > 1 && asprintf(&via, "via relay %s: %s", n->name, msg ? msg : "failed") < 0)
		via = NULL;
	for (size_t h = n->first + 1; h < n->first + n->count; h++)
		leaf_finish(fo, h, outcome, via, 0);
	free(via);
	free(msg);
	if (n->state != N_IDLE)
		fo->inflight--;
	/* After END the session ended well: say goodbye with close_notify. */
	if (n->ssl && (outcome == WIRE_OUT_OK || outcome == WIRE_OUT_TRUNCATED || outcome == WIRE_OUT_SQL))
		SSL_shutdown(n->ssl);
	n->state = N_DONE;
	node_release(n);
	step(fo);
	fo->done++;
	if (fo->done == fo->n)
		event_base_loopexit(fo->base, NULL);
	else if (fo->next < fo->n)
		event_active(&fo->ev_kick, 0, 0);
}

static void node_error_text(struct node *n, const char *what, int err)
{
	free(n->last_error);
	if (asprintf(&n->last_error, "%s: %s", what, strerror(err)) < 0)
		n->last_error = NULL;
}

static void try_connect(struct node *n);

static void read_cb(struct bufferevent *bev, void *arg);
static void event_cb(struct bufferevent *bev, short what, void *arg);

static void start_session(struct node *n)
{
	struct fanout *fo = n->fo;
	int one = 1;

	setsockopt(n->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* The agent builds its HELLO after our ClientHello: a bound for the clock sample. */
	if (!fo->p->insecure)
		n->t_lo = clock_ns(CLOCK_REALTIME);
	if (fo->p->insecure) {
		n->bev = bufferevent_socket_new(fo->base, n->fd, BEV_OPT_CLOSE_ON_FREE);
		n->state = N_HELLO;
	} else {
		X509_VERIFY_PARAM *vp;

		n->ssl = SSL_new(fo->ctx);
		if (!n->ssl) {
			node_finish(n, WIRE_OUT_TLS, "cannot create TLS session: %s", ssl_reason());
			return;
		}
		/* Resume the last session with this host and port when there is one:
		 * the agent's certificate was verified, against this name and our
		 * CAs, when that session was made. */
		session_offer(n->ssl, n->skey);
		/* Verify the agent's certificate against the name we dialled. */
		vp = SSL_get0_param(n->ssl);
		if (n->is_ip) {
			X509_VERIFY_PARAM_set1_ip_asc(vp, n->host);
		} else {
			X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
			X509_VERIFY_PARAM_set1_host(vp, n->host, 0);
			SSL_set_tlsext_host_name(n->ssl, n->host);
		}
		n->bev = bufferevent_openssl_socket_new(
			fo->base, n->fd, n->ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
		/* On failure libevent may already have freed the SSL (CLOSE_ON_FREE):
		 * leaking it on this out-of-memory path beats a double free. */
		n->state = N_HANDSHAKE;
	}
	if (!n->bev) {
		n->ssl = NULL;
		node_finish(n, WIRE_OUT_UNREACHABLE, "cannot set up the connection");
		return;
	}
	bufferevent_setcb(n->bev, read_cb, NULL, event_cb, n);
	bufferevent_enable(n->bev, EV_READ | EV_WRITE);
}

static void connect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct node *n = arg;
	int err = 0;
	socklen_t len = sizeof(err);

	n->connect_set = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		node_error_text(n, "connect", err);
		close(n->fd);
		n->fd = -1;
		n->ai_next = n->ai_next->ai_next;
		try_connect(n);
		return;
	}
	start_session(n);
}

static void try_connect(struct node *n)
{
	struct fanout *fo = n->fo;

	for (; n->ai_next; n->ai_next = n->ai_next->ai_next) {
		struct evutil_addrinfo *a = n->ai_next;

		n->fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (n->fd < 0) {
			node_error_text(n, "socket", errno);
			continue;
		}
		/* A plaintext agent sends HELLO once it accepts: after this. */
		n->t_lo = clock_ns(CLOCK_REALTIME);
		if (connect(n->fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
			event_assign(&n->ev_connect, fo->base, n->fd, EV_WRITE, connect_cb, n);
			event_add(&n->ev_connect, NULL);
			n->connect_set = 1;
			n->state = N_CONNECTING;
			return;
		}
		node_error_text(n, "connect", errno);
		close(n->fd);
		n->fd = -1;
	}
	node_finish(n, WIRE_OUT_UNREACHABLE, "%s", n->last_error ? n->last_error : "no address");
}

static void dns_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct node *n = arg;

	if (result == EVUTIL_EAI_CANCEL)
		return;
	n->dns = NULL;
	if (result) {
		node_finish(n, WIRE_OUT_UNREACHABLE, "cannot resolve '%s': %s", n->host,
			    evutil_gai_strerror(result));
		return;
	}
	n->ai = n->ai_next = res;
	try_connect(n);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct node *n = arg;
	double secs = n->fo->p->connect_timeout_ms / 1000.0;

	n->timer_set = 0;
	switch (n->state) {
	case N_RESOLVING:
		node_finish(n, WIRE_OUT_UNREACHABLE, "cannot resolve '%s' within %gs", n->host, secs);
		break;
	case N_CONNECTING:
		node_finish(n, WIRE_OUT_UNREACHABLE, "connect timed out after %gs", secs);
		break;
	case N_HANDSHAKE:
		node_finish(n, WIRE_OUT_TIMEOUT, "TLS handshake not done within %gs", secs);
		break;
	default:
		/* A TLS agent waits for our ClientHello as we wait for its HELLO. */
		node_finish(n, WIRE_OUT_TIMEOUT,
			    n->fo->p->insecure ? "no HELLO within %gs (does the agent serve TLS? "
						 "then drop --insecure)"
					       : "no HELLO within %gs",
			    secs);
		break;
	}
}

static void node_start(struct node *n)
{
	struct fanout *fo = n->fo;
	struct evutil_addrinfo hints = { 0 };
	struct timeval tv = ms_tv(fo->p->connect_timeout_ms);
	char port[8];

	fo->inflight++;
	n->state = N_RESOLVING;
	evtimer_assign(&n->ev_timer, fo->base, timer_cb, n);
	evtimer_add(&n->ev_timer, &tv);
	n->timer_set = 1;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	/* An address is no name: ADDRCONFIG would refuse ::1 on a host without a
	 * routable IPv6 address, as libevent checks for one. */
	hints.ai_flags = n->is_ip ? EVUTIL_AI_NUMERICHOST : EVUTIL_AI_ADDRCONFIG;
	snprintf(port, sizeof(port), "%d", n->port);
	/* The callback may run before this returns (numeric hosts). */
	n->dns = evdns_getaddrinfo(fo->dns, n->host, port, &hints, dns_cb, n);
	if (n->state != N_RESOLVING)
		n->dns = NULL;
}

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fanout *fo = arg;

	while (fo->next < fo->n && fo->inflight < (size_t)fo->p->window && !fo->fatal) {
		struct node *n = &fo->nodes[fo->next++];

		/* The deadline may have finished nodes that never started. */
		if (n->state == N_IDLE)
			node_start(n);
	}
}

/*
 * One clock sample: the agent read its clock (t2) somewhere between t1 and t3
 * on ours; assuming the middle, its offset is t2 - (t1 + rtt/2), off by at
 * most rtt/2. The sample with the smallest rtt is the one kept (NTP-style).
 */
static void clock_sample(struct node *n, int64_t t1, int64_t t2, int64_t t3)
{
	struct fanout_node_info *in = n->info;
	int64_t rtt = t3 - t1;

	if (rtt < 0 || !t1 || !t2)
		return;
	if (!in->samples || rtt < in->rtt_ns) {
		in->rtt_ns = rtt;
		in->offset_ns = t2 - (t1 + rtt / 2);
	}
	in->samples++;
}

static void send_ping(struct node *n)
{
	struct fanout *fo = n->fo;
	struct wire_ping ping = { .t1_ns = clock_ns(CLOCK_REALTIME) };

	wire_buf_reset(&fo->out);
	if (wire_put_ping(&fo->out, WIRE_PING, &ping)) {
		set_fatal(fo, strdup("cannot encode PING"));
		return;
	}
	bufferevent_write(n->bev, fo->out.data, fo->out.len);
	n->pings_sent++;
	n->state = N_PING;
}

static void send_query(struct node *n)
{
	struct fanout *fo = n->fo;
	const struct fanout_params *p = fo->p;
	int64_t left = fo->start_ms + p->timeout_ms - clock_ns(CLOCK_MONOTONIC) / 1000000;
	struct wire_query q = {
		.id = n->idx + 1,
		.sql = p->sql,
		.max_rows = p->max_rows,
		/* The agent may stop by itself when nobody will wait any more. */
		.timeout_ms = left > 1 ? left : 1,
		.nparams = p->nparams,
		.params = fo->params,
	};

	if (n->count > 1) {
		q.peers = p->hosts + n->first + 1;
		q.npeers = n->count - 1;
		q.tree_width = p->tree_width;
		q.self_name = n->name;
		q.clock_param = (int64_t)p->clock_param;
		/* The relay samples its leaves' clocks as we sample ours. */
		q.pings = p->pings > 0 ? p->pings : 0;
		/* ... and gives them the time to HELLO we give ours. */
		q.connect_ms = p->connect_timeout_ms > 0 ? p->connect_timeout_ms : 0;
	}
	q.on_behalf = p->on_behalf;

	/* A window start on our clock, moved onto this node's. */
	if (p->clock_param && p->clock_param <= p->nparams &&
	    p->params[p->clock_param - 1].type == WIRE_INT)
		fo->params[p->clock_param - 1].i =
			p->params[p->clock_param - 1].i + n->info->offset_ns;
	wire_buf_reset(&fo->out);
	if (wire_put_query(&fo->out, &q)) {
		set_fatal(fo, strdup("cannot encode QUERY"));
		return;
	}
	bufferevent_write(n->bev, fo->out.data, fo->out.len);
	n->state = N_COLUMNS;
}

/* After HELLO and after each PONG: the next PING, the query, or done. */
static void session_next(struct node *n)
{
	if (n->pings_sent < n->fo->p->pings)
		send_ping(n);
	else if (n->fo->p->sql)
		send_query(n);
	else
		node_finish(n, WIRE_OUT_OK, NULL);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void on_hello(struct node *n, const struct wire_hello *h)
{
	struct fanout_node_info *in = n->info;

	in->hello = 1;
	in->agent_version = dup_or_null(h->agent_version);
	in->node = dup_or_null(h->node);
	in->clock_source = dup_or_null(h->clock_source);
	in->peer = dup_or_null(h->peer_identity);
	in->gpu_status = dup_or_null(h->gpu_status);
	in->schema_version = h->schema_version;
	in->ring_drops = h->ring_drops;
	in->store_lag_ns = h->store_lag_ns;
	if (h->realtime_ns)
		clock_sample(n, n->t_lo, h->realtime_ns, clock_ns(CLOCK_REALTIME));
}

static void on_error_frame(struct node *n, const struct wire_error *e)
{
	const char *msg = e->message ? e->message : "";

	switch (e->code) {
	case WIRE_E_AUTH:
		node_finish(n, WIRE_OUT_TLS, "agent refused our certificate: %s", msg);
		break;
	case WIRE_E_PROTO:
	case WIRE_E_VERSION:
		node_finish(n, WIRE_OUT_PROTOCOL, "agent: %s", msg);
		break;
	case WIRE_E_BUSY:
		node_finish(n, WIRE_OUT_BUSY, "%s", msg);
		break;
	default:
		node_finish(n, WIRE_OUT_AGENT, "%s: %s", wire_status_name((int)e->code), msg);
	}
}

/* Host of the connection named name (len bytes, not NUL-terminated), or SIZE_MAX. */
static size_t find_leaf(struct node *n, const char *name, size_t len)
{
	const char *const *hosts = n->fo->p->hosts;

	if (strlen(hosts[n->last_leaf]) == len && !memcmp(hosts[n->last_leaf], name, len))
		return n->last_leaf;
	for (size_t h = n->first; h < n->first + n->count; h++)
		if (strlen(hosts[h]) == len && !memcmp(hosts[h], name, len))
			return n->last_leaf = h;
	return SIZE_MAX;
}

/*
 * The user's own row limit, whose cut is no failure (0: none). A relay keeps
 * its leaves "truncated" so that the END it passes up says why; the client
 * at the top decides.
 */
static int64_t user_max_rows(const struct fanout *fo)
{
	return fo->p->relay ? 0 : fo->p->max_rows;
}

/* An END's status as an outcome, with the one-line reason in *msg (malloc'd). */
static int end_outcome(const struct fanout *fo, const struct wire_end *e, int64_t rows,
		       int64_t max_rows, char **why)
{
	const char *msg = e->message ? e->message : wire_status_name((int)e->status);
	const char *sname = wire_status_name((int)e->status);
	size_t sl = strlen(sname);
	int outcome = WIRE_OUT_OK, r = 0;

	*why = NULL;
	/* A relay tells the outcome it saw for the leaf: keep it as it is. */
	if (e->node && e->outcome) {
		outcome = wire_outcome_parse(e->outcome);
		/* A name we do not know is no "ok". */
		if (outcome < 0) {
			outcome = WIRE_OUT_AGENT;
			msg = e->outcome;
		}
		if (outcome != WIRE_OUT_OK && e->message) {
			size_t ol = strlen(e->outcome);

			/* "sql error: sql error: ...": the outcome names it already. */
			if (!strncmp(msg, e->outcome, ol) && msg[ol] == ':' && msg[ol + 1] == ' ' &&
			    msg[ol + 2])
				msg += ol + 2;
			/* Nothing more to say than the outcome: in the sink's words. */
			if (msg != e->outcome && !strcmp(msg, e->outcome))
				msg = oname(fo, outcome);
			*why = strdup(msg);
		}
		if (outcome == WIRE_OUT_TRUNCATED && max_rows > 0 && rows == max_rows &&
		    e->status == WIRE_E_ROWS) {
			outcome = WIRE_OUT_OK;
			free(*why);
			*why = NULL;
		}
		if (outcome == WIRE_OUT_OK && e->rows != rows) {
			outcome = WIRE_OUT_PROTOCOL;
			r = asprintf(why, "END counts %" PRId64 " rows, %" PRId64 " arrived",
				     e->rows, rows);
		}
		goto out;
	}
	/* "sql error: sql error: ..." says it twice: the outcome names it already. */
	if (!strncmp(msg, sname, sl) && msg[sl] == ':' && msg[sl + 1] == ' ' && msg[sl + 2])
		msg += sl + 2;
	if (max_rows > 0 && rows == max_rows && e->status == WIRE_E_ROWS) {
		/* The user's own --max-rows: what was asked for, not a node failing. */
		outcome = WIRE_OUT_OK;
	} else if (e->truncated || e->status == WIRE_E_ROWS || e->status == WIRE_E_BYTES) {
		outcome = WIRE_OUT_TRUNCATED;
		r = asprintf(why, "%s, %" PRId64 " rows kept", msg, rows);
	} else if (e->status == WIRE_E_PEER) {
		outcome = WIRE_OUT_UNREACHABLE;
		r = asprintf(why, "%s", msg);
	} else if (e->status == WIRE_E_BUSY) {
		outcome = WIRE_OUT_BUSY;
		r = asprintf(why, "%s", msg);
	} else if (e->status != WIRE_OK) {
		outcome = WIRE_OUT_SQL;
		r = asprintf(why, "%s", msg);
	} else if (e->rows != rows) {
		outcome = WIRE_OUT_PROTOCOL;
		r = asprintf(why, "END counts %" PRId64 " rows, %" PRId64 " arrived", e->rows,
			     rows);
	}
out:
	if (r < 0)
		*why = NULL;
	return outcome;
}

static void on_end(struct node *n, const struct wire_end *e)
{
	struct fanout *fo = n->fo;
	char *why = NULL;
	int outcome;

	if (e->node && n->count > 1) {
		size_t h = find_leaf(n, e->node, strlen(e->node));

		if (h == SIZE_MAX) {
			node_finish(n, WIRE_OUT_PROTOCOL, "relay sent END for unknown node '%s'",
				    e->node);
			return;
		}
		/* The leaf's clock: the relay's offset to ours plus the leaf's to the relay's. */
		if (e->rtt_ns > 0 && n->info->samples) {
			fo->infos[h].samples = e->samples > 0 ? e->samples : 1;
			fo->infos[h].offset_ns = n->info->offset_ns + e->offset_ns;
			fo->infos[h].rtt_ns = n->info->rtt_ns + e->rtt_ns;
		}
		outcome = end_outcome(fo, e, fo->leaves[h].rows, user_max_rows(fo), &why);
		/* A leaf the relay could not reach: say which relay (each hop adds its own). */
		if (h != n->first && (outcome == WIRE_OUT_UNREACHABLE || outcome == WIRE_OUT_TLS ||
				      outcome == WIRE_OUT_TIMEOUT || outcome == WIRE_OUT_PARTIAL ||
				      outcome == WIRE_OUT_PROTOCOL)) {
			char *via = NULL;

			if (asprintf(&via, "relay %s: %s", n->name,
				     why ? why : oname(fo, outcome)) >= 0) {
				free(why);
				why = via;
			}
		}
		leaf_finish(fo, h, outcome, why, (int)e->status);
		step(fo);
		free(why);
		return;
	}
	if (n->count > 1) {
		/* The relay's own summary: hosts it did not end are not answered. */
		for (size_t h = n->first; h < n->first + n->count; h++)
			if (!fo->leaves[h].done) {
				const char *m = e->message ? e->message : "no END for this node";

				node_finish(n, e->status == WIRE_E_PROTO ? WIRE_OUT_PROTOCOL : WIRE_OUT_PARTIAL,
					    "relay %s: %s", n->name, m);
				return;
			}
		node_finish(n, WIRE_OUT_OK, NULL);
		return;
	}
	outcome = end_outcome(fo, e, n->rows, user_max_rows(fo), &why);
	n->end_status = (int)e->status;
	if (why)
		node_finish(n, outcome, "%s", why);
	else
		node_finish(n, outcome, NULL);
	free(why);
}

static void on_columns(struct node *n, struct wire_msg *msg)
{
	struct fanout *fo = n->fo;
	size_t nc = msg->u.columns.ncols;
	char *cause = NULL;
	const char *const *names = msg->u.columns.names;
	int err;

	if (n->off && (!nc || strcmp(names[0], "node"))) {
		node_finish(n, WIRE_OUT_PROTOCOL, "relay COLUMNS do not start with 'node'");
		return;
	}
	err = fo->sink->columns(fo->sink->ctx, n->first, n->count, nc - n->off, names + n->off,
				&cause);
	if (err == -EINVAL) {
		node_finish(n, WIRE_OUT_COLUMNS, "%s", cause ? cause : oname(fo, WIRE_OUT_COLUMNS));
		free(cause);
		return;
	}
	if (err) {
		set_fatal(fo, cause);
		return;
	}
	if (nc > fo->vals_cap) {
		struct wire_value *v = realloc(fo->vals, nc * sizeof(*v));

		if (!v) {
			set_fatal(fo, NULL);
			return;
		}
		fo->vals = v;
		fo->vals_cap = nc;
	}
	n->ncols = nc;
	n->state = N_ROWS;
	step(fo);
}

/* frame: the frame msg was decoded from (len bytes). */
static void on_rows(struct node *n, struct wire_msg *msg, const void *frame, size_t len)
{
	struct fanout *fo = n->fo;
	char *cause = NULL;
	int r;

	if (msg->u.rows.nrows && msg->u.rows.ncols != n->ncols) {
		node_finish(n, WIRE_OUT_PROTOCOL, "ROWS with %zu columns, COLUMNS announced %zu",
			    msg->u.rows.ncols, n->ncols);
		return;
	}
	/* A hostile or broken agent must not grow us without bound. */
	/* (a relay's connection carries the rows of n->count nodes) */
	if (fo->p->max_bytes > 0 &&
	    n->bytes + (int64_t)len > fo->p->max_bytes * (int64_t)n->count) {
		node_finish(n, WIRE_OUT_TRUNCATED, "fleetq's --max-bytes of %" PRId64
			    " per node reached, %" PRId64 " rows kept", fo->p->max_bytes, n->rows);
		return;
	}
	if (fo->p->max_bytes > 0 && fo->bytes_total + (int64_t)len > 4 * fo->p->max_bytes) {
		node_finish(n, WIRE_OUT_TRUNCATED, "fleetq's budget of %" PRId64 " bytes per run "
			    "(4 x --max-bytes) reached, %" PRId64 " rows kept",
			    4 * fo->p->max_bytes, n->rows);
		return;
	}
	n->bytes += (int64_t)len;
	fo->bytes_total += (int64_t)len;
	/* wire_decode() checked every row: one node's frame is kept whole, read when printed. */
	if (fo->sink->frame && !n->off) {
		int64_t nr = (int64_t)msg->u.rows.nrows;

		if (fo->p->max_rows > 0 && n->rows + nr > fo->p->max_rows) {
			node_finish(n, WIRE_OUT_PROTOCOL, "sent more rows than the %" PRId64
				    " asked for (--max-rows)", fo->p->max_rows);
			return;
		}
		if (nr && fo->sink->frame(fo->sink->ctx, n->first, frame, len, &cause)) {
			set_fatal(fo, cause);
			return;
		}
		fo->leaves[n->first].rows += nr;
		n->rows += nr;
		fo->rows_total += nr;
		return;
	}
	while ((r = wire_rows_next(msg, fo->vals)) == 1) {
		size_t h = n->first;
		struct leaf *l;
		int err;

		if (n->off) {
			h = fo->vals[0].type == WIRE_TEXT
				    ? find_leaf(n, fo->vals[0].p, fo->vals[0].n)
				    : SIZE_MAX;
			if (h == SIZE_MAX || fo->leaves[h].done) {
				node_finish(n, WIRE_OUT_PROTOCOL,
					    "relay sent a row of an unknown or ended node");
				return;
			}
		}
		l = &fo->leaves[h];
		if (fo->p->max_rows > 0 && l->rows >= fo->p->max_rows) {
			node_finish(n, WIRE_OUT_PROTOCOL, "%s sent more rows than the %" PRId64
				    " asked for (--max-rows)", fo->p->hosts[h], fo->p->max_rows);
			return;
		}
		err = fo->sink->row(fo->sink->ctx, h, l->rows, n->ncols - n->off, fo->vals + n->off,
				    &cause);
		if (err) {
			set_fatal(fo, cause);
			return;
		}
		l->rows++;
		n->rows++;
		fo->rows_total++;
	}
	if (r < 0)
		node_finish(n, WIRE_OUT_PROTOCOL, "malformed ROWS frame");
}

/* Returns 1 when the node is finished (its buffers are gone). */
static int on_frame(struct node *n, const void *frame, size_t len)
{
	struct wire_msg msg;
	char *cause = NULL;
	int err;

	memset(&msg, 0, sizeof(msg));
	err = wire_decode(&msg, frame, len, &cause);
	if (err == -EPROTONOSUPPORT) {
		node_finish(n, WIRE_OUT_PROTOCOL,
			    "agent speaks protocol version %d, fleetq speaks %d: "
			    "upgrade one of them",
			    msg.version, WIRE_VERSION);
		goto out;
	}
	if (err) {
		node_finish(n, WIRE_OUT_PROTOCOL, "bad frame: %s", cause ? cause : strerror(-err));
		goto out;
	}
	if (msg.type == WIRE_ERROR) {
		on_error_frame(n, &msg.u.error);
		goto out;
	}
	/* Data can be read before the handshake-done event is delivered. */
	if (n->state == N_HANDSHAKE)
		n->state = N_HELLO;
	switch (n->state) {
	case N_HELLO:
		if (msg.type != WIRE_HELLO) {
			node_finish(n, WIRE_OUT_PROTOCOL, "expected HELLO, got %s",
				    wire_type_name(msg.type));
			break;
		}
		if (msg.u.hello.proto_min > WIRE_VERSION || msg.u.hello.proto_max < WIRE_VERSION) {
			node_finish(n, WIRE_OUT_PROTOCOL,
				    "agent speaks protocol versions %" PRId64 "-%" PRId64
				    ", fleetq speaks %d: upgrade one of them",
				    msg.u.hello.proto_min, msg.u.hello.proto_max, WIRE_VERSION);
			break;
		}
		/* Connected: from here only the overall deadline applies. */
		if (n->timer_set) {
			event_del(&n->ev_timer);
			n->timer_set = 0;
		}
		on_hello(n, &msg.u.hello);
		session_next(n);
		break;
	case N_PING:
		if (msg.type != WIRE_PONG) {
			node_finish(n, WIRE_OUT_PROTOCOL, "expected PONG, got %s",
				    wire_type_name(msg.type));
			break;
		}
		clock_sample(n, msg.u.ping.t1_ns, msg.u.ping.t2_ns, clock_ns(CLOCK_REALTIME));
		session_next(n);
		break;
	case N_COLUMNS:
		if (msg.type == WIRE_COLUMNS)
			on_columns(n, &msg);
		else if (msg.type == WIRE_END)
			on_end(n, &msg.u.end);
		else if (msg.type != WIRE_PONG)
			node_finish(n, WIRE_OUT_PROTOCOL, "expected COLUMNS, got %s",
				    wire_type_name(msg.type));
		break;
	case N_ROWS:
		if (msg.type == WIRE_ROWS)
			on_rows(n, &msg, frame, len);
		else if (msg.type == WIRE_END)
			on_end(n, &msg.u.end);
		else if (msg.type != WIRE_PONG)
			node_finish(n, WIRE_OUT_PROTOCOL, "expected ROWS or END, got %s",
				    wire_type_name(msg.type));
		break;
	default:
		node_finish(n, WIRE_OUT_PROTOCOL, "unexpected %s", wire_type_name(msg.type));
	}
out:
	wire_msg_release(&msg);
	free(cause);
	return n->state == N_DONE || n->fo->fatal;
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct node *n = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	for (;;) {
		size_t avail = evbuffer_get_length(in), flen;
		unsigned char hdr[WIRE_HDR_LEN];
		uint32_t plen;
		unsigned char *p;

		if (avail < WIRE_HDR_LEN)
			return;
		evbuffer_copyout(in, hdr, WIRE_HDR_LEN);
		plen = (uint32_t)hdr[0] << 24 | hdr[1] << 16 | hdr[2] << 8 | hdr[3];
		if (plen > WIRE_FRAME_MAX) {
			node_finish(n, WIRE_OUT_PROTOCOL,
				    "frame of %" PRIu32 " bytes exceeds the %u limit", plen,
				    WIRE_FRAME_MAX);
			return;
		}
		flen = WIRE_HDR_LEN + (size_t)plen;
		if (avail < flen)
			return;
		p = evbuffer_pullup(in, flen);
		if (!p) {
			set_fatal(n->fo, NULL);
			return;
		}
		if (on_frame(n, p, flen))
			return;
		evbuffer_drain(in, flen);
	}
}

/* Why a TLS connection failed, in words. */
static void tls_why(struct node *n, char *buf, size_t len)
{
	unsigned long e = 0, x;
	long vr;

	while ((x = bufferevent_get_openssl_error(n->bev)))
		e = x;
	vr = n->ssl ? SSL_get_verify_result(n->ssl) : X509_V_OK;
	if (vr != X509_V_OK)
		snprintf(buf, len, "agent certificate not accepted: %s",
			 X509_verify_cert_error_string(vr));
	else if (e && ERR_GET_LIB(e) != ERR_LIB_SYS && ERR_reason_error_string(e))
		snprintf(buf, len, "%s", ERR_reason_error_string(e));
	else if (e) /* libevent's SSL_ERROR_SYSCALL, or a reset: the agent closed on us */
		snprintf(buf, len, "agent closed the connection (busy, or limiting this address: "
			 "see its log)");
	else if (EVUTIL_SOCKET_ERROR())
		snprintf(buf, len, "%s", strerror(EVUTIL_SOCKET_ERROR()));
	else
		snprintf(buf, len, "connection closed");
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct node *n = arg;
	char why[256];

	if (what & BEV_EVENT_CONNECTED) {
		n->state = N_HELLO;
		return;
	}
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	/* Frames that arrived with the close (an ERROR before it) come first. */
	read_cb(bev, n);
	if (n->state == N_DONE || n->fo->fatal)
		return;
	if (n->fo->p->insecure) {
		snprintf(why, sizeof(why), "%s",
			 (what & BEV_EVENT_ERROR) && EVUTIL_SOCKET_ERROR()
				 ? strerror(EVUTIL_SOCKET_ERROR())
				 : "connection closed");
	} else {
		tls_why(n, why, sizeof(why));
	}
	switch (n->state) {
	case N_HANDSHAKE:
		node_finish(n, WIRE_OUT_TLS, "handshake failed: %s", why);
		break;
	case N_HELLO:
		/* Under TLS 1.3 a refused client finishes its handshake; the
		 * refusal shows up as a close before HELLO. */
		if (n->fo->p->insecure)
			node_finish(n, WIRE_OUT_PROTOCOL, "closed before HELLO: %s", why);
		else
			node_finish(n, WIRE_OUT_TLS,
				    "closed before HELLO (agent refused our certificate?): %s",
				    why);
		break;
	case N_PING:
		node_finish(n, WIRE_OUT_PARTIAL, "connection lost while sampling the clock: %s", why);
		break;
	default:
		node_finish(n, WIRE_OUT_PARTIAL,
			    "connection lost after %" PRId64 " rows, rows dropped: %s", n->rows,
			    why);
	}
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fanout *fo = arg;
	double secs = fo->p->timeout_ms / 1000.0;

	for (size_t i = 0; i < fo->n; i++) {
		struct node *n = &fo->nodes[i];

		switch (n->state) {
		case N_DONE:
			break;
		case N_IDLE:
			node_finish(n, WIRE_OUT_TIMEOUT,
				    "not contacted within %gs: raise --timeout or "
				    "--fanout",
				    secs);
			break;
		case N_RESOLVING:
		case N_CONNECTING:
		case N_HANDSHAKE:
		case N_HELLO:
			node_finish(n, WIRE_OUT_TIMEOUT, "not connected within %gs", secs);
			break;
		case N_PING:
			node_finish(n, WIRE_OUT_TIMEOUT, "no PONG within %gs", secs);
			break;
		default:
			node_finish(n, WIRE_OUT_TIMEOUT, "no END within %gs%s", secs,
				    n->rows ? ", rows dropped" : "");
		}
	}
	event_base_loopexit(fo->base, NULL);
}

/* The hosts still in flight, folded ("gpu[03,07]"), when few enough to name; else NULL. */
static char *inflight_names(struct fanout *fo)
{
	const char **names;
	char *folded = NULL;
	size_t k = 0;

	if (!fo->inflight || fo->inflight > PROGRESS_NAMED)
		return NULL;
	names = malloc(fo->inflight * sizeof(*names));
	if (!names)
		return NULL;
	for (size_t i = 0; i < fo->n && k < fo->inflight; i++)
		if (fo->nodes[i].state != N_IDLE && fo->nodes[i].state != N_DONE)
			names[k++] = fo->nodes[i].name;
	if (k)
		folded = hostlist_fold(names, k);
	free(names);
	return folded;
}

static void progress_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fanout *fo = arg;
	struct timeval tv = ms_tv(250);
	char *slow = inflight_names(fo);

	/* The slow ones by name, as pdsh does: the line stays one line (cut at 60 columns). */
	fprintf(stderr, "\rfleetq: %zu/%zu nodes done, %zu in flight%s%.60s%s%s, %" PRId64
			" rows\033[K",
		fo->done, fo->n, fo->inflight, slow ? " (" : "", slow ? slow : "",
		slow && strlen(slow) > 60 ? "..." : "", slow ? ")" : "", fo->rows_total);
	free(slow);
	fo->progress_shown = 1;
	evtimer_add(&fo->ev_progress, &tv);
}

/* Ctrl-C: end the fan-out now, as the deadline would; what arrived stays. */
static void interrupt_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fanout *fo = arg;
	struct timeval tv = ms_tv(100);
	double secs = (double)(clock_ns(CLOCK_MONOTONIC) / 1000000 - fo->start_ms) / 1000;

	if (!*fo->p->interrupt) {
		evtimer_add(&fo->ev_interrupt, &tv);
		return;
	}
	for (size_t i = 0; i < fo->n; i++) {
		struct node *n = &fo->nodes[i];

		if (n->state != N_DONE)
			node_finish(n, WIRE_OUT_INTERRUPTED, "interrupted after %.1fs%s", secs,
				    n->rows ? ", rows dropped" : "");
	}
	event_base_loopexit(fo->base, NULL);
}

static void cancel_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fanout *fo = arg;
	struct timeval tv = ms_tv(100);

	if (__atomic_load_n(fo->p->cancel, __ATOMIC_RELAXED)) {
		fo->cancelled = 1;
		set_fatal(fo, strdup("fan-out cancelled"));
		return;
	}
	evtimer_add(&fo->ev_cancel, &tv);
}

int fanout_run(struct fanout *fo, const struct fanout_sink *sink, char **cause)
{
	struct timeval tv;
	int err = 0;

	*cause = NULL;
	fo->sink = sink;
	fo->start_ms = clock_ns(CLOCK_MONOTONIC) / 1000000;
	fo->base = event_base_new();
	if (!fo->base)
		return fq_fail(cause, -ENOMEM, "cannot create event loop");
	fo->dns = evdns_base_new(fo->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
						   EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (!fo->dns)
		fo->dns = evdns_base_new(fo->base, EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (!fo->dns) {
		err = fq_fail(cause, -ENOMEM, "cannot set up the DNS resolver");
		goto out;
	}
	evtimer_assign(&fo->ev_deadline, fo->base, deadline_cb, fo);
	tv = ms_tv(fo->p->timeout_ms);
	evtimer_add(&fo->ev_deadline, &tv);
	event_assign(&fo->ev_kick, fo->base, -1, 0, kick_cb, fo);
	evtimer_assign(&fo->ev_progress, fo->base, progress_cb, fo);
	evtimer_assign(&fo->ev_cancel, fo->base, cancel_cb, fo);
	evtimer_assign(&fo->ev_interrupt, fo->base, interrupt_cb, fo);
	if (fo->p->interrupt) {
		tv = ms_tv(100);
		evtimer_add(&fo->ev_interrupt, &tv);
	}
	if (fo->p->cancel) {
		tv = ms_tv(100);
		evtimer_add(&fo->ev_cancel, &tv);
	}
	if (fo->p->progress) {
		tv = ms_tv(1000);
		evtimer_add(&fo->ev_progress, &tv);
	}
	if (fo->n) {
		event_active(&fo->ev_kick, 0, 0);
		event_base_dispatch(fo->base);
	}
	if (fo->progress_shown)
		fprintf(stderr, "\r\033[K");
	if (fo->fatal) {
		err = fo->cancelled ? -ECANCELED : -EIO;
		*cause = fo->fatal;
		fo->fatal = NULL;
	}
out:
	for (size_t i = 0; i < fo->n; i++)
		node_release(&fo->nodes[i]);
	/* The tickets of this run, for the next: a failure only costs handshakes then. */
	if (fo->ctx && fo->p->session_dir)
		session_save(fo->p->session_dir, fo->scope);
	event_del(&fo->ev_deadline);
	event_del(&fo->ev_kick);
	event_del(&fo->ev_progress);
	event_del(&fo->ev_cancel);
	event_del(&fo->ev_interrupt);
	if (fo->dns)
		evdns_base_free(fo->dns, 1);
	fo->dns = NULL;
	event_base_free(fo->base);
	fo->base = NULL;
	return err;
}

const struct fanout_node_info *fanout_node_info(const struct fanout *fo, size_t i)
{
	return &fo->infos[i];
}

void fanout_stop(struct fanout *fo, size_t h, int outcome, const char *msg)
{
	struct node *n = &fo->nodes[fo->leaves[h].conn];

	if (n->state != N_DONE)
		node_finish(n, outcome, "%s", msg);
}

void fanout_forget_rows(struct fanout *fo, size_t h)
{
	fo->rows_total -= fo->leaves[h].rows;
}
