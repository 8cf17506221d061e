/* SPDX-License-Identifier: MIT */
/*
 * A QUERY with peers (PROTOCOL.md "Relay"): the query runs here, its rows
 * labelled with this node's name, then on the peers through the transport's
 * fan-out, their rows and ENDs streamed up as they come.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "fanout.h"
#include "query_int.h"
#include "strbuf.h"

struct relay {
	struct query *q;
	struct fanout *fo;
	struct wire_buf *b;
	struct wire_rows w;
	int open;		 /* a ROWS frame is being built in b */
	struct wire_value *vals; /* "node" + the query's columns */
	size_t cap;
	int64_t rows;		 /* rows sent up, all nodes */
	size_t failed;
};

/* Closes the ROWS frame being built and hands it up (waits for room). */
static int relay_flush(struct relay *rl)
{
	int rc;

	if (!rl->open)
		return 0;
	rl->open = 0;
	rc = wire_rows_finish(&rl->w);
	if (!rc && rl->b->len)
		rc = query_hand_over(rl->q, rl->b, 0);
	return rc;
}

static int relay_send_columns(struct relay *rl, size_t ncols, const char *const *names)
{
	struct query *q = rl->q;
	const char **all = calloc(ncols + 1, sizeof(*all));
	int rc = -ENOMEM;

	q->cols = calloc(ncols + 1, sizeof(*q->cols));
	if (!all || !q->cols)
		goto out;
	all[0] = "node";
	for (size_t i = 0; i < ncols; i++) {
		all[i + 1] = names[i];
		if (!(q->cols[i] = strdup(names[i])))
			goto out;
		q->ncols = i + 1;
	}
	q->ncols = ncols;
	rc = wire_put_columns(rl->b, ncols + 1, all);
	if (!rc)
		rc = query_hand_over(q, rl->b, 0);
out:
	free(all);
	return rc;
}

static int relay_columns(void *ctx, size_t i, size_t count, size_t ncols,
			 const char *const *names, char **cause)
{
	struct relay *rl = ctx;
	struct query *q = rl->q;

	if (!q->cols)
		return relay_send_columns(rl, ncols, names);
	if (ncols != q->ncols)
		return fq_fail(cause, -EINVAL,
				  "%zu columns where the first node sent %zu: not merged", ncols,
				  q->ncols);
	for (size_t k = 0; k < ncols; k++)
		if (strcmp(names[k], q->cols[k]))
			return fq_fail(cause, -EINVAL,
					  "column %zu is '%s' where the first node has '%s': "
					  "not merged",
					  k + 1, names[k], q->cols[k]);
	return 0;
}

static int relay_row(void *ctx, size_t i, int64_t index, size_t ncols,
		     const struct wire_value *vals, char **cause)
{
	struct relay *rl = ctx;
	struct query *q = rl->q;
	int rc;

	if (ncols + 1 > rl->cap) {
		struct wire_value *v = realloc(rl->vals, (ncols + 1) * sizeof(*v));

		if (!v)
			return -ENOMEM;
		rl->vals = v;
		rl->cap = ncols + 1;
	}
	rl->vals[0] = (struct wire_value){ .type = WIRE_TEXT, .p = q->peers[i],
					   .n = strlen(q->peers[i]) };
	memcpy(rl->vals + 1, vals, ncols * sizeof(*vals));
	if (!rl->open) {
		rc = wire_rows_begin(&rl->w, rl->b, ncols + 1);
		if (rc)
			return rc;
		rl->open = 1;
	}
	rc = wire_rows_add(&rl->w, rl->vals);
	if (!rc)
		rl->rows++;
	if (!rc && wire_rows_bytes(&rl->w) >= WIRE_ROWS_TARGET)
		rc = relay_flush(rl);
	if (rc)
		fq_fail(cause, rc, "relay stopped: %s", strerror(-rc));
	return rc;
}

