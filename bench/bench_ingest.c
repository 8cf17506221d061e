/* SPDX-License-Identifier: MIT */
/*
 * Trace store ingest against its ceiling: N rec_collective through
 * store_put -> writer thread -> SQLite, versus a raw bulk insert of the same
 * rows (same schema, same pragmas, one prepared statement, one transaction)
 * measured in the same run. Also the raw insert without the secondary
 * indexes, to show what the indexes cost.
 *
 * usage: bench_ingest [rows] [dir]   (BENCH_BATCH_ROWS=n overrides the store's batch_rows)
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "fqsql.h"
#include "store.h"

static const char *const ops[] = { "AllReduce", "AllGather", "ReduceScatter", "Broadcast" };
static const char *const hashes[] = { "0123456789abcdef", "fedcba9876543210", "00000000deadbeef",
				      "1111111122222222" };

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Row i, as the tracer would make it: 4 communicators, increasing times. */
static void make(struct rec *r, int64_t i)
{
	struct rec_collective *c = &r->u.collective;

	r->kind = REC_COLLECTIVE;
	c->ts_ns = 1700000000000000000LL + i * 1000;
	c->dur_ns = 20000 + i % 9000;
	c->pid = 1000 + i % 8;
	c->tid = 2000 + i % 8;
	c->comm_ptr = 0x7f0000000000LL + (i % 4) * 4096;
	memcpy(c->comm_hash, hashes[i % 4], 17);
	c->rank = i % 8;
	c->nranks = 8;
	c->seq = i / 4;
	c->op = ops[(i / 4) % 4];
	c->count = 1 << 20;
	c->bytes = 4 << 20;
	c->datatype = "float32";
	c->redop = "sum";
	c->peer = INT64_MIN;
	c->stream = 0x5500 + i % 8;
	c->busy_ns = 100000 + i % 777;
	c->ret = 0;
}

static void die(const char *what, sqlite3 *db)
{
	fprintf(stderr, "bench_ingest: %s: %s\n", what, db ? sqlite3_errmsg(db) : strerror(errno));
	exit(1);
}

static void bind_i64(sqlite3_stmt *st, int i, int64_t v)
{
	if (v == REC_NULL)
		sqlite3_bind_null(st, i);
	else
		sqlite3_bind_int64(st, i, v);
}

/* rows/s of one prepared INSERT in one transaction. */
static double raw_insert(const char *path, int64_t n, int indexes)
{
	sqlite3_stmt *st;
	sqlite3 *db;
	char *cause = NULL;
	struct rec r;
	double t0, t1;

	unlink(path);
	if (sqlite3_open(path, &db) != SQLITE_OK)
		die("open", db);
	/* the store's pragmas (agentd/store.c) */
	if (sqlite3_exec(db,
			 "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL; "
			 "PRAGMA synchronous = NORMAL; PRAGMA cache_size = -32768; "
			 "PRAGMA journal_size_limit = 67108864",
			 NULL, NULL, NULL) != SQLITE_OK)
		die("pragmas", db);
	if (fqsql_schema_apply(db, &cause)) {
		fprintf(stderr, "bench_ingest: schema: %s\n", cause);
		exit(1);
	}
	if (!indexes &&
	    sqlite3_exec(db, "DROP INDEX collectives_comm_seq; DROP INDEX collectives_ts", NULL,
			 NULL, NULL) != SQLITE_OK)
		die("drop indexes", db);
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO collectives (ts_ns, dur_ns, pid, tid, comm_ptr, "
			       "comm_hash, rank, nranks, seq, op, count, bytes, datatype, redop, "
			       "peer, stream, busy_ns, ret) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, "
			       "?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
			       -1, &st, NULL) != SQLITE_OK)
		die("prepare", db);

	t0 = now_s();
	sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
	for (int64_t i = 0; i < n; i++) {
		const struct rec_collective *c = &r.u.collective;

		make(&r, i);
		bind_i64(st, 1, c->ts_ns);
		bind_i64(st, 2, c->dur_ns);
		bind_i64(st, 3, c->pid);
		bind_i64(st, 4, c->tid);
		bind_i64(st, 5, c->comm_ptr);
		sqlite3_bind_text(st, 6, c->comm_hash, -1, SQLITE_STATIC);
		bind_i64(st, 7, c->rank);
		bind_i64(st, 8, c->nranks);
		bind_i64(st, 9, c->seq);
		sqlite3_bind_text(st, 10, c->op, -1, SQLITE_STATIC);
		bind_i64(st, 11, c->count);
		bind_i64(st, 12, c->bytes);
		sqlite3_bind_text(st, 13, c->datatype, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 14, c->redop, -1, SQLITE_STATIC);
		bind_i64(st, 15, c->peer);
		bind_i64(st, 16, c->stream);
		bind_i64(st, 17, c->busy_ns);
		bind_i64(st, 18, c->ret);
		if (sqlite3_step(st) != SQLITE_DONE)
			die("insert", db);
		sqlite3_reset(st);
	}
	if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		die("commit", db);
	t1 = now_s();
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n / (t1 - t0);
}

