/* SPDX-License-Identifier: MIT */
/*
 * Trace store: exact round trip of every record kind, the process-exit and
 * comm-destroy updates, queue-full accounting, readers during writes,
 * retention by age and by size, meta rows, rows of one nanosecond (moved, never
 * dropped), a file of an older schema version (moved aside).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fqsql.h"
#include "store.h"
#include "store_test.h"

struct want {
	int type; /* SQLITE_INTEGER, SQLITE_TEXT, SQLITE_NULL */
	int64_t i;
	const char *t;
};
#define W_I(v) { SQLITE_INTEGER, (v), NULL }
#define W_T(v) { SQLITE_TEXT, 0, (v) }
#define W_N { SQLITE_NULL, 0, NULL }

/* sql must return exactly one row matching want[0..n). */
static void check_row(sqlite3 *db, const char *sql, const struct want *w, int n, int line)
{
	sqlite3_stmt *st;
	int rc;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		DIE("cannot prepare '%s': %s", sql, sqlite3_errmsg(db));
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		fprintf(stderr, "line %d: no row for '%s'\n", line, sql);
		check_failures++;
		goto out;
	}
	if (sqlite3_column_count(st) != n) {
		fprintf(stderr, "line %d: %d columns, want %d\n", line, sqlite3_column_count(st),
			n);
		check_failures++;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		int type = sqlite3_column_type(st, i);
		const char *name = sqlite3_column_name(st, i);

		if (type != w[i].type) {
			fprintf(stderr, "line %d: column %s has type %d, want %d\n", line, name,
				type, w[i].type);
			check_failures++;
		} else if (type == SQLITE_INTEGER && sqlite3_column_int64(st, i) != w[i].i) {
			fprintf(stderr, "line %d: column %s is %lld, want %lld\n", line, name,
				(long long)sqlite3_column_int64(st, i), (long long)w[i].i);
			check_failures++;
		} else if (type == SQLITE_TEXT &&
			   strcmp((const char *)sqlite3_column_text(st, i), w[i].t)) {
			fprintf(stderr, "line %d: column %s is '%s', want '%s'\n", line, name,
				sqlite3_column_text(st, i), w[i].t);
			check_failures++;
		}
	}
	if (sqlite3_step(st) != SQLITE_DONE) {
		fprintf(stderr, "line %d: more than one row for '%s'\n", line, sql);
		check_failures++;
	}
out:
	sqlite3_finalize(st);
}
#define CHECK_ROW(db, sql, ...)                                                           \
	do {                                                                              \
		const struct want w_[] = { __VA_ARGS__ };                                 \
		check_row(db, sql, w_, (int)(sizeof(w_) / sizeof(w_[0])), __LINE__);      \
	} while (0)

static struct store *open_store(const char *path, struct store_opts *o)
{
	struct store *s;
	char *cause = NULL;

	o->path = path;
	s = store_open(o, &cause);
	if (!s)
		DIE("store_open: %s", cause ? cause : strerror(errno));
	return s;
}

static int64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static struct rec collective(int64_t ts, int64_t seq)
{
	struct rec r = { .kind = REC_COLLECTIVE };
	struct rec_collective *c = &r.u.collective;

	c->ts_ns = ts;
	c->dur_ns = 25000;
	c->pid = 4242;
	c->tid = 4243;
	c->comm_ptr = 0x7f0012345678;
	strcpy(c->comm_hash, "0123456789abcdef");
	c->rank = 1;
	c->nranks = 8;
	c->seq = seq;
	c->op = "AllReduce";
	c->count = 1 << 20;
	c->bytes = 4 << 20;
	c->datatype = "float32";
	c->redop = "sum";
	c->peer = REC_NULL;
	c->stream = 0x55;
	c->busy_ns = 1000;
	c->sync_ns = 2000;
	c->gap_ns = 3000;
	c->ret = 0;
	return r;
}

