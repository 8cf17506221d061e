/* SPDX-License-Identifier: MIT */
/* The query pool: slots for running queries, and read-only connections kept for the next. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "query_int.h"

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
void query_pool_free_slot(struct query_pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->running--;
	pthread_mutex_unlock(&p->mu);
}

void query_db_close(struct query_db *d)
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
		query_db_close(&p->idle[i]);
	p->nidle = 0;
	pthread_mutex_destroy(&p->mu);
}

/*
 * A read-only connection for one query: an idle one when there is one (its
 * guard re-armed: limits, authorizer, query_only), else a new one.
 */
int query_pool_take_db(struct query_pool *p, const struct fqsql_limits *lim, struct query_db *d,
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
		query_db_close(d);
	if (d->db) {
		if (!fqsql_rearm(d->db, lim))
			return 0;
		query_db_close(d);
	}
	rc = fqsql_open_readonly(p->db_path, lim, &d->db, cause);
	if (!rc && known) {
		d->dev = sb.st_dev;
		d->ino = sb.st_ino;
	}
	return rc;
}

/* Keeps d for the next query when there is room; else closes it. */
void query_pool_give_db(struct query_pool *p, struct query_db *d)
{
	pthread_mutex_lock(&p->mu);
	if (p->nidle < QUERY_IDLE_DBS) {
		p->idle[p->nidle++] = *d;
		memset(d, 0, sizeof(*d));
	}
	pthread_mutex_unlock(&p->mu);
	query_db_close(d);
}

int query_pool_running(struct query_pool *p)
{
	int n;

	pthread_mutex_lock(&p->mu);
	n = p->running;
	pthread_mutex_unlock(&p->mu);
	return n;
}
