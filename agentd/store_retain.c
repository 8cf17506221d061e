/* SPDX-License-Identifier: MIT */
/*
 * The store's retention: the writer deletes rows older than retain_age_s, and
 * the oldest share of the stored time span while the file is over retain_bytes,
 * in bounded passes between its batches (every ~10 s, or when asked).
 */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include <sqlite3.h>

#include "clock.h"
#include "store_int.h"

#define RETAIN_INTERVAL_NS (10 * 1000000000LL)
/* Rows one retention pass deletes per table at most: keeps a pass short so
 * the writer gets back to the queue before it fills; the next pass follows
 * right after the next batch. */
#define RETAIN_CHUNK 100000
/* Share of the stored time span that a size-retention pass deletes. */
#define RETAIN_SIZE_PCT 10

/* Tables with an index on ts_ns: retention deletes from these by time. */
static const char *const ts_tables[] = {
	"collectives", "cuda_calls", "offcpu", "tcp_retransmits", "ib_counters", "nccl_groups",
	"nccl_kernels", "gpu_samples", "gpu_busy", "gpu_activity",
};
#define N_TS_TABLES (sizeof(ts_tables) / sizeof(ts_tables[0]))

int exec_int(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_type(st, 0) == SQLITE_NULL ? REC_NULL
								 : sqlite3_column_int64(st, 0);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		*out = REC_NULL;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

/*
 * Deletes rows older than cutoff (ts_ns scale), at most RETAIN_CHUNK per table.
 * *more is set when a table had more to delete.
 */
static int retain_before(struct store *s, int64_t cutoff, bool *more)
{
	char sql[256];
	int rc = SQLITE_OK;

	for (size_t i = 0; i < N_TS_TABLES + 3 && rc == SQLITE_OK; i++) {
		sqlite3_stmt *st;
		int n;

		if (i < N_TS_TABLES)
			snprintf(sql, sizeof(sql),
				 "DELETE FROM %s WHERE rowid IN (SELECT rowid FROM %s "
				 "WHERE ts_ns < ?1 ORDER BY ts_ns LIMIT %d)",
				 ts_tables[i], ts_tables[i], RETAIN_CHUNK);
		else if (i == N_TS_TABLES)
			/* a comm still alive describes collectives that are kept: keep it */
			snprintf(sql, sizeof(sql),
				 "DELETE FROM comms WHERE destroyed_ns < ?1");
		else if (i == N_TS_TABLES + 1)
			snprintf(sql, sizeof(sql),
				 "DELETE FROM processes WHERE exit_ns < ?1");
		else
			/* after processes: the GPUs of processes no longer described */
			snprintf(sql, sizeof(sql),
				 "DELETE FROM process_gpus WHERE ts_ns < ?1 AND NOT EXISTS "
				 "(SELECT 1 FROM processes p WHERE p.pid = process_gpus.pid AND "
				 "p.start_ns = process_gpus.start_ns)");
		rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
		if (rc != SQLITE_OK)
			break;
		sqlite3_bind_int64(st, 1, cutoff);
		rc = step_reset(st);
		n = sqlite3_changes(s->db);
		sqlite3_finalize(st);
		if (rc == SQLITE_OK) {
			atomic_fetch_add_explicit(&s->retained, n, memory_order_relaxed);
			if (i < N_TS_TABLES && n >= RETAIN_CHUNK)
				*more = true;
		}
	}
	return rc;
}

static int db_bytes(struct store *s, int64_t *bytes)
{
	int64_t pages = 0, psize = 0; /* GCC -O3 cannot see exec_int() set them */
	int rc;

	rc = exec_int(s->db, "PRAGMA page_count", &pages);
	if (rc == SQLITE_OK)
		rc = exec_int(s->db, "PRAGMA page_size", &psize);
	if (rc == SQLITE_OK)
		*bytes = pages * psize;
	return rc;
}

/* One retention pass, outside any batch. *more: call again soon. */
static int retain_pass(struct store *s, bool *more)
{
	int64_t bytes = 0, lo = INT64_MAX, hi = INT64_MIN, v = 0;
	bool deleted_by_size = false;
	int rc = SQLITE_OK;
	char sql[128];

	*more = false;
	if (!s->retain_age_s && !s->retain_bytes)
		return SQLITE_OK;
	if (s->retain_age_s > 0) {
		rc = retain_before(s, clock_ns(CLOCK_REALTIME) - s->retain_age_s * 1000000000LL,
				   more);
		if (rc != SQLITE_OK)
			goto out;
	}
	if (s->retain_bytes > 0) {
		rc = db_bytes(s, &bytes);
		if (rc != SQLITE_OK || bytes <= s->retain_bytes)
			goto out;
		/* min/max come from the ts_ns indexes: O(log n), unlike count(*) */
		for (size_t i = 0; i < N_TS_TABLES; i++) {
			snprintf(sql, sizeof(sql), "SELECT min(ts_ns) FROM %s", ts_tables[i]);
			if (exec_int(s->db, sql, &v) == SQLITE_OK && v != REC_NULL && v < lo)
				lo = v;
			snprintf(sql, sizeof(sql), "SELECT max(ts_ns) FROM %s", ts_tables[i]);
			if (exec_int(s->db, sql, &v) == SQLITE_OK && v != REC_NULL && v > hi)
				hi = v;
		}
		if (lo > hi)
			goto out;
		/* the oldest RETAIN_SIZE_PCT of the time span, at least one ns */
		v = lo + (int64_t)((double)(hi - lo) * RETAIN_SIZE_PCT / 100) + 1;
		rc = retain_before(s, v, more);
		if (rc != SQLITE_OK)
			goto out;
		deleted_by_size = true;
	}
out:
	if (rc != SQLITE_OK) {
		write_failed(s, rc);
		return rc;
	}
	if (deleted_by_size) {
		sqlite3_exec(s->db, "PRAGMA incremental_vacuum", NULL, NULL, NULL);
		if (db_bytes(s, &bytes) == SQLITE_OK && bytes > s->retain_bytes)
			*more = true;
	}
	ckpt_request(s, false);
	return SQLITE_OK;
}

bool retain_due(struct store *s, uint64_t retain_req, int64_t now)
{
	if (retain_req > s->retain_done)
		return true;
	return (s->retain_age_s || s->retain_bytes) && now >= s->next_retain_ns;
}

void retain_run(struct store *s, uint64_t retain_req)
{
	bool more = false;
	int rc, passes = 0;

	/* a background pass does one bounded round; store_retain_now finishes the job */
	do
		rc = s->db ? retain_pass(s, &more) : SQLITE_CANTOPEN; /* no file: store_roll.c */
	while (rc == SQLITE_OK && more && retain_req > s->retain_done && ++passes < 1000);
	s->next_retain_ns = clock_ns(CLOCK_MONOTONIC) + (more ? 0 : RETAIN_INTERVAL_NS);
	pthread_mutex_lock(&s->mu);
	if (retain_req > s->retain_done) {
		s->retain_done = retain_req;
		s->retain_rc = rc == SQLITE_OK ? 0 : -EIO;
		pthread_cond_broadcast(&s->done);
	}
	pthread_mutex_unlock(&s->mu);
}
