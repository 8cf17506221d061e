/* SPDX-License-Identifier: MIT */
/* Tiny assertion helpers for the sql tests: count failures, keep going, exit 1 if any. */
#ifndef FLEETQ_TESTS_SQL_CHECK_H
#define FLEETQ_TESTS_SQL_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		check_count++;                                                             \
		if (!(cond)) {                                                             \
			check_failures++;                                                  \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
			fprintf(stderr, __VA_ARGS__);                                      \
			fputc('\n', stderr);                                               \
		}                                                                          \
	} while (0)

#define CHECK_NEAR(got, want, tol, what)                                                   \
	CHECK(fabs((got) - (want)) <= (tol), "%s: got %.17g, want %.17g", what, (double)(got), \
	      (double)(want))

static inline int check_done(const char *name)
{
	printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
	return check_failures ? 1 : 0;
}

#endif
