/* SPDX-License-Identifier: MIT */
/*
 * Trace store ingest against its ceiling. For each workload, N records through
 * store_put -> writer thread -> SQLite, versus a raw bulk insert of the same rows
 * (same schema, same pragmas, one prepared statement per table, one transaction)
 * measured in the same run, best of two rounds each. Workloads:
 *
 *   coll    rec_collective only: the widest row, and the only table with
 *           secondary indexes (collectives_comm_seq, partial collectives_key)
 *   cuda    rec_cuda only (cuLaunchKernel rows)
 *   offcpu  rec_offcpu only
 *   mix     what the tracer makes at high rates, per collective: 10 kernel
 *           launches, 2 sync rows (cudaStreamSynchronize and the
 *           cuStreamSynchronize under it), 4 off-CPU intervals (the sync's block,
 *           and the NCCL proxy / data-loader threads' waits); 17 events in all
 *
 * Each also against raw inserts into the version 1 layout (rowid key, ts_ns index);
 * coll also into the bare table (no secondary index), to show what the layout and
 * the indexes cost.
 *
 * usage: bench_ingest [rows] [dir] [workloads]   (workloads: comma-separated, default all)
 *        BENCH_BATCH_ROWS=n overrides the store's batch_rows;
 *        BENCH_STORE_ONLY=1 skips the raw inserts (for profiling the store);
 *        BENCH_CACHE_KIB=n sets the page cache of both (default: the store's);
 *        BENCH_MEMSTATUS=1 leaves SQLite's memory statistics on (agentd turns them off).
 *
 * Each workload's second line is rows per CPU-second of the inserting threads (see
 * last_cpu_rate): the comparison to trust on a machine shared with other work.
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

/* agentd/store.c's page cache (CACHE_KIB): raw inserts run with the store's pragmas;
 * BENCH_CACHE_KIB=n sets both */
#define STORE_CACHE_KIB 2048
static int cache_kib = STORE_CACHE_KIB;

static const char *const ops[] = { "AllReduce", "AllGather", "ReduceScatter", "Broadcast" };
static const char *const hashes[] = { "0123456789abcdef", "fedcba9876543210", "00000000deadbeef",
				      "1111111122222222" };
#define T0 1700000000000000000LL

/* A workload: record i of it. */
typedef void (*make_fn)(struct rec *r, int64_t i);

