/* SPDX-License-Identifier: MIT */
/*
 * Temporary storage of the read-only connections (sql/fqsql_tmpvfs.c).
 *
 *   test_sql_tmpvfs arena DIR:  a GROUP BY over 50,000 rows makes a few
 *     allocations, not one a row: SQLite's sorter keeps its records in its own
 *     arena (temp_store = MEMORY made it allocate each, 1.25-1.5x the CPU of
 *     the query, issue 15). Counted by an allocator wrapped around SQLite's.
 *   test_sql_tmpvfs budget DIR: a sort and a DISTINCT larger than SQLite's
 *     cache spill, come out right, open no file in SQLITE_TMPDIR, and are
 *     charged to the thread's memory budget: past it they fail with the budget
 *     named (issue 14's bound on temporary storage).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "fqsql.h"

#define ROWS 50000
#define SPILL_ROWS 100000 /* x 100-byte blobs: 11 MB, past the sorter's 2 MB in memory */

static sqlite3_mem_methods orig;
static long long allocs;

static void *count_malloc(int n)
{
	__atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
	return orig.xMalloc(n);
}

static void *count_realloc(void *p, int n)
{
	__atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
	return orig.xRealloc(p, n);
}

/* t(a, b) at path with ROWS rows, b from 1000 values in no order */
static int make_db(const char *path)
{
	sqlite3 *db = NULL;
	int rc;

	unlink(path);
	rc = sqlite3_open(path, &db);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db,
				  "CREATE TABLE t(a INTEGER, b INTEGER);"
				  "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s "
				  "WHERE i < 50000) INSERT INTO t SELECT i, (i * 7919) % 1000 FROM s",
				  NULL, NULL, NULL);
	sqlite3_close(db);
	return rc;
}

static sqlite3 *open_ro(const char *path)
{
	sqlite3 *db = NULL;
	char *cause = NULL;

	if (fqsql_open_readonly(path, NULL, &db, &cause)) {
		fprintf(stderr, "cannot open '%s': %s\n", path, cause ? cause : "?");
		free(cause);
		return NULL;
	}
	return db;
}

static int arena(const char *dir)
{
	sqlite3_mem_methods m;
	sqlite3_stmt *st = NULL;
	sqlite3 *db;
	char path[PATH_MAX];
	long long before, groups = 0;
	int rc;

	CHECK_MSG(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &orig) == SQLITE_OK, "GETMALLOC\n");
	m = orig;
	m.xMalloc = count_malloc;
	m.xRealloc = count_realloc;
	CHECK_MSG(sqlite3_config(SQLITE_CONFIG_MALLOC, &m) == SQLITE_OK, "MALLOC\n");
	snprintf(path, sizeof(path), "%s/tmpvfs-arena.db", dir);
	CHECK_MSG(make_db(path) == SQLITE_OK, "cannot make '%s'\n", path);
	db = open_ro(path);
	if (!db)
		return check_done("test_sql_tmpvfs arena");
	before = __atomic_load_n(&allocs, __ATOMIC_RELAXED);
	rc = sqlite3_prepare_v2(db, "SELECT b, count(*), sum(a) FROM t GROUP BY b", -1, &st, NULL);
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		groups++;
		rc = SQLITE_OK;
	}
	CHECK_MSG(rc == SQLITE_DONE, "GROUP BY: %s\n", sqlite3_errmsg(db));
	CHECK_MSG(groups == 1000, "GROUP BY gave %lld groups, want 1000\n", groups);
	sqlite3_finalize(st);
	before = __atomic_load_n(&allocs, __ATOMIC_RELAXED) - before;
	printf("GROUP BY over %d rows: %lld allocations\n", ROWS, before);
	CHECK_MSG(before < ROWS / 10,
		  "%lld allocations for %d rows: the sorter allocates a row at a "
		  "time (temp_store = MEMORY?)\n",
		  before, ROWS);
	sqlite3_close(db);
	unlink(path);
	return check_done("test_sql_tmpvfs arena");
}

