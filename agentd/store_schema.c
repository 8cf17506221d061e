/* SPDX-License-Identifier: MIT */
/*
 * The record kinds' tables (store_sql.c: rec_tables[], from which the writer's
 * INSERTs are built and its records bound) against the file's tables, made
 * from sql/schema.sql and its in-place upgrades. A column the file has and no
 * statement writes would be stored NULL in every row without a word; one a
 * statement names and the table lacks would fail every row. Both are refused
 * when the store opens, naming the table and the column. Every store_open
 * runs this, so a column added to schema.sql alone, or misnamed in
 * rec_tables[], fails the store tests.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "cause.h"
#include "store_int.h"

#define MAX_COLS 64
#define NAME_LEN 64

/* The columns of table, from PRAGMA table_info; how many, or -errno. */
static int table_cols(sqlite3 *db, const char *table, char (*out)[NAME_LEN])
{
	sqlite3_stmt *st = NULL;
	int n = 0, rc;

	rc = sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info(?1)", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return -EIO;
	sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < MAX_COLS) {
		const char *name = (const char *)sqlite3_column_text(st, 0);

		snprintf(out[n++], NAME_LEN, "%s", name ? name : "");
	}
	sqlite3_finalize(st);
	if (rc == SQLITE_ROW)
		return -E2BIG;
	return rc == SQLITE_DONE ? n : -EIO;
}

/* Whether a statement of tabs writes column of table (comms.destroyed_ns: the UPDATE's) */
static bool written(const struct rec_table *tabs, const char *table, const char *column)
{
	for (int k = REC_PROCESS; k <= REC_KIND_MAX; k++) {
		if (strcmp(tabs[k].name, table))
			continue;
		for (int i = 0; i < tabs[k].ncol; i++)
			if (!strcmp(tabs[k].col[i].name, column))
				return true;
	}
	return false;
}

/* One kind's table against the file's; 0, or -errno with *cause naming the table and column. */
static int check_table(sqlite3 *db, const char *path, const struct rec_table *tabs,
		       const struct rec_table *t, char **cause)
{
	char tcol[MAX_COLS][NAME_LEN];
	int n, i, j;

	n = table_cols(db, t->name, tcol);
	if (n < 0) {
		fq_fail(cause, 0, "trace store '%s': cannot read the columns of table %s: %s; "
				  "move the file aside and restart agentd", path, t->name,
			sqlite3_errmsg(db));
		return n;
	}
	if (!n) {
		fq_fail(cause, 0, "trace store '%s' has no table %s; move the file aside and "
				  "restart agentd", path, t->name);
		return -EINVAL;
	}
	/* an UPDATE (t->sql) writes some columns of a table an INSERT fills */
	for (i = 0; i < n && !t->sql; i++) {
		if (!written(tabs, t->name, tcol[i])) {
			fq_fail(cause, 0, "trace store '%s': column %s.%s is not written by this "
					  "agent; move the file aside and restart agentd",
				path, t->name, tcol[i]);
			return -EINVAL;
		}
	}
	for (j = 0; j < t->ncol; j++) {
		for (i = 0; i < n && strcmp(t->col[j].name, tcol[i]); i++)
			;
		if (i == n) {
			fq_fail(cause, 0, "trace store '%s': table %s has no column %s, which this "
					  "agent writes; move the file aside and restart agentd",
				path, t->name, t->col[j].name);
			return -EINVAL;
		}
	}
	return 0;
}

int store_schema_check(sqlite3 *db, const char *path, const struct rec_table *tabs,
		       char **cause)
{
	for (int k = REC_PROCESS; k <= REC_KIND_MAX; k++) {
		int err = check_table(db, path, tabs, &tabs[k], cause);

		if (err)
			return err;
	}
	return 0;
}
