/* SPDX-License-Identifier: MIT */
/* The trace schema: sql/schema.sql (embedded as fqsql_schema_sql) plus its version in meta. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqsql.h"

__attribute__((format(printf, 3, 4)))
static int set_cause(char **cause, int err, const char *fmt, ...)
{
	va_list ap;

	if (cause) {
		va_start(ap, fmt);
		if (vasprintf(cause, fmt, ap) < 0)
			*cause = NULL;
		va_end(ap);
	}
	return err;
}

/* The schema_version a file records, 0 when it has none (new file). */
static int current_version(sqlite3 *db, int *version)
{
	sqlite3_stmt *st = NULL;
	int rc;

	*version = 0;
	rc = sqlite3_prepare_v2(db,
				"SELECT value FROM meta WHERE key = 'schema_version' AND EXISTS "
				"(SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'meta')",
				-1, &st, NULL);
	if (rc != SQLITE_OK) {
		/* no meta table yet: prepare fails on the missing table */
		sqlite3_finalize(st);
		return 0;
	}
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		*version = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -EIO;
}

int fqsql_schema_apply(sqlite3 *db, char **cause)
{
	char *err = NULL;
	int version = 0, ret = 0;
	char sql[128];

	if (cause)
		*cause = NULL;
	if (!db)
		return -EINVAL;
	/* a savepoint works both inside and outside the caller's transaction */
	if (sqlite3_exec(db, "SAVEPOINT fqsql_schema", NULL, NULL, &err) != SQLITE_OK) {
		ret = set_cause(cause, -EIO, "cannot create the trace schema: %s", err);
		sqlite3_free(err);
		return ret;
	}
	if (current_version(db, &version) < 0) {
		ret = set_cause(cause, -EIO, "cannot read the trace schema version: %s",
				sqlite3_errmsg(db));
		goto out;
	}
	if (version > FQSQL_SCHEMA_VERSION) {
		ret = set_cause(cause, -ENOTSUP,
				"trace file has schema version %d, newer than this build's %d: "
				"upgrade fleetq", version, FQSQL_SCHEMA_VERSION);
		goto out;
	}
	/*
	 * Version 2 differs from 3 by two columns at the end of collectives: added in
	 * place (old rows have them NULL), so an agent upgrade keeps the file.
	 */
	if (version == 2) {
		if (sqlite3_exec(db, "ALTER TABLE collectives ADD COLUMN sync_ns INTEGER; "
				 "ALTER TABLE collectives ADD COLUMN gap_ns INTEGER", NULL, NULL,
				 &err) != SQLITE_OK) {
			ret = set_cause(cause,
					sqlite3_errcode(db) == SQLITE_READONLY ? -EROFS : -EIO,
					"cannot add collectives.sync_ns and gap_ns to a version 2 "
					"trace: %s", err ? err : sqlite3_errmsg(db));
			sqlite3_free(err);
			goto out;
		}
		version = FQSQL_SCHEMA_VERSION;
	}
	if (version && version < FQSQL_SCHEMA_VERSION) {
		/* tables of another shape under the same names: never mix the two */
		ret = set_cause(cause, -ESTALE,
				"trace file has schema version %d, older than this build's %d: "
				"move it aside to start a new file", version, FQSQL_SCHEMA_VERSION);
		goto out;
	}
	snprintf(sql, sizeof(sql),
		 "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', %d)",
		 FQSQL_SCHEMA_VERSION);
	if (sqlite3_exec(db, fqsql_schema_sql, NULL, NULL, &err) != SQLITE_OK ||
	    sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		ret = set_cause(cause, sqlite3_errcode(db) == SQLITE_READONLY ? -EROFS : -EIO,
				"cannot create the trace schema: %s", err ? err : sqlite3_errmsg(db));
		sqlite3_free(err);
	}
out:
	if (ret < 0)
		sqlite3_exec(db, "ROLLBACK TO fqsql_schema", NULL, NULL, NULL);
	sqlite3_exec(db, "RELEASE fqsql_schema", NULL, NULL, NULL);
	return ret;
}
