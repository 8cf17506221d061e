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

#include "fanout_int.h"

/* The progress line names the hosts in flight when there are at most this many. */
#define PROGRESS_NAMED 16

const char *ssl_reason(void)
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

void set_fatal(struct fanout *fo, char *cause)
{
	if (!fo->fatal)
		fo->fatal = cause ? cause : strdup("out of memory");
	else
		free(cause);
	event_base_loopbreak(fo->base);
}

/* An outcome in the sink's words. */
const char *oname(const struct fanout *fo, int outcome)
{
	return fo->sink->outcome_name ? fo->sink->outcome_name(outcome)
				      : wire_outcome_name(outcome);
}

void sink_step(struct fanout *fo)
{
	char *cause = NULL;

	if (fo->sink->step && fo->sink->step(fo->sink->ctx, &cause))
		set_fatal(fo, cause);
}

/* Hands host h's outcome to the sink, once. */
void leaf_finish(struct fanout *fo, size_t h, int outcome, const char *msg, int status)
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
void node_finish(struct node *n, int outcome, const char *fmt, ...)
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
	sink_step(fo);
	fo->done++;
	if (fo->done == fo->n)
		event_base_loopexit(fo->base, NULL);
	else if (fo->next < fo->n)
		event_active(&fo->ev_kick, 0, 0);
}

void node_error_text(struct node *n, const char *what, int err)
{
	free(n->last_error);
	if (asprintf(&n->last_error, "%s: %s", what, strerror(err)) < 0)
		n->last_error = NULL;
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
