/* SPDX-License-Identifier: MIT */
/*
 * Every field of every record kind lands in its own column (issue 15). Each
 * record below sets each of its fields to a value no other field has (the
 * field's name in text, a number of its own otherwise), so a column bound to
 * the wrong field, or not bound, changes the dump of the file compared with
 * want[] below. The NULL encodings (REC_NULL, REC_NULL32, a NULL string, an
 * empty hash), strings the caller reuses once store_put returns (one too long
 * for the slot), the processes upsert, process_gpus' rules (the driver's first
 * sighting, the environment's latest read), the comm-destroy UPDATE and a ts_ns
 * collision (nudged 1 ns) are in it too.
 *
 * want[] was taken from the writer before its column tables (hand-written
 * INSERTs and binding): the trace file's contents did not change with them.
 */
#include "store.h"
#include "store_test.h"

/* The records' strings live here until put() returns, then are overwritten: the store must
 * have copied every one of them (into the slot, or the heap when they do not fit). */
static char scratch[1024];
static size_t scratch_used;

static const char *S(const char *v)
{
	char *p = scratch + scratch_used;
	size_t n = strlen(v) + 1;

	if (n > sizeof(scratch) - scratch_used)
		DIE("scratch too small");
	memcpy(p, v, n);
	scratch_used += n;
	return p;
}

static void put(struct store *s, struct rec *r)
{
	CHECK_EQ(store_put(s, r), 0);
	memset(scratch, '#', sizeof(scratch) - 1);
	scratch_used = 0;
}

/* longer than a ring slot's string arena */
#define LONG_CMDLINE "cmdline2 --an-argument-list-longer-than-the-slot-arena=1234567890"

/* Another read of r's process GPU (r->u.process_gpu): its strings made again, as put()
 * clobbers the scratch they came from. */
static void put_gpu_read(struct store *s, struct rec *r, int64_t ts_ns, int64_t gpu_index,
			 const char *source)
{
	r->u.process_gpu.ts_ns = ts_ns;
	r->u.process_gpu.gpu_index = gpu_index;
	r->u.process_gpu.gpu_uuid = S("gpu_uuid");
	r->u.process_gpu.source = S(source);
	put(s, r);
}

