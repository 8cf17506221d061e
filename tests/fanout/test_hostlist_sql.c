/* SPDX-License-Identifier: MIT */
/* hostlist(): the merge database folds node names back into one expression. */
#include <stdlib.h>

#include "check.h"
#include "merge.h"

static sqlite3 *db;

/* The one text value of sql ("NULL" for NULL, "ERR: ..." on error); caller frees. */
static char *one(const char *sql)
{
	sqlite3_stmt *st = NULL;
	char *s = NULL;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		s = strdup(sqlite3_errmsg(db));
	else if (sqlite3_step(st) != SQLITE_ROW)
		s = strdup("no row");
	else
		s = strdup(sqlite3_column_type(st, 0) == SQLITE_NULL
				   ? "NULL"
				   : (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return s;
}

#define ONE(sql, want)                                                                      \
	do {                                                                                \
		char *s_ = one(sql);                                                        \
		CHECK_STR(s_, want);                                                        \
		free(s_);                                                                   \
	} while (0)

int main(void)
{
	char *cause = NULL;
	struct merge *m = merge_new(&cause);

	CHECK(m != NULL);
	if (!m)
		return 1;
	db = merge_db(m);
	CHECK(sqlite3_exec(db, "CREATE TABLE results(node TEXT, n INTEGER); INSERT INTO results "
			       "VALUES ('gpu01', 5), ('gpu02', 5), ('gpu04', 5), ('gpu07', 5), "
			       "('gpu03', 4), (NULL, 5), ('login1', 4), ('gpu05', 5)",
			   NULL, NULL, NULL) == SQLITE_OK);
	ONE("SELECT hostlist(node) FROM results", "gpu[01-05,07],login1");
	/* dshbak -c: the nodes that gave each answer */
	ONE("SELECT group_concat(h || '=' || n, ' ') FROM (SELECT hostlist(node) AS h, n FROM "
	    "results GROUP BY n ORDER BY n)",
	    "gpu03,login1=4 gpu[01-02,04-05,07]=5");
	ONE("SELECT hostlist(node) FROM results WHERE n > 9", "NULL");
	ONE("SELECT hostlist(NULL)", "NULL");
	ONE("SELECT hostlist(x) FROM (SELECT '127.0.0.1:7077' AS x UNION ALL SELECT "
	    "'127.0.0.1:7078')",
	    "127.0.0.1:[7077-7078]");
	/* duplicates fold once */
	ONE("SELECT hostlist(x) FROM (SELECT 'a1' AS x UNION ALL SELECT 'a1' UNION ALL "
	    "SELECT 'a2')",
	    "a[1-2]");
	merge_free(m);
	return check_done(NULL);
}
