/* SPDX-License-Identifier: MIT */
/*
 * The writer's INSERTs agree with the file's tables (issue 15): a new file made
 * from sql/schema.sql opens, and a record of every kind lands in it with no
 * drop; a trace whose table has a column the writer does not fill, or lacks one
 * it writes, is refused at open with one line naming the table and the column.
 * A column added to schema.sql but not to the writer's column tables
 * (store_sql.c: rec_tables[]) fails here (and in every store test) before a row
 * is stored NULL; a column misnamed in rec_tables[] is refused the same way; a
 * field of a record struct that no column names, or a ts_ns-keyed table whose
 * first column is not its key, fails the layout checks below.
 */
#include <errno.h>
#include <stdalign.h>
#include <unistd.h>

#include "store.h"
#include "store_int.h"
#include "store_test.h"

/* A trace made by the store itself, then altered by sql. */
static void make(const char *path, const char *sql)
{
	struct store_opts o = { .node = "n", .path = path };
	char *cause = NULL, *err = NULL;
	struct store *s = store_open(&o, &cause);
	sqlite3 *db;

	if (!s)
		DIE("%s: refused: %s", path, cause ? cause : "?");
	store_close(s);
	if (sqlite3_open(path, &db) != SQLITE_OK ||
	    sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
		DIE("cannot alter %s: %s", path, err ? err : sqlite3_errmsg(db));
	sqlite3_close(db);
}

/* store_open refuses path with one line that has every word of want. */
static void refused(const char *path, const char *const *want)
{
	struct store_opts o = { .node = "n", .path = path };
	char *cause = NULL;
	struct store *s = store_open(&o, &cause);

	CHECK(!s);
	for (; *want; want++) {
		if (!cause || !strstr(cause, *want)) {
			fprintf(stderr, "%s: cause '%s' lacks '%s'\n", path,
				cause ? cause : "(none)", *want);
			check_failures++;
		}
	}
	CHECK(!cause || !strchr(cause, '\n'));
	store_close(s);
	free(cause);
}

static int put(struct store *s, const struct rec *r)
{
	CHECK_EQ(store_put(s, r), 0);
	return 1;
}

/* One record of every kind, all its fields set, written and counted. */
static void every_kind(const char *path)
{
	struct store_opts o = { .node = "n", .path = path };
	struct store_stats st;
	char *cause = NULL;
	struct store *s = store_open(&o, &cause);
	struct rec r;
	int kinds = 0;

	if (!s)
		DIE("%s: refused: %s", path, cause ? cause : "?");
	r = (struct rec){ .kind = REC_PROCESS };
	r.u.process = (struct rec_process){ .pid = 1, .start_ns = 2, .exit_ns = 3, .comm = "c",
					    .cmdline = "c a", .cgroup = "/g", .job_id = "j" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_COMM };
	r.u.comm = (struct rec_comm){ .ts_ns = 10, .pid = 1, .comm_ptr = 7, .fn = "ncclCommInitRank",
				      .comm_hash = "0123456789abcdef" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_COMM_DESTROY };
	r.u.comm_destroy = (struct rec_comm_destroy){ .ts_ns = 20, .pid = 1, .comm_ptr = 7 };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_COLLECTIVE };
	r.u.collective = (struct rec_collective){ .ts_ns = 11, .pid = 1, .op = "AllReduce",
						  .datatype = "float", .redop = "sum" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_CUDA };
	r.u.cuda = (struct rec_cuda){ .ts_ns = 12, .pid = 1, .api = "cudaMalloc", .kind = "malloc" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_OFFCPU };
	r.u.offcpu = (struct rec_offcpu){ .ts_ns = 13, .pid = 1, .reason = "blocked" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_TCP };
	r.u.tcp = (struct rec_tcp){ .ts_ns = 14, .saddr = "10.0.0.1", .daddr = "10.0.0.2",
				    .state = "ESTABLISHED" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_IB };
	r.u.ib = (struct rec_ib){ .ts_ns = 15, .device = "mlx5_0", .port = 1,
				  .counter = "port_xmit_data" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_GROUP };
	r.u.group = (struct rec_group){ .ts_ns = 16, .pid = 1 };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_KERNEL };
	r.u.kernel = (struct rec_kernel){ .ts_ns = 17, .pid = 1, .op = "AllReduce",
					  .nccl_comm = "0123456789abcdef" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_GPU };
	r.u.gpu = (struct rec_gpu){ .ts_ns = 18, .uuid = "GPU-1", .pci_bus_id = "0000:01:00.0" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_PROCESS_GPU };
	r.u.process_gpu = (struct rec_process_gpu){ .pid = 1, .start_ns = 2, .ts_ns = 19,
						    .gpu_uuid = "GPU-1", .source = "nvml" };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_BUSY };
	r.u.busy = (struct rec_busy){ .ts_ns = 20, .dur_ns = 200000000, .pid = 1, .device = 0,
				      .busy_ns = 150000000, .nccl_ns = 40000000 };
	kinds += put(s, &r);
	r = (struct rec){ .kind = REC_GPU_ACT };
	r.u.gpu_act = (struct rec_gpu_act){ .ts_ns = 21, .dur_ns = 1000000000, .uuid = "GPU-1",
					    .sm_active_pm = 975, .sm_occupancy_pm = REC_NULL32 };
	kinds += put(s, &r);
	CHECK_EQ(kinds, REC_KIND_MAX);
	CHECK_EQ(store_flush(s), 0);
	store_get_stats(s, &st);
	CHECK_EQ(st.drops, 0);
	CHECK_EQ(st.write_errors, 0);
	store_close(s);
	free(cause);
}

