/* SPDX-License-Identifier: MIT */
/*
 * The checks of every C unit test in tests/: a failed check prints where it is and what
 * failed, the test goes on, and main returns check_done(), which is 1 when any check
 * failed. The counters are atomic: some tests check from several threads (the stand-in's
 * ranks, the store's writer and readers).
 */
#ifndef FLEETQ_TESTS_CHECK_H
#define FLEETQ_TESTS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A test built from several sources defines CHECK_SHARED before including this, and one
 * of them CHECK_SHARED_HERE too: every source then counts into the same two counters.
 */
#if defined(CHECK_SHARED_HERE)
_Atomic int check_failures;
_Atomic int check_count;
#elif defined(CHECK_SHARED)
extern _Atomic int check_failures;
extern _Atomic int check_count;
#else
static _Atomic int check_failures;
static _Atomic int check_count;
#endif

/* One failed check: "file:line: check failed: what", and the details when there are any. */
__attribute__((format(printf, 4, 5), unused)) static void
check_failed(const char *file, int line, const char *what, const char *fmt, ...)
{
	va_list ap;

	check_failures++;
	fprintf(stderr, "%s:%d: check failed: %s", file, line, what);
	if (fmt) {
		fputs(": ", stderr);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
	}
	fputc('\n', stderr);
}

#define CHECK(cond)                                                                        \
	do {                                                                               \
		check_count++;                                                             \
		if (!(cond))                                                               \
			check_failed(__FILE__, __LINE__, #cond, NULL);                     \
	} while (0)

/* CHECK with the details a reader needs to see why (printf format and arguments). */
#define CHECK_MSG(cond, ...)                                                               \
	do {                                                                               \
		check_count++;                                                             \
		if (!(cond))                                                               \
			check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__);              \
	} while (0)

/* Two integers, compared as long long (int64_t and narrower). */
#define CHECK_EQ(got, want)                                                                \
	do {                                                                               \
		long long g_ = (long long)(got), w_ = (long long)(want);                   \
		check_count++;                                                             \
		if (g_ != w_)                                                              \
			check_failed(__FILE__, __LINE__, #got " == " #want, "%lld, want %lld", \
				     g_, w_);                                              \
	} while (0)

/* Two strings, either of which may be NULL: equal when both are, or when strcmp says so. */
#define CHECK_STR(got, want)                                                               \
	do {                                                                               \
		const char *g_ = (got), *w_ = (want);                                      \
		check_count++;                                                             \
		if (!g_ != !w_ || (g_ && strcmp(g_, w_)))                                  \
			check_failed(__FILE__, __LINE__, #got " == " #want,                \
				     "'%s', want '%s'", g_ ? g_ : "(null)",                \
				     w_ ? w_ : "(null)");                                  \
	} while (0)

/* Two doubles within tol of each other; what names them. */
#define CHECK_NEAR(got, want, tol, what)                                                   \
	CHECK_MSG(fabs((got) - (want)) <= (tol), "%s: got %.17g, want %.17g", what,        \
		  (double)(got), (double)(want))

/* main's status: 0 when every check passed, else 1; name (may be NULL) says whose counts. */
__attribute__((unused)) static int check_done(const char *name)
{
	int failed = check_failures;

	if (name)
		printf("%s: %d checks, %d failed\n", name, (int)check_count, failed);
	else if (failed)
		fprintf(stderr, "%d check(s) failed\n", failed);
	return failed ? 1 : 0;
}

#endif
