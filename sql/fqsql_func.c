/* SPDX-License-Identifier: MIT */
/*
 * The statistics functions users type: median, percentile, p50..p999, mad
 * (aggregates and window functions) and robust_z (scalar).
 *
 * Every aggregate collects its non-NULL inputs as doubles in one growable
 * array and answers with quickselect, O(n) instead of a sort. The array is
 * allocated with sqlite3_malloc so the connection's heap limit applies to it.
 * Definitions (the same as numpy's default 'linear' method) are in
 * docs/schema.md; keep the two in agreement.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fqsql.h"

struct fq_agg {
	double *v;
	sqlite3_int64 n;
	sqlite3_int64 cap;
	double p;  /* percentile(): the p of the first row, which all rows must share */
	int p_set;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void swapd(double *a, double *b)
{
	double t = *a;

	*a = *b;
	*b = t;
}

/*
 * Moves the k-th smallest of a[0..n) to a[k], smaller ones before it and
 * larger ones after it. Median-of-three quickselect with Hoare partitioning
 * (runs of equal values split evenly); if an adversarial input makes it
 * recurse too deep, the rest is sorted, so the worst case is O(n log n).
 */
static void select_kth(double *a, sqlite3_int64 n, sqlite3_int64 k)
{
	sqlite3_int64 lo = 0, hi = n - 1;
	int budget = 16;

	for (sqlite3_int64 m = n; m > 1; m >>= 1)
		budget += 2;
	while (hi > lo) {
		sqlite3_int64 mid = lo + (hi - lo) / 2, i = lo, j = hi;
		double pivot;

		if (budget-- == 0) {
			qsort(a + lo, hi - lo + 1, sizeof(*a), cmp_double);
			return;
		}
		if (a[mid] < a[lo])
			swapd(&a[mid], &a[lo]);
		if (a[hi] < a[lo])
			swapd(&a[hi], &a[lo]);
		if (a[hi] < a[mid])
			swapd(&a[hi], &a[mid]);
		pivot = a[mid];
		while (i <= j) {
			while (a[i] < pivot)
				i++;
			while (a[j] > pivot)
				j--;
			if (i <= j) {
				swapd(&a[i], &a[j]);
				i++;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return;
	}
}

/* numpy's _lerp: the second form for t >= 0.5 keeps results monotonic in t. */
static double lerp(double a, double b, double t)
{
	double d = b - a;

	if (t == 0 || a == b)
		return a;
	return t >= 0.5 ? b - d * (1 - t) : a + d * t;
}

/*
 * percentile(x, p) over a[0..n), n > 0, p in [0, 100]: with the values
 * sorted, h = (n - 1) * p / 100 and the answer interpolates linearly between
 * the values at floor(h) and floor(h) + 1. Reorders a.
 */
static double quantile(double *a, sqlite3_int64 n, double p)
{
	double h = (p / 100.0) * (double)(n - 1);
	sqlite3_int64 lo = (sqlite3_int64)floor(h);
	double t = h - (double)lo, next;

	if (lo >= n - 1)
		lo = n - 1, t = 0;
	select_kth(a, n, lo);
	if (t == 0)
		return a[lo];
	/* select_kth left everything after lo >= a[lo]: the next rank is their minimum */
	next = a[lo + 1];
	for (sqlite3_int64 i = lo + 2; i < n; i++)
		if (a[i] < next)
			next = a[i];
	return lerp(a[lo], next, t);
}

/* mad over a[0..n): median(|x - median(x)|), unscaled. Overwrites a. */
static double mad_of(double *a, sqlite3_int64 n)
{
	double med = quantile(a, n, 50);

	for (sqlite3_int64 i = 0; i < n; i++)
		a[i] = fabs(a[i] - med);
	return quantile(a, n, 50);
}

/* Reads one input as a double; 1 when it is a number, 0 for NULL, -1 (error set) otherwise. */
static int arg_double(sqlite3_context *ctx, sqlite3_value *v, const char *fn, double *out)
{
	switch (sqlite3_value_numeric_type(v)) {
	case SQLITE_INTEGER:
		*out = (double)sqlite3_value_int64(v);
		return 1;
	case SQLITE_FLOAT:
		*out = sqlite3_value_double(v);
		return isnan(*out) ? 0 : 1;
	case SQLITE_NULL:
		return 0;
	default: {
		char *msg = sqlite3_mprintf("%s(): takes numbers, got %s '%.32s'", fn,
					    sqlite3_value_type(v) == SQLITE_BLOB ? "blob" : "text",
					    sqlite3_value_type(v) == SQLITE_BLOB ?
						    "..." : (const char *)sqlite3_value_text(v));

		if (msg) {
			sqlite3_result_error(ctx, msg, -1);
			sqlite3_free(msg);
		} else {
			sqlite3_result_error_nomem(ctx);
		}
		return -1;
	}
	}
}

static const char *fn_name(sqlite3_context *ctx)
{
	const double *p = sqlite3_user_data(ctx);

	if (!p)
		return "median";
	if (*p < 0)
		return *p == -1 ? "percentile" : "mad";
	if (*p == 50)
		return "p50";
	if (*p == 90)
		return "p90";
	if (*p == 95)
		return "p95";
	if (*p == 99)
		return "p99";
	return "p999";
}

static void agg_push(sqlite3_context *ctx, struct fq_agg *g, double x)
{
	if (g->n == g->cap) {
		sqlite3_int64 cap = g->cap ? g->cap * 2 : 64;
		double *v = sqlite3_realloc64(g->v, (sqlite3_uint64)cap * sizeof(*v));

		if (!v) {
			sqlite3_result_error_nomem(ctx);
			return;
		}
		g->v = v;
		g->cap = cap;
	}
	g->v[g->n++] = x;
}

/* Checks p of percentile(x, p): a number in [0, 100], the same on every row. */
static int check_p(sqlite3_context *ctx, struct fq_agg *g, sqlite3_value *pv)
{
	double p;
	char *msg = NULL;
	int r = arg_double(ctx, pv, "percentile", &p);

	if (r < 0)
		return -1;
	if (r == 0)
		msg = sqlite3_mprintf("percentile(x, p): p is NULL; give a number from 0 to 100");
	else if (!(p >= 0 && p <= 100))
		msg = sqlite3_mprintf("percentile(x, p): p must be from 0 to 100, got %g", p);
	else if (g->p_set && p != g->p)
		msg = sqlite3_mprintf("percentile(x, p): p must be the same on every row "
				      "(got %g, then %g)", g->p, p);
	if (r == 0 || msg) {
		if (msg) {
			sqlite3_result_error(ctx, msg, -1);
			sqlite3_free(msg);
		} else {
			sqlite3_result_error_nomem(ctx);
		}
		return -1;
	}
	g->p = p;
	g->p_set = 1;
	return 0;
}

static void agg_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	struct fq_agg *g = sqlite3_aggregate_context(ctx, sizeof(*g));
	double x;
	int r;

	if (!g) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	if (argc == 2 && check_p(ctx, g, argv[1]) < 0)
		return;
	r = arg_double(ctx, argv[0], fn_name(ctx), &x);
	if (r > 0)
		agg_push(ctx, g, x);
}

/* Window frames shrink one row at a time: drop one copy of the value that leaves. */
static void agg_inverse(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	struct fq_agg *g = sqlite3_aggregate_context(ctx, sizeof(*g));
	double x;

	if (!g || arg_double(ctx, argv[0], fn_name(ctx), &x) <= 0)
		return;
	for (sqlite3_int64 i = 0; i < g->n; i++) {
		if (g->v[i] == x) {
			g->v[i] = g->v[--g->n];
			return;
		}
	}
}

/* The fixed p of p50..p999, or of median; percentile() takes it from the rows. */
static double agg_p(sqlite3_context *ctx, const struct fq_agg *g)
{
	const double *p = sqlite3_user_data(ctx);

	if (!p)
		return 50;
	return *p == -1 ? g->p : *p;
}

static void agg_result(sqlite3_context *ctx, int final)
{
	struct fq_agg *g = sqlite3_aggregate_context(ctx, 0);
	const double *p = sqlite3_user_data(ctx);

	if (!g || g->n == 0) {
		sqlite3_result_null(ctx);
	} else if (p && *p == -2) {
		/* mad overwrites its input: a window frame needs it again for the next row */
		double *a = g->v;

		if (!final) {
			a = sqlite3_malloc64((sqlite3_uint64)g->n * sizeof(*a));
			if (!a) {
				sqlite3_result_error_nomem(ctx);
				return;
			}
			memcpy(a, g->v, (size_t)g->n * sizeof(*a));
		}
		sqlite3_result_double(ctx, mad_of(a, g->n));
		if (a != g->v)
			sqlite3_free(a);
	} else {
		/* quantile reorders the values, which a window frame does not mind */
		sqlite3_result_double(ctx, quantile(g->v, g->n, agg_p(ctx, g)));
	}
	if (final && g) {
		sqlite3_free(g->v);
		g->v = NULL;
		g->n = g->cap = 0;
	}
}

static void agg_value(sqlite3_context *ctx)
{
	agg_result(ctx, 0);
}

static void agg_final(sqlite3_context *ctx)
{
	agg_result(ctx, 1);
}

/*
 * robust_z(x, median, mad) = 0.6745 * (x - median) / mad, the Iglewicz-Hoaglin
 * modified z-score. MAD == 0 means more than half the ranks agree exactly;
 * a rank that differs from them is then as far out as can be, so it gets
 * +-FQSQL_Z_CAP (and flags under any threshold) and a rank equal to the median
 * gets 0. Results are clamped to +-FQSQL_Z_CAP so they stay finite in JSON.
 */
static void robust_z(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	double v[3], z;

	for (int i = 0; i < 3; i++) {
		int r = arg_double(ctx, argv[i], "robust_z", &v[i]);

		if (r < 0)
			return;
		if (r == 0) {
			sqlite3_result_null(ctx);
			return;
		}
	}
	if (v[2] < 0) {
		sqlite3_result_error(ctx, "robust_z(x, median, mad): mad must be >= 0", -1);
		return;
	}
	if (v[2] == 0)
		z = v[0] == v[1] ? 0 : copysign(FQSQL_Z_CAP, v[0] - v[1]);
	else
		z = FQSQL_Z_K * (v[0] - v[1]) / v[2];
	if (z > FQSQL_Z_CAP)
		z = FQSQL_Z_CAP;
	else if (z < -FQSQL_Z_CAP)
		z = -FQSQL_Z_CAP;
	sqlite3_result_double(ctx, z);
}

int fqsql_register(sqlite3 *db)
{
	/* user data: NULL = median, -1 = percentile (p from the rows), -2 = mad, else a fixed p */
	static const double p_pct = -1, p_mad = -2;
	static const struct {
		const char *name;
		int nargs;
		const double p;
	} fixed[] = {
		{ "p50", 1, 50 }, { "p90", 1, 90 }, { "p95", 1, 95 },
		{ "p99", 1, 99 }, { "p999", 1, 99.9 },
	};
	const int flags = SQLITE_UTF8 | SQLITE_INNOCUOUS;
	int rc;

	if (!db)
		return -EINVAL;
	rc = sqlite3_create_window_function(db, "median", 1, flags, NULL, agg_step, agg_final,
					    agg_value, agg_inverse, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_window_function(db, "percentile", 2, flags, (void *)&p_pct,
						    agg_step, agg_final, agg_value, agg_inverse,
						    NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_window_function(db, "mad", 1, flags, (void *)&p_mad, agg_step,
						    agg_final, agg_value, agg_inverse, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < sizeof(fixed) / sizeof(fixed[0]); i++)
		rc = sqlite3_create_window_function(db, fixed[i].name, fixed[i].nargs, flags,
						    (void *)&fixed[i].p, agg_step, agg_final,
						    agg_value, agg_inverse, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function(db, "robust_z", 3, flags | SQLITE_DETERMINISTIC, NULL,
					     robust_z, NULL, NULL);
	if (rc == SQLITE_NOMEM)
		return -ENOMEM;
	return rc == SQLITE_OK ? 0 : -EINVAL;
}