static void put_all(struct store *s)
{
	struct rec r;

	r = (struct rec){ .kind = REC_PROCESS };
	r.u.process = (struct rec_process){
		.pid = 101, .start_ns = 102, .exit_ns = REC_NULL, .exit_code = REC_NULL,
		.ppid = 105, .comm = S("comm"), .cmdline = S("cmdline"), .cgroup = S("cgroup"),
		.cgroup_id = 109, .rank = 110, .local_rank = 111, .world_size = 112,
		.job_id = S("job_id") };
	put(s, &r);
	/* the exit: NULL fields leave the first sighting's values, others replace them */
	r.u.process = (struct rec_process){
		.pid = 101, .start_ns = 102, .exit_ns = 103, .exit_code = 104, .ppid = REC_NULL,
		.cgroup_id = REC_NULL, .rank = 120, .local_rank = REC_NULL,
		.world_size = REC_NULL, .cmdline = S(LONG_CMDLINE) };
	put(s, &r);
	r.u.process = (struct rec_process){
		.pid = 131, .start_ns = 132, .exit_ns = REC_NULL, .exit_code = REC_NULL,
		.ppid = REC_NULL, .cgroup_id = REC_NULL, .rank = REC_NULL,
		.local_rank = REC_NULL, .world_size = REC_NULL };
	put(s, &r);

	r = (struct rec){ .kind = REC_COMM };
	r.u.comm = (struct rec_comm){ .ts_ns = 201, .dur_ns = 202, .pid = 203, .tid = 204,
				      .comm_ptr = 205, .comm_hash = "0123456789abcdef",
				      .rank = 207, .nranks = 208, .fn = S("fn"), .ret = 210,
				      .nccl_hash = "fedcba9876543210" };
	put(s, &r);
	r.u.comm = (struct rec_comm){ .ts_ns = 221, .dur_ns = REC_NULL, .pid = 203, .tid = 224,
				      .comm_ptr = 225, .comm_hash = "", .rank = REC_NULL,
				      .nranks = REC_NULL, .ret = REC_NULL, .nccl_hash = "" };
	put(s, &r);
	r = (struct rec){ .kind = REC_COMM_DESTROY };
	r.u.comm_destroy = (struct rec_comm_destroy){ .ts_ns = 231, .pid = 203, .comm_ptr = 205 };
	put(s, &r);

	r = (struct rec){ .kind = REC_COLLECTIVE };
	r.u.collective = (struct rec_collective){
		.ts_ns = 301, .dur_ns = 302, .pid = 303, .tid = 304, .comm_ptr = 305,
		.comm_hash = "0123456789abcdef", .ret = 307, .rank = 308, .nranks = 309,
		.seq = 310, .op = S("op"), .count = 312, .bytes = 313, .datatype = S("datatype"),
		.redop = S("redop"), .peer = 316, .stream = 317, .busy_ns = 318, .sync_ns = 319,
		.gap_ns = 320, .cpu_ns = 321 };
	put(s, &r);
	/* the same nanosecond: moved to the next */
	r.u.collective = (struct rec_collective){
		.ts_ns = 301, .dur_ns = 332, .pid = 303, .tid = 334, .comm_ptr = REC_NULL,
		.comm_hash = "", .rank = REC_NULL, .nranks = REC_NULL, .seq = REC_NULL,
		.count = REC_NULL, .bytes = REC_NULL, .peer = REC_NULL, .stream = REC_NULL,
		.busy_ns = REC_NULL, .sync_ns = REC_NULL, .gap_ns = REC_NULL,
		.cpu_ns = REC_NULL };
	put(s, &r);

	r = (struct rec){ .kind = REC_CUDA };
	r.u.cuda = (struct rec_cuda){ .ts_ns = 401, .dur_ns = 402, .pid = 403, .tid = 404,
				      .api = S("api"), .kind = S("kind"), .bytes = 407,
				      .stream = 408, .ret = 409 };
	put(s, &r);
	r = (struct rec){ .kind = REC_OFFCPU };
	r.u.offcpu = (struct rec_offcpu){ .ts_ns = 501, .dur_ns = 502, .pid = 503, .tid = 504,
					  .reason = S("reason") };
	put(s, &r);
	r = (struct rec){ .kind = REC_TCP };
	r.u.tcp = (struct rec_tcp){ .ts_ns = 601, .pid = 602, .saddr = S("saddr"), .sport = 604,
				    .daddr = S("daddr"), .dport = 606, .state = S("state") };
	put(s, &r);
	r.u.tcp = (struct rec_tcp){ .ts_ns = 611, .pid = REC_NULL, .sport = REC_NULL,
				    .dport = REC_NULL };
	put(s, &r);
	r = (struct rec){ .kind = REC_IB };
	r.u.ib = (struct rec_ib){ .ts_ns = 701, .device = S("device"), .port = 703,
				  .counter = S("counter"), .value = 705, .delta = 706 };
	put(s, &r);
	r = (struct rec){ .kind = REC_GROUP };
	r.u.group = (struct rec_group){ .ts_ns = 801, .dur_ns = 802, .end_dur_ns = 803,
					.pid = 804, .tid = 805, .ncalls = 806, .ret = 807 };
	put(s, &r);

	r = (struct rec){ .kind = REC_KERNEL };
	r.u.kernel = (struct rec_kernel){
		.ts_ns = 901, .host_dur_ns = 902, .pid = 903, .rank = 904, .nranks = 905,
		.nccl_comm = "fedcba9876543210", .comm_hash = "0123456789abcdef", .op = S("op"),
		.seq = 909, .count = 910, .nchannels = 911, .gpu_start_ns = 912,
		.gpu_dur_ns = 913, .gpu_ch_ns = 914, .partial = 915, .peer = 916 };
	put(s, &r);
	r.u.kernel = (struct rec_kernel){
		.ts_ns = 921, .host_dur_ns = REC_NULL, .pid = 923, .rank = REC_NULL,
		.nranks = REC_NULL, .nccl_comm = "1111111122222222", .comm_hash = "",
		.seq = 929, .count = REC_NULL, .nchannels = REC_NULL, .gpu_start_ns = REC_NULL,
		.gpu_dur_ns = REC_NULL, .gpu_ch_ns = REC_NULL, .partial = REC_NULL,
		.peer = REC_NULL };
	put(s, &r);

	r = (struct rec){ .kind = REC_GPU };
	r.u.gpu = (struct rec_gpu){
		.ts_ns = 1001, .gpu_index = 1002, .uuid = S("uuid"), .pci_bus_id = S("pci_bus_id"),
		.sm_clock_mhz = 1005, .mem_clock_mhz = 1006, .sm_clock_max_mhz = 1007,
		.mem_clock_max_mhz = 1008, .clock_reasons = 1009, .temp_c = 1010,
		.power_mw = 1011, .power_limit_mw = 1012, .util_gpu_pct = 1013,
		.util_mem_pct = 1014, .ecc_uncorrected = 1015, .ecc_corrected = 1016,
		.remap_corrected = 1017, .remap_uncorrected = 1018, .remap_pending = 1019,
		.remap_failed = 1020, .xid_count = 1021, .xid_last = 1022, .pcie_gen = 1023,
		.pcie_width = 1024, .pcie_gen_max = 1025, .pcie_width_max = 1026,
		.pcie_replays = 1027, .nvlink_replay = 1028, .nvlink_recovery = 1029,
		.nvlink_crc = 1030 };
	put(s, &r);
	r.u.gpu = (struct rec_gpu){
		.ts_ns = 1101, .gpu_index = 1102, .sm_clock_mhz = REC_NULL32,
		.mem_clock_mhz = REC_NULL32, .sm_clock_max_mhz = REC_NULL32,
		.mem_clock_max_mhz = REC_NULL32, .clock_reasons = REC_NULL, .temp_c = REC_NULL32,
		.power_mw = REC_NULL32, .power_limit_mw = REC_NULL32, .util_gpu_pct = REC_NULL32,
		.util_mem_pct = REC_NULL32, .ecc_uncorrected = REC_NULL, .ecc_corrected = REC_NULL,
		.remap_corrected = REC_NULL32, .remap_uncorrected = REC_NULL32,
		.remap_pending = REC_NULL32, .remap_failed = REC_NULL32, .xid_count = REC_NULL,
		.xid_last = REC_NULL32, .pcie_gen = REC_NULL32, .pcie_width = REC_NULL32,
		.pcie_gen_max = REC_NULL32, .pcie_width_max = REC_NULL32,
		.pcie_replays = REC_NULL32, .nvlink_replay = REC_NULL, .nvlink_recovery = REC_NULL,
		.nvlink_crc = REC_NULL };
	put(s, &r);

	r = (struct rec){ .kind = REC_PROCESS_GPU };
	r.u.process_gpu = (struct rec_process_gpu){ .ts_ns = 1201, .pid = 1202, .start_ns = 1203,
						    .gpu_index = 1204, .gpu_uuid = S("gpu_uuid"),
						    .source = S("source") };
	put(s, &r);
	/* a later read of the same (pid, start_ns, gpu_uuid, source) from the environment: the
	 * row stays, its ts_ns the latest read's (and an earlier one's never moves it back) */
	put_gpu_read(s, &r, 1211, 1214, "source");
	put_gpu_read(s, &r, 1205, 1214, "source");
	/* the driver's list: the first sighting stays */
	put_gpu_read(s, &r, 1221, 1214, "nvml");
	put_gpu_read(s, &r, 1231, 1234, "nvml");
}