static double clock_s(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/*
 * Rows per CPU-second of the threads that insert (raw: this one; store: the writer and
 * the checkpointer, i.e. the process less the producing thread) in the last
 * raw_insert / store_insert. Unlike rows/s it barely moves when other work shares the
 * CPUs, so it is the fairer comparison on a busy machine.
 */
static double last_cpu_rate;

/* Collective j: 4 communicators, 8 ranks, increasing times (1 µs apart unless given). */
static void make_coll_at(struct rec *r, int64_t j, int64_t ts)
{
	struct rec_collective *c = &r->u.collective;

	r->kind = REC_COLLECTIVE;
	c->ts_ns = ts;
	c->dur_ns = 20000 + j % 9000;
	c->pid = 1000 + j % 8;
	c->tid = 2000 + j % 8;
	c->comm_ptr = 0x7f0000000000LL + (j % 4) * 4096;
	memcpy(c->comm_hash, hashes[j % 4], 17);
	c->rank = j % 8;
	c->nranks = 8;
	c->seq = j / 4;
	c->op = ops[(j / 4) % 4];
	c->count = 1 << 20;
	c->bytes = 4 << 20;
	c->datatype = "float32";
	c->redop = "sum";
	c->peer = INT64_MIN;
	c->stream = 0x5500 + j % 8;
	c->busy_ns = 100000 + j % 777;
	c->sync_ns = 2000000 + j % 555;
	c->gap_ns = 4000 + j % 333;
	c->ret = 0;
}

static void make_coll(struct rec *r, int64_t i)
{
	make_coll_at(r, i, T0 + i * 1000);
}

static void make_cuda_at(struct rec *r, int64_t j, int64_t ts, int sync)
{
	struct rec_cuda *c = &r->u.cuda;

	r->kind = REC_CUDA;
	c->ts_ns = ts;
	c->pid = 1000 + j % 8;
	c->tid = 2000 + j % 8;
	c->api = sync == 1 ? "cudaStreamSynchronize" : sync == 2 ? "cuStreamSynchronize"
								 : "cuLaunchKernel";
	c->kind = sync ? "sync" : "launch";
	c->dur_ns = sync ? 2000000 + j % 50000 : 4000 + j % 3000;
	c->bytes = INT64_MIN;
	c->stream = 0x5500 + j % 8;
	c->ret = 0;
}

static void make_cuda(struct rec *r, int64_t i)
{
	make_cuda_at(r, i, T0 + i * 1000, 0);
}

static void make_offcpu_at(struct rec *r, int64_t j, int64_t ts)
{
	struct rec_offcpu *o = &r->u.offcpu;

	r->kind = REC_OFFCPU;
	o->ts_ns = ts;
	o->dur_ns = 10000 + j % 100000;
	o->pid = 1000 + j % 8;
	o->tid = 2000 + j % 16;
	o->reason = j % 3 ? "blocked" : "preempted";
}

static void make_offcpu(struct rec *r, int64_t i)
{
	make_offcpu_at(r, i, T0 + i * 1000);
}

/*
 * Event i of the mix: in each group of 17 (one collective's worth, 17 µs apart from
 * the next group), event 0 is the collective, 1-10 launches, 11-12 the sync pair,
 * 13-16 off-CPU intervals. Times rise within each table.
 */
#define MIX 17
static void make_mix(struct rec *r, int64_t i)
{
	int64_t g = i / MIX, k = i % MIX, ts = T0 + i * 1000;

	if (k == 0)
		make_coll_at(r, g, ts);
	else if (k <= 10)
		make_cuda_at(r, g * 12 + k, ts, 0);
	else if (k <= 12)
		make_cuda_at(r, g * 12 + k, ts, (int)(k - 10));
	else
		make_offcpu_at(r, g * 4 + k, ts);
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

static void bind_text(sqlite3_stmt *st, int i, const char *v)
{
	sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
}

enum layout {
	L_V2,     /* this build's schema */
	L_V1,     /* the three tables laid out as schema version 1 had them: rowid key, (ts_ns) index */
	L_BARE,   /* this build's collectives without its secondary indexes */
};

static const char v1_tables[] =
	"DROP TABLE collectives; "
	"CREATE TABLE collectives (ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, "
	"pid INTEGER NOT NULL, tid INTEGER NOT NULL, comm_ptr INTEGER, comm_hash TEXT, "
	"rank INTEGER, nranks INTEGER, seq INTEGER, op TEXT, count INTEGER, bytes INTEGER, "
	"datatype TEXT, redop TEXT, peer INTEGER, stream INTEGER, busy_ns INTEGER, ret INTEGER, "
	"sync_ns INTEGER, gap_ns INTEGER); " /* v3's columns: the layout is what is compared */
	"CREATE INDEX collectives_comm_seq ON collectives (comm_hash, seq); "
	"CREATE INDEX collectives_ts ON collectives (ts_ns); "
	"CREATE INDEX collectives_key ON collectives (pid, comm_hash, rank, seq) "
	"WHERE seq % 64 = 0; "
	"DROP TABLE cuda_calls; "
	"CREATE TABLE cuda_calls (ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, "
	"pid INTEGER NOT NULL, tid INTEGER NOT NULL, api TEXT NOT NULL, kind TEXT NOT NULL, "
	"bytes INTEGER, stream INTEGER, ret INTEGER); "
	"CREATE INDEX cuda_calls_ts ON cuda_calls (ts_ns); "
	"DROP TABLE offcpu; "
	"CREATE TABLE offcpu (ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, "
	"pid INTEGER NOT NULL, tid INTEGER NOT NULL, reason TEXT NOT NULL); "
	"CREATE INDEX offcpu_ts ON offcpu (ts_ns)";

/* rows/s of one prepared INSERT per table in one transaction. */
static double raw_insert(const char *path, int64_t n, make_fn make, enum layout layout)
{
	static const char *const sql[] = {
		"INSERT INTO collectives (ts_ns, dur_ns, pid, tid, comm_ptr, comm_hash, rank, "
		"nranks, seq, op, count, bytes, datatype, redop, peer, stream, busy_ns, ret, "
		"sync_ns, gap_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
		"?14, ?15, ?16, ?17, ?18, ?19, ?20)",
		"INSERT INTO cuda_calls (ts_ns, dur_ns, pid, tid, api, kind, bytes, stream, ret) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
		"INSERT INTO offcpu (ts_ns, dur_ns, pid, tid, reason) VALUES (?1, ?2, ?3, ?4, ?5)",
	};
	sqlite3_stmt *st[3];
	sqlite3 *db;
	char *cause = NULL, pragmas[256];
	struct rec r;
	double t0, t1, c0;

	unlink(path);
	if (sqlite3_open_v2(path, &db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
			    NULL) != SQLITE_OK)
		die("open", db);
	/* the store's pragmas (agentd/store.c) */
	snprintf(pragmas, sizeof(pragmas),
		 "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL; "
		 "PRAGMA synchronous = NORMAL; PRAGMA cache_size = -%d; "
		 "PRAGMA journal_size_limit = 67108864",
		 cache_kib);
	if (sqlite3_exec(db, pragmas, NULL, NULL, NULL) != SQLITE_OK)
		die("pragmas", db);
	if (fqsql_schema_apply(db, &cause)) {
		fprintf(stderr, "bench_ingest: schema: %s\n", cause);
		exit(1);
	}
	if (layout == L_V1 && sqlite3_exec(db, v1_tables, NULL, NULL, NULL) != SQLITE_OK)
		die("v1 layout", db);
	if (layout == L_BARE &&
	    sqlite3_exec(db, "DROP INDEX collectives_comm_seq; DROP INDEX collectives_key", NULL,
			 NULL, NULL) != SQLITE_OK)
		die("drop indexes", db);
	for (int i = 0; i < 3; i++)
		if (sqlite3_prepare_v2(db, sql[i], -1, &st[i], NULL) != SQLITE_OK)
			die("prepare", db);

	t0 = now_s();
	c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
	for (int64_t i = 0; i < n; i++) {
		sqlite3_stmt *s;

		make(&r, i);
		if (r.kind == REC_COLLECTIVE) {
			const struct rec_collective *c = &r.u.collective;

			s = st[0];
			bind_i64(s, 1, c->ts_ns);
			bind_i64(s, 2, c->dur_ns);
			bind_i64(s, 3, c->pid);
			bind_i64(s, 4, c->tid);
			bind_i64(s, 5, c->comm_ptr);
			bind_text(s, 6, c->comm_hash);
			bind_i64(s, 7, c->rank);
			bind_i64(s, 8, c->nranks);
			bind_i64(s, 9, c->seq);
			bind_text(s, 10, c->op);
			bind_i64(s, 11, c->count);
			bind_i64(s, 12, c->bytes);
			bind_text(s, 13, c->datatype);
			bind_text(s, 14, c->redop);
			bind_i64(s, 15, c->peer);
			bind_i64(s, 16, c->stream);
			bind_i64(s, 17, c->busy_ns);
			bind_i64(s, 18, c->ret);
			bind_i64(s, 19, c->sync_ns);
			bind_i64(s, 20, c->gap_ns);
		} else if (r.kind == REC_CUDA) {
			const struct rec_cuda *c = &r.u.cuda;

			s = st[1];
			bind_i64(s, 1, c->ts_ns);
			bind_i64(s, 2, c->dur_ns);
			bind_i64(s, 3, c->pid);
			bind_i64(s, 4, c->tid);
			bind_text(s, 5, c->api);
			bind_text(s, 6, c->kind);
			bind_i64(s, 7, c->bytes);
			bind_i64(s, 8, c->stream);
			bind_i64(s, 9, c->ret);
		} else {
			const struct rec_offcpu *o = &r.u.offcpu;

			s = st[2];
			bind_i64(s, 1, o->ts_ns);
			bind_i64(s, 2, o->dur_ns);
			bind_i64(s, 3, o->pid);
			bind_i64(s, 4, o->tid);
			bind_text(s, 5, o->reason);
		}
		if (sqlite3_step(s) != SQLITE_DONE)
			die("insert", db);
		sqlite3_reset(s);
	}
	if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
		die("commit", db);
	t1 = now_s();
	last_cpu_rate = n / (clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0);
	for (int i = 0; i < 3; i++)
		sqlite3_finalize(st[i]);
	sqlite3_close(db);
	return n / (t1 - t0);
}

/* rows/s through the store, first put to flush; a full queue is retried (and reported). */
static double store_insert(const char *path, int64_t n, make_fn make, int64_t *retries,
			   int64_t *nudged)
{
	struct store_opts o = { .path = path, .node = "bench", .cache_kib = cache_kib };
	struct store_stats st;
	char *cause = NULL;
	struct store *s;
	struct rec r;
	double t0, t1, p0, m0, m1;

	if (getenv("BENCH_BATCH_ROWS"))
		o.batch_rows = atoi(getenv("BENCH_BATCH_ROWS"));
	unlink(path);
	s = store_open(&o, &cause);
	if (!s) {
		fprintf(stderr, "bench_ingest: %s\n", cause);
		exit(1);
	}
	*retries = 0;
	t0 = now_s();
	p0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	m0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	for (int64_t i = 0; i < n; i++) {
		make(&r, i);
		while (store_put(s, &r) == -ENOBUFS) {
			(*retries)++;
			usleep(20);
		}
	}
	store_flush(s);
	t1 = now_s();
	m1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	last_cpu_rate = n / (clock_s(CLOCK_PROCESS_CPUTIME_ID) - p0 - (m1 - m0));
	store_get_stats(s, &st);
	*nudged = st.ts_nudged;
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
		make_coll(&r, i);
		full += store_put(s, &r) != 0;
	}
	t1 = now_s();
	store_close(s);
	if (full)
		fprintf(stderr, "bench_ingest: %lld puts found the queue full\n", (long long)full);
	return (t1 - t0) * 1e9 / n;
}

static double best(double a, double b)
{
	return a > b ? a : b;
}

static void unlink_db(char *path)
{
	size_t l = strlen(path);

	unlink(path);
	strcpy(path + l, "-wal");
	unlink(path);
	strcpy(path + l, "-shm");
	unlink(path);
	path[l] = '\0';
}

static const struct {
	const char *name, *what;
	make_fn make;
} workloads[] = {
	{ "coll", "rec_collective", make_coll },
	{ "cuda", "rec_cuda (launch)", make_cuda },
	{ "offcpu", "rec_offcpu", make_offcpu },
	{ "mix", "mix: 1 collective, 10 launch, 2 sync, 4 offcpu", make_mix },
};

static int wanted(const char *list, const char *name)
{
	size_t l = strlen(name);

	for (const char *p = list; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0))
		if (strcspn(p, ",") == l && !strncmp(p, name, l))
			return 1;
	return !list || !strcmp(list, "all");
}