static void test_roundtrip(const char *dir)
{
	struct store_opts o = { .node = "node-a", .clock_source = "test clock" };
	char path[512], longcmd[5000];
	struct store *s;
	struct rec r;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/roundtrip.db", dir);
	s = open_store(path, &o);

	for (size_t i = 0; i < sizeof(longcmd) - 1; i++)
		longcmd[i] = 'a' + i % 26;
	longcmd[sizeof(longcmd) - 1] = '\0';

	memset(&r, 0, sizeof(r));
	r.kind = REC_PROCESS;
	r.u.process = (struct rec_process){ .pid = 1, .start_ns = INT64_MAX, .exit_ns = REC_NULL,
					    .exit_code = REC_NULL, .ppid = INT64_MIN + 1,
					    .comm = "python3", .cmdline = longcmd, .cgroup = NULL,
					    .cgroup_id = 0, .rank = 3, .local_rank = REC_NULL,
					    .world_size = 16, .job_id = "" };
	CHECK_EQ(store_put(s, &r), 0);

	memset(&r, 0, sizeof(r));
	r.kind = REC_COMM;
	r.u.comm = (struct rec_comm){ .ts_ns = 100, .dur_ns = REC_NULL, .pid = 2, .tid = 3,
				      .comm_ptr = -1, .comm_hash = "fedcba9876543210",
				      .rank = 0, .nranks = 2, .fn = "ncclCommInitRankConfig",
				      .ret = -7 };
	CHECK_EQ(store_put(s, &r), 0);

	r = collective(INT64_MAX, 0);
	r.u.collective.comm_hash[0] = '\0'; /* no hash: NULL */
	r.u.collective.redop = NULL;
	r.u.collective.peer = 5;
	r.u.collective.busy_ns = REC_NULL;
	r.u.collective.sync_ns = 7654321;
	r.u.collective.gap_ns = REC_NULL;
	CHECK_EQ(store_put(s, &r), 0);

	memset(&r, 0, sizeof(r));
	r.kind = REC_CUDA;
	r.u.cuda = (struct rec_cuda){ .ts_ns = 7, .dur_ns = 0, .pid = 8, .tid = 9,
				      .api = "cudaStreamSynchronize", .kind = "sync",
				      .bytes = REC_NULL, .stream = INT64_MIN + 1, .ret = 0 };
	CHECK_EQ(store_put(s, &r), 0);

	memset(&r, 0, sizeof(r));
	r.kind = REC_OFFCPU;
	r.u.offcpu = (struct rec_offcpu){ .ts_ns = 10, .dur_ns = 11, .pid = 12, .tid = 13,
					  .reason = "blocked" };
	CHECK_EQ(store_put(s, &r), 0);

	memset(&r, 0, sizeof(r));
	r.kind = REC_TCP;
	r.u.tcp = (struct rec_tcp){ .ts_ns = 14, .pid = REC_NULL,
				    .saddr = "fe80:0000:0000:0000:0202:b3ff:fe1e:8329",
				    .sport = 65535, .daddr = "10.0.0.2", .dport = 29500,
				    .state = "ESTABLISHED" };
	CHECK_EQ(store_put(s, &r), 0);

	memset(&r, 0, sizeof(r));
	r.kind = REC_IB;
	r.u.ib = (struct rec_ib){ .ts_ns = 15, .device = "mlx5_0", .port = 1,
				  .counter = "port_rcv_errors", .value = 9, .delta = REC_NULL };
	CHECK_EQ(store_put(s, &r), 0);

	memset(&r, 0, sizeof(r));
	r.kind = 99;
	CHECK_EQ(store_put(s, &r), -EINVAL);

	CHECK_EQ(store_flush(s), 0);

	/* read back from another connection while the store is still open */
	db = test_reader(path);
	CHECK_ROW(db, "SELECT * FROM processes", W_I(1), W_I(INT64_MAX), W_N, W_N,
		  W_I(INT64_MIN + 1), W_T("python3"), W_T(longcmd), W_N, W_I(0), W_I(3), W_N,
		  W_I(16), W_T(""));
	CHECK_ROW(db, "SELECT * FROM comms", W_I(100), W_N, W_I(2), W_I(3), W_I(-1),
		  W_T("fedcba9876543210"), W_I(0), W_I(2), W_T("ncclCommInitRankConfig"), W_I(-7),
		  W_N, W_N);
	CHECK_ROW(db, "SELECT * FROM collectives", W_I(INT64_MAX), W_I(25000), W_I(4242),
		  W_I(4243), W_I(0x7f0012345678), W_N, W_I(1), W_I(8), W_I(0), W_T("AllReduce"),
		  W_I(1 << 20), W_I(4 << 20), W_T("float32"), W_N, W_I(5), W_I(0x55), W_N, W_I(0),
		  W_I(7654321), W_N, W_I(0));
	CHECK_ROW(db, "SELECT * FROM cuda_calls", W_I(7), W_I(0), W_I(8), W_I(9),
		  W_T("cudaStreamSynchronize"), W_T("sync"), W_N, W_I(INT64_MIN + 1), W_I(0));
	CHECK_ROW(db, "SELECT * FROM offcpu", W_I(10), W_I(11), W_I(12), W_I(13), W_T("blocked"));
	CHECK_ROW(db, "SELECT * FROM tcp_retransmits", W_I(14), W_N,
		  W_T("fe80:0000:0000:0000:0202:b3ff:fe1e:8329"), W_I(65535), W_T("10.0.0.2"),
		  W_I(29500), W_T("ESTABLISHED"));
	CHECK_ROW(db, "SELECT * FROM ib_counters", W_I(15), W_T("mlx5_0"), W_I(1),
		  W_T("port_rcv_errors"), W_I(9), W_N);

	/* meta written at open, and counters written with each commit */
	CHECK_ROW(db, "SELECT value FROM meta WHERE key = 'node'", W_T("node-a"));
	CHECK_ROW(db, "SELECT value FROM meta WHERE key = 'clock_source'", W_T("test clock"));
	CHECK_ROW(db, "SELECT value FROM meta WHERE key = 'schema_version'",
		  W_I(FQSQL_SCHEMA_VERSION));
	CHECK_ROW(db, "SELECT value FROM meta WHERE key = 'store_rows'", W_I(7));
	CHECK_ROW(db, "SELECT value FROM meta WHERE key = 'store_drops'", W_I(0));
	CHECK(test_i64(db, "SELECT value FROM meta WHERE key = 'agent_start_ns'") > 0);
	CHECK_EQ(test_i64(db, "PRAGMA auto_vacuum"), 2);
	sqlite3_close(db);

	CHECK_EQ(store_set_meta_text(s, "tracer_probes", "nccl,cuda"), 0);
	CHECK_EQ(store_set_meta_int(s, "ring_drops", 12), 0);
	CHECK_EQ(store_set_meta_int(s, "ring_drops", 13), 0); /* the last value wins */
	CHECK_EQ(store_flush(s), 0);
	db = test_reader(path);
	CHECK_ROW(db, "SELECT value FROM meta WHERE key = 'tracer_probes'", W_T("nccl,cuda"));
	CHECK_ROW(db, "SELECT value FROM meta WHERE key = 'ring_drops'", W_I(13));
	CHECK_ROW(db, "PRAGMA journal_mode", W_T("wal"));
	sqlite3_close(db);

	{
		struct store_stats st;

		store_get_stats(s, &st);
		CHECK_EQ(st.queued, 7);
		CHECK_EQ(st.rows, 7);
		CHECK_EQ(st.drops, 0);
		CHECK_EQ(st.write_errors, 0);
		CHECK_EQ(st.lag_ns, 0);
	}
	store_close(s);

	/* reopening an existing store keeps its rows */
	s = open_store(path, &o);
	store_close(s);
	db = test_reader(path);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM collectives"), 1);
	sqlite3_close(db);
}