/* Every table but meta, rows in the order of all their columns, as text. */
static char *dump(sqlite3 *db)
{
	sqlite3_stmt *tabs, *st;
	char *out = NULL, sql[512];
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!f || sqlite3_prepare_v2(db, "SELECT name FROM sqlite_schema WHERE type = 'table' "
					 "AND name != 'meta' ORDER BY name", -1, &tabs,
				     NULL) != SQLITE_OK)
		DIE("cannot list tables: %s", sqlite3_errmsg(db));
	while (sqlite3_step(tabs) == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(tabs, 0);
		int n, off;

		snprintf(sql, sizeof(sql), "SELECT * FROM %s", t);
		if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
			DIE("cannot read %s: %s", t, sqlite3_errmsg(db));
		n = sqlite3_column_count(st);
		sqlite3_finalize(st);
		off = snprintf(sql, sizeof(sql), "SELECT * FROM %s ORDER BY 1", t);
		for (int i = 2; i <= n; i++)
			off += snprintf(sql + off, sizeof(sql) - off, ", %d", i);
		if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
			DIE("cannot read %s: %s", t, sqlite3_errmsg(db));
		while (sqlite3_step(st) == SQLITE_ROW) {
			fprintf(f, "%s:", t);
			for (int i = 0; i < n; i++) {
				switch (sqlite3_column_type(st, i)) {
				case SQLITE_NULL:
					fputs(" -", f);
					break;
				case SQLITE_INTEGER:
					fprintf(f, " %lld", (long long)sqlite3_column_int64(st, i));
					break;
				default:
					fprintf(f, " '%s'", sqlite3_column_text(st, i));
				}
			}
			fputc('\n', f);
		}
		sqlite3_finalize(st);
	}
	sqlite3_finalize(tabs);
	fclose(f);
	return out;
}

