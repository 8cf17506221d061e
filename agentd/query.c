/* SPDX-License-Identifier: MIT */
/* A query's life: started by the loop, run by its own worker thread, stopped or released. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "clock.h"
#include "log.h"
#include "query_int.h"

#define QUERY_STACK (1u << 20)

/* One-word statuses for the log, so lines split on spaces. */
static const char *status_word(int st)
{
	static const char *const w[] = {
		[WIRE_OK] = "ok",
		[WIRE_E_PROTO] = "proto",
		[WIRE_E_VERSION] = "version",
		[WIRE_E_AUTH] = "auth",
		[WIRE_E_SQL] = "sql",
		[WIRE_E_DENIED] = "denied",
		[WIRE_E_TIMEOUT] = "timeout",
		[WIRE_E_ROWS] = "rows",
		[WIRE_E_BYTES] = "bytes",
		[WIRE_E_MEMORY] = "memory",
		[WIRE_E_BUSY] = "busy",
		[WIRE_E_SHUTDOWN] = "shutdown",
		[WIRE_E_INTERNAL] = "internal",
		[WIRE_E_PEER] = "peer",
	};

	return st >= 0 && st < (int)(sizeof(w) / sizeof(w[0])) && w[st] ? w[st] : "?";
}

static void query_free(struct query *q)
{
	if (q->ready)
		evbuffer_free(q->ready);
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->mu);
	free(q->sql);
	free(q->params);
	for (size_t i = 0; i < q->npeers; i++)
		free(q->peers[i]);
	free(q->peers);
	for (size_t i = 0; q->cols && i < q->ncols; i++)
		free(q->cols[i]);
	free(q->cols);
	free(q->label);
	free(q->on_behalf);
	free(q);
}

static void query_unref(struct query *q)
{
	int last;

	pthread_mutex_lock(&q->mu);
	last = --q->refs == 0;
	pthread_mutex_unlock(&q->mu);
	if (last)
		query_free(q);
}

