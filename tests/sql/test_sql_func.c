/* SPDX-License-Identifier: MIT */
/* The SQL functions against known values (numpy's percentile(..., method='linear')). */
#include <errno.h>
#include <time.h>

#include "check.h"
#include "fqsql.h"

static sqlite3 *db;

/* Runs a one-value query: 1 and *out for a number, 0 for NULL, -1 with errbuf on error. */
static int q(const char *sql, double *out, char *errbuf, size_t n)
{
	sqlite3_stmt *st = NULL;
	int rc, ret = -1;

	*out = NAN;
	if (errbuf)
		errbuf[0] = 0;
	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		ret = sqlite3_column_type(st, 0) != SQLITE_NULL;
		*out = sqlite3_column_double(st, 0);
		if (ret && sqlite3_column_type(st, 0) != SQLITE_FLOAT) {
			snprintf(errbuf, n, "result is not REAL");
			ret = -1;
		}
	} else if (errbuf) {
		snprintf(errbuf, n, "%s", sqlite3_errmsg(db));
	}
	sqlite3_finalize(st);
	return ret;
}

static void expect(const char *sql, double want)
{
	char err[256];
	double got;
	int r = q(sql, &got, err, sizeof(err));

	CHECK_MSG(r == 1, "%s: %s", sql, r < 0 ? err : "NULL");
	if (r == 1)
		CHECK_MSG(fabs(got - want) <= 1e-9 * (1 + fabs(want)), "%s: got %.17g, want %.17g",
		      sql, got, want);
}

static void expect_null(const char *sql)
{
	char err[256];
	double got;
	int r = q(sql, &got, err, sizeof(err));

	CHECK_MSG(r == 0, "%s: want NULL, got %s", sql, r < 0 ? err : "a number");
}

static void expect_error(const char *sql, const char *substr)
{
	char err[256];
	double got;
	int r = q(sql, &got, err, sizeof(err));

	CHECK_MSG(r < 0 && strstr(err, substr), "%s: want error with '%s', got %s", sql, substr,
	      r < 0 ? err : "a result");
}

static void exec(const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "setup failed: %s: %s\n", sql, err);
		exit(1);
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The definition, written the slow obvious way: sort, then interpolate. */
static double ref_percentile(double *v, int n, double p)
{
	double h = p / 100.0 * (n - 1);
	int lo = (int)floor(h);

	qsort(v, n, sizeof(*v), cmp);
	if (lo >= n - 1)
		return v[n - 1];
	return v[lo] + (h - lo) * (v[lo + 1] - v[lo]);
}

/* Random sizes and many ties, compared with the sort-based definition. */
static void test_random(void)
{
	sqlite3_stmt *ins;
	unsigned s = 12345;
	static const double ps[] = { 0, 1, 10, 25, 33.3, 50, 75, 90, 99, 99.9, 100 };
	double v[300];
	char sql[128];

	exec("CREATE TABLE r (x)");
	sqlite3_prepare_v2(db, "INSERT INTO r VALUES (?)", -1, &ins, NULL);
	for (int trial = 0; trial < 200; trial++) {
		int n = 1 + trial % 150;

		exec("DELETE FROM r");
		for (int i = 0; i < n; i++) {
			s = s * 1103515245 + 12345;
			/* every third trial draws from 5 values: ties stress the partition */
			v[i] = trial % 3 ? (double)((int)(s >> 8) % 2001 - 1000) / 7.0 :
					   (double)((s >> 16) % 5);
			sqlite3_bind_double(ins, 1, v[i]);
			sqlite3_step(ins);
			sqlite3_reset(ins);
		}
		for (size_t k = 0; k < sizeof(ps) / sizeof(ps[0]); k++) {
			double want = ref_percentile(v, n, ps[k]), got;
			char err[256];

			snprintf(sql, sizeof(sql), "SELECT percentile(x, %g) FROM r", ps[k]);
			CHECK_MSG(q(sql, &got, err, sizeof(err)) == 1 &&
				      fabs(got - want) <= 1e-9 * (1 + fabs(want)),
			      "n=%d p=%g: got %.17g, want %.17g", n, ps[k], got, want);
		}
	}
	sqlite3_finalize(ins);
}

