/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the read-only guard (sql/fqsql.h): the input is one
 * query as a client would send it. It is opened read-only on a small fixture
 * database, prepared and stepped under a short deadline, the way agentd's
 * workers run queries. Nothing may crash, and nothing may write: the
 * fixture's bytes are compared with a copy taken at start, every
 * CHECK_EVERY inputs and at exit, and the fixture's directory must hold no
 * other file (an absolute ATTACH or VACUUM INTO beside it would show). The
 * working directory stays as it is: libFuzzer reads its own relative paths.
 */
#include "fqsql.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CHECK_EVERY 256
#define DEADLINE_NS (20 * 1000000ll) /* per input: keeps CTE bombs cheap */
#define MAX_ROWS 2000

static char dir[256], dbpath[300];
static unsigned char *golden;
static size_t golden_len;
static unsigned long runs;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long len;

	*n = 0;
	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto out;
	buf = malloc(len ? (size_t)len : 1);
	if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
	} else {
		*n = (size_t)len;
	}
out:
	fclose(f);
	return buf;
}

/* Aborts when the fixture changed or a file appeared beside it. */
static void check_fixture(void)
{
	size_t n;
	unsigned char *now = slurp(dbpath, &n);
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!now || n != golden_len || memcmp(now, golden, n)) {
		fprintf(stderr, "fuzz_sqlguard: '%s' changed after %lu inputs\n", dbpath, runs);
		abort();
	}
	free(now);
	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, "fixture.db"))
			continue;
		fprintf(stderr, "fuzz_sqlguard: a query created '%s/%s'\n", dir, e->d_name);
		abort();
	}
	if (d)
		closedir(d);
}

static void at_exit(void)
{
	check_fixture();
	unlink(dbpath);
	rmdir(dir);
}

static const char fixture_sql[] =
	"INSERT OR REPLACE INTO meta VALUES ('schema_version', 1), ('clock_source', 'fuzz');"
	"CREATE TABLE t (a INTEGER, b TEXT, c REAL, d BLOB);"
	"WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 200) "
	"INSERT INTO t SELECT x, 'r' || x, x / 3.0, randomblob(x % 7) FROM n;"
	"INSERT INTO collectives (ts_ns, dur_ns, pid, tid, rank, seq, busy_ns) "
	"VALUES (1, 25000, 10, 10, 0, 0, 100), (2, 26000, 11, 11, 1, 0, 300),"
	"(3, 27000, 10, 10, 0, 1, 120), (4, 90000, 11, 11, 1, 1, 900);";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	sqlite3 *db = NULL;
	char *err = NULL, *cause = NULL;

	(void)argc, (void)argv;
	snprintf(dir, sizeof(dir), "%s/fuzz-sqlguard.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir)) {
		perror("fuzz_sqlguard: mkdtemp");
		exit(1);
	}
	snprintf(dbpath, sizeof(dbpath), "%s/fixture.db", dir);
	if (sqlite3_open(dbpath, &db) != SQLITE_OK || fqsql_schema_apply(db, &cause) ||
	    sqlite3_exec(db, fixture_sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "fuzz_sqlguard: cannot make '%s': %s\n", dbpath,
			err ? err : cause ? cause : sqlite3_errmsg(db));
		exit(1);
	}
	sqlite3_close(db);
	golden = slurp(dbpath, &golden_len);
	if (!golden) {
		fprintf(stderr, "fuzz_sqlguard: cannot read back '%s'\n", dbpath);
		exit(1);
	}
	atexit(at_exit);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Small limits: the point is the guard, not how fast SQLite fills memory. */
	struct fqsql_limits lim = { .max_length = 1 << 20, .heap_limit = 256 << 20 };
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	char *sql, *cause = NULL;
	int rc, rows = 0;

	if (!golden)
		LLVMFuzzerInitialize(NULL, NULL);
	sql = malloc(size + 1);
	if (!sql)
		return 0;
	memcpy(sql, data, size);
	sql[size] = '\0';
	if (fqsql_open_readonly(dbpath, &lim, &db, &cause)) {
		fprintf(stderr, "fuzz_sqlguard: cannot open the fixture: %s\n", cause);
		abort();
	}
	free(cause);
	cause = NULL;
	fqsql_set_deadline(db, now_ns() + DEADLINE_NS);
	rc = fqsql_prepare(db, sql, &st, &cause);
	if (rc) {
		if (!cause)
			abort(); /* every refusal explains itself */
		if (st)
			abort();
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && ++rows < MAX_ROWS) {
		int i, n = sqlite3_column_count(st);

		for (i = 0; i < n; i++)
			(void)sqlite3_column_bytes(st, i);
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		if (fqsql_step_cause(db, rc, &cause) >= 0 || !cause)
			abort();
	}
out:
	sqlite3_finalize(st);
	fqsql_close(db);
	free(cause);
	free(sql);
	if (++runs % CHECK_EVERY == 0)
		check_fixture();
	return 0;
}