static void *worker(void *arg)
{
	struct query *q = arg;
	struct query_pool *p = q->pool;
	struct result r = { .status = WIRE_OK };
	struct wire_buf b;
	char sql[512], msg[256], who[256];
	int64_t elapsed;
	int rc;

	wire_buf_init(&b);
	rc = q->npeers ? query_relay(q, &b, &r) : query_run(q, &b, &r);
	elapsed = clock_ns(CLOCK_MONOTONIC) - q->start_ns;
	/* logged before the end frame is handed over: a client that has its answer finds the
	 * line in the log (tests, and an operator's script, read it right after) */
	log_line("query peer=%s%s%s addr=%s tls=%s id=%llu rows=%lld bytes=%lld ms=%lld "
		 "status=%s%s%s%s sql=\"%s\"",
		 q->peer, q->on_behalf ? " for=" : "",
		 q->on_behalf ? log_escape(who, sizeof(who), q->on_behalf, 200) : "", q->addr,
		 q->tls, (unsigned long long)q->id, (long long)r.rows,
		 (long long)r.bytes, (long long)(elapsed / 1000000),
		 rc == -ECANCELED ? "cancelled" : status_word(r.status), r.msg ? " error=\"" : "",
		 r.msg ? log_escape(msg, sizeof(msg), r.msg, 200) : "", r.msg ? "\"" : "",
		 log_escape(sql, sizeof(sql), q->sql, 200));
	if (rc != -ECANCELED) {
		struct wire_end e = {
			.id = q->id,
			.rows = r.rows,
			.status = r.status,
			.elapsed_ns = elapsed,
			.truncated = r.truncated,
			.message = r.status == WIRE_OK ? NULL
				   : r.msg	       ? r.msg
						       : wire_status_name(r.status),
		};

		wire_buf_reset(&b);
		rc = wire_put_end(&b, &e);
		if (rc)
			wire_buf_reset(&b);
		query_pool_free_slot(p);
		rc = query_hand_over(q, &b, 1);
	} else {
		query_pool_free_slot(p);
	}
	wire_buf_release(&b);
	free(r.msg);
	query_unref(q);

	/* Last: the server may free the event base once threads reaches 0. */
	pthread_mutex_lock(&p->mu);
	p->threads--;
	if (p->reaped)
		event_active(p->reaped, EV_TIMEOUT, 0);
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static int copy_request(struct query *q, const struct wire_query *m)
{
	size_t i, extra = 0;
	char *data;

	q->sql = strdup(m->sql ? m->sql : "");
	if (!q->sql)
		return -ENOMEM;
	if (m->on_behalf && !(q->on_behalf = strdup(m->on_behalf)))
		return -ENOMEM;
	if (m->npeers) {
		q->peers = calloc(m->npeers, sizeof(*q->peers));
		if (!q->peers)
			return -ENOMEM;
		for (i = 0; i < m->npeers; i++) {
			if (!(q->peers[i] = strdup(m->peers[i])))
				return -ENOMEM;
			q->npeers = i + 1;
		}
		q->tree_width = m->tree_width;
		q->clock_param = m->clock_param;
		q->pings = m->pings;
		q->connect_ms = m->connect_ms;
		q->label = strdup(m->self_name ? m->self_name : "");
		if (!q->label)
			return -ENOMEM;
	}
	for (i = 0; i < m->nparams; i++)
		if (m->params[i].type == WIRE_TEXT || m->params[i].type == WIRE_BLOB)
			extra += m->params[i].n + 1;
	q->nparams = m->nparams;
	q->params = calloc(1, m->nparams * sizeof(*q->params) + extra + 1);
	if (!q->params)
		return -ENOMEM;
	data = (char *)(q->params + m->nparams);
	for (i = 0; i < m->nparams; i++) {
		q->params[i] = m->params[i];
		if (m->params[i].type == WIRE_TEXT || m->params[i].type == WIRE_BLOB) {
			if (m->params[i].n)
				memcpy(data, m->params[i].p, m->params[i].n);
			q->params[i].p = data;
			data += m->params[i].n + 1;
		}
	}
	return 0;
}

/* A client may ask for less than the agent allows, never more. */
static int64_t lower(int64_t agent, int64_t client)
{
	return client > 0 && client < agent ? client : agent;
}

struct query *query_start(struct query_pool *p, const struct wire_query *m, const char *peer,
			  const char *addr, const char *tls, struct event *wake, int *running)
{
	struct query *q = NULL;
	pthread_attr_t attr;
	pthread_t tid;
	int err = 0, have_attr = 0;

	pthread_mutex_lock(&p->mu);
	*running = p->running;
	if (p->running >= p->max) {
		err = EBUSY;
	} else {
		p->running++;
		p->threads++;
	}
	pthread_mutex_unlock(&p->mu);
	if (err)
		goto fail;

	q = calloc(1, sizeof(*q));
	if (!q) {
		err = ENOMEM;
		goto unreserve;
	}
	pthread_mutex_init(&q->mu, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&q->cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	q->refs = 2;
	q->pool = p;
	q->wake = wake;
	q->ready = evbuffer_new();
	q->id = m->id;
	q->max_rows = lower(p->max_rows, m->max_rows);
	q->max_bytes = lower(p->max_bytes, m->max_bytes);
	q->timeout_ms = lower(p->timeout_ms, m->timeout_ms);
	q->start_ns = clock_ns(CLOCK_MONOTONIC);
	q->deadline_ns = q->start_ns + q->timeout_ms * 1000000;
	snprintf(q->peer, sizeof(q->peer), "%s", peer && *peer ? peer : "-");
	snprintf(q->addr, sizeof(q->addr), "%s", addr ? addr : "-");
	q->tls = tls ? tls : "-";
	if (!q->ready || copy_request(q, m)) {
		err = ENOMEM;
		goto free_q;
	}

	err = pthread_attr_init(&attr);
	if (err)
		goto free_q;
	have_attr = 1;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, QUERY_STACK);
	err = pthread_create(&tid, &attr, worker, q);
	if (err)
		goto free_q;
	pthread_attr_destroy(&attr);
	return q;

free_q:
	if (have_attr)
		pthread_attr_destroy(&attr);
	query_free(q);
unreserve:
	pthread_mutex_lock(&p->mu);
	p->running--;
	p->threads--;
	pthread_mutex_unlock(&p->mu);
fail:
	errno = err;
	return NULL;
}

int query_take(struct query *q, struct evbuffer *dst)
{
	int done;

	pthread_mutex_lock(&q->mu);
	evbuffer_add_buffer(dst, q->ready);
	q->unsent = evbuffer_get_length(dst);
	done = q->ended && evbuffer_get_length(q->ready) == 0;
	pthread_mutex_unlock(&q->mu);
	return done;
}

void query_sink_drained(struct query *q, size_t len)
{
	pthread_mutex_lock(&q->mu);
	q->unsent = len;
	if (evbuffer_get_length(q->ready) + len <= QUERY_HIGH_WATER)
		pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

void query_stop(struct query *q, int why)
{
	pthread_mutex_lock(&q->mu);
	if (!q->stop || why == QUERY_STOP_CANCEL)
		__atomic_store_n(&q->stop, why, __ATOMIC_RELAXED);
	if (q->db)
		sqlite3_interrupt(q->db);
	fqsql_mem_stop(q->budget);
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

void query_release(struct query *q)
{
	pthread_mutex_lock(&q->mu);
	q->wake = NULL;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	query_unref(q);
}