static const char want[] =
	"collectives: 301 302 303 304 305 '0123456789abcdef' 308 309 310 'op' 312 313 'datatype' "
	"'redop' 316 317 318 307 319 320 321\n"
	"collectives: 302 332 303 334 - - - - - - - - - - - - - 0 - - -\n"
	"comms: 201 202 203 204 205 '0123456789abcdef' 207 208 'fn' 210 231 'fedcba9876543210'\n"
	"comms: 221 - 203 224 225 - - - - - - -\n"
	"cuda_calls: 401 402 403 404 'api' 'kind' 407 408 409\n"
	"gpu_samples: 1001 1002 'uuid' 'pci_bus_id' 1005 1006 1007 1008 1009 1010 1011 1012 1013 "
	"1014 1015 1016 1017 1018 1019 1020 1021 1022 1023 1024 1025 1026 1027 1028 1029 1030\n"
	"gpu_samples: 1101 1102 - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n"
	"ib_counters: 701 'device' 703 'counter' 705 706\n"
	"nccl_groups: 801 802 803 804 805 806 807\n"
	"nccl_kernels: 901 902 903 904 905 'fedcba9876543210' '0123456789abcdef' 'op' 909 910 911 "
	"912 913 914 915 916\n"
	"nccl_kernels: 921 - 923 - - '1111111122222222' - - 929 - - - - - - -\n"
	"offcpu: 501 502 503 504 'reason'\n"
	"process_gpus: 1202 1203 1204 'gpu_uuid' 'source' 1211\n"
	"process_gpus: 1202 1203 1214 'gpu_uuid' 'nvml' 1221\n"
	"processes: 101 102 103 104 105 'comm' '" LONG_CMDLINE "' 'cgroup' 109 120 111 112 "
	"'job_id'\n"
	"processes: 131 132 - - - - - - - - - - -\n"
	"tcp_retransmits: 601 602 'saddr' 604 'daddr' 606 'state'\n"
	"tcp_retransmits: 611 - - - - - -\n";

int main(void)
{
	char *dir = test_tmpdir(), path[512], *cause = NULL, *got;
	struct store_opts o = { .node = "n", .path = path };
	struct store_stats st;
	struct store *s;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/rows.db", dir);
	s = store_open(&o, &cause);
	if (!s)
		DIE("%s: refused: %s", path, cause ? cause : "?");
	put_all(s);
	CHECK_EQ(store_flush(s), 0);
	store_get_stats(s, &st);
	CHECK_EQ(st.drops, 0);
	CHECK_EQ(st.write_errors, 0);
	store_close(s);

	db = test_reader(path);
	got = dump(db);
	CHECK_EQ(test_i64(db, "SELECT value FROM meta WHERE key = 'ts_nudged'"), 1);
	sqlite3_close(db);
	if (strcmp(got, want)) {
		fprintf(stderr, "test_store_rows: the file holds\n%s\nwant\n%s\n", got, want);
		check_failures++;
	}
	free(got);
	free(cause);
	test_rmrf(dir);
	if (check_failures)
		fprintf(stderr, "test_store_rows: %d checks failed\n", check_failures);
	return check_failures ? 1 : 0;
}