/* One END per node: flushes that node's rows first, so its count is right. */
static int relay_end(struct relay *rl, const char *node, int outcome, int64_t rows,
		     const char *msg, const struct fanout_node_info *in)
{
	struct query *q = rl->q;
	struct wire_end e = {
		.id = q->id,
		.rows = rows,
		.status = outcome == WIRE_OUT_OK	  ? WIRE_OK
			  : outcome == WIRE_OUT_TRUNCATED ? WIRE_E_ROWS
			  : outcome == WIRE_OUT_SQL	  ? WIRE_E_SQL
							  : WIRE_E_PEER,
		.truncated = outcome == WIRE_OUT_TRUNCATED,
		.message = outcome == WIRE_OUT_OK ? NULL : msg ? msg : wire_outcome_name(outcome),
		.node = node,
		.outcome = wire_outcome_name(outcome),
	};
	int rc = relay_flush(rl);

	if (in && in->samples && in->rtt_ns > 0) {
		e.offset_ns = in->offset_ns;
		e.rtt_ns = in->rtt_ns;
		e.samples = in->samples;
	}
	if (outcome != WIRE_OUT_OK)
		rl->failed++;
	if (!rc)
		rc = wire_put_end(rl->b, &e);
	if (!rc)
		rc = query_hand_over(q, rl->b, 0);
	return rc;
}

static int relay_done(void *ctx, size_t i, int outcome, int64_t rows, const char *msg,
		      int status, char **cause)
{
	struct relay *rl = ctx;
	int rc = relay_end(rl, rl->q->peers[i], outcome, rows, msg,
			   rl->fo ? fanout_node_info(rl->fo, i) : NULL);

	if (rc)
		fq_fail(cause, rc, "relay stopped: %s", strerror(-rc));
	return rc;
}

/* "host:port", "[v6]:port" or "host" as "host:port", host lowercased, port as a number. */
static int peer_key(const char *peer, int dflt, char *host, size_t hn, int *port)
{
	const char *colon = strrchr(peer, ':'), *h = peer;
	size_t len = strlen(peer);
	char *end;
	long v;

	*port = dflt;
	if (peer[0] == '[') {
		const char *close = strchr(peer, ']');

		if (!close)
			return -EINVAL;
		h = peer + 1;
		len = (size_t)(close - h);
		colon = close[1] == ':' ? close + 1 : NULL;
	} else if (colon && strchr(peer, ':') != colon) {
		colon = NULL; /* a bare IPv6 address */
	} else if (colon) {
		len = (size_t)(colon - peer);
	}
	if (colon) {
		errno = 0;
		v = strtol(colon + 1, &end, 10);
		if (errno || end == colon + 1 || *end || v < 1 || v > 65535)
			return -EINVAL;
		*port = (int)v;
	}
	if (!len || len >= hn)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		host[i] = (char)tolower((unsigned char)h[i]);
	host[len] = '\0';
	return 0;
}

/* 1 when host is an address of this machine (bind() takes it), or one of its names. */
static int host_is_self(const struct query *q, const char *host)
{
	struct sockaddr_storage ss = { 0 };
	char me[256];
	socklen_t len = 0;
	int fd, ok;

	if (!strcmp(host, "localhost") || (q->label && !strcasecmp(host, q->label)) ||
	    (q->pool->relay_node && !strcasecmp(host, q->pool->relay_node)))
		return 1;
	if (!gethostname(me, sizeof(me)) && (me[sizeof(me) - 1] = 0, !strcasecmp(host, me)))
		return 1;
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
		ss.ss_family = AF_INET;
		len = sizeof(struct sockaddr_in);
	} else if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
		ss.ss_family = AF_INET6;
		len = sizeof(struct sockaddr_in6);
	} else {
		return 0;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	ok = bind(fd, (struct sockaddr *)&ss, len) == 0;
	close(fd);
	return ok;
}

struct peer_ref {
	char key[280];
	size_t i;
};

static int peer_ref_cmp(const void *a, const void *b)
{
	const struct peer_ref *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	return c ? c : x->i < y->i ? -1 : x->i > y->i;
}

