/* SPDX-License-Identifier: MIT */
/*
 * store_comm_name: the names an earlier agent gave communicators in a trace file, read when
 * the store opens it again (agentd restarted while the job ran keeps its communicators'
 * names). Rows written by one store, the file opened by a second: the newest row of each
 * (pid, NCCL hash) wins; a row without both hashes, one whose two hashes are the same (an
 * adopted communicator named by NCCL's), one that is not 16 lower-case hex digits of TEXT
 * (the file is not trusted) give no name; at most STORE_NAMES rows are read (the newest).
 */
#include "store.h"
#include "store_test.h"

static void comm(struct store *s, int64_t ts, int64_t pid, const char *hash, const char *nccl)
{
	struct rec r = { .kind = REC_COMM };

	r.u.comm = (struct rec_comm){ .ts_ns = ts, .dur_ns = 1, .pid = pid, .tid = pid,
				      .comm_ptr = 0x1000, .rank = 0, .nranks = 2,
				      .fn = "ncclCommInitRank", .ret = 0 };
	snprintf(r.u.comm.comm_hash, sizeof(r.u.comm.comm_hash), "%s", hash);
	snprintf(r.u.comm.nccl_hash, sizeof(r.u.comm.nccl_hash), "%s", nccl);
	CHECK_EQ(store_put(s, &r), 0);
}

/* name of (pid, nccl), or "-" */
static const char *name(struct store *s, uint32_t pid, uint64_t nccl)
{
	static char n[17];

	memset(n, 'x', sizeof(n));
	if (!store_comm_name(s, pid, nccl, n))
		return "-";
	if (n[16] != '\0')
		return "unterminated";
	return n;
}

/* sql run on the file, by a connection of its own (the store closed) */
static void exec_or_die(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	char *err = NULL;

	if (sqlite3_open(path, &db) != SQLITE_OK)
		DIE("cannot open %s", path);
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
		DIE("'%s': %s", sql, err ? err : "?");
	sqlite3_close(db);
}

static struct store *open_or_die(const struct store_opts *o)
{
	char *cause = NULL;
	struct store *s = store_open(o, &cause);

	if (!s)
		DIE("%s: refused: %s", o->path, cause ? cause : "?");
	free(cause);
	return s;
}

int main(void)
{
	char *dir = test_tmpdir(), path[512];
	struct store_opts o = { .node = "n", .path = path };
	struct store *s;

	snprintf(path, sizeof(path), "%s/names.db", dir);
	s = open_or_die(&o);
	/* a file with nothing in it yet: no names */
	CHECK_STR(name(s, 10, 0xaa), "-");
	comm(s, 100, 10, "1111111111111111", "00000000000000aa");
	comm(s, 200, 10, "2222222222222222", "00000000000000aa"); /* newer: wins */
	comm(s, 150, 11, "3333333333333333", "00000000000000aa"); /* another process */
	comm(s, 160, 10, "4444444444444444", "ffffffffffffffff");
	comm(s, 170, 10, "00000000000000bb", "00000000000000bb"); /* adopted: NCCL's name */
	comm(s, 180, 12, "5555555555555555", "");                  /* NCCL hash unknown */
	comm(s, 190, 12, "", "00000000000000cc");                  /* no name */
	CHECK_EQ(store_flush(s), 0);
	/* read when the store opened: nothing of this run's rows */
	CHECK_STR(name(s, 10, 0xaa), "-");
	store_close(s);

	/* what only a hostile or damaged file holds */
	exec_or_die(path, "INSERT INTO comms (ts_ns, pid, tid, comm_hash, nccl_hash) VALUES "
			"(300, 13, 13, 'GGGGGGGGGGGGGGGG', '00000000000000dd'), "
			"(301, 13, 13, '1234', '00000000000000ee'), "
			"(302, 13, 13, '6666666666666666', '00000000000000AD'), "
			"(305, 13, 13, 'ABCDEF0123456789', '00000000000000ac'), "
			"(303, -1, 13, '7777777777777777', '00000000000000dd'), "
			"(304, 13, 13, X'3838383838383838383838383838383800', '00000000000000ab')");
	s = open_or_die(&o);
	CHECK_STR(name(s, 10, 0xaa), "2222222222222222");
	CHECK_STR(name(s, 11, 0xaa), "3333333333333333");
	CHECK_STR(name(s, 10, 0xffffffffffffffffULL), "4444444444444444");
	CHECK_STR(name(s, 12, 0), "-"); /* an empty NCCL hash is no hash 0 */
	CHECK_STR(name(s, 10, 0xbb), "-");
	CHECK_STR(name(s, 12, 0xcc), "-");
	CHECK_STR(name(s, 13, 0xdd), "-");
	CHECK_STR(name(s, 13, 0xee), "-");
	CHECK_STR(name(s, 13, 0xab), "-");
	CHECK_STR(name(s, 13, 0xac), "-"); /* upper-case hex */
	CHECK_STR(name(s, 13, 0xad), "-");
	CHECK_STR(name(s, 0xffffffffu, 0xdd), "-");
	store_close(s);

	/* bounded: the newest STORE_NAMES rows only */
	exec_or_die(path, "WITH RECURSIVE i(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM i "
			"WHERE k < 5000) INSERT INTO comms (ts_ns, pid, tid, comm_hash, nccl_hash) "
			"SELECT 1000 + k, 20, 20, printf('%016x', k), printf('%016x', 100000 + k) "
			"FROM i");
	s = open_or_die(&o);
	CHECK_STR(name(s, 20, 100000 + 5000), "0000000000001388");
	CHECK_STR(name(s, 20, 100000 + 5000 - STORE_NAMES + 1), "0000000000000389");
	CHECK_STR(name(s, 20, 100000 + 5000 - STORE_NAMES), "-");
	CHECK_STR(name(s, 10, 0xaa), "-"); /* older than all of them */
	store_close(s);

	test_rmrf(dir);
	return check_done("test_store_names");
}