/* nccl_groups: every column round-trips, and retention by age covers the table */
static void test_groups(const char *dir)
{
	struct store_opts o = { .node = "n", .retain_age_s = 3600 };
	int64_t now = realtime_ns(), hour = 3600LL * 1000000000LL;
	char path[512];
	struct store *s;
	struct rec r;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/groups.db", dir);
	s = open_store(path, &o);
	memset(&r, 0, sizeof(r));
	r.kind = REC_GROUP;
	r.u.group = (struct rec_group){ .ts_ns = now, .dur_ns = 90000, .end_dur_ns = 70000,
					.pid = 41, .tid = 42, .ncalls = 4, .ret = 7 };
	CHECK_EQ(store_put(s, &r), 0);
	r.u.group.ts_ns = now - 2 * hour;
	CHECK_EQ(store_put(s, &r), 0);
	CHECK_EQ(store_flush(s), 0);
	CHECK_EQ(store_retain_now(s), 0);
	store_close(s);
	db = test_reader(path);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM nccl_groups"), 1); /* the old one retained */
	CHECK_ROW(db, "SELECT * FROM nccl_groups", W_I(now), W_I(90000), W_I(70000), W_I(41),
		  W_I(42), W_I(4), W_I(7));
	sqlite3_close(db);
}

static void test_updates(const char *dir)
{
	struct store_opts o = { .node = "n" };
	char path[512];
	struct store *s;
	struct rec r;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/updates.db", dir);
	s = open_store(path, &o);

	memset(&r, 0, sizeof(r));
	r.kind = REC_PROCESS;
	r.u.process = (struct rec_process){ .pid = 50, .start_ns = 1000, .exit_ns = REC_NULL,
					    .exit_code = REC_NULL, .ppid = 1, .comm = "torchrun",
					    .cmdline = "torchrun train.py", .cgroup = "/job",
					    .cgroup_id = 77, .rank = 0, .local_rank = 0,
					    .world_size = 2, .job_id = "1234" };
	CHECK_EQ(store_put(s, &r), 0);
	/* another process with the same pid, earlier incarnation: must stay apart */
	r.u.process.start_ns = 500;
	r.u.process.comm = "old";
	CHECK_EQ(store_put(s, &r), 0);
	CHECK_EQ(store_flush(s), 0);

	/* the exit record carries only the key and the exit fields */
	memset(&r, 0, sizeof(r));
	r.kind = REC_PROCESS;
	r.u.process = (struct rec_process){ .pid = 50, .start_ns = 1000, .exit_ns = 9000,
					    .exit_code = 137, .ppid = REC_NULL,
					    .cgroup_id = REC_NULL, .rank = REC_NULL,
					    .local_rank = REC_NULL, .world_size = REC_NULL };
	CHECK_EQ(store_put(s, &r), 0);
	/* an exit for a process never seen inserts it */
	r.u.process.pid = 60;
	CHECK_EQ(store_put(s, &r), 0);

	/* comms: two generations of the same (pid, comm_ptr), and another comm */
	for (int i = 0; i < 3; i++) {
		memset(&r, 0, sizeof(r));
		r.kind = REC_COMM;
		r.u.comm = (struct rec_comm){ .ts_ns = 100 * (i + 1), .dur_ns = 5, .pid = 50,
					      .tid = 51, .comm_ptr = i == 2 ? 0xbbb : 0xaaa,
					      .comm_hash = "00000000000000aa", .rank = 0,
					      .nranks = 2, .fn = "ncclCommInitRank", .ret = 0 };
		CHECK_EQ(store_put(s, &r), 0);
	}
	memset(&r, 0, sizeof(r));
	r.kind = REC_COMM_DESTROY;
	r.u.comm_destroy = (struct rec_comm_destroy){ .ts_ns = 250, .pid = 50, .comm_ptr = 0xaaa };
	CHECK_EQ(store_put(s, &r), 0);
	CHECK_EQ(store_flush(s), 0);

	db = test_reader(path);
	CHECK_ROW(db, "SELECT * FROM processes WHERE pid = 50 AND start_ns = 1000", W_I(50),
		  W_I(1000), W_I(9000), W_I(137), W_I(1), W_T("torchrun"),
		  W_T("torchrun train.py"), W_T("/job"), W_I(77), W_I(0), W_I(0), W_I(2),
		  W_T("1234"));
	CHECK_ROW(db, "SELECT exit_ns, comm FROM processes WHERE pid = 50 AND start_ns = 500",
		  W_N, W_T("old"));
	CHECK_ROW(db, "SELECT exit_ns, exit_code, comm FROM processes WHERE pid = 60", W_I(9000),
		  W_I(137), W_N);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM processes"), 3);
	CHECK_ROW(db, "SELECT destroyed_ns FROM comms WHERE ts_ns = 200", W_I(250));
	CHECK_ROW(db, "SELECT destroyed_ns FROM comms WHERE ts_ns = 100", W_N);
	CHECK_ROW(db, "SELECT destroyed_ns FROM comms WHERE ts_ns = 300", W_N);
	sqlite3_close(db);
	store_close(s);
}

