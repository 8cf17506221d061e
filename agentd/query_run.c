/* SPDX-License-Identifier: MIT */
/*
 * One statement on a worker thread: prepared on a guarded read-only connection,
 * run under the query's memory budget and deadline, its rows encoded as COLUMNS
 * and ROWS frames and handed to the loop with backpressure (query.h).
 */
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "query_int.h"

/* Largest string or blob a query may make: one value must fit in one frame. */
#define QUERY_VALUE_MAX (WIRE_FRAME_MAX - (64u << 10))
/* A row estimated above this cannot be sent: ROWS frames are capped at WIRE_FRAME_MAX. */
#define QUERY_ROW_MAX (WIRE_FRAME_MAX - (16u << 10))
/* Far above any analysis (a few thousand); bounds code generation for a statement that expands. */
#define QUERY_VDBE_OPS 250000
/* A query whose SQLite memory peaked above this trims the heap when it ends. */
#define QUERY_TRIM_PEAK (8 << 20)

/*
 * When a statement failed, why, if its memory budget refused an allocation
 * (fqsql_mem.c): fills r and returns 1; else 0.
 */
static int budget_cause(struct query *q, struct result *r)
{
	switch (fqsql_mem_hit()) {
	case FQSQL_MEM_QUERY:
		r->status = WIRE_E_MEMORY;
		query_set_msg(r, "query exceeded its memory budget (%lld MiB): select or aggregate less, "
			"or check --query-mem", (long long)(q->pool->query_mem >> 20));
		return 1;
	case FQSQL_MEM_TOTAL:
		r->status = WIRE_E_MEMORY;
		query_set_msg(r, "queries running together exceeded agentd's query memory (%lld MiB): "
			"retry, or check --query-mem-total",
			(long long)(q->pool->query_mem_total >> 20));
		return 1;
	case FQSQL_MEM_STOPPED: /* query_stop(): the client left or the agent drains */
		r->status = WIRE_E_SHUTDOWN;
		r->truncated = 1;
		query_set_msg(r, "agent is shutting down; query stopped");
		return 1;
	case FQSQL_MEM_DEADLINE:
		r->status = WIRE_E_TIMEOUT;
		r->truncated = 1;
		query_set_msg(r, "query ran past its %lld ms deadline", (long long)q->timeout_ms);
		return 1;
	}
	return 0;
}

void query_set_msg(struct result *r, const char *fmt, ...)
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
int query_hand_over(struct query *q, struct wire_buf *b, int is_end)
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
		query_set_msg(r, "query has %d parameters but %zu values were sent", want, q->nparams);
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
		query_set_msg(r, "cannot bind parameter %zu: %s", i, sqlite3_errstr(rc));
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

int query_stop_status(struct query *q)
{
	return __atomic_load_n(&q->stop, __ATOMIC_RELAXED);
}

/* Streams COLUMNS and ROWS; fills r. Returns -ECANCELED when the client is gone. */
static int stream(struct query *q, sqlite3 *db, sqlite3_stmt *st, struct wire_buf *b,
		  struct result *r)
{
	int ncols = sqlite3_column_count(st), i, rc, stepped = SQLITE_DONE, open = 0, sent;
	int off = q->label ? 1 : 0; /* a relay labels its rows with a leading node column */
	const char **names = calloc((size_t)ncols + 2, sizeof(*names));
	struct wire_value *vals = calloc((size_t)ncols + 2, sizeof(*vals));
	struct wire_rows w;
	int64_t limit_bytes;

	if (!names || !vals) {
		rc = -ENOMEM;
		goto nomem;
	}
	names[0] = "node";
	for (i = 0; i < ncols; i++)
		names[i + off] = sqlite3_column_name(st, i) ? sqlite3_column_name(st, i) : "";
	if (off) {
		vals[0] = (struct wire_value){ .type = WIRE_TEXT, .p = q->label,
					       .n = strlen(q->label) };
		q->cols = calloc((size_t)ncols + 1, sizeof(*q->cols));
		if (!q->cols) {
			rc = -ENOMEM;
			goto nomem;
		}
		q->ncols = (size_t)ncols;
		for (i = 0; i < ncols; i++)
			if (!(q->cols[i] = strdup(names[i + 1]))) {
				rc = -ENOMEM;
				goto nomem;
			}
	}
	rc = wire_put_columns(b, (size_t)ncols + off, names);
	if (rc)
		goto nomem;
	rc = query_hand_over(q, b, 0);
	if (rc)
		goto sent_fail;