/* rows/s through the store, first put to flush; a full queue is retried (and reported). */
static double store_insert(const char *path, int64_t n, int64_t *retries, int64_t *drops)
{
	struct store_opts o = { .path = path, .node = "bench" };

	if (getenv("BENCH_BATCH_ROWS"))
		o.batch_rows = atoi(getenv("BENCH_BATCH_ROWS"));
	struct store_stats st;
	char *cause = NULL;
	struct store *s;
	struct rec r;
	double t0, t1;

	unlink(path);
	s = store_open(&o, &cause);
	if (!s) {
		fprintf(stderr, "bench_ingest: %s\n", cause);
		exit(1);
	}
	*retries = 0;
	t0 = now_s();
	for (int64_t i = 0; i < n; i++) {
		make(&r, i);
		while (store_put(s, &r) == -ENOBUFS) {
			(*retries)++;
			usleep(20);
		}
	}
	store_flush(s);
	t1 = now_s();
	store_get_stats(s, &st);
	*drops = st.drops;
	if (st.rows != n)
		fprintf(stderr, "bench_ingest: store committed %lld of %lld rows\n",
			(long long)st.rows, (long long)n);
	store_close(s);
	return n / (t1 - t0);
}

/* ns per store_put while the queue has room: what the tracer's callback pays. */
static double put_cost(const char *path, int64_t n)
{
	struct store_opts o = { .path = path, .node = "bench", .queue_rows = n };
	char *cause = NULL;
	struct store *s;
	struct rec r;
	double t0, t1;
	int64_t full = 0;

	unlink(path);
	s = store_open(&o, &cause);
	if (!s) {
		fprintf(stderr, "bench_ingest: %s\n", cause);
		exit(1);
	}
	t0 = now_s();
	for (int64_t i = 0; i < n; i++) {
		make(&r, i);
		full += store_put(s, &r) != 0;
	}
	t1 = now_s();
	store_close(s);
	if (full)
		fprintf(stderr, "bench_ingest: %lld puts found the queue full\n", (long long)full);
	return (t1 - t0) * 1e9 / n;
}

int main(int argc, char **argv)
{
	int64_t n = argc > 1 ? atoll(argv[1]) : 2000000, retries = 0, drops = 0, rt, dr;
	const char *dir = argc > 2 ? argv[2] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	double raw = 0, store = 0, noidx = 0, put_ns, v;
	char path[512];

	snprintf(path, sizeof(path), "%s/bench_ingest.%d.db", dir, (int)getpid());
	/* two rounds, best of each: the first also warms the page cache */
	for (int round = 0; round < 2; round++) {
		v = raw_insert(path, n, 1);
		raw = v > raw ? v : raw;
		v = store_insert(path, n, &rt, &dr);
		if (v > store) {
			store = v;
			retries = rt;
			drops = dr;
		}
	}
	noidx = raw_insert(path, n, 0);
	put_ns = put_cost(path, 1 << 18);
	unlink(path);
	strcat(path, "-wal");
	unlink(path);
	path[strlen(path) - 4] = '\0';
	strcat(path, "-shm");
	unlink(path);

	printf("rows                 %lld rec_collective\n", (long long)n);
	printf("raw sqlite           %10.0f rows/s  (one statement, one transaction)\n", raw);
	printf("store                %10.0f rows/s  (store_put .. store_flush)\n", store);
	printf("store / raw          %10.2f\n", store / raw);
	printf("raw, no sec. indexes %10.0f rows/s  (indexes cost %.0f%%)\n", noidx,
	       100.0 * (1 - raw / noidx));
	printf("store_put alone      %10.0f rows/s  (%.0f ns per put, queue not full)\n",
	       1e9 / put_ns, put_ns);
	printf("queue full retries   %10lld  (producer outran the writer; drops %lld)\n",
	       (long long)retries, (long long)drops);
	return 0;
}