/* A queue of 4 slots behind a writer stalled by another connection's write lock. */
static void test_queue_full(const char *dir)
{
	struct store_opts o = { .node = "n", .queue_rows = 4, .batch_rows = 2, .batch_ms = 1 };
	struct store_stats st;
	int n = 2000, ok = 0, full = 0;
	char path[512];
	struct store *s;
	sqlite3 *lock;
	struct rec r;

	snprintf(path, sizeof(path), "%s/full.db", dir);
	s = open_store(path, &o);
	if (sqlite3_open(path, &lock) != SQLITE_OK ||
	    sqlite3_exec(lock, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
		DIE("cannot take the write lock on %s", path);

	for (int i = 0; i < n; i++) {
		int rc;

		r = collective(i, i);
		rc = store_put(s, &r);
		if (rc == 0)
			ok++;
		else if (rc == -ENOBUFS)
			full++;
		else
			CHECK_EQ(rc, 0);
	}
	store_get_stats(s, &st);
	CHECK(full > 0);
	CHECK_EQ(st.queued, ok);
	CHECK(st.drops >= full);

	sqlite3_exec(lock, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(lock);
	store_flush(s);

	/* writing resumes; every record is committed or counted as dropped */
	r = collective(n, n);
	CHECK_EQ(store_put(s, &r), 0);
	CHECK_EQ(store_flush(s), 0);
	store_get_stats(s, &st);
	CHECK_EQ(st.queued, ok + 1);
	CHECK_EQ(st.rows + st.drops, n + 1);
	CHECK(st.rows >= 1);
	store_close(s);

	{
		sqlite3 *db = test_reader(path);

		CHECK_EQ(test_i64(db, "SELECT count(*) FROM collectives"), st.rows);
		CHECK_EQ(test_i64(db, "SELECT count(*) FROM collectives WHERE seq = 2000"), 1);
		CHECK_EQ(test_i64(db, "SELECT value FROM meta WHERE key = 'store_drops'"),
			  st.drops);
		sqlite3_close(db);
	}
}

struct reader_arg {
	const char *path;
	atomic_int stop;
	int errors, reads;
	int64_t last, backwards;
};

static void *reader_main(void *arg)
{
	struct reader_arg *a = arg;
	sqlite3 *db = test_reader(a->path);
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db, "SELECT count(*) FROM collectives", -1, &st, NULL))
		DIE("prepare: %s", sqlite3_errmsg(db));
	while (!atomic_load(&a->stop)) {
		int rc = sqlite3_step(st);

		if (rc == SQLITE_ROW) {
			int64_t v = sqlite3_column_int64(st, 0);

			if (v < a->last)
				a->backwards++;
			a->last = v;
			a->reads++;
		} else {
			a->errors++;
		}
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return NULL;
}

static void test_readers(const char *dir)
{
	struct store_opts o = { .node = "n", .batch_ms = 5, .batch_rows = 1000 };
	struct reader_arg a = { 0 };
	int chunks = 20, per = 5000;
	char path[512];
	struct store *s;
	pthread_t th;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/readers.db", dir);
	s = open_store(path, &o);
	a.path = path;
	pthread_create(&th, NULL, reader_main, &a);
	db = test_reader(path);
	for (int c = 0; c < chunks; c++) {
		for (int i = 0; i < per; i++) {
			struct rec r = collective(c * per + i, c * per + i);

			while (store_put(s, &r) == -ENOBUFS)
				usleep(100);
		}
		CHECK_EQ(store_flush(s), 0);
		/* the writer thread is running and holds the file: a reader sees it all */
		CHECK_EQ(test_i64(db, "SELECT count(*) FROM collectives"), (int64_t)(c + 1) * per);
	}
	atomic_store(&a.stop, 1);
	pthread_join(th, NULL);
	CHECK_EQ(a.errors, 0);
	CHECK_EQ(a.backwards, 0);
	CHECK(a.reads > 0);
	sqlite3_close(db);
	store_close(s);
}

static void put_ts_rows(struct store *s, int64_t ts, int64_t tag)
{
	struct rec r;

	r = collective(ts, tag);
	CHECK_EQ(store_put(s, &r), 0);
	memset(&r, 0, sizeof(r));
	r.kind = REC_CUDA;
	r.u.cuda = (struct rec_cuda){ .ts_ns = ts, .dur_ns = 1, .pid = tag, .tid = 1,
				      .api = "cuLaunchKernel", .kind = "launch", .bytes = 0,
				      .stream = 0, .ret = 0 };
	CHECK_EQ(store_put(s, &r), 0);
	memset(&r, 0, sizeof(r));
	r.kind = REC_OFFCPU;
	r.u.offcpu = (struct rec_offcpu){ .ts_ns = ts, .dur_ns = 1, .pid = tag, .tid = 1,
					  .reason = "blocked" };
	CHECK_EQ(store_put(s, &r), 0);
	memset(&r, 0, sizeof(r));
	r.kind = REC_TCP;
	r.u.tcp = (struct rec_tcp){ .ts_ns = ts, .pid = tag, .saddr = "a", .sport = 1,
				    .daddr = "b", .dport = 2, .state = "x" };
	CHECK_EQ(store_put(s, &r), 0);
	memset(&r, 0, sizeof(r));
	r.kind = REC_IB;
	r.u.ib = (struct rec_ib){ .ts_ns = ts, .device = "mlx5_0", .port = 1, .counter = "c",
				  .value = tag, .delta = 0 };
	CHECK_EQ(store_put(s, &r), 0);
}

static void test_retain_age(const char *dir)
{
	struct store_opts o = { .node = "n", .retain_age_s = 3600 };
	int64_t now = realtime_ns(), hour = 3600LL * 1000000000LL;
	static const char *const tables[] = { "collectives", "cuda_calls", "offcpu",
					      "tcp_retransmits", "ib_counters" };
	struct store_stats st;
	char path[512], sql[256];
	struct store *s;
	struct rec r;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/age.db", dir);
	s = open_store(path, &o);
	for (int i = 0; i < 10; i++)
		put_ts_rows(s, now - 2 * hour - i, 1); /* old */
	for (int i = 0; i < 3; i++)
		put_ts_rows(s, now - hour / 6 + i, 2); /* recent */

	/* processes and comms go by exit / destroy time: live ones stay */
	memset(&r, 0, sizeof(r));
	r.kind = REC_PROCESS;
	r.u.process = (struct rec_process){ .pid = 1, .start_ns = now - 3 * hour,
					    .exit_ns = now - 2 * hour, .exit_code = 0,
					    .ppid = REC_NULL, .cgroup_id = REC_NULL,
					    .rank = REC_NULL, .local_rank = REC_NULL,
					    .world_size = REC_NULL };
	CHECK_EQ(store_put(s, &r), 0);
	r.u.process.pid = 2;
	r.u.process.exit_ns = REC_NULL;
	CHECK_EQ(store_put(s, &r), 0);
	memset(&r, 0, sizeof(r));
	r.kind = REC_COMM;
	r.u.comm = (struct rec_comm){ .ts_ns = now - 3 * hour, .dur_ns = 1, .pid = 1, .tid = 1,
				      .comm_ptr = 1, .rank = 0, .nranks = 2, .ret = 0 };
	CHECK_EQ(store_put(s, &r), 0);
	r.u.comm.pid = 2;
	CHECK_EQ(store_put(s, &r), 0);
	memset(&r, 0, sizeof(r));
	r.kind = REC_COMM_DESTROY;
	r.u.comm_destroy = (struct rec_comm_destroy){ .ts_ns = now - 2 * hour, .pid = 1,
						      .comm_ptr = 1 };
	CHECK_EQ(store_put(s, &r), 0);
	CHECK_EQ(store_flush(s), 0);

	CHECK_EQ(store_retain_now(s), 0);
	store_get_stats(s, &st);
	CHECK_EQ(st.retained, 5 * 10 + 2);

	db = test_reader(path);
	for (int i = 0; i < 5; i++) {
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", tables[i]);
		CHECK_EQ(test_i64(db, sql), 3);
		snprintf(sql, sizeof(sql), "SELECT min(ts_ns) FROM %s", tables[i]);
		CHECK_EQ(test_i64(db, sql), now - hour / 6);
	}
	CHECK_EQ(test_i64(db, "SELECT group_concat(pid) FROM processes"), 2);
	CHECK_EQ(test_i64(db, "SELECT group_concat(pid) FROM comms"), 2);
	sqlite3_close(db);
	store_close(s);
}

static void test_retain_size(const char *dir)
{
	int64_t limit = 2 << 20, n = 60000, bytes;
	struct store_opts o = { .node = "n", .retain_bytes = limit };
	struct store_stats st;
	char path[512];
	struct store *s;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/size.db", dir);
	s = open_store(path, &o);
	for (int64_t i = 0; i < n; i++) {
		struct rec r = collective(1000000 + i, i);

		while (store_put(s, &r) == -ENOBUFS)
			usleep(100);
	}
	CHECK_EQ(store_flush(s), 0);
	db = test_reader(path);
	bytes = test_i64(db, "PRAGMA page_count") * test_i64(db, "PRAGMA page_size");
	if (bytes <= limit)
		DIE("size test needs more rows: %lld bytes are within the limit", (long long)bytes);
	CHECK_EQ(store_retain_now(s), 0);
	store_get_stats(s, &st);
	CHECK(st.retained > 0);
	bytes = test_i64(db, "PRAGMA page_count") * test_i64(db, "PRAGMA page_size");
	CHECK(bytes <= limit);
	/* the newest rows stay, the oldest go */
	CHECK_EQ(test_i64(db, "SELECT max(seq) FROM collectives"), n - 1);
	CHECK(test_i64(db, "SELECT min(seq) FROM collectives") > 0);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM collectives"), n - st.retained);
	sqlite3_close(db);
	store_close(s);
}

/*
 * Events of one nanosecond in a table keyed by ts_ns: every row is stored, moved
 * forward to the next free nanosecond in arrival order, and counted.
 */
static void test_nudge(const char *dir)
{
	struct store_opts o = { .node = "n", .batch_rows = 7 };
	static const char *const tables[] = { "cuda_calls", "offcpu", "tcp_retransmits" };
	int64_t n = 100, t0 = 1000;
	struct store_stats st;
	char path[512], sql[256];
	struct store *s;
	struct rec r;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/nudge.db", dir);
	s = open_store(path, &o);
	/* a row already at t0 + 3, committed: the run of taken nanoseconds skips it */
	r = collective(t0 + 3, 1000);
	CHECK_EQ(store_put(s, &r), 0);
	CHECK_EQ(store_flush(s), 0);
	for (int64_t i = 0; i < n; i++) {
		r = collective(t0, i);
		CHECK_EQ(store_put(s, &r), 0);
	}
	/* every keyed table: 3 more rows at t0 (and ib_counters, not keyed: 3 at t0) */
	for (int i = 0; i < 3; i++)
		put_ts_rows(s, t0, i);
	CHECK_EQ(store_flush(s), 0);
	store_get_stats(s, &st);
	CHECK_EQ(st.drops, 0);
	CHECK_EQ(st.rows, 1 + n + 3 * 5);
	/* all but the first row at t0 of each keyed table */
	CHECK_EQ(st.ts_nudged, n + 3 - 1 + 3 * 2);
	store_close(s);

	db = test_reader(path);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM collectives"), n + 1 + 3);
	CHECK_EQ(test_i64(db, "SELECT count(DISTINCT ts_ns) FROM collectives"), n + 1 + 3);
	CHECK_EQ(test_i64(db, "SELECT min(ts_ns) FROM collectives"), t0);
	/* t0 .. t0 + n + 3: the run steps over t0 + 3, which the first row holds */
	CHECK_EQ(test_i64(db, "SELECT max(ts_ns) FROM collectives"), t0 + n + 3);
	CHECK_EQ(test_i64(db, "SELECT seq FROM collectives WHERE ts_ns = 1003"), 1000);
	/* arrival order kept: seq rises with ts_ns over the first n */
	CHECK_EQ(test_i64(db, "SELECT count(DISTINCT seq) FROM collectives WHERE ts_ns <= 1100"),
		  n + 1);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (ORDER BY ts_ns) "
			       "AS p FROM collectives WHERE ts_ns <= 1100 AND seq < 1000) "
			       "WHERE seq < p"),
		  0);
	for (int i = 0; i < 3; i++) {
		snprintf(sql, sizeof(sql), "SELECT group_concat((ts_ns - %lld) || ':' || pid) FROM "
			 "(SELECT * FROM %s ORDER BY ts_ns)", (long long)t0, tables[i]);
		{
			sqlite3_stmt *q;

			if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK ||
			    sqlite3_step(q) != SQLITE_ROW)
				DIE("'%s': %s", sql, sqlite3_errmsg(db));
			CHECK_STR((const char *)sqlite3_column_text(q, 0), "0:0,1:1,2:2");
			sqlite3_finalize(q);
		}
	}
	CHECK_EQ(test_i64(db, "SELECT count(DISTINCT ts_ns) FROM ib_counters"), 1);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM ib_counters"), 3);
	CHECK_EQ(test_i64(db, "SELECT value FROM meta WHERE key = 'ts_nudged'"), st.ts_nudged);
	/* a time window is a range of the table itself: no ts_ns index to write */
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM pragma_table_info('collectives') "
			       "WHERE name = 'ts_ns' AND pk = 1"),
		  1);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND "
			       "sql LIKE '%(ts_ns)%' AND tbl_name NOT IN ('ib_counters', 'nccl_groups', "
			       "'gpu_samples', 'gpu_activity')"),
		  0);
	sqlite3_close(db);
}

