/* SPDX-License-Identifier: MIT */
/*
 * printf() and format() on guarded connections (sql/fqsql_printf.c): the same
 * answers as SQLite's own for every format that fits the value limit (compared
 * on a plain connection), SQLITE_TOOBIG at once for %c precisions that add up
 * past it, and SQLITE_NOMEM at once past the query's deadline or at the call
 * its memory budget refused.
 * usage: test_sql_printf WORKDIR
 */
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fqsql.h"

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The value of expr on db as text with its type ("3:abc"), or "E<code>"; caller frees. */
static char *eval(sqlite3 *db, const char *expr, int *rc_out)
{
	sqlite3_stmt *st = NULL;
	char *sql = sqlite3_mprintf("SELECT %s", expr), *out = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

	if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const unsigned char *t = sqlite3_column_text(st, 0);

		out = sqlite3_mprintf("%d:%s", sqlite3_column_type(st, 0),
				      t ? (const char *)t : "");
		rc = SQLITE_OK;
	} else {
		out = sqlite3_mprintf("E%d", rc);
	}
	*rc_out = rc;
	sqlite3_finalize(st);
	sqlite3_free(sql);
	return out;
}

static const char *const same[] = {
	"printf('%d|%5d|%-5d|%05d|%+d|% d|%,d|%u|%i', 42, 42, 42, 42, 42, 42, 1234567, -1, 7)",
	"printf('%x|%X|%#x|%o|%#o|%p|%r|%r|%r', 255, 255, 255, 8, 8, 255, 1, 2, 13)",
	"printf('%f|%.2f|%10.3f|%-10.1f|%e|%E|%g|%G|%!.3f|%#g', 3.14159, 2.5, 1.0, 2.0, 1e10, "
	"1e-10, 0.0001, 1e20, 1.0, 1.5)",
	"printf('%s|%.2s|%5s|%-5s|%!.2s|%z', 'abc', 'abc', 'ab', 'ab', 'héllo', 'z')",
	"printf('%q|%Q|%Q|%w|%.3q', 'it''s', 'it''s', NULL, 'a\"b', 'a''bcdef')",
	"printf('%c|%.3c|%5.3c|%-5.3c|%.*c|%*c|%.0c|%.1c', 'xy', 'ab', 'c', 'd', 4, 'é', 3, 'e', "
	"'f', 'g')",
	"printf('%*d|%-*d|%.*f|%*.*s', 6, 1, 6, 2, 3, 2.0, 8, 2, 'abcdef')",
	"printf('%*d|%.*d', -6, 1, -3, 7)",
	"printf('%lld|%ld|%lf|%ls', 1, 2, 3.0, 'x')",
	"printf('%%|%|%5%|100%')",
	"printf('%d %d %s %c', 1)",
	"printf('%k%d', 1)",
	"printf('%T %d', 1)",
	"printf('%n%d', 5)",
	"printf('x%')",
	"printf()",
	"printf(NULL, 1)",
	"printf(42)",
	"printf('%s %d %f', x'414243', '12abc', 'nan')",
	"printf('%.*c', 100000, 'a')",
	"length(printf('%.*c%.*c', 8000000, 'a', 8000000, 'é'))",
	"printf('%.3c', NULL)",
	"printf('%020.5f|%-+8d|%0,12d', -3.25, 5, 1234567)",
	"printf('%.1000000000f', 1.5)",
	"printf('%1000000000d', 1)",
	"format('%s=%d', 'n', 3)",
	"format('%.*c', 3, 'q')",
	"typeof(printf('%s', 1))",
	"printf('%l.20000000c|%d', 'a', 1)",
};

static void test_same(sqlite3 *guarded, sqlite3 *plain)
{
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
		int rg, rp;
		char *g = eval(guarded, same[i], &rg), *p = eval(plain, same[i], &rp);

		CHECK_MSG(g && p && !strcmp(g, p), "%s: guarded '%.80s', SQLite '%.80s'", same[i],
		      g ? g : "(null)", p ? p : "(null)");
		sqlite3_free(g);
		sqlite3_free(p);
	}
}