/* store_schema_check of path against rec_tables[] with kind's column from renamed to
 * name (or, from NULL, name added as a column), as a misnamed table would be */
static void misnamed(const char *path, int kind, const char *from, const char *name,
		     const char *const *want)
{
	struct rec_table tabs[REC_KIND_MAX + 1];
	struct rec_col col[64];
	const struct rec_table *t = &rec_tables[kind];
	char *cause = NULL;
	sqlite3 *db;
	int i = 0;

	memcpy(tabs, rec_tables, sizeof(tabs));
	if (t->ncol >= 64)
		DIE("rec_tables[%d]: too many columns for this test", kind);
	memcpy(col, t->col, t->ncol * sizeof(col[0]));
	tabs[kind].col = col;
	if (from) {
		while (i < t->ncol && strcmp(col[i].name, from))
			i++;
		if (i == t->ncol)
			DIE("rec_tables[%d] has no column %s", kind, from);
	} else {
		col[i = tabs[kind].ncol++] = col[0];
	}
	col[i].name = name;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
		DIE("cannot open %s", path);
	/* the tables as they are agree with the file ... */
	CHECK_EQ(store_schema_check(db, path, rec_tables, NULL), 0);
	/* ... and the altered ones do not, in one line that names the column */
	CHECK_EQ(store_schema_check(db, path, tabs, &cause), -EINVAL);
	for (; *want; want++) {
		if (!cause || !strstr(cause, *want)) {
			fprintf(stderr, "%s: cause '%s' lacks '%s'\n", name,
				cause ? cause : "(none)", *want);
			check_failures++;
		}
	}
	CHECK(!cause || !strchr(cause, '\n'));
	sqlite3_close(db);
	free(cause);
}

static size_t col_size(int type)
{
	switch (type) {
	case COL_I64:
		return sizeof(int64_t);
	case COL_I32:
		return sizeof(int32_t);
	case COL_TEXT:
		return sizeof(const char *);
	default:
		return sizeof(((struct rec_comm *)0)->comm_hash);
	}
}

static size_t col_align(int type)
{
	switch (type) {
	case COL_I64:
		return alignof(int64_t);
	case COL_I32:
		return alignof(int32_t);
	case COL_TEXT:
		return alignof(const char *);
	default:
		return 1;
	}
}

static int by_off(const void *a, const void *b)
{
	return (int)((const struct rec_col *)a)->off - (int)((const struct rec_col *)b)->off;
}

/*
 * Every field of every record struct has its column: the columns, in the order of their
 * fields, leave no gaps in the struct but the padding their alignment needs. A field that
 * no column names would leave a gap of its size.
 */