/*
 * Takes out of q->peers what this relay will not dial, each with its own END
 * (E_PEER, why): a peer it cannot parse, itself under any spelling it can tell
 * (":09401" for its port 9401, its node or host name, a local address), a
 * peer named twice, one outside --relay-peer. A relay that dialled itself
 * held a query slot per hop until every slot was taken.
 */
static int relay_screen(struct relay *rl)
{
	struct query *q = rl->q;
	struct query_pool *p = q->pool;
	struct peer_ref *refs = calloc(q->npeers ? q->npeers : 1, sizeof(*refs));
	const char **why = calloc(q->npeers ? q->npeers : 1, sizeof(*why));
	size_t i, kept = 0;
	int rc = 0;

	if (!refs || !why) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < q->npeers; i++) {
		char host[256];
		int port, ok = !p->nrelay_allow;

		refs[i].i = i;
		if (peer_key(q->peers[i], p->relay_port, host, sizeof(host), &port)) {
			why[i] = "relay cannot parse this peer (want HOST[:PORT]): not dialled";
			continue;
		}
		snprintf(refs[i].key, sizeof(refs[i].key), "%s:%d", host, port);
		if (port == p->self_port && host_is_self(q, host)) {
			why[i] = "this is the relay itself: not dialled again";
			continue;
		}
		for (size_t k = 0; k < p->nrelay_allow && !ok; k++)
			ok = !fnmatch(p->relay_allow[k], host, FNM_CASEFOLD);
		if (!ok)
			why[i] = "outside the relay's --relay-peer list: not dialled";
	}
	qsort(refs, q->npeers, sizeof(*refs), peer_ref_cmp);
	for (i = 1; i < q->npeers; i++)
		if (refs[i].key[0] && !strcmp(refs[i].key, refs[i - 1].key) && !why[refs[i].i])
			why[refs[i].i] = "named twice in one query: dialled once";
	for (i = 0; i < q->npeers && !rc; i++) {
		if (!why[i]) {
			q->peers[kept++] = q->peers[i];
			continue;
		}
		rc = relay_end(rl, q->peers[i], WIRE_OUT_AGENT, 0, why[i], NULL);
		free(q->peers[i]);
	}
	for (; i < q->npeers; i++)
		q->peers[kept++] = q->peers[i];
	q->npeers = kept;
out:
	free(refs);
	free(why);
	return rc;
}

/*
 * Runs the query here (rows labelled with our name), then on the peers
 * through the fan-out client, streaming their rows and ENDs up as they come.
 * Fills r for the final END. -ECANCELED: nobody to tell.
 */
