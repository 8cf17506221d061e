/* SPDX-License-Identifier: MIT */
/*
 * Per-thread memory budgets for SQLite (sql/fqsql_mem.c): a thread with a
 * budget gets SQLITE_NOMEM past it and its statement ends; a thread without
 * one (agentd's trace writer) is never refused, even while a budgeted thread
 * is at its limit; blocks freed on another thread (a pooled connection closed
 * later) are uncharged from the budget they came from; the total bounds all
 * budgets together; allocations after the deadline, or after another thread
 * stopped the budget, fail.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "check.h"
#include "fqsql.h"

#define BIG "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 100000) " \
	    "SELECT length(group_concat(printf('%.100c', 'x'))) FROM s"

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Runs BIG (about 10 MB of string) on a fresh in-memory connection: the step's result code. */
static int run_big(sqlite3 **keep)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int rc;

	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
		return SQLITE_CANTOPEN;
	rc = sqlite3_prepare_v2(db, BIG, -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (keep)
		*keep = db;
	else
		sqlite3_close(db);
	return rc;
}

static void *writer(void *arg)
{
	*(int *)arg = run_big(NULL);
	return NULL;
}

struct budgeted {
	int64_t limit, deadline_ns;
	int stop; /* fqsql_mem_stop() before running */
	int rc, hit;
	sqlite3 *db; /* left open: closed by another thread */
};

static void *budgeted(void *arg)
{
	struct budgeted *b = arg;

	if (fqsql_mem_begin(b->limit, b->deadline_ns)) {
		b->rc = -1;
		return NULL;
	}
	if (b->stop)
		fqsql_mem_stop(fqsql_mem_current());
	b->rc = run_big(&b->db);
	b->hit = fqsql_mem_hit();
	fqsql_mem_end();
	return NULL;
}

static void run_thread(void *(*fn)(void *), void *arg)
{
	pthread_t t;

	pthread_create(&t, NULL, fn, arg);
	pthread_join(t, NULL);
}

int main(void)
{
	struct budgeted b = { .limit = 4 << 20 };
	int64_t base;
	int w = 0;

	CHECK_MSG(fqsql_mem_install(32 << 20) == 0, "cannot install the allocator\n");
	CHECK_MSG(sqlite3_initialize() == SQLITE_OK, "sqlite3_initialize\n");

	/* over its own budget: NOMEM, and the budget says which limit */
	run_thread(budgeted, &b);
	CHECK_MSG(b.rc == SQLITE_NOMEM, "4 MiB budget: step gave %d, want SQLITE_NOMEM\n", b.rc);
	CHECK_MSG(b.hit == FQSQL_MEM_QUERY, "hit %d, want FQSQL_MEM_QUERY\n", b.hit);
	sqlite3_close(b.db);
	CHECK_MSG(fqsql_mem_total() == 0, "%lld bytes still charged after close\n",
	      (long long)fqsql_mem_total());

	/* within a larger budget it runs; its connection, closed on this thread, is uncharged */
	b = (struct budgeted){ .limit = 64 << 20 };
	run_thread(budgeted, &b);
	CHECK_MSG(b.rc == SQLITE_ROW,
		  "64 MiB budget: step gave %d, want a row (total 32 MiB: %d)\n", b.rc, b.hit);
	base = fqsql_mem_total();
	CHECK_MSG(base > 0, "an open connection of an ended budget holds nothing\n");
	sqlite3_close(b.db);
	CHECK_MSG(fqsql_mem_total() == 0, "%lld bytes still charged after another thread closed\n",
	      (long long)fqsql_mem_total());

	/* the total: a budget of 64 MiB still stops at 32 MiB for all */
	b = (struct budgeted){ .limit = 64 << 20 };
	{
		sqlite3 *db = NULL;

		if (fqsql_mem_begin(64 << 20, 0) == 0) {
			/* hold most of the total on this thread */
			void *hold = sqlite3_malloc(30 << 20);

			fqsql_mem_end();
			run_thread(budgeted, &b);
			CHECK_MSG(b.rc == SQLITE_NOMEM && b.hit == FQSQL_MEM_TOTAL,
			      "with 30 of 32 MiB held: rc %d hit %d, want NOMEM, FQSQL_MEM_TOTAL\n",
			      b.rc, b.hit);
			/* a thread without a budget is never refused, total or not */
			run_thread(writer, &w);
			CHECK_MSG(w == SQLITE_ROW, "unbudgeted thread: step gave %d, want a row\n",
				  w);
			sqlite3_free(hold);
		}
		sqlite3_close(b.db);
		sqlite3_close(db);
	}

	/* past the deadline, allocations fail and the budget says so */
	b = (struct budgeted){ .limit = 64 << 20, .deadline_ns = now_ns() - 1 };
	run_thread(budgeted, &b);
	CHECK_MSG(b.rc != SQLITE_ROW && b.hit == FQSQL_MEM_DEADLINE,
	      "past the deadline: rc %d hit %d, want FQSQL_MEM_DEADLINE\n", b.rc, b.hit);
	sqlite3_close(b.db);

	/* stopped (a client gone, a drain): the same, and the budget says why */
	b = (struct budgeted){ .limit = 64 << 20, .stop = 1 };
	run_thread(budgeted, &b);
	CHECK_MSG(b.rc != SQLITE_ROW && b.hit == FQSQL_MEM_STOPPED,
	      "stopped: rc %d hit %d, want FQSQL_MEM_STOPPED\n", b.rc, b.hit);
	sqlite3_close(b.db);
	CHECK_MSG(fqsql_mem_total() == 0, "%lld bytes left charged\n",
		  (long long)fqsql_mem_total());
	return check_done("test_sql_mem");
}
