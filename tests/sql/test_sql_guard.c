/* SPDX-License-Identifier: MIT */
/*
 * The read-only guard: hostile statements are refused or stopped with the
 * right code and leave the file's bytes as they were; reads work, including
 * on a WAL file another process is writing.
 * usage: test_sql_guard WORKDIR
 */
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fqsql.h"

static char dir[512], dbpath[600], walpath[600], vacpath[600];

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long len;

	*n = 0;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	buf = malloc(len > 0 ? len : 1);
	if (buf && fread(buf, 1, len, f) == (size_t)len)
		*n = (size_t)len;
	fclose(f);
	return buf;
}

static int exists(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0;
}

static void setup_exec(sqlite3 *db, const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "setup failed: %s: %s\n", sql, err);
		exit(1);
	}
}

static void make_fixture(void)
{
	sqlite3 *db;
	char *cause = NULL;

	unlink(dbpath);
	if (sqlite3_open(dbpath, &db) != SQLITE_OK || fqsql_schema_apply(db, &cause) != 0) {
		fprintf(stderr, "cannot create fixture '%s': %s\n", dbpath, cause);
		exit(1);
	}
	setup_exec(db, "CREATE TABLE t (a); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL "
		       "SELECT i + 1 FROM c WHERE i < 1000) INSERT INTO t SELECT i FROM c;"
		       "INSERT INTO collectives (ts_ns, dur_ns, pid, tid, rank, seq, busy_ns) "
		       "VALUES (1, 25000, 10, 10, 0, 0, 100), (2, 26000, 11, 11, 1, 0, 300)");
	sqlite3_close(db);
}

struct hostile {
	const char *sql;
	int want;
	const char *cause;
};

static void check_refused(sqlite3 *db, const char *sql, int want, const char *cause_has)
{
	sqlite3_stmt *st = (sqlite3_stmt *)&st; /* must come back NULL */
	char *cause = NULL;
	int r = fqsql_prepare(db, sql, &st, &cause);

	CHECK_MSG(r == want, "%s: got %d (%s), want %d", sql, r, cause ? cause : "-", want);
	CHECK_MSG(st == NULL, "%s: statement returned on refusal", sql);
	CHECK_MSG(cause && strstr(cause, cause_has), "%s: cause '%s' lacks '%s'", sql,
	      cause ? cause : "(null)", cause_has);
	CHECK_MSG(!cause || !strchr(cause, '\n'), "%s: cause is more than one line", sql);
	if (r == 0)
		sqlite3_finalize(st);
	free(cause);
}

/* Prepares (must succeed) and steps to the end: the first error code, or SQLITE_DONE. */
static int run(sqlite3 *db, const char *sql, int64_t *first)
{
	sqlite3_stmt *st = NULL;
	char *cause = NULL;
	int r = fqsql_prepare(db, sql, &st, &cause), rc;

	CHECK_MSG(r == 0, "%s: prepare failed: %s", sql, cause);
	free(cause);
	if (r)
		return SQLITE_ERROR;
	*first = INT64_MIN;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (*first == INT64_MIN)
			*first = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return rc;
}

static double one_double(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	char *cause = NULL;
	double v = NAN;

	if (fqsql_prepare(db, sql, &st, &cause) == 0 && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_double(st, 0);
	CHECK_MSG(!isnan(v), "%s: %s", sql, cause ? cause : sqlite3_errmsg(db));
	sqlite3_finalize(st);
	free(cause);
	return v;
}

static void dummy_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	sqlite3_result_int(ctx, 1);
}

