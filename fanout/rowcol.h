/* SPDX-License-Identifier: MIT */
#ifndef FQ_ROWCOL_H
#define FQ_ROWCOL_H

/*
 * A result row's columns by name: the analyses' SQL files may gain or reorder columns (a
 * user adapts them), so the reports never read a column by position.
 */
#include <sqlite3.h>
#include <string.h>

/* The column's index, -1 when the row has none of that name. */
static inline int row_col(sqlite3_stmt *st, const char *name)
{
	for (int i = 0; i < sqlite3_column_count(st); i++)
		if (!strcmp(sqlite3_column_name(st, i), name))
			return i;
	return -1;
}

/* The column is there and not NULL. */
static inline int row_has(sqlite3_stmt *st, const char *name)
{
	int i = row_col(st, name);

	return i >= 0 && sqlite3_column_type(st, i) != SQLITE_NULL;
}

static inline double row_dbl(sqlite3_stmt *st, const char *name)
{
	int i = row_col(st, name);

	return i < 0 ? 0 : sqlite3_column_double(st, i);
}

/* NULL when the column is missing or NULL. */
static inline const char *row_txt(sqlite3_stmt *st, const char *name)
{
	int i = row_col(st, name);

	return i < 0 ? NULL : (const char *)sqlite3_column_text(st, i);
}

#endif