static void every_field(void)
{
	for (int k = REC_PROCESS; k <= REC_KIND_MAX; k++) {
		const struct rec_table *t = &rec_tables[k];
		struct rec_col col[64];
		size_t end = 0, al = 1;

		CHECK(t->name && t->ncol > 0 && t->ncol <= 64 && t->size > 0);
		if (!t->name || t->ncol <= 0 || t->ncol > 64)
			continue;
		memcpy(col, t->col, t->ncol * sizeof(col[0]));
		qsort(col, t->ncol, sizeof(col[0]), by_off);
		for (int i = 0; i < t->ncol; i++) {
			size_t a = col_align(col[i].type);

			if (col[i].off < end) {
				fprintf(stderr, "%s: column %s shares its field with another\n",
					t->name, col[i].name);
				check_failures++;
			} else if (col[i].off != (end + a - 1) / a * a) {
				fprintf(stderr, "%s: %zu bytes before column %s have no column\n",
					t->name, col[i].off - end, col[i].name);
				check_failures++;
			}
			end = col[i].off + col_size(col[i].type);
			al = a > al ? a : al;
		}
		if (t->size != (end + al - 1) / al * al) {
			fprintf(stderr, "%s: %zu bytes after column %s have no column\n", t->name,
				(size_t)t->size - end, col[t->ncol - 1].name);
			check_failures++;
		}
		/* a ts_ns-keyed table: the writer moves ?1 on a taken key */
		if (t->ts_key)
			CHECK_STR(t->col[0].name, "ts_ns");
	}
}

/* The tables the writer moves a taken ts_ns on are those keyed by it in the file. */
static void ts_keys(const char *path)
{
	sqlite3 *db = test_reader(path);

	for (int k = REC_PROCESS; k <= REC_KIND_MAX; k++) {
		const struct rec_table *t = &rec_tables[k];
		char sql[256];

		snprintf(sql, sizeof(sql),
			 "SELECT count(*) FROM pragma_table_info('%s') WHERE pk AND name = 'ts_ns' "
			 "AND type = 'INTEGER' AND (SELECT count(*) FROM pragma_table_info('%s') "
			 "WHERE pk) = 1", t->name, t->name);
		if (test_i64(db, sql) != (t->ts_key ? 1 : 0)) {
			fprintf(stderr, "%s: ts_key %d, but the file says otherwise\n", t->name,
				t->ts_key);
			check_failures++;
		}
	}
	sqlite3_close(db);
}

int main(void)
{
	char *dir = test_tmpdir(), p[512];

	/* what sql/schema.sql makes, the writer fills */
	snprintf(p, sizeof(p), "%s/new.db", dir);
	every_kind(p);

	/* a column the writer does not know */
	snprintf(p, sizeof(p), "%s/extra.db", dir);
	make(p, "ALTER TABLE collectives ADD COLUMN extra_ns INTEGER");
	refused(p, (const char *const[]){ "collectives.extra_ns", "is not written by this agent",
					  "move the file aside", NULL });
	snprintf(p, sizeof(p), "%s/extra-kernels.db", dir);
	make(p, "ALTER TABLE nccl_kernels ADD COLUMN late TEXT");
	refused(p, (const char *const[]){ "nccl_kernels.late", NULL });

	/* a column the writer fills that the table lacks */
	snprintf(p, sizeof(p), "%s/missing.db", dir);
	make(p, "ALTER TABLE cuda_calls DROP COLUMN stream");
	refused(p, (const char *const[]){ "table cuda_calls has no column stream",
					  "move the file aside", NULL });

	/* comms.destroyed_ns is written by an UPDATE, not the INSERT: no refusal */
	snprintf(p, sizeof(p), "%s/reopen.db", dir);
	make(p, "SELECT 1");
	every_kind(p);

	/* a column misnamed in the writer's tables */
	misnamed(p, REC_COLLECTIVE, "busy_ns", "busy",
		 (const char *const[]){ "collectives.busy_ns", "is not written by this agent",
					NULL });
	misnamed(p, REC_GPU, "gpu_uuid", "uuid",
		 (const char *const[]){ "gpu_samples.gpu_uuid", NULL });
	/* ... the UPDATE's column too */
	misnamed(p, REC_COMM_DESTROY, "destroyed_ns", "destroyed",
		 (const char *const[]){ "comms.destroyed_ns", "is not written", NULL });
	/* a column the writer's tables name that the file lacks */
	misnamed(p, REC_PROCESS_GPU, NULL, "extra",
		 (const char *const[]){ "table process_gpus has no column extra", NULL });
	misnamed(p, REC_COMM_DESTROY, NULL, "destroyed",
		 (const char *const[]){ "table comms has no column destroyed", NULL });

	every_field();
	ts_keys(p);

	test_rmrf(dir);
	if (check_failures)
		fprintf(stderr, "test_store_schema: %d checks failed\n", check_failures);
	return check_failures ? 1 : 0;
}