	limit_bytes = q->max_bytes;
	for (;;) {
		size_t est;

		stepped = sqlite3_step(st);
		if (stepped != SQLITE_ROW || query_stop_status(q))
			break;
		if (r->rows >= q->max_rows) {
			r->status = WIRE_E_ROWS;
			r->truncated = 1;
			query_set_msg(r, "row limit of %lld reached", (long long)q->max_rows);
			break;
		}
		est = read_row(st, ncols, vals + off) + (off ? strlen(q->label) + 5 : 0);
		if (est > QUERY_ROW_MAX) {
			r->status = WIRE_E_BYTES;
			r->truncated = 1;
			query_set_msg(r, "row %lld is larger than one frame (%zu bytes)",
				(long long)r->rows + 1, est);
			break;
		}
		if (r->bytes + (open ? (int64_t)wire_rows_bytes(&w) : 0) + (int64_t)est >
		    limit_bytes) {
			r->status = WIRE_E_BYTES;
			r->truncated = 1;
			query_set_msg(r, "byte limit of %lld reached", (long long)limit_bytes);
			break;
		}
		if (!open) {
			rc = wire_rows_begin(&w, b, (size_t)ncols + off);
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
			rc = query_hand_over(q, b, 0);
			if (rc)
				goto sent_fail;
		}
	}
	if (open) {
		r->bytes += (int64_t)wire_rows_bytes(&w);
		rc = wire_rows_finish(&w);
		if (rc)
			goto nomem;
		rc = query_hand_over(q, b, 0);
		if (rc)
			goto sent_fail;
	}
	sent = query_stop_status(q);
	if (sent == QUERY_STOP_CANCEL) {
		rc = -ECANCELED;
	} else if (sent == QUERY_STOP_SHUTDOWN && r->status == WIRE_OK &&
		   (stepped == SQLITE_ROW || stepped == SQLITE_INTERRUPT ||
		    fqsql_mem_hit() == FQSQL_MEM_STOPPED)) {
		r->status = WIRE_E_SHUTDOWN;
		r->truncated = 1;
		query_set_msg(r, "agent is shutting down; query stopped after %lld rows",
			(long long)r->rows);
	} else if (r->status == WIRE_OK && stepped != SQLITE_DONE && stepped != SQLITE_ROW) {
		if (budget_cause(q, r)) {
			;
		} else if (stepped == SQLITE_INTERRUPT && fqsql_deadline_passed(db)) {
			r->status = WIRE_E_TIMEOUT;
			r->truncated = 1;
			query_set_msg(r, "query ran past its %lld ms deadline", (long long)q->timeout_ms);
		} else if (stepped == SQLITE_NOMEM) {
			r->status = WIRE_E_MEMORY;
			query_set_msg(r, "out of memory running the query");
		} else if (stepped == SQLITE_TOOBIG) {
			r->status = WIRE_E_BYTES;
			r->truncated = 1;
			query_set_msg(r, "a value is larger than the %u-byte limit", QUERY_VALUE_MAX);
		} else {
			r->status = WIRE_E_SQL;
			query_set_msg(r, "%s", sqlite3_errmsg(db));
		}
	}
	goto out;

sent_fail:
	if (rc == -ETIMEDOUT) {
		r->status = WIRE_E_TIMEOUT;
		r->truncated = 1;
		query_set_msg(r, "query ran past its %lld ms deadline (client reading slowly)",
			(long long)q->timeout_ms);
		rc = 0;
	}
	goto out;
nomem:
	r->status = WIRE_E_MEMORY;
	query_set_msg(r, "out of memory encoding rows");
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
	struct fqsql_limits lim = { .max_length = QUERY_VALUE_MAX, .max_vdbe_op = QUERY_VDBE_OPS };
	struct query_db qd;
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	char *cause = NULL;
	int rc, stop, keep;

