/* SPDX-License-Identifier: MIT */
/*
 * One session of the fan-out, frame by frame: the agent's HELLO and the clock samples
 * of HELLO and PING, the QUERY sent, COLUMNS, ROWS and END handed to the sink for the
 * hosts they name, and an END's or ERROR's outcome.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/ssl.h>

#include "clock.h"
#include "session.h"
#include "strbuf.h"
#include "wire.h"

#include "fanout_int.h"

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
		sink_step(fo);
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
	sink_step(fo);
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
int on_frame(struct node *n, const void *frame, size_t len)
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
