/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <sqlite3.h>

#include "../sql/fqsql.h"
#include "log.h"
#include "query.h"

/* Largest string or blob a query may make: one value must fit in one frame. */
#define QUERY_VALUE_MAX (WIRE_FRAME_MAX - (64u << 10))
/* A row estimated above this cannot be sent: ROWS frames are capped at WIRE_FRAME_MAX. */
#define QUERY_ROW_MAX (WIRE_FRAME_MAX - (16u << 10))
#define QUERY_STACK (1u << 20)

struct query {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* the worker waits here for room in the output */
	int refs;	   /* the connection and the worker */
	struct query_pool *pool;
	struct event *wake;	/* the connection's; NULL once it let go */
	struct evbuffer *ready; /* whole frames the loop has not taken yet */
	size_t unsent;		/* bytes waiting in the connection's output */
	int stop;		/* enum query_stop; read without the lock in the step loop */
	int ended;		/* END is in ready */
	sqlite3 *db;		/* while open, for sqlite3_interrupt() from the loop */

	/* The request, owned. */
	uint64_t id;
	char *sql;
	size_t nparams;
	struct wire_value *params; /* text/blob bytes live in the same allocation */
	int64_t max_rows, max_bytes, timeout_ms;
	int64_t start_ns, deadline_ns;
	char peer[256];
	char addr[64];
};

struct result {
	int64_t rows, bytes;
	int status;
	int truncated;
	char *msg;
};

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

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int query_pool_init(struct query_pool *p, int max)
{
	memset(p, 0, sizeof(*p));
	p->max = max;
	return -pthread_mutex_init(&p->mu, NULL);
}

int query_pool_threads(struct query_pool *p)
{
	int n;

	pthread_mutex_lock(&p->mu);
	n = p->threads;
	pthread_mutex_unlock(&p->mu);
	return n;
}

/*
 * Frees the worker's slot. Called before END is handed over: a client that
 * sends its next query as soon as END arrives must not find its own finished
 * query still counted.
 */
static void release_slot(struct query_pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->running--;
	pthread_mutex_unlock(&p->mu);
}

void query_pool_release(struct query_pool *p)
{
	pthread_mutex_destroy(&p->mu);
}

int query_pool_running(struct query_pool *p)
{
	int n;

	pthread_mutex_lock(&p->mu);
	n = p->running;
	pthread_mutex_unlock(&p->mu);
	return n;
}

static void query_free(struct query *q)
{
	if (q->ready)
		evbuffer_free(q->ready);
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->mu);
	free(q->sql);
	free(q->params);
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

static void set_msg(struct result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_msg(struct result *r, const char *fmt, ...)
{
	va_list ap;

	free(r->msg);
	va_start(ap, fmt);
	if (vasprintf(&r->msg, fmt, ap) < 0)
		r->msg = NULL;
	va_end(ap);
}

/*
 * Hands the whole frames in b to the loop and empties b. Unless b holds END
 * (is_end), first waits while the connection has more than QUERY_HIGH_WATER
 * unsent. Returns 0, -ECANCELED when the client is gone, -ETIMEDOUT at the
 * deadline.
 */
static int hand_over(struct query *q, struct wire_buf *b, int is_end)
{
	struct timespec ts = { .tv_sec = q->deadline_ns / 1000000000,
			       .tv_nsec = q->deadline_ns % 1000000000 };
	int rc = 0;

	pthread_mutex_lock(&q->mu);
	while (!is_end && !q->stop && q->wake &&
	       evbuffer_get_length(q->ready) + q->unsent > QUERY_HIGH_WATER) {
		if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT) {
			rc = -ETIMEDOUT;
			break;
		}
	}
	if (!q->wake || q->stop == QUERY_STOP_CANCEL) {
		rc = -ECANCELED;
	} else if (!rc) {
		if (evbuffer_add(q->ready, b->data, b->len))
			rc = -ENOMEM;
		/* Set with the frame, so the loop never sees "ended" before END itself. */
		if (is_end)
			q->ended = 1;
		event_active(q->wake, EV_WRITE, 0);
	}
	pthread_mutex_unlock(&q->mu);
	wire_buf_reset(b);
	return rc;
}

static int bind_params(struct query *q, sqlite3_stmt *st, struct result *r)
{
	int want = sqlite3_bind_parameter_count(st), rc = SQLITE_OK;
	size_t i;

	if ((size_t)want != q->nparams) {
		r->status = WIRE_E_SQL;
		set_msg(r, "query has %d parameters but %zu values were sent", want, q->nparams);
		return -EINVAL;
	}
	for (i = 0; i < q->nparams && rc == SQLITE_OK; i++) {
		const struct wire_value *v = &q->params[i];
		int k = (int)i + 1;

		switch (v->type) {
		case WIRE_INT:
			rc = sqlite3_bind_int64(st, k, v->i);
			break;
		case WIRE_REAL:
			rc = sqlite3_bind_double(st, k, v->d);
			break;
		case WIRE_TEXT:
			rc = sqlite3_bind_text64(st, k, v->p, v->n, SQLITE_STATIC, SQLITE_UTF8);
			break;
		case WIRE_BLOB:
			rc = sqlite3_bind_blob64(st, k, v->p, v->n, SQLITE_STATIC);
			break;
		default:
			rc = sqlite3_bind_null(st, k);
			break;
		}
	}
	if (rc != SQLITE_OK) {
		r->status = rc == SQLITE_NOMEM ? WIRE_E_MEMORY : WIRE_E_SQL;
		set_msg(r, "cannot bind parameter %zu: %s", i, sqlite3_errstr(rc));
		return -EINVAL;
	}
	return 0;
}