static void test_hostile(void)
{
	static const struct hostile h[] = {
		{ "INSERT INTO t VALUES (1)", -EACCES, "denied: INSERT into 't'" },
		{ "REPLACE INTO t VALUES (1)", -EACCES, "INSERT into 't'" },
		{ "INSERT INTO t SELECT a FROM t RETURNING a", -EACCES, "INSERT" },
		{ "UPDATE t SET a = 0", -EACCES, "UPDATE of 't'" },
		{ "DELETE FROM collectives", -EACCES, "DELETE from 'collectives'" },
		{ "WITH x AS (SELECT 1) DELETE FROM t", -EACCES, "DELETE from 't'" },
		{ "CREATE TABLE x (a)", -EACCES, "denied: CREATE TABLE (" },
		{ "CREATE TEMP TABLE x (a)", -EACCES, "denied: CREATE TEMP TABLE" },
		{ "CREATE INDEX ti ON t (a)", -EACCES, "denied: CREATE INDEX" },
		{ "CREATE VIEW v AS SELECT 1", -EACCES, "CREATE VIEW" },
		{ "CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END", -EACCES,
		  "CREATE TRIGGER" },
		{ "CREATE VIRTUAL TABLE f USING fts5(a)", -EACCES, "denied" },
		{ "DROP TABLE t", -EACCES, "denied: DROP TABLE" },
		{ "DROP INDEX collectives_comm_seq", -EACCES, "denied: DROP INDEX" },
		{ "ALTER TABLE t ADD COLUMN b", -EACCES, "ALTER TABLE 't'" },
		{ "ALTER TABLE t RENAME TO u", -EACCES, "ALTER TABLE" },
		{ "ATTACH 'x.db' AS x", -EACCES, "denied: ATTACH" },
		{ "ATTACH DATABASE 'file:x.db?mode=rwc' AS x", -EACCES, "ATTACH" },
		{ "ATTACH '/tmp/fq x.db' AS \"my db\"", -EACCES, "ATTACH" },
		{ "ATTACH ':memory:' AS m", -EACCES, "ATTACH" },
		{ "DETACH main", -EACCES, "DETACH" },
		{ "PRAGMA writable_schema = 1", -EACCES, "PRAGMA writable_schema" },
		{ "PRAGMA journal_mode = DELETE", -EACCES, "PRAGMA journal_mode" },
		{ "PRAGMA journal_mode = WAL", -EACCES, "PRAGMA journal_mode" },
		{ "PRAGMA query_only = 0", -EACCES, "PRAGMA query_only" },
		{ "PRAGMA query_only = OFF", -EACCES, "PRAGMA query_only" },
		{ "PRAGMA user_version = 5", -EACCES, "PRAGMA user_version" },
		{ "PRAGMA main.user_version = 5", -EACCES, "PRAGMA user_version" },
		{ "PRAGMA journal_mode", -EACCES, "not on the read-only list" },
		{ "PRAGMA wal_checkpoint(TRUNCATE)", -EACCES, "PRAGMA wal_checkpoint" },
		{ "PRAGMA trusted_schema = 1", -EACCES, "PRAGMA trusted_schema" },
		{ "SELECT load_extension('x')", -EACCES, "denied: function load_extension()" },
		{ "SELECT fts3_tokenizer('simple')", -EACCES, "fts3_tokenizer" },
		{ "SELECT * FROM pragma_journal_mode", -EACCES, "pragma_journal_mode" },
		{ "SELECT * FROM pragma_journal_mode('delete')", -EACCES, "pragma_journal_mode" },
		{ "VACUUM", -EACCES, "denied: VACUUM" },
		{ "REINDEX", -EACCES, "REINDEX" },
		{ "ANALYZE", -EACCES, "denied: ANALYZE" },
		{ "UPDATE sqlite_master SET sql = ''", -EINVAL, "may not be modified" },
		{ "BEGIN", -EACCES, "denied: BEGIN" },
		{ "BEGIN IMMEDIATE", -EACCES, "BEGIN" },
		{ "COMMIT", -EACCES, "COMMIT" },
		{ "ROLLBACK", -EACCES, "ROLLBACK" },
		{ "SAVEPOINT s", -EACCES, "SAVEPOINT" },
		{ "RELEASE s", -EACCES, "SAVEPOINT" },
		{ "SELECT 1; DELETE FROM t", -EINVAL, "one statement per query" },
		{ "SELECT 1; SELECT 2", -EINVAL, "one statement per query" },
		{ "SELECT 1 /* c */ ; -- c\n PRAGMA query_only = 0", -EINVAL, "one statement" },
		{ "", -EINVAL, "empty query" },
		{ "  -- only a comment", -EINVAL, "empty query" },
		{ "SELEC 1", -EINVAL, "sql error" },
		{ "SELECT * FROM no_such_table", -EINVAL, "no such table" },
	};
	struct fqsql_limits lim = { 0 };
	sqlite3_stmt *pst = NULL;
	sqlite3 *db = NULL;
	char *cause = NULL, sql[1024];
	int64_t first;
	size_t n0, n1;
	char *before = slurp(dbpath, &n0), *after;
	int rc;

	CHECK_MSG(before && n0 > 0, "cannot read fixture");
	CHECK_MSG(fqsql_open_readonly(dbpath, &lim, &db, &cause) == 0, "open: %s", cause);
	free(cause);
	cause = NULL;
	if (!db)
		return;
	for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++)
		check_refused(db, h[i].sql, h[i].want, h[i].cause);
	snprintf(sql, sizeof(sql), "VACUUM INTO '%s'", vacpath);
	check_refused(db, sql, -EACCES, "denied: VACUUM");

	/* readfile() and friends are not in libsqlite3; if something registers them, deny */
	check_refused(db, "SELECT readfile('/etc/passwd')", -EINVAL, "no such function");
	sqlite3_create_function(db, "readfile", 1, SQLITE_UTF8, NULL, dummy_fn, NULL, NULL);
	sqlite3_create_function(db, "writefile", 2, SQLITE_UTF8, NULL, dummy_fn, NULL, NULL);
	check_refused(db, "SELECT readfile('/etc/passwd')", -EACCES, "denied: function readfile()");
	check_refused(db, "SELECT writefile('/tmp/fq-x', 'x')", -EACCES, "writefile");

	/* statements that only a limit can stop */
	fqsql_set_deadline(db, now_ns() + 300000000);
	rc = run(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
		 "SELECT count(*) FROM c", &first);
	CHECK_MSG(rc == SQLITE_INTERRUPT, "recursive CTE bomb: rc %d", rc);
	CHECK_MSG(fqsql_deadline_passed(db), "recursive CTE bomb: deadline not recorded");
	CHECK_MSG(fqsql_step_cause(db, rc, &cause) == -ETIMEDOUT && strstr(cause, "deadline"),
	      "CTE bomb cause: %s", cause);
	free(cause);
	cause = NULL;

	fqsql_set_deadline(db, now_ns() + 300000000);
	CHECK_MSG(!fqsql_deadline_passed(db), "set_deadline does not clear the flag");
	rc = run(db, "SELECT count(*) FROM t a, t b, t c, t d", &first);
	CHECK_MSG(rc == SQLITE_INTERRUPT && fqsql_deadline_passed(db), "cross join: rc %d", rc);
	fqsql_set_deadline(db, 0);

	rc = run(db, "SELECT length(randomblob(2000000000))", &first);
	CHECK_MSG(rc == SQLITE_TOOBIG, "randomblob(2e9): rc %d", rc);
	CHECK_MSG(fqsql_step_cause(db, rc, &cause) == -E2BIG, "randomblob cause: %s", cause);
	free(cause);
	cause = NULL;
	rc = run(db, "SELECT length(zeroblob(100000000))", &first);
	CHECK_MSG(rc == SQLITE_TOOBIG, "zeroblob(1e8) over 64 MiB: rc %d", rc);
	rc = run(db, "SELECT length(group_concat(hex(zeroblob(1000000)))) FROM t", &first);
	CHECK_MSG(rc == SQLITE_TOOBIG, "group_concat to 2 GB: rc %d", rc);

	/* a table-valued pragma given a value would set it: denied when it runs */
	if (fqsql_prepare(db, "SELECT * FROM pragma_user_version(7)", &pst, &cause) == 0) {
		rc = sqlite3_step(pst);
		CHECK_MSG(rc != SQLITE_ROW && rc != SQLITE_DONE, "pragma_user_version(7) ran");
		sqlite3_finalize(pst);
	}
	free(cause);
	cause = NULL;

	/* what a query may do */
	CHECK_NEAR(one_double(db, "SELECT median(a) FROM t"), 500.5, 1e-9, "median");
	CHECK_NEAR(one_double(db, "SELECT p99(a) FROM t"), 990.01, 1e-9, "p99");
	CHECK_NEAR(one_double(db, "SELECT mad(a) FROM t"), 250, 1e-9, "mad");
	CHECK_NEAR(one_double(db, "SELECT robust_z(max(busy_ns), median(busy_ns), 100) FROM "
			      "collectives"), 0.6745, 1e-9, "robust_z");
	CHECK_NEAR(one_double(db, "SELECT count(*) FROM t a, t b WHERE a.a < 10 AND b.a < 10"),
		   81, 0, "join");
	CHECK_NEAR(one_double(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM "
			      "c WHERE x < 10) SELECT sum(x) FROM c"), 55, 0, "recursive CTE");
	CHECK_NEAR(one_double(db, "SELECT count(*) FROM pragma_table_info('collectives')"), 21, 0,
		   "pragma_table_info");
	CHECK_NEAR(one_double(db, "SELECT count(*) FROM pragma_function_list WHERE name = "
			      "'median'"), 1, 0, "pragma_function_list");
	CHECK_NEAR(one_double(db, "SELECT 41 + 1; -- trailing comment ;"), 42, 0, "trailing");
	rc = run(db, "PRAGMA table_info(collectives)", &first);
	CHECK_MSG(rc == SQLITE_DONE && first == 0, "PRAGMA table_info: rc %d", rc);
	rc = run(db, "PRAGMA user_version", &first);
	CHECK_MSG(rc == SQLITE_DONE && first == 0, "PRAGMA user_version: rc %d, %lld", rc,
	      (long long)first);
	rc = run(db, "PRAGMA index_list('collectives')", &first);
	CHECK_MSG(rc == SQLITE_DONE, "PRAGMA index_list: rc %d", rc);
	rc = run(db, "SELECT value FROM meta WHERE key = 'schema_version'", &first);
	CHECK_MSG(rc == SQLITE_DONE && first == FQSQL_SCHEMA_VERSION, "schema_version %lld",
	      (long long)first);
	fqsql_close(db);

	after = slurp(dbpath, &n1);
	CHECK_MSG(after && n0 == n1 && !memcmp(before, after, n0), "the file's bytes changed");
	CHECK_MSG(!exists(vacpath), "VACUUM INTO wrote '%s'", vacpath);
	CHECK_MSG(!exists("x.db"), "ATTACH created x.db");
	CHECK_MSG(!exists("/tmp/fq x.db"), "ATTACH created '/tmp/fq x.db'");
	snprintf(sql, sizeof(sql), "%s-journal", dbpath);
	CHECK_MSG(!exists(sql), "a rollback journal appeared");
	snprintf(sql, sizeof(sql), "%s-wal", dbpath);
	CHECK_MSG(!exists(sql), "a WAL file appeared");
	free(before);
	free(after);
}