/*
 * The checkpointer thread copies the WAL into the file while the store is open (the
 * writer's own auto-checkpoint is off): without it the file would stay at its first pages.
 */
static void test_checkpoint(const char *dir)
{
	struct store_opts o = { .node = "n" };
	char path[512];
	struct store *s;
	struct stat sb;
	int i;

	snprintf(path, sizeof(path), "%s/ckpt.db", dir);
	s = open_store(path, &o);
	for (int64_t j = 0; j < 40000; j++) {
		struct rec r = collective(1000000 + j, j);

		while (store_put(s, &r) == -ENOBUFS)
			usleep(100);
	}
	CHECK_EQ(store_flush(s), 0);
	for (i = 0; i < 500; i++) {
		if (stat(path, &sb) == 0 && sb.st_size >= (2 << 20))
			break;
		usleep(10000);
	}
	CHECK(i < 500);
	store_close(s);
	snprintf(path + strlen(path), sizeof(path) - strlen(path), "-wal");
	CHECK(stat(path, &sb) != 0 && errno == ENOENT); /* removed at close */
}

/*
 * A writer that never pauses still lets the WAL start over: past CKPT_WAIT_PAGES (32 MiB)
 * it waits once for a checkpoint pass, so the WAL stays near that size instead of
 * growing with everything written (about 75 MiB here).
 */
