/* SPDX-License-Identifier: MIT */
/*
 * The writer's INSERTs (store_sql.c) against the file's tables: the schema is
 * written in sql/schema.sql (and its in-place upgrades), in records.h, in the
 * INSERT text and in the binding. A column the schema has and no INSERT names
 * would be stored NULL in every row without a word; one an INSERT names and
 * the table lacks would fail every row. Both are refused when the store opens,
 * naming the table and the column. Every store_open runs this, so a column
 * added to schema.sql alone fails the store tests.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "cause.h"
#include "store_int.h"

#define MAX_COLS 64
#define NAME_LEN 64

/* Columns that no INSERT writes, on purpose. */
static const struct {
	const char *table, *column;
} unwritten[] = {
	{ "comms", "destroyed_ns" }, /* set by the comm-destroy UPDATE */
};

struct insert_cols {
	char *buf; /* a copy of the text after INTO, cut into the names below */
	const char *table;
	const char *col[MAX_COLS];
	int ncol;
};

/* Cuts "INSERT [OR x] INTO t (a, b, ...) ..." into t and its column list. 0 or -errno. */
static int insert_parse(const char *sql, struct insert_cols *in)
{
	const char *into = strstr(sql, " INTO ");
	char *p, *end, *save = NULL, *w;

	if (!into)
		return -EINVAL;
	in->buf = strdup(into + strlen(" INTO "));
	if (!in->buf)
		return -ENOMEM;
	in->table = p = in->buf;
	p = strchr(p, ' ');
	if (!p || p[1] != '(' || !(end = strchr(p, ')')))
		return -EINVAL;
	*p = '\0';
	*end = '\0';
	for (w = strtok_r(p + 2, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		if (in->ncol == MAX_COLS)
			return -E2BIG;
		in->col[in->ncol++] = w;
	}
	return in->ncol ? 0 : -EINVAL;
}

static int is_unwritten(const char *table, const char *column)
{
	for (size_t i = 0; i < sizeof(unwritten) / sizeof(unwritten[0]); i++)
		if (!strcmp(unwritten[i].table, table) && !strcmp(unwritten[i].column, column))
			return 1;
	return 0;
}

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

/* One INSERT against its table; 0, or -errno with *cause naming the table and column. */
static int check_insert(sqlite3 *db, const char *path, const char *sql, char **cause)
{
	struct insert_cols in = { 0 };
	char tcol[MAX_COLS][NAME_LEN];
	int n, i, j, err;

	err = insert_parse(sql, &in);
	if (err) {
		fq_fail(cause, 0, "trace store '%s': cannot read the column list of '%.40s' "
				  "(a defect of this agent: report it)", path, sql);
		goto cleanup;
	}
	n = table_cols(db, in.table, tcol);
	if (n < 0) {
		err = n;
		fq_fail(cause, 0, "trace store '%s': cannot read the columns of table %s: %s; "
				  "move the file aside and restart agentd", path, in.table,
			sqlite3_errmsg(db));
		goto cleanup;
	}
	err = -EINVAL;
	if (!n) {
		fq_fail(cause, 0, "trace store '%s' has no table %s; move the file aside and "
				  "restart agentd", path, in.table);
		goto cleanup;
	}
	for (i = 0; i < n; i++) {
		for (j = 0; j < in.ncol && strcmp(in.col[j], tcol[i]); j++)
			;
		if (j == in.ncol && !is_unwritten(in.table, tcol[i])) {
			fq_fail(cause, 0, "trace store '%s': column %s.%s is not written by this "
					  "agent; move the file aside and restart agentd",
				path, in.table, tcol[i]);
			goto cleanup;
		}
	}
	for (j = 0; j < in.ncol; j++) {
		for (i = 0; i < n && strcmp(in.col[j], tcol[i]); i++)
			;
		if (i == n) {
			fq_fail(cause, 0, "trace store '%s': table %s has no column %s, which this "
					  "agent writes; move the file aside and restart agentd",
				path, in.table, in.col[j]);
			goto cleanup;
		}
	}
	err = 0;
cleanup:
	free(in.buf);
	return err;
}

int store_schema_check(sqlite3 *db, const char *path, char **cause)
{
	for (int i = 0; i < ST_MAX; i++) {
		int err;

		if (strncmp(stmt_sql[i], "INSERT ", strlen("INSERT ")))
			continue;
		err = check_insert(db, path, stmt_sql[i], cause);
		if (err)
			return err;
	}
	return 0;
}