static const char *const toobig[] = {
	"printf('%.2000000000c', 'x')",
	"printf('%.*c', 2147483647, 'a')",
	"format('%.*c', -2147483647, 'a')",
	"printf('%.9000000c%.9000000c', 'a', 'b')",
	"printf('%5.*c%.*c', 2147483647, -1, 2147483647, 'a')",
	"printf('%*.*c', 3, 20000000, 'a')",
};

static void test_toobig(sqlite3 *guarded)
{
	for (size_t i = 0; i < sizeof(toobig) / sizeof(toobig[0]); i++) {
		int64_t t0 = now_ns();
		int rc;
		char *g = eval(guarded, toobig[i], &rc);

		CHECK_MSG(rc == SQLITE_TOOBIG, "%s: got '%s', want SQLITE_TOOBIG", toobig[i], g);
		CHECK_MSG(now_ns() - t0 < 50000000, "%s: %lld ms", toobig[i],
		      (long long)((now_ns() - t0) / 1000000));
		sqlite3_free(g);
	}
}

/* Past the deadline a call fails at once, as a refused allocation would. */
static void test_deadline(sqlite3 *guarded)
{
	int rc;
	char *g;

	CHECK_MSG(fqsql_mem_begin(64 << 20, now_ns() - 1) == 0, "budget");
	g = eval(guarded, "printf('%d', 1)", &rc);
	CHECK_MSG(rc == SQLITE_NOMEM && fqsql_mem_hit() == FQSQL_MEM_DEADLINE,
	      "past the deadline: got '%s', hit %d", g, fqsql_mem_hit());
	sqlite3_free(g);
	fqsql_mem_end();
	CHECK_MSG(fqsql_mem_begin(64 << 20, now_ns() + 60000000000) == 0, "budget");
	g = eval(guarded, "printf('%d', 1)", &rc);
	CHECK_MSG(rc == SQLITE_OK && !strcmp(g, "3:1"), "within the deadline: got '%s'", g);
	sqlite3_free(g);
	fqsql_mem_end();
}

/* A row of calls over the memory budget ends at the call the budget refused, as SQLite's. */
static void test_budget(sqlite3 *guarded)
{
	int rc;
	char *g;

	CHECK_MSG(fqsql_mem_begin(14 << 20, 0) == 0, "budget");
	g = eval(guarded, "printf('%.*c', 6000000, 'a'), printf('%.*c', 6000000, 'b'), "
		 "printf('%.*c', 6000000, 'c'), printf('%.*c', 6000000, 'd')", &rc);
	CHECK_MSG(rc == SQLITE_NOMEM && fqsql_mem_hit() == FQSQL_MEM_QUERY,
	      "24 MB in a row under a 14 MiB budget: got '%.20s', hit %d", g, fqsql_mem_hit());
	sqlite3_free(g);
	fqsql_mem_end();
}

int main(int argc, char **argv)
{
	struct fqsql_limits lim = { .max_length = 16 << 20 };
	char path[600];
	sqlite3 *guarded = NULL, *plain = NULL;
	char *cause = NULL;

	if (fqsql_mem_install(0)) {
		fprintf(stderr, "test_sql_printf: cannot install the budgets\n");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/printf.db", argc > 1 ? argv[1] : ".");
	unlink(path);
	if (sqlite3_open(path, &plain) != SQLITE_OK ||
	    sqlite3_exec(plain, "CREATE TABLE t(x)", NULL, NULL, NULL) != SQLITE_OK) {
		fprintf(stderr, "test_sql_printf: cannot make '%s'\n", path);
		return 1;
	}
	sqlite3_limit(plain, SQLITE_LIMIT_LENGTH, lim.max_length);
	CHECK_MSG(fqsql_open_readonly(path, &lim, &guarded, &cause) == 0, "open: %s", cause);
	free(cause);
	if (guarded) {
		test_same(guarded, plain);
		test_toobig(guarded);
		test_deadline(guarded);
		test_budget(guarded);
		fqsql_close(guarded);
	}
	sqlite3_close(plain);
	unlink(path);
	return check_done("test_sql_printf");
}