static void test_speed(void)
{
	struct timespec t0, t1;
	double got, secs;
	char err[256];

	/* i * 7919 mod 10^6 permutes 0..999999: an unsorted input with a known median */
	exec("CREATE TABLE big AS WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c "
	     "WHERE i < 999999) SELECT (i * 7919) % 1000000 AS x FROM c");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_MSG(q("SELECT median(x) FROM big", &got, err, sizeof(err)) == 1, "%s", err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK_NEAR(got, 499999.5, 1e-9, "median of 1M");
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("median of 1,000,000 rows: %.3f s\n", secs);
	expect("SELECT p99(x) FROM big", 989999.01);
	expect("SELECT mad(x) FROM big", 250000);
}

int main(void)
{
	if (sqlite3_open(":memory:", &db) != SQLITE_OK || fqsql_register(db) != 0) {
		fprintf(stderr, "cannot set up an in-memory database\n");
		return 1;
	}
	CHECK_MSG(fqsql_register(NULL) == -EINVAL, "NULL db");
	exec("CREATE TABLE odd (x); INSERT INTO odd VALUES (3), (1), (2);"
	     "CREATE TABLE even (x); INSERT INTO even VALUES (4), (1), (3), (2);"
	     "CREATE TABLE nulls (x); INSERT INTO nulls VALUES (1), (NULL), (3), (NULL);"
	     "CREATE TABLE allnull (x); INSERT INTO allnull VALUES (NULL), (NULL);"
	     "CREATE TABLE empty (x);"
	     "CREATE TABLE neg (x); INSERT INTO neg VALUES (-5), (-1), (-3), (-10);"
	     "CREATE TABLE reals (x); INSERT INTO reals VALUES (0.5), (1.5), (2.5), (10.0);"
	     "CREATE TABLE mixed (x); INSERT INTO mixed VALUES (1), (2.5), ('4'), (6);"
	     "CREATE TABLE ten (x); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
	     "FROM c WHERE i < 10) INSERT INTO ten SELECT i FROM c;"
	     "CREATE TABLE madt (x); INSERT INTO madt VALUES (1), (1), (2), (2), (4), (6), (9);"
	     "CREATE TABLE txt (x); INSERT INTO txt VALUES (1), ('abc');"
	     "CREATE TABLE one (x); INSERT INTO one VALUES (42);"
	     "CREATE TABLE w (i, x); INSERT INTO w VALUES (1, 5), (2, 1), (3, 4), (4, 2), (5, 3);");

	/* median */
	expect("SELECT median(x) FROM odd", 2);
	expect("SELECT median(x) FROM even", 2.5);
	expect("SELECT median(x) FROM nulls", 2);
	expect("SELECT median(x) FROM neg", -4);
	expect("SELECT median(x) FROM reals", 2);
	expect("SELECT median(x) FROM mixed", 3.25);
	expect("SELECT median(x) FROM one", 42);
	expect_null("SELECT median(x) FROM empty");
	expect_null("SELECT median(x) FROM allnull");
	expect_error("SELECT median(x) FROM txt", "median(): takes numbers");

	/* percentile: numpy.percentile(range(1, 11), p) */
	expect("SELECT percentile(x, 0) FROM ten", 1);
	expect("SELECT percentile(x, 100) FROM ten", 10);
	expect("SELECT percentile(x, 25) FROM ten", 3.25);
	expect("SELECT percentile(x, 50) FROM ten", 5.5);
	expect("SELECT percentile(x, 33.3) FROM ten", 3.997);
	expect("SELECT percentile(x, 90.0) FROM ten", 9.1);
	expect("SELECT percentile(x, 10) FROM neg", -8.5);
	expect("SELECT percentile(x, 50) FROM nulls", 2);
	expect("SELECT percentile(x, 0) FROM one", 42);
	expect("SELECT percentile(x, 100) FROM one", 42);
	expect_null("SELECT percentile(x, 50) FROM empty");
	expect_error("SELECT percentile(x, 150) FROM ten", "from 0 to 100");
	expect_error("SELECT percentile(x, -0.5) FROM ten", "from 0 to 100");
	expect_error("SELECT percentile(x, NULL) FROM ten", "p is NULL");
	expect_error("SELECT percentile(x, x) FROM ten", "same on every row");
	expect_error("SELECT percentile(x, 'abc') FROM ten", "takes numbers");

	/* fixed percentiles */
	expect("SELECT p50(x) FROM ten", 5.5);
	expect("SELECT p90(x) FROM ten", 9.1);
	expect("SELECT p95(x) FROM ten", 9.55);
	expect("SELECT p99(x) FROM ten", 9.91);
	expect("SELECT p999(x) FROM ten", 9.991);
	expect("SELECT p99(x) FROM nulls", 2.98);
	expect_null("SELECT p999(x) FROM empty");

	/* mad: median(|x - median(x)|) */
	expect("SELECT mad(x) FROM madt", 1);
	expect("SELECT mad(x) FROM even", 1);
	expect("SELECT mad(x) FROM neg", 2);
	expect("SELECT mad(x) FROM one", 0);
	expect("SELECT mad(x) FROM nulls", 1);
	expect_null("SELECT mad(x) FROM empty");
	expect_null("SELECT mad(x) FROM allnull");

	/* robust_z */
	expect("SELECT robust_z(10, 2, 1)", 0.6745 * 8);
	expect("SELECT robust_z(-2, 2, 4)", -0.6745);
	expect("SELECT robust_z(2.0, 2, 0)", 0);
	expect("SELECT robust_z(3, 2, 0)", FQSQL_Z_CAP);
	expect("SELECT robust_z(1, 2, 0)", -FQSQL_Z_CAP);
	expect("SELECT robust_z(1e300, 0, 1e-300)", FQSQL_Z_CAP);
	expect_null("SELECT robust_z(NULL, 2, 1)");
	expect_null("SELECT robust_z(1, NULL, 1)");
	expect_null("SELECT robust_z(1, 2, NULL)");
	expect_error("SELECT robust_z(1, 2, -1)", "mad must be >= 0");
	/* the way analyses use it: one rank stands out */
	exec("CREATE TABLE ranks (rank, v); INSERT INTO ranks VALUES (0, 100), (1, 101), (2, 99),"
	     "(3, 100), (4, 180)");
	expect("SELECT rank + 0.0 FROM ranks, (SELECT median(v) AS m, mad(v) AS d FROM ranks) "
	       "WHERE abs(robust_z(v, m, d)) > 3.5",
	       4);

	/* GROUP BY and window use */
	expect("SELECT sum(m) FROM (SELECT x % 2 AS g, median(x) AS m FROM ten GROUP BY g)",
	       5 + 6);
	expect("SELECT sum(m * i) FROM (SELECT i, median(x) OVER (ORDER BY i ROWS BETWEEN 1 "
	       "PRECEDING AND 1 FOLLOWING) AS m FROM w)",
	       3 * 1 + 4 * 2 + 2 * 3 + 3 * 4 + 2.5 * 5);
	expect("SELECT sum(m * i) FROM (SELECT i, mad(x) OVER (ORDER BY i ROWS BETWEEN 1 "
	       "PRECEDING AND 1 FOLLOWING) AS m FROM w)",
	       2 * 1 + 1 * 2 + 1 * 3 + 1 * 4 + 0.5 * 5);
	expect("SELECT sum(m) FROM (SELECT percentile(x, 100) OVER (ORDER BY i) AS m FROM w)",
	       5 * 5);

	test_random();
	test_speed();
	sqlite3_close(db);
	return check_done("test_sql_func");
}