/* Files this process has open under dir (SQLite unlinks its temp files at once). */
static int open_under(const char *dir)
{
	char link[PATH_MAX], target[PATH_MAX];
	struct dirent *e;
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && (e = readdir(d))) {
		ssize_t len;

		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		if (!strncmp(target, dir, strlen(dir)))
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

#define SERIES "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 100000) "

/* Runs sql under a budget of limit bytes: rows seen, sorted check, files in tmp, peak, hit. */
struct run {
	long long rows;
	int rc, unsorted, files, hit;
	int64_t peak;
};

static struct run run(sqlite3 *db, const char *sql, int64_t limit, const char *tmp)
{
	struct run r = { 0 };
	sqlite3_stmt *st = NULL;
	unsigned char prev[100];
	int have = 0;

	if (fqsql_mem_begin(limit, 0)) {
		r.rc = -1;
		return r;
	}
	r.rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	while (r.rc == SQLITE_OK && (r.rc = sqlite3_step(st)) == SQLITE_ROW) {
		const void *b = sqlite3_column_blob(st, 0);
		int n = sqlite3_column_bytes(st, 0);

		/* The sort is done and its runs are open: any file of them shows now. */
		if (!r.rows++)
			r.files = open_under(tmp);
		if (n == (int)sizeof(prev)) {
			if (have && memcmp(prev, b, sizeof(prev)) > 0)
				r.unsorted++;
			memcpy(prev, b, sizeof(prev));
			have = 1;
		}
		r.rc = SQLITE_OK;
	}
	r.peak = fqsql_mem_peak();
	r.hit = fqsql_mem_hit();
	sqlite3_finalize(st);
	fqsql_mem_end();
	return r;
}

static int budget(const char *dir)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	struct run r;
	sqlite3 *db;

	/* Read by SQLite's unix VFS when it starts: set before anything initializes it. */
	snprintf(path, sizeof(path), "%s/tmpvfs-tmp", dir);
	mkdir(path, 0700);
	/* absolute: /proc/self/fd says where a file is that way */
	CHECK_MSG(realpath(path, tmp), "cannot resolve '%s': %s\n", path, strerror(errno));
	setenv("SQLITE_TMPDIR", tmp, 1);
	CHECK_MSG(fqsql_mem_install(0) == 0, "cannot install the budgets\n");
	snprintf(path, sizeof(path), "%s/tmpvfs-budget.db", dir);
	CHECK_MSG(make_db(path) == SQLITE_OK, "cannot make '%s'\n", path);
	db = open_ro(path);
	if (!db)
		return check_done("test_sql_tmpvfs budget");

	/* a sort that spills: every row, in order, no file, its runs charged */
	r = run(db, SERIES "SELECT randomblob(100) AS b FROM s ORDER BY b", 64 << 20, tmp);
	CHECK_MSG(r.rc == SQLITE_DONE, "spilled sort: rc %d (%s)\n", r.rc, sqlite3_errmsg(db));
	CHECK_MSG(r.rows == SPILL_ROWS && !r.unsorted, "spilled sort: %lld rows, %d out of order\n",
	      r.rows, r.unsorted);
	CHECK_MSG(r.files == 0, "spilled sort: %d files open in SQLITE_TMPDIR\n", r.files);
	CHECK_MSG(r.peak > 10 << 20,
		  "spilled sort: budget peak %lld bytes: its runs were not charged\n",
		  (long long)r.peak);
	printf("sort of %d x 100 bytes: budget peak %lld bytes\n", SPILL_ROWS, (long long)r.peak);

	/* a transient table that spills (the pager's temporary database): the same */
	r = run(db, SERIES "SELECT count(DISTINCT randomblob(100)) FROM s", 64 << 20, tmp);
	CHECK_MSG(r.rc == SQLITE_DONE && r.rows == 1, "DISTINCT: rc %d rows %lld (%s)\n", r.rc,
		  r.rows, sqlite3_errmsg(db));
	CHECK_MSG(r.peak > 10 << 20,
		  "DISTINCT: budget peak %lld bytes: its pages were not charged\n",
		  (long long)r.peak);

	/* past the budget: the statement fails and the budget is what refused */
	r = run(db, SERIES "SELECT randomblob(100) AS b FROM s ORDER BY b", 6 << 20, tmp);
	CHECK_MSG(r.rc != SQLITE_DONE && r.hit == FQSQL_MEM_QUERY,
	      "sort over a 6 MiB budget: rc %d rows %lld hit %d, want a failure of the budget\n",
	      r.rc, r.rows, r.hit);
	r = run(db, SERIES "SELECT count(DISTINCT randomblob(100)) FROM s", 6 << 20, tmp);
	CHECK_MSG(r.rc != SQLITE_DONE && r.hit == FQSQL_MEM_QUERY,
	      "DISTINCT over a 6 MiB budget: rc %d hit %d, want a failure of the budget\n", r.rc,
	      r.hit);

	sqlite3_close(db);
	CHECK_MSG(fqsql_mem_total() == 0, "%lld bytes left charged\n",
		  (long long)fqsql_mem_total());
	unlink(path);
	rmdir(tmp);
	return check_done("test_sql_tmpvfs budget");
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "arena"))
		return arena(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "budget"))
		return budget(argv[2]);
	fprintf(stderr, "usage: test_sql_tmpvfs arena|budget DIR\n");
	return 2;
}