int query_relay(struct query *q, struct wire_buf *b, struct result *r)
{
	struct query_pool *p = q->pool;
	struct relay rl = { .q = q, .b = b };
	struct result own = { .status = WIRE_OK };
	struct fanout_sink sink = {
		.ctx = &rl, .columns = relay_columns, .row = relay_row, .done = relay_done };
	struct fanout_params fp = { 0 };
	struct fanout *fo = NULL;
	size_t total = 0;
	int64_t left_ms, margin;
	char *cause = NULL;
	int rc, outcome;

	rc = query_run(q, b, &own);
	if (rc)
		goto out;
	total = q->npeers;
	rl.rows = own.rows;
	outcome = own.status == WIRE_OK ? WIRE_OUT_OK : own.truncated ? WIRE_OUT_TRUNCATED : WIRE_OUT_SQL;
	/* Our own END reads as fleetq would have written it for us. */
	if (outcome == WIRE_OUT_TRUNCATED) {
		char *why = own.msg;

		own.msg = NULL;
		query_set_msg(&own, "%s, %lld rows kept", why ? why : "truncated", (long long)own.rows);
		free(why);
	}
	rc = relay_end(&rl, q->label, outcome, own.rows, own.msg, NULL);
	if (!rc)
		rc = relay_screen(&rl);
	if (rc)
		goto out;
	if (!q->npeers)
		goto out;

	/* Each hop keeps a margin so its ENDs get up before the caller gives up. */
	left_ms = (q->deadline_ns - clock_ns(CLOCK_MONOTONIC)) / 1000000;
	margin = left_ms / 10 > 200 ? left_ms / 10 : 200;
	fp.hosts = (const char *const *)q->peers;
	fp.nhosts = q->npeers;
	fp.port = p->relay_port;
	fp.ca = p->relay_ca;
	fp.cert = p->relay_cert;
	fp.key = p->relay_key;
	fp.insecure = !p->relay_cert;
	fp.window = 64;
	fp.timeout_ms = left_ms - margin > 1 ? left_ms - margin : 1;
	/* The requester's connect timeout when it sent one (fleetq --connect-timeout), else 5 s;
	 * never past the deadline. */
	fp.connect_timeout_ms = q->connect_ms > 0 ? q->connect_ms : 5000;
	if (fp.connect_timeout_ms > fp.timeout_ms)
		fp.connect_timeout_ms = fp.timeout_ms;
	fp.sql = q->sql;
	fp.max_rows = q->max_rows;
	fp.params = q->params;
	fp.nparams = q->nparams;
	fp.tree_width = (int)q->tree_width;
	/* Past relay_max_dial peers, sub-relays take the rest: this agent dials no more. */
	if (p->relay_max_dial > 0 && q->npeers > (size_t)p->relay_max_dial &&
	    (fp.tree_width <= 0 || fp.tree_width > p->relay_max_dial))
		fp.tree_width = p->relay_max_dial;
	/* The leaves check the client we serve, not us (PROTOCOL.md "Relay"). */
	fp.on_behalf = q->on_behalf ? q->on_behalf : strcmp(q->peer, "-") ? q->peer : NULL;
	fp.clock_param = (size_t)q->clock_param;
	/* Sample the leaves' clocks as the requester samples its own nodes (it says how
	 * many PINGs in the QUERY; a requester that does not say: 4 when the query has
	 * a clock parameter), so their offsets go up in END. */
	fp.pings = q->pings > 0 ? (int)(q->pings < 64 ? q->pings : 64) : q->clock_param ? 4 : 0;
	fp.relay = 1;
	fp.cancel = &q->stop; /* the client left or the agent drains */
	fo = fanout_new(&fp, &cause);
	if (!fo) {
		/* Every peer fails alike (bad name, unreadable certificate). */
		for (size_t i = 0; i < q->npeers && !rc; i++)
			rc = relay_end(&rl, q->peers[i], WIRE_OUT_AGENT, 0,
				       cause ? cause : "relay cannot start its fan-out", NULL);
		goto out;
	}
	rl.fo = fo;
	rc = fanout_run(fo, &sink, &cause);
	if (!rc)
		rc = relay_flush(&rl);
out:
	/* -ECANCELED from a drain is ours (stopped fan-out): END still goes up. */
	if (query_stop_status(q) == QUERY_STOP_CANCEL ||
	    (rc == -ECANCELED && query_stop_status(q) != QUERY_STOP_SHUTDOWN)) {
		rc = -ECANCELED;
	} else {
		if (rc && rl.open) {
			wire_rows_finish(&rl.w);
			rl.open = 0;
		}
		wire_buf_reset(b);
		r->rows = rl.rows;
		if (query_stop_status(q) == QUERY_STOP_SHUTDOWN) {
			r->status = WIRE_E_SHUTDOWN;
			r->truncated = 1;
			query_set_msg(r, "agent is shutting down; relay stopped");
		} else if (rc) {
			r->status = WIRE_E_INTERNAL;
			query_set_msg(r, "relay failed: %s", cause ? cause : strerror(-rc));
		} else if (rl.failed) {
			r->status = WIRE_E_PEER;
			query_set_msg(r, "%zu of %zu nodes did not answer fully", rl.failed,
				(total > q->npeers ? total : q->npeers) + 1);
		}
		rc = 0;
	}
	if (rl.open)
		wire_rows_finish(&rl.w);
	fanout_free(fo);
	free(rl.vals);
	free(own.msg);
	free(cause);
	return rc;
}