int main(int argc, char **argv)
{
	int64_t n = argc > 1 ? atoll(argv[1]) : 2000000;
	const char *dir = argc > 2 ? argv[2] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	const char *list = argc > 3 ? argv[3] : NULL;
	int store_only = getenv("BENCH_STORE_ONLY") && atoi(getenv("BENCH_STORE_ONLY"));
	char path[512];

	if (getenv("BENCH_CACHE_KIB"))
		cache_kib = atoi(getenv("BENCH_CACHE_KIB"));
	/* as agentd does before any other SQLite call (agentd/main.c); BENCH_MEMSTATUS=1: on */
	if (!getenv("BENCH_MEMSTATUS") || !atoi(getenv("BENCH_MEMSTATUS")))
		sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
	snprintf(path, sizeof(path), "%s/bench_ingest.%d.db", dir, (int)getpid());
	printf("%-8s %-48s %10s %10s %6s %8s %8s\n", "workload", "rows", "raw/s", "store/s",
	       "ratio", "retries", "nudged");
	for (size_t w = 0; w < sizeof(workloads) / sizeof(workloads[0]); w++) {
		double raw = 0, store = 0, raw_cpu = 0, store_cpu = 0;
		int64_t rt = 0, nudged = 0, r1, n1;

		if (!wanted(list, workloads[w].name))
			continue;
		/* two rounds, best of each: the first also warms the page cache */
		for (int round = 0; round < 2; round++) {
			if (!store_only) {
				raw = best(raw, raw_insert(path, n, workloads[w].make, L_V2));
				raw_cpu = best(raw_cpu, last_cpu_rate);
			}
			double v = store_insert(path, n, workloads[w].make, &r1, &n1);

			store_cpu = best(store_cpu, last_cpu_rate);
			if (v > store) {
				store = v;
				rt = r1;
				nudged = n1;
			}
		}
		printf("%-8s %-48s %10.0f %10.0f %6.2f %8lld %8lld\n", workloads[w].name,
		       workloads[w].what, raw, store, store / raw, (long long)rt,
		       (long long)nudged);
		printf("         per CPU-second of the inserting threads      %10.0f %10.0f %6.2f\n",
		       raw_cpu, store_cpu, store_cpu / raw_cpu);
		fflush(stdout);
		if (!store_only) {
			double v1 = 0, v1_cpu = 0;

			for (int round = 0; round < 2; round++) {
				v1 = best(v1, raw_insert(path, n, workloads[w].make, L_V1));
				v1_cpu = best(v1_cpu, last_cpu_rate);
			}
			printf("         raw, schema v1 layout (rowid, ts index)          %10.0f "
			       "           (v2/v1 %.2f; per CPU-s %.0f, v2/v1 %.2f)\n",
			       v1, raw / v1, v1_cpu, raw_cpu / v1_cpu);
		}
		if (workloads[w].make == make_coll && !store_only) {
			double bare = 0, bare_cpu = 0;

			for (int round = 0; round < 2; round++) {
				bare = best(bare, raw_insert(path, n, make_coll, L_BARE));
				bare_cpu = best(bare_cpu, last_cpu_rate);
			}
			printf("         raw, no secondary index (ts_ns key only)          %10.0f "
			       "           (indexes cost %.0f%%; per CPU-s %.0f, %.0f%%)\n", bare,
			       100.0 * (1 - raw / bare), bare_cpu, 100.0 * (1 - raw_cpu / bare_cpu));
		}
	}
	if (wanted(list, "put")) {
		double put_ns = put_cost(path, 1 << 18);

		printf("store_put alone %10.0f rows/s  (%.0f ns per put, queue not full)\n",
		       1e9 / put_ns, put_ns);
	}
	unlink_db(path);
	return 0;
}
