/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <sqlite3.h>

#include "../sql/fqsql.h"
#include "clock.h"
#include "fanout.h"
#include "strbuf.h"
#include "log.h"
#include "query.h"

/* Largest string or blob a query may make: one value must fit in one frame. */
#define QUERY_VALUE_MAX (WIRE_FRAME_MAX - (64u << 10))
/* A row estimated above this cannot be sent: ROWS frames are capped at WIRE_FRAME_MAX. */
#define QUERY_ROW_MAX (WIRE_FRAME_MAX - (16u << 10))
#define QUERY_STACK (1u << 20)
/* Far above any analysis (a few thousand); bounds code generation for a statement that expands. */
#define QUERY_VDBE_OPS 250000
/* A query whose SQLite memory peaked above this trims the heap when it ends. */
#define QUERY_TRIM_PEAK (8 << 20)

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
	struct fqsql_budget *budget; /* while open: query_stop() ends a prepare with it */

	/* The request, owned. */
	uint64_t id;
	char *sql;
	size_t nparams;
	struct wire_value *params; /* text/blob bytes live in the same allocation */
	int64_t max_rows, max_bytes, timeout_ms;
	int64_t start_ns, deadline_ns;
	char peer[256];
	char addr[64];
	const char *tls; /* a literal: how the session began */

	/* Relay: forward to these peers; own rows labelled with label. */
	size_t npeers;
	char **peers;
	int64_t tree_width, clock_param, pings, connect_ms;
	char *label;	/* NULL: not relaying */
	char *on_behalf; /* QUERY "for": the client a relay asks for; NULL when none */
	char **cols;	/* relay: the columns sent up (without "node"), NULL until sent */
	size_t ncols;
};

struct result {
	int64_t rows, bytes;
	int status;
	int truncated;
	char *msg;
};