static void test_wal_bounded(const char *dir)
{
	struct store_opts o = { .node = "n" };
	int64_t wal_max = 0;
	char path[512], wal[600];
	struct store *s;
	struct stat sb;

	snprintf(path, sizeof(path), "%s/walmax.db", dir);
	snprintf(wal, sizeof(wal), "%s-wal", path);
	s = open_store(path, &o);
	for (int64_t j = 0; j < 600000; j++) {
		struct rec r = collective(1000000 + j, j);

		while (store_put(s, &r) == -ENOBUFS)
			usleep(100);
		if ((j & 1023) == 0 && stat(wal, &sb) == 0 && sb.st_size > wal_max)
			wal_max = sb.st_size;
	}
	CHECK_EQ(store_flush(s), 0);
	if (stat(wal, &sb) == 0 && sb.st_size > wal_max)
		wal_max = sb.st_size;
	store_close(s);
	if (getenv("TEST_VERBOSE") || wal_max > (52 << 20))
		fprintf(stderr, "WAL grew to %lld bytes\n", (long long)wal_max);
	CHECK(wal_max <= (52 << 20));
}

/* A file of schema version 1 (as agentd before version 2 made it): a v1 table layout. */
static void make_v1_file(const char *path, int64_t ts)
{
	sqlite3 *db;
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "PRAGMA journal_mode = WAL;"
		 "CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
		 "INSERT INTO meta VALUES ('schema_version', 1), ('node', 'old');"
		 "CREATE TABLE collectives (ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, "
		 "pid INTEGER NOT NULL, tid INTEGER NOT NULL, seq INTEGER);"
		 "CREATE INDEX collectives_ts ON collectives (ts_ns);"
		 "INSERT INTO collectives VALUES (%lld, 1, 2, 3, 4), (%lld, 1, 2, 3, 5);",
		 (long long)ts, (long long)ts);
	if (sqlite3_open(path, &db) != SQLITE_OK ||
	    sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		DIE("cannot make a v1 file %s: %s", path, sqlite3_errmsg(db));
	sqlite3_close(db);
}