/* Reads the current row into vals; returns an upper bound of its encoded size. */
static size_t read_row(sqlite3_stmt *st, int ncols, struct wire_value *vals)
{
	size_t est = 5;
	int i;

	for (i = 0; i < ncols; i++) {
		struct wire_value *v = &vals[i];

		switch (sqlite3_column_type(st, i)) {
		case SQLITE_INTEGER:
			v->type = WIRE_INT;
			v->i = sqlite3_column_int64(st, i);
			est += 9;
			break;
		case SQLITE_FLOAT:
			v->type = WIRE_REAL;
			v->d = sqlite3_column_double(st, i);
			est += 9;
			break;
		case SQLITE_TEXT:
			v->type = WIRE_TEXT;
			v->p = sqlite3_column_text(st, i);
			v->n = (size_t)sqlite3_column_bytes(st, i);
			est += v->n + 5;
			break;
		case SQLITE_BLOB:
			v->type = WIRE_BLOB;
			v->p = sqlite3_column_blob(st, i);
			v->n = (size_t)sqlite3_column_bytes(st, i);
			est += v->n + 5;
			break;
		default:
			v->type = WIRE_NULL;
			est += 1;
			break;
		}
	}
	return est;
}

static int stop_status(struct query *q)
{
	return __atomic_load_n(&q->stop, __ATOMIC_RELAXED);
}

/* Streams COLUMNS and ROWS; fills r. Returns -ECANCELED when the client is gone. */
static int stream(struct query *q, sqlite3 *db, sqlite3_stmt *st, struct wire_buf *b,
		  struct result *r)
{
	int ncols = sqlite3_column_count(st), i, rc, stepped = SQLITE_DONE, open = 0, sent;
	const char **names = calloc((size_t)ncols + 1, sizeof(*names));
	struct wire_value *vals = calloc((size_t)ncols + 1, sizeof(*vals));
	struct wire_rows w;
	int64_t limit_bytes;

	if (!names || !vals) {
		rc = -ENOMEM;
		goto nomem;
	}
	for (i = 0; i < ncols; i++)
		names[i] = sqlite3_column_name(st, i) ? sqlite3_column_name(st, i) : "";
	rc = wire_put_columns(b, (size_t)ncols, names);
	if (rc)
		goto nomem;
	rc = hand_over(q, b, 0);
	if (rc)
		goto sent_fail;

	limit_bytes = q->max_bytes;
	for (;;) {
		size_t est;

		stepped = sqlite3_step(st);
		if (stepped != SQLITE_ROW || stop_status(q))
			break;
		if (r->rows >= q->max_rows) {
			r->status = WIRE_E_ROWS;
			r->truncated = 1;
			set_msg(r, "row limit of %lld reached", (long long)q->max_rows);
			break;
		}
		est = read_row(st, ncols, vals);
		if (est > QUERY_ROW_MAX) {
			r->status = WIRE_E_BYTES;
			r->truncated = 1;
			set_msg(r, "row %lld is larger than one frame (%zu bytes)",
				(long long)r->rows + 1, est);
			break;
		}
		if (r->bytes + (open ? (int64_t)wire_rows_bytes(&w) : 0) + (int64_t)est >
		    limit_bytes) {
			r->status = WIRE_E_BYTES;
			r->truncated = 1;
			set_msg(r, "byte limit of %lld reached", (long long)limit_bytes);
			break;
		}
		if (!open) {
			rc = wire_rows_begin(&w, b, (size_t)ncols);
			if (rc)
				goto nomem;
			open = 1;
		}
		rc = wire_rows_add(&w, vals);
		if (rc)
			goto nomem;
		r->rows++;
		if (wire_rows_bytes(&w) >= WIRE_ROWS_TARGET) {
			r->bytes += (int64_t)wire_rows_bytes(&w);
			rc = wire_rows_finish(&w);
			open = 0;
			if (rc)
				goto nomem;
			rc = hand_over(q, b, 0);
			if (rc)
				goto sent_fail;
		}
	}
	if (open) {
		r->bytes += (int64_t)wire_rows_bytes(&w);
		rc = wire_rows_finish(&w);
		if (rc)
			goto nomem;
		rc = hand_over(q, b, 0);
		if (rc)
			goto sent_fail;
	}
	sent = stop_status(q);
	if (sent == QUERY_STOP_CANCEL) {
		rc = -ECANCELED;
	} else if (sent == QUERY_STOP_SHUTDOWN && r->status == WIRE_OK &&
		   (stepped == SQLITE_ROW || stepped == SQLITE_INTERRUPT)) {
		r->status = WIRE_E_SHUTDOWN;
		r->truncated = 1;
		set_msg(r, "agent is shutting down; query stopped after %lld rows",
			(long long)r->rows);
	} else if (r->status == WIRE_OK && stepped != SQLITE_DONE && stepped != SQLITE_ROW) {
		if (stepped == SQLITE_INTERRUPT && fqsql_deadline_passed(db)) {
			r->status = WIRE_E_TIMEOUT;
			r->truncated = 1;
			set_msg(r, "query ran past its %lld ms deadline", (long long)q->timeout_ms);
		} else if (stepped == SQLITE_NOMEM) {
			r->status = WIRE_E_MEMORY;
			set_msg(r, "out of memory running the query");
		} else if (stepped == SQLITE_TOOBIG) {
			r->status = WIRE_E_BYTES;
			r->truncated = 1;
			set_msg(r, "a value is larger than the %u-byte limit", QUERY_VALUE_MAX);
		} else {
			r->status = WIRE_E_SQL;
			set_msg(r, "%s", sqlite3_errmsg(db));
		}
	}
	goto out;

sent_fail:
	if (rc == -ETIMEDOUT) {
		r->status = WIRE_E_TIMEOUT;
		r->truncated = 1;
		set_msg(r, "query ran past its %lld ms deadline (client reading slowly)",
			(long long)q->timeout_ms);
		rc = 0;
	}
	goto out;
nomem:
	r->status = WIRE_E_MEMORY;
	set_msg(r, "out of memory encoding rows");
	rc = 0;
out:
	if (open)
		wire_rows_finish(&w);
	free(names);
	free(vals);
	return rc;
}

