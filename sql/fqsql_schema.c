/* SPDX-License-Identifier: MIT */
/* The trace schema: sql/schema.sql (embedded as fqsql_schema_sql) plus its version in meta. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cause.h"
#include "fqsql.h"

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
		ret = fq_fail(cause, -EIO, "cannot create the trace schema: %s", err);
		sqlite3_free(err);
		return ret;
	}
	if (current_version(db, &version) < 0) {
		ret = fq_fail(cause, -EIO, "cannot read the trace schema version: %s",
			      sqlite3_errmsg(db));
		goto out;
	}
	if (version > FQSQL_SCHEMA_VERSION) {
		ret = fq_fail(cause, -ENOTSUP,
			      "trace file has schema version %d, newer than this build's %d: "
			      "upgrade fleetq", version, FQSQL_SCHEMA_VERSION);
		goto out;
	}
	/*
	 * Versions 2 to 4 differ from 5 by columns at the end of collectives, comms and
	 * nccl_kernels (and by a new table, which the schema text below creates): added in
	 * place (old rows have them NULL), so an agent upgrade keeps the file.
	 */
	if (version >= 2 && version <= 4) {
		const char *add = version == 2 ?
			"ALTER TABLE collectives ADD COLUMN sync_ns INTEGER; "
			"ALTER TABLE collectives ADD COLUMN gap_ns INTEGER; "
			"ALTER TABLE collectives ADD COLUMN cpu_ns INTEGER; "
			"ALTER TABLE comms ADD COLUMN nccl_hash TEXT" :
			version == 3 ?
			"ALTER TABLE collectives ADD COLUMN cpu_ns INTEGER; "
			"ALTER TABLE comms ADD COLUMN nccl_hash TEXT" :
			"ALTER TABLE nccl_kernels ADD COLUMN peer INTEGER";

		if (sqlite3_exec(db, add, NULL, NULL, &err) != SQLITE_OK) {
			ret = fq_fail(cause,
				      sqlite3_errcode(db) == SQLITE_READONLY ? -EROFS : -EIO,
				      "cannot add the version %d columns to a version %d trace: %s",
				      FQSQL_SCHEMA_VERSION, version, err ? err : sqlite3_errmsg(db));
			sqlite3_free(err);
			goto out;
		}
		version = FQSQL_SCHEMA_VERSION;
	}
	if (version && version < FQSQL_SCHEMA_VERSION) {
		/* tables of another shape under the same names: never mix the two */
		ret = fq_fail(cause, -ESTALE,
			      "trace file has schema version %d, older than this build's %d: "
			      "move it aside to start a new file", version, FQSQL_SCHEMA_VERSION);
		goto out;
	}
	snprintf(sql, sizeof(sql),
		 "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', %d)",
		 FQSQL_SCHEMA_VERSION);
	if (sqlite3_exec(db, fqsql_schema_sql, NULL, NULL, &err) != SQLITE_OK ||
	    sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		ret = fq_fail(cause, sqlite3_errcode(db) == SQLITE_READONLY ? -EROFS : -EIO,
			      "cannot create the trace schema: %s", err ? err : sqlite3_errmsg(db));
		sqlite3_free(err);
	}
out:
	if (ret < 0)
		sqlite3_exec(db, "ROLLBACK TO fqsql_schema", NULL, NULL, NULL);
	sqlite3_exec(db, "RELEASE fqsql_schema", NULL, NULL, NULL);
	return ret;
}
