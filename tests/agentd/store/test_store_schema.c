/* SPDX-License-Identifier: MIT */
/*
 * The writer's INSERTs agree with the file's tables (issue 15): a new file made
 * from sql/schema.sql opens, and a record of every kind lands in it with no
 * drop; a trace whose table has a column the writer does not fill, or lacks one
 * it writes, is refused at open with one line naming the table and the column.
 * A column added to schema.sql but not to the INSERT text and the binding fails
 * here (and in every store test) before a row is stored NULL.
 */
#include <unistd.h>

#include "store.h"
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
	CHECK_EQ(kinds, REC_KIND_MAX);
	CHECK_EQ(store_flush(s), 0);
	store_get_stats(s, &st);
	CHECK_EQ(st.drops, 0);
	CHECK_EQ(st.write_errors, 0);
	store_close(s);
	free(cause);
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

	test_rmrf(dir);
	if (check_failures)
		fprintf(stderr, "test_store_schema: %d checks failed\n", check_failures);
	return check_failures ? 1 : 0;
}
