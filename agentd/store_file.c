/* SPDX-License-Identifier: MIT */
/*
 * The store's door: decides from a read-only look whether --db is a file the
 * store may write (store_file.h). Opening it for writing first would already
 * change it: the store's pragmas switch a rollback-journal file to WAL and set
 * auto_vacuum before any table is looked at.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cause.h"
#include "fqsql.h"
#include "store_file.h"

#define NOT_OURS "agentd writes only into a trace file it created: point --db at a new path, " \
		 "or serve this file read-only with --no-trace"

/* 1 when the file starts with SQLite's magic, 0 when not, -errno. */
static int is_sqlite(const char *path)
{
	static const char magic[16] = "SQLite format 3";
	char buf[16];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return -errno;
	return n == (ssize_t)sizeof(buf) && !memcmp(buf, magic, sizeof(magic));
}

/* One integer from sql; 1 with *out, 0 for no row or NULL, -1 on error. */
static int one_int(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st = NULL;
	int rc, ret = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		ret = sqlite3_column_type(st, 0) == SQLITE_INTEGER;
		*out = sqlite3_column_int64(st, 0);
	} else if (rc == SQLITE_DONE) {
		ret = 0;
	}
	sqlite3_finalize(st);
	return ret;
}

int store_file_check(const char *path, int64_t *version, char **cause)
{
	sqlite3 *db = NULL;
	struct stat sb;
	int64_t objects = 0, v = 0;
	int rc, ret = 0;

	*version = 0;
	if (stat(path, &sb)) {
		if (errno == ENOENT)
			return 0; /* the store creates it */
		return fq_fail(cause, -errno, "cannot look at trace file '%s': %s", path,
			       strerror(errno));
	}
	if (!S_ISREG(sb.st_mode))
		return fq_fail(cause, -EPERM, "'%s' is not a regular file: %s", path, NOT_OURS);
	if (sb.st_size == 0)
		return 0;
	rc = is_sqlite(path);
	if (rc < 0)
		return fq_fail(cause, rc, "cannot read '%s': %s", path, strerror(-rc));
	if (!rc)
		return fq_fail(cause, -EPERM, "'%s' is not an SQLite file: %s", path, NOT_OURS);
	rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_busy_timeout(db, 1000);
		rc = one_int(db, "SELECT count(*) FROM sqlite_schema", &objects) < 0;
	}
	if (rc) {
		ret = fq_fail(cause, -EIO, "cannot read '%s' to check it is a fleetq trace: %s; %s",
			      path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), NOT_OURS);
		goto out;
	}
	if (!objects)
		goto out; /* an SQLite file without a table: empty */
	rc = one_int(db, "SELECT value FROM meta WHERE key = 'schema_version'", &v);
	if (rc <= 0) {
		ret = fq_fail(cause, -EPERM, "'%s' is not a fleetq trace file (%s): %s", path,
			      rc < 0 ? "it has no meta table of ours"
				     : "its meta table names no schema_version",
			      NOT_OURS);
		goto out;
	}
	*version = v;
	if (v > FQSQL_SCHEMA_VERSION)
		ret = fq_fail(cause, -ENOTSUP,
			      "trace file '%s' has schema version %lld, newer than this agent's "
			      "%d: upgrade agentd, or point --db at a new path",
			      path, (long long)v, FQSQL_SCHEMA_VERSION);
	else if (v < 1)
		ret = fq_fail(cause, -EPERM,
			      "'%s' is not a fleetq trace file (schema_version %lld): %s", path,
			      (long long)v, NOT_OURS);
	else if (v < 2) /* 2 is upgraded in place (fqsql_schema_apply) */
		ret = -ESTALE;
out:
	sqlite3_close(db);
	return ret;
}