static void set_msg(struct result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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

/*
 * When a statement failed, why, if its memory budget refused an allocation
 * (fqsql_mem.c): fills r and returns 1; else 0.
 */
static int budget_cause(struct query *q, struct result *r)
{
	switch (fqsql_mem_hit()) {
	case FQSQL_MEM_QUERY:
		r->status = WIRE_E_MEMORY;
		set_msg(r, "query exceeded its memory budget (%lld MiB): select or aggregate less, "
			"or check --query-mem", (long long)(q->pool->query_mem >> 20));
		return 1;
	case FQSQL_MEM_TOTAL:
		r->status = WIRE_E_MEMORY;
		set_msg(r, "queries running together exceeded agentd's query memory (%lld MiB): "
			"retry, or check --query-mem-total",
			(long long)(q->pool->query_mem_total >> 20));
		return 1;
	case FQSQL_MEM_STOPPED: /* query_stop(): the client left or the agent drains */
		r->status = WIRE_E_SHUTDOWN;
		r->truncated = 1;
		set_msg(r, "agent is shutting down; query stopped");
		return 1;
	case FQSQL_MEM_DEADLINE:
		r->status = WIRE_E_TIMEOUT;
		r->truncated = 1;
		set_msg(r, "query ran past its %lld ms deadline", (long long)q->timeout_ms);
		return 1;
	}
	return 0;
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

static void qdb_close(struct query_db *d)
{
	sqlite3_finalize(d->st);
	free(d->sql);
	if (d->db)
		fqsql_close(d->db);
	memset(d, 0, sizeof(*d));
}

void query_pool_release(struct query_pool *p)
{
	for (int i = 0; i < p->nidle; i++)
		qdb_close(&p->idle[i]);
	p->nidle = 0;
	pthread_mutex_destroy(&p->mu);
}

/*
 * A read-only connection for one query: an idle one when there is one (its
 * guard re-armed: limits, authorizer, query_only), else a new one.
 */
static int db_take(struct query_pool *p, const struct fqsql_limits *lim, struct query_db *d,
		   char **cause)
{
	struct stat sb;
	int rc, known = stat(p->db_path, &sb) == 0;

	memset(d, 0, sizeof(*d));
	pthread_mutex_lock(&p->mu);
	if (p->nidle)
		*d = p->idle[--p->nidle];
	pthread_mutex_unlock(&p->mu);
	/* One stat per query: an idle connection on a file no longer at db_path is let go. */
	if (d->db && known && (d->dev != sb.st_dev || d->ino != sb.st_ino))
		qdb_close(d);
	if (d->db) {
		if (!fqsql_rearm(d->db, lim))
			return 0;
		qdb_close(d);
	}
	rc = fqsql_open_readonly(p->db_path, lim, &d->db, cause);
	if (!rc && known) {
		d->dev = sb.st_dev;
		d->ino = sb.st_ino;
	}
	return rc;
}

/* Keeps d for the next query when there is room; else closes it. */
static void db_give(struct query_pool *p, struct query_db *d)
{
	pthread_mutex_lock(&p->mu);
	if (p->nidle < QUERY_IDLE_DBS) {
		p->idle[p->nidle++] = *d;
		memset(d, 0, sizeof(*d));
	}
	pthread_mutex_unlock(&p->mu);
	qdb_close(d);
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
		est = read_row(st, ncols, vals + off) + (off ? strlen(q->label) + 5 : 0);
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
		   (stepped == SQLITE_ROW || stepped == SQLITE_INTERRUPT ||
		    fqsql_mem_hit() == FQSQL_MEM_STOPPED)) {
		r->status = WIRE_E_SHUTDOWN;
		r->truncated = 1;
		set_msg(r, "agent is shutting down; query stopped after %lld rows",
			(long long)r->rows);
	} else if (r->status == WIRE_OK && stepped != SQLITE_DONE && stepped != SQLITE_ROW) {
		if (budget_cause(q, r)) {
			;
		} else if (stepped == SQLITE_INTERRUPT && fqsql_deadline_passed(db)) {
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
	struct fqsql_limits lim = { .max_length = QUERY_VALUE_MAX, .max_vdbe_op = QUERY_VDBE_OPS };
	struct query_db qd;
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	char *cause = NULL;
	int rc, stop, keep;

	rc = db_take(q->pool, &lim, &qd, &cause);
	db = qd.db;
	if (rc) {
		r->status = WIRE_E_INTERNAL;
		if (!budget_cause(q, r))
			set_msg(r, "%s", cause ? cause : "cannot open the trace database");
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
	if (rc && stop_status(q)) {
		stop = stop_status(q);
		goto stopped;
	}
	if (rc) {
		r->status = rc == -EACCES   ? WIRE_E_DENIED
			    : rc == -ENOMEM ? WIRE_E_MEMORY
					    : WIRE_E_SQL;
		if (rc == -EACCES || !budget_cause(q, r))
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
		db_give(q->pool, &qd);
	} else {
		sqlite3_finalize(st);
		qdb_close(&qd);
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
static int run_budgeted(struct query *q, struct wire_buf *b, struct result *r)
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

/* ---- relay: QUERY with peers (PROTOCOL.md "Relay") ---- */


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
		rc = hand_over(rl->q, rl->b, 0);
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
		rc = hand_over(q, rl->b, 0);
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
		rc = hand_over(q, rl->b, 0);
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
static int relay(struct query *q, struct wire_buf *b, struct result *r)
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

	rc = run_budgeted(q, b, &own);
	if (rc)
		goto out;
	total = q->npeers;
	rl.rows = own.rows;
	outcome = own.status == WIRE_OK ? WIRE_OUT_OK : own.truncated ? WIRE_OUT_TRUNCATED : WIRE_OUT_SQL;
	/* Our own END reads as fleetq would have written it for us. */
	if (outcome == WIRE_OUT_TRUNCATED) {
		char *why = own.msg;

		own.msg = NULL;
		set_msg(&own, "%s, %lld rows kept", why ? why : "truncated", (long long)own.rows);
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
	if (stop_status(q) == QUERY_STOP_CANCEL ||
	    (rc == -ECANCELED && stop_status(q) != QUERY_STOP_SHUTDOWN)) {
		rc = -ECANCELED;
	} else {
		if (rc && rl.open) {
			wire_rows_finish(&rl.w);
			rl.open = 0;
		}
		wire_buf_reset(b);
		r->rows = rl.rows;
		if (stop_status(q) == QUERY_STOP_SHUTDOWN) {
			r->status = WIRE_E_SHUTDOWN;
			r->truncated = 1;
			set_msg(r, "agent is shutting down; relay stopped");
		} else if (rc) {
			r->status = WIRE_E_INTERNAL;
			set_msg(r, "relay failed: %s", cause ? cause : strerror(-rc));
		} else if (rl.failed) {
			r->status = WIRE_E_PEER;
			set_msg(r, "%zu of %zu nodes did not answer fully", rl.failed,
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
	rc = q->npeers ? relay(q, &b, &r) : run_budgeted(q, &b, &r);
	elapsed = clock_ns(CLOCK_MONOTONIC) - q->start_ns;
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
	log_line("query peer=%s%s%s addr=%s tls=%s id=%llu rows=%lld bytes=%lld ms=%lld "
		 "status=%s%s%s%s sql=\"%s\"",
		 q->peer, q->on_behalf ? " for=" : "",
		 q->on_behalf ? log_escape(who, sizeof(who), q->on_behalf, 200) : "", q->addr,
		 q->tls, (unsigned long long)q->id, (long long)r.rows,
		 (long long)r.bytes, (long long)(elapsed / 1000000),
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