static void test_open_errors(void)
{
	sqlite3 *db = (sqlite3 *)&db;
	char *cause = NULL, path[700];
	FILE *f;
	int r;

	snprintf(path, sizeof(path), "%s/no-such.db", dir);
	r = fqsql_open_readonly(path, NULL, &db, &cause);
	CHECK_MSG(r == -ENOENT && db == NULL, "missing file: %d", r);
	CHECK_MSG(cause && strstr(cause, path) && !strchr(cause, '\n'), "cause: %s", cause);
	free(cause);

	snprintf(path, sizeof(path), "%s/not-a-db.db", dir);
	f = fopen(path, "w");
	fputs("this is not a database, it is a text file long enough to have a header..........."
	      "..............................................................................",
	      f);
	fclose(f);
	r = fqsql_open_readonly(path, NULL, &db, &cause);
	CHECK_MSG(r < 0 && db == NULL && cause && strstr(cause, "not a database"),
		  "text file: %d %s", r, cause);
	free(cause);
	r = fqsql_open_readonly(dir, NULL, &db, &cause);
	CHECK_MSG(r == -EINVAL && cause && strstr(cause, "not a regular file"), "dir: %d", r);
	free(cause);
}

#define WAL_TX 200
#define WAL_ROWS 50

static void wal_writer(void)
{
	sqlite3 *db;
	sqlite3_stmt *st;

	if (sqlite3_open(walpath, &db) != SQLITE_OK)
		_exit(2);
	sqlite3_busy_timeout(db, 5000);
	sqlite3_prepare_v2(db, "INSERT INTO w VALUES (?, ?)", -1, &st, NULL);
	for (int tx = 0; tx < WAL_TX; tx++) {
		if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
			_exit(3);
		for (int i = 0; i < WAL_ROWS; i++) {
			sqlite3_bind_int(st, 1, tx);
			sqlite3_bind_int(st, 2, i);
			if (sqlite3_step(st) != SQLITE_DONE)
				_exit(4);
			sqlite3_reset(st);
		}
		if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
			_exit(5);
		usleep(200);
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	_exit(0);
}

/* Reads stay consistent (whole transactions only) while another process writes. */
static void test_wal(void)
{
	sqlite3 *db;
	char *cause = NULL;
	int64_t last = 0, reads = 0, changes = 0, count;
	int status = 0, done = 0, bad = 0;
	pid_t pid;

	unlink(walpath);
	if (sqlite3_open(walpath, &db) != SQLITE_OK) {
		CHECK_MSG(0, "cannot create '%s'", walpath);
		return;
	}
	setup_exec(db, "PRAGMA journal_mode = WAL; CREATE TABLE w (tx, i)");
	sqlite3_close(db);

	pid = fork();
	if (pid == 0)
		wal_writer();
	CHECK_MSG(pid > 0, "fork failed");
	if (pid < 0)
		return;
	CHECK_MSG(fqsql_open_readonly(walpath, NULL, &db, &cause) == 0, "open WAL: %s", cause);
	free(cause);
	while (db && !done) {
		sqlite3_stmt *st = NULL;
		int rc;

		done = waitpid(pid, &status, WNOHANG) == pid;
		if (fqsql_prepare(db, "SELECT count(*) FROM w", &st, &cause) != 0) {
			CHECK_MSG(0, "prepare under a writer: %s", cause);
			free(cause);
			break;
		}
		rc = sqlite3_step(st);
		count = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
		sqlite3_finalize(st);
		reads++;
		if (rc != SQLITE_ROW || count % WAL_ROWS || count < last) {
			bad++;
			fprintf(stderr, "read %lld under a writer: rc %d (%s), count %lld after %lld\n",
				(long long)reads, rc, sqlite3_errmsg(db), (long long)count,
				(long long)last);
		}
		changes += count != last;
		last = count;
	}
	CHECK_MSG(bad == 0, "%d of %lld reads under a writer failed or saw half a transaction", bad,
	      (long long)reads);
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer failed: status %d",
		  status);
	CHECK_MSG(last == WAL_TX * WAL_ROWS, "final count %lld, want %d", (long long)last,
	      WAL_TX * WAL_ROWS);
	printf("WAL: %lld reads under a writer saw %lld different counts\n", (long long)reads,
	       (long long)changes);
	fqsql_close(db);
}

