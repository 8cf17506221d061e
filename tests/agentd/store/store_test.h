/* SPDX-License-Identifier: MIT */
/* Small helpers shared by the store and IB poller tests; their checks are tests/check.h's. */
#ifndef FLEETQ_TEST_STORE_H
#define FLEETQ_TEST_STORE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "../../check.h"

#define DIE(...)                                                                          \
	do {                                                                              \
		fprintf(stderr, __VA_ARGS__);                                             \
		fputc('\n', stderr);                                                      \
		exit(1);                                                                  \
	} while (0)

/* A fresh directory under $TMPDIR (or /tmp); the caller removes it. */
static inline char *test_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	char *d;

	if (asprintf(&d, "%s/fleetq-store-XXXXXX", base && *base ? base : "/tmp") < 0 ||
	    !mkdtemp(d))
		DIE("cannot make a temporary directory");
	return d;
}

static inline void test_rmrf(const char *dir)
{
	char *cmd;

	if (asprintf(&cmd, "rm -rf '%s'", dir) >= 0) {
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", dir);
		free(cmd);
	}
}

/* A reader's connection, as queries would open it. */
static inline sqlite3 *test_reader(const char *path)
{
	sqlite3 *db = NULL;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
		DIE("cannot open %s read-only: %s", path, sqlite3_errmsg(db));
	sqlite3_busy_timeout(db, 5000);
	return db;
}

/* First column of the first row of sql, as an int64; REC_NULL-like INT64_MIN for NULL. */
static inline int64_t test_i64(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	int64_t v = INT64_MIN;
	int rc;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		DIE("cannot prepare '%s': %s", sql, sqlite3_errmsg(db));
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
		v = sqlite3_column_int64(st, 0);
	else if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		DIE("'%s' failed: %s", sql, sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return v;
}

#endif