	rc = query_pool_take_db(q->pool, &lim, &qd, &cause);
	db = qd.db;
	if (rc) {
		r->status = WIRE_E_INTERNAL;
		if (!budget_cause(q, r))
			query_set_msg(r, "%s", cause ? cause : "cannot open the trace database");
		rc = 0;
		goto out;
	}
	pthread_mutex_lock(&q->mu);
	q->db = db;
	stop = q->stop;
	pthread_mutex_unlock(&q->mu);
	if (stop)
		goto stopped;
	fqsql_set_deadline(db, q->deadline_ns);
	/*
	 * The connection's last statement when the SQL is the same: prepared
	 * behind this guard (authorizer, one read-only statement), and SQLite
	 * prepares it again, authorizer included, if the schema changed.
	 */
	if (qd.st && !strcmp(qd.sql, q->sql)) {
		st = qd.st;
		qd.st = NULL;
		rc = 0;
	} else {
		sqlite3_finalize(qd.st);
		qd.st = NULL;
		rc = fqsql_prepare(db, q->sql, &st, &cause);
	}
	free(qd.sql);
	qd.sql = NULL;
	if (rc && query_stop_status(q)) {
		stop = query_stop_status(q);
		goto stopped;
	}
	if (rc) {
		r->status = rc == -EACCES   ? WIRE_E_DENIED
			    : rc == -ENOMEM ? WIRE_E_MEMORY
					    : WIRE_E_SQL;
		if (rc == -EACCES || !budget_cause(q, r))
			query_set_msg(r, "%s", cause ? cause : strerror(-rc));
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
		query_set_msg(r, "agent is shutting down");
		rc = 0;
	}
out:
	pthread_mutex_lock(&q->mu);
	q->db = NULL;
	stop = q->stop;
	pthread_mutex_unlock(&q->mu);
	/*
	 * Only a connection whose query ended cleanly goes back: nobody can have
	 * interrupted it (q->db was set while stop was 0) and no transaction is
	 * open once its statement is reset (a statement left mid-step would pin
	 * its read snapshot).
	 */
	keep = db && !rc && !stop && r->status == WIRE_OK;
	if (st && (sqlite3_reset(st) != SQLITE_OK || sqlite3_clear_bindings(st) != SQLITE_OK))
		keep = 0;
	if (keep && sqlite3_get_autocommit(db)) {
		qd.st = st;
		qd.sql = st ? strdup(q->sql) : NULL;
		if (!qd.sql) {
			sqlite3_finalize(qd.st);
			qd.st = NULL;
		}
		query_pool_give_db(q->pool, &qd);
	} else {
		sqlite3_finalize(st);
		query_db_close(&qd);
	}
	free(cause);
	return rc;
}

/*
 * run() with every SQLite allocation of this thread charged to the query's
 * memory budget, which also ends allocation at the deadline: preparing a
 * statement runs no progress callback, so this is what stops a query that
 * expands to millions of nodes before its first step.
 */
int query_run(struct query *q, struct wire_buf *b, struct result *r)
{
	int rc, budget = fqsql_mem_begin(q->pool->query_mem, q->deadline_ns) == 0;

	pthread_mutex_lock(&q->mu);
	q->budget = budget ? fqsql_mem_current() : NULL;
	/* A stop that came before: SQLite's interrupt does not reach a prepare, this does. */
	if (q->stop)
		fqsql_mem_stop(q->budget);
	pthread_mutex_unlock(&q->mu);
	rc = run(q, b, r);
	pthread_mutex_lock(&q->mu);
	q->budget = NULL;
	pthread_mutex_unlock(&q->mu);
	if (budget) {
		int64_t peak = fqsql_mem_peak();

		fqsql_mem_end();
		/* Millions of small blocks (a statement that expanded) stay in this
		 * thread's heap once freed: give the pages back, not only the big
		 * mapped blocks. */
		if (peak > QUERY_TRIM_PEAK)
			malloc_trim(0);
	}
	return rc;
}