/* Last: the heap limit is process-wide. */
static void test_heap_limit(void)
{
	struct fqsql_limits lim = { .heap_limit = 8 << 20 };
	sqlite3 *db = NULL;
	char *cause = NULL;
	int64_t first;
	int rc;

	CHECK_MSG(fqsql_open_readonly(dbpath, &lim, &db, &cause) == 0, "open: %s", cause);
	free(cause);
	cause = NULL;
	if (!db)
		return;
	rc = run(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
		 "WHERE x < 3000000) SELECT median(x) FROM c", &first);
	CHECK_MSG(rc == SQLITE_NOMEM, "median of 3M values under an 8 MiB heap: rc %d", rc);
	CHECK_MSG(fqsql_step_cause(db, rc, &cause) == -ENOMEM, "cause: %s", cause);
	free(cause);
	fqsql_close(db);
	sqlite3_hard_heap_limit64(0);
}

/* A kept connection re-armed for its next query: the guard holds as if just opened. */
static void test_rearm(void)
{
	struct fqsql_limits lim = { .max_length = 4000 };
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	char *cause = NULL;
	int64_t first;
	int rc;

	CHECK_MSG(fqsql_open_readonly(dbpath, &lim, &db, &cause) == 0, "open: %s", cause);
	free(cause);
	cause = NULL;
	if (!db)
		return;
	fqsql_set_deadline(db, now_ns() - 1);
	rc = run(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
		 "WHERE x < 100000000) SELECT count(*) FROM c", &first);
	CHECK_MSG(rc == SQLITE_INTERRUPT && fqsql_deadline_passed(db), "past deadline: rc %d", rc);

	/* a statement still open: refused */
	CHECK_MSG(fqsql_prepare(db, "SELECT a FROM t", &st, &cause) == 0, "prepare: %s", cause);
	free(cause);
	cause = NULL;
	if (st)
		sqlite3_step(st);
	CHECK_MSG(fqsql_rearm(db, &lim) == -EINVAL, "rearm with a statement open");
	sqlite3_finalize(st);

	/* a statement kept across queries is not compiled again by a rearm */
	CHECK_MSG(fqsql_prepare(db, "SELECT count(*) FROM t", &st, &cause) == 0, "prepare: %s",
		  cause);
	free(cause);
	cause = NULL;
	if (st) {
		CHECK_MSG(sqlite3_step(st) == SQLITE_ROW, "kept statement: first run");
		sqlite3_reset(st);
		CHECK_MSG(fqsql_rearm(db, &lim) == 0, "rearm with a kept statement");
		CHECK_MSG(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1000,
		      "kept statement after rearm");
		CHECK_MSG(sqlite3_stmt_status(st, SQLITE_STMTSTATUS_REPREPARE, 0) == 0,
		      "kept statement compiled again %d times after rearm",
		      sqlite3_stmt_status(st, SQLITE_STMTSTATUS_REPREPARE, 0));
		sqlite3_finalize(st);
	}

	lim.max_length = 100;
	CHECK_MSG(fqsql_rearm(db, &lim) == 0, "rearm");
	CHECK_MSG(!fqsql_deadline_passed(db), "deadline flag kept after rearm");
	CHECK_NEAR(one_double(db, "SELECT count(*) FROM t"), 1000, 0, "count after rearm");
	rc = run(db, "SELECT length(zeroblob(500))", &first);
	CHECK_MSG(rc == SQLITE_TOOBIG, "new length limit after rearm: rc %d", rc);
	CHECK_MSG(fqsql_prepare(db, "DELETE FROM t", &st, &cause) == -EACCES,
	      "DELETE after rearm: %s", cause);
	free(cause);
	cause = NULL;
	CHECK_MSG(fqsql_prepare(db, "PRAGMA query_only = 0", &st, &cause) == -EACCES,
	      "PRAGMA query_only = 0 after rearm: %s", cause);
	free(cause);
	fqsql_close(db);
}

int main(int argc, char **argv)
{
	snprintf(dir, sizeof(dir), "%s", argc > 1 ? argv[1] : ".");
	snprintf(dbpath, sizeof(dbpath), "%s/guard.db", dir);
	snprintf(walpath, sizeof(walpath), "%s/guard-wal.db", dir);
	snprintf(vacpath, sizeof(vacpath), "%s/vacuum-into.db", dir);
	unlink(vacpath);
	make_fixture();
	test_hostile();
	test_open_errors();
	test_wal();
	test_heap_limit();
	test_rearm();
	return check_done("test_sql_guard");
}