/* A v1 file is never written as v2: it moves to <path>.v1 (then .v1.1) and a new file starts. */
static void test_v1_file(const char *dir)
{
	struct store_opts o = { .node = "new" };
	char path[512], old[600];
	struct store *s;
	struct rec r;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/v1.db", dir);
	for (int round = 0; round < 2; round++) {
		make_v1_file(path, 500 + round);
		s = open_store(path, &o);
		r = collective(500, 7);
		CHECK_EQ(store_put(s, &r), 0);
		CHECK_EQ(store_flush(s), 0);
		store_close(s);

		db = test_reader(path);
		CHECK_EQ(test_i64(db, "SELECT value FROM meta WHERE key = 'schema_version'"),
			  FQSQL_SCHEMA_VERSION);
		CHECK_ROW(db, "SELECT value FROM meta WHERE key = 'node'", W_T("new"));
		CHECK_ROW(db, "SELECT ts_ns, seq FROM collectives", W_I(500), W_I(7));
		sqlite3_close(db);

		/* the old rows, untouched, beside it */
		if (round)
			snprintf(old, sizeof(old), "%s.v1.%d", path, round);
		else
			snprintf(old, sizeof(old), "%s.v1", path);
		db = test_reader(old);
		CHECK_EQ(test_i64(db, "SELECT value FROM meta WHERE key = 'schema_version'"), 1);
		CHECK_ROW(db, "SELECT value FROM meta WHERE key = 'node'", W_T("old"));
		CHECK_EQ(test_i64(db, "SELECT count(*) FROM collectives"), 2);
		CHECK_EQ(test_i64(db, "SELECT min(ts_ns) FROM collectives"), 500 + round);
		sqlite3_close(db);
		unlink(path);
	}
	/* a file of a newer version is refused, and left alone */
	{
		struct store_opts on = { .node = "n", .path = path };
		char *cause = NULL;

		if (sqlite3_open(path, &db) != SQLITE_OK ||
		    sqlite3_exec(db, "CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
				 "INSERT INTO meta VALUES ('schema_version', 99)",
				 NULL, NULL, NULL) != SQLITE_OK)
			DIE("cannot make %s: %s", path, sqlite3_errmsg(db));
		sqlite3_close(db);
		s = store_open(&on, &cause);
		CHECK(!s);
		CHECK(cause && strstr(cause, "newer"));
		free(cause);
		store_close(s);
		db = test_reader(path);
		CHECK_EQ(test_i64(db, "SELECT value FROM meta WHERE key = 'schema_version'"), 99);
		sqlite3_close(db);
	}
}