/* Opens, prepares, streams; always leaves r ready for END. -ECANCELED: nobody to tell. */
static int run(struct query *q, struct wire_buf *b, struct result *r)
{
	struct fqsql_limits lim = { .max_length = QUERY_VALUE_MAX };
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	char *cause = NULL;
	int rc, stop;

	rc = fqsql_open_readonly(q->pool->db_path, &lim, &db, &cause);
	if (rc) {
		r->status = WIRE_E_INTERNAL;
		set_msg(r, "%s", cause ? cause : "cannot open the trace database");
		goto out;
	}
	pthread_mutex_lock(&q->mu);
	q->db = db;
	stop = q->stop;
	pthread_mutex_unlock(&q->mu);
	if (stop)
		goto stopped;
	fqsql_set_deadline(db, q->deadline_ns);
	rc = fqsql_prepare(db, q->sql, &st, &cause);
	if (rc) {
		r->status = rc == -EACCES   ? WIRE_E_DENIED
			    : rc == -ENOMEM ? WIRE_E_MEMORY
					    : WIRE_E_SQL;
		set_msg(r, "%s", cause ? cause : strerror(-rc));
		rc = 0;
		goto out;
	}
	if (bind_params(q, st, r)) {
		rc = 0;
		goto out;
	}
	rc = stream(q, db, st, b, r);
	goto out;
stopped:
	if (stop == QUERY_STOP_CANCEL) {
		rc = -ECANCELED;
	} else {
		r->status = WIRE_E_SHUTDOWN;
		set_msg(r, "agent is shutting down");
		rc = 0;
	}
out:
	pthread_mutex_lock(&q->mu);
	q->db = NULL;
	pthread_mutex_unlock(&q->mu);
	sqlite3_finalize(st);
	if (db)
		fqsql_close(db);
	free(cause);
	return rc;
}

static void *worker(void *arg)
{
	struct query *q = arg;
	struct query_pool *p = q->pool;
	struct result r = { .status = WIRE_OK };
	struct wire_buf b;
	char sql[512], msg[256];
	int64_t elapsed;
	int rc;

	wire_buf_init(&b);
	rc = run(q, &b, &r);
	elapsed = mono_ns() - q->start_ns;
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
		release_slot(p);
		rc = hand_over(q, &b, 1);
	} else {
		release_slot(p);
	}
	log_line("query peer=%s addr=%s id=%llu rows=%lld bytes=%lld ms=%lld status=%s%s%s%s "
		 "sql=\"%s\"",
		 q->peer, q->addr, (unsigned long long)q->id, (long long)r.rows, (long long)r.bytes,
		 (long long)(elapsed / 1000000),
		 rc == -ECANCELED ? "cancelled" : status_word(r.status), r.msg ? " error=\"" : "",
		 r.msg ? log_escape(msg, sizeof(msg), r.msg, 200) : "", r.msg ? "\"" : "",
		 log_escape(sql, sizeof(sql), q->sql, 200));
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
			  const char *addr, struct event *wake, int *running)
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
	q->start_ns = mono_ns();
	q->deadline_ns = q->start_ns + q->timeout_ms * 1000000;
	snprintf(q->peer, sizeof(q->peer), "%s", peer && *peer ? peer : "-");
	snprintf(q->addr, sizeof(q->addr), "%s", addr ? addr : "-");
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