/*
 * A version 2 file (the layout of version 3 without collectives.sync_ns and gap_ns), a
 * version 3 file (version 4 without collectives.cpu_ns, comms.nccl_hash and the table
 * nccl_kernels) and a version 4 file (version 5 without nccl_kernels.peer) are upgraded in
 * place: their rows stay, with the new columns NULL, and new rows have them.
 */
static void test_old_file(const char *dir, int version)
{
	struct store_opts o = { .node = "new" };
	char path[512], moved[600];
	struct store *s;
	struct rec r;
	sqlite3 *db;
	char *err = NULL;

	snprintf(path, sizeof(path), "%s/v%d.db", dir, version);
	if (sqlite3_open(path, &db) != SQLITE_OK || fqsql_schema_apply(db, NULL) ||
	    (version == 4 && sqlite3_exec(db,
			 "ALTER TABLE nccl_kernels DROP COLUMN peer;"
			 "INSERT INTO nccl_kernels (ts_ns, pid, nccl_comm, op, seq) "
			 "VALUES (90, 2, '0123456789abcdef', 'AllReduce', 0);",
			 NULL, NULL, &err) != SQLITE_OK) ||
	    (version < 4 && sqlite3_exec(db,
			 "ALTER TABLE collectives DROP COLUMN cpu_ns;"
			 "ALTER TABLE comms DROP COLUMN nccl_hash;"
			 "DROP TABLE nccl_kernels;", NULL, NULL, &err) != SQLITE_OK) ||
	    (version == 2 && sqlite3_exec(db,
			 "ALTER TABLE collectives DROP COLUMN gap_ns;"
			 "ALTER TABLE collectives DROP COLUMN sync_ns;", NULL, NULL, &err) != SQLITE_OK) ||
	    sqlite3_exec(db, version == 2 ?
			 "UPDATE meta SET value = 2 WHERE key = 'schema_version';" :
			 version == 3 ?
			 "UPDATE meta SET value = 3 WHERE key = 'schema_version';" :
			 "UPDATE meta SET value = 4 WHERE key = 'schema_version';",
			 NULL, NULL, &err) != SQLITE_OK ||
	    sqlite3_exec(db, "INSERT INTO collectives (ts_ns, dur_ns, pid, tid, seq, busy_ns) "
			 "VALUES (100, 1, 2, 3, 4, 5)",
			 NULL, NULL, &err) != SQLITE_OK)
		DIE("cannot make a v%d file %s: %s", version, path,
		    err ? err : sqlite3_errmsg(db));
	sqlite3_close(db);

	s = open_store(path, &o);
	r = collective(500, 7);
	CHECK_EQ(store_put(s, &r), 0);
	CHECK_EQ(store_flush(s), 0);
	store_close(s);

	db = test_reader(path);
	CHECK_EQ(test_i64(db, "SELECT value FROM meta WHERE key = 'schema_version'"),
		  FQSQL_SCHEMA_VERSION);
	CHECK_ROW(db, "SELECT ts_ns, seq, busy_ns, sync_ns, gap_ns, cpu_ns FROM collectives "
		  "WHERE ts_ns = 100", W_I(100), W_I(4), W_I(5), W_N, W_N, W_N);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM nccl_kernels"), version == 4);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM nccl_kernels WHERE peer IS NULL"),
		  version == 4);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM pragma_table_info('comms') "
			       "WHERE name = 'nccl_hash'"), 1);
	CHECK_ROW(db, "SELECT ts_ns, seq, sync_ns, gap_ns FROM collectives WHERE ts_ns = 500",
		  W_I(500), W_I(7), W_I(2000), W_I(3000));
	sqlite3_close(db);
	snprintf(moved, sizeof(moved), "%s.v%d", path, version);
	CHECK(access(moved, F_OK) != 0);
	unlink(path);
}

int main(void)
{
	char *dir = test_tmpdir();

	test_roundtrip(dir);
	test_groups(dir);
	test_updates(dir);
	test_queue_full(dir);
	test_readers(dir);
	test_retain_age(dir);
	test_retain_size(dir);
	test_nudge(dir);
	test_checkpoint(dir);
	test_wal_bounded(dir);
	test_v1_file(dir);
	test_old_file(dir, 2);
	test_old_file(dir, 3);
	test_old_file(dir, 4);
	test_rmrf(dir);
	free(dir);
	if (check_failures) {
		fprintf(stderr, "test_store: %d failure(s)\n", check_failures);
		return 1;
	}
	printf("test_store: ok\n");
	return 0;
}
