/* SPDX-License-Identifier: MIT */
/*
 * fanout/compat.c and merge_absorb(): which "no such table" a node's answer names, the
 * query with tables read as empty (after comments, into its own WITH clause, RECURSIVE or
 * not, or ahead of a bare SELECT) run on a trace without them and on one with them (the
 * shim hides them: only nodes without the table are asked so), and rows of a second
 * fan-out joining the first's in hostlist order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "check.h"
#include "compat.h"
#include "fqsql.h"
#include "merge.h"
#include "wire.h"

static void test_missing_table(void)
{
	char buf[64];

	CHECK_STR(compat_missing_table("no such table: gpu_busy", buf, sizeof(buf)), "gpu_busy");
	CHECK_STR(compat_missing_table("sql error: no such table: main.gpu_activity", buf,
				       sizeof(buf)),
		  "gpu_activity");
	CHECK_STR(compat_missing_table("no such table: GPU_SAMPLES", buf, sizeof(buf)),
		  "gpu_samples");
	CHECK(!compat_missing_table("no such table: gpu_busyy", buf, sizeof(buf)));
	CHECK(!compat_missing_table("no such column: gpu_busy", buf, sizeof(buf)));
	CHECK(!compat_missing_table("no such table: ", buf, sizeof(buf)));
	CHECK(!compat_missing_table(NULL, buf, sizeof(buf)));
}

/* A trace of this schema without gpu_busy and gpu_activity, one process row. */
static sqlite3 *old_trace(int drop)
{
	sqlite3 *db = NULL;
	char *cause = NULL;

	if (sqlite3_open(":memory:", &db) || fqsql_schema_apply(db, &cause) ||
	    sqlite3_exec(db, "INSERT INTO processes (pid, start_ns) VALUES (7, 1)", NULL, NULL,
			 NULL) ||
	    sqlite3_exec(db, "INSERT INTO gpu_busy (ts_ns, dur_ns, pid, busy_ns, nccl_ns) "
			     "VALUES (1, 200, 7, 50, 0)",
			 NULL, NULL, NULL) ||
	    (drop && sqlite3_exec(db, "DROP TABLE gpu_busy; DROP TABLE gpu_activity", NULL, NULL,
				  NULL))) {
		fprintf(stderr, "cannot make a trace: %s %s\n", db ? sqlite3_errmsg(db) : "",
			cause ? cause : "");
		exit(1);
	}
	free(cause);
	return db;
}

/* The single value the query gives on db, as text ("" for none, "ERR: ..." on error). */
static char *one(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	char *out;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL)) {
		if (asprintf(&out, "ERR: %s", sqlite3_errmsg(db)) < 0)
			out = NULL;
		return out;
	}
	out = strdup(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0)
			     ? (const char *)sqlite3_column_text(st, 0)
			     : "");
	sqlite3_finalize(st);
	return out;
}

static void check_query(sqlite3 *db, const char *sql, const char *const *tabs, size_t n,
			const char *want)
{
	int err = 1;
	char *q = compat_sql(sql, tabs, n, &err), *got;

	CHECK_EQ(err, 0);
	CHECK(q != NULL);
	if (!q)
		return;
	got = one(db, q);
	CHECK_MSG(got && !strcmp(got, want), "%s: got '%s', want '%s'", q, got ? got : "?", want);
	free(got);
	free(q);
}

static void test_sql(void)
{
	static const char *const both[] = { "gpu_busy", "gpu_activity" };
	static const char *const bad[] = { "gpu_busy", "nope" };
	sqlite3 *old = old_trace(1), *cur = old_trace(0);
	const char *with = "-- a node file\n/* its * comment */\n"
			   "WITH p AS (SELECT pid FROM processes)\n"
			   "SELECT (SELECT count(*) FROM p) || ',' || (SELECT count(*) FROM gpu_busy)"
			   " || ',' || (SELECT count(*) FROM gpu_activity)";
	const char *rec = "with recursive n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
			  "WHERE i < 3) SELECT (SELECT sum(i) FROM n) || ',' || "
			  "(SELECT count(*) FROM gpu_busy b JOIN processes USING (pid))";
	const char *bare = "  SELECT count(*) || ',' || coalesce(sum(busy_ns), 'x') FROM gpu_busy";
	char *q, *got;
	int err;

	/* without the shim the old trace refuses them */
	got = one(old, with);
	CHECK_MSG(got && strstr(got, "no such table"), "%s", got ? got : "?");
	free(got);
	check_query(old, with, both, 2, "1,0,0");
	check_query(old, rec, both, 1, "6,0");
	check_query(old, bare, both, 1, "0,x");
	/* the comment before the WITH stays where it was */
	q = compat_sql(with, both, 2, &err);
	CHECK(q && !strncmp(q, "-- a node file\n/* its * comment */\nWITH \"gpu_busy\"(", 49));
	free(q);
	/* a node with the table reads it unless it is read as empty */
	got = one(cur, bare);
	CHECK_STR(got, "1,50");
	free(got);
	check_query(cur, bare, both, 1, "0,x");
	/* a name the schema lacks */
	err = 0;
	CHECK(!compat_sql(bare, bad, 2, &err));
	CHECK_EQ(err, -ENOENT);
	sqlite3_close(old);
	sqlite3_close(cur);
}

/* A merge of n hosts, rows (node, a) of the given hosts (host k's value: 10 * k + row). */
static struct merge *filled(size_t nh, const size_t *hosts, size_t k, const char *const *names,
			    const char *const *cols, size_t ncols)
{
	char *cause = NULL;
	struct merge *m = merge_new(&cause);

	CHECK(m != NULL);
	CHECK_EQ(merge_hosts(m, nh), 0);
	for (size_t j = 0; j < k; j++)
		CHECK(merge_columns(m, hosts[j], 1, ncols, cols, &cause) >= 0);
	for (size_t j = 0; j < k; j++)
		for (int r = 0; r < 2; r++) {
			struct wire_value v[2] = { { .type = WIRE_INT, .i = 10 * (int64_t)hosts[j] + r },
						   { .type = WIRE_INT, .i = 1 } };

			CHECK_EQ(merge_row(m, hosts[j], names[hosts[j]], r, v, &cause), 0);
		}
	CHECK_EQ(merge_finish(m, &cause), 0);
	CHECK_EQ(merge_choose(m, 0, &cause), 0);
	free(cause);
	return m;
}

static void test_absorb(void)
{
	static const char *const names[] = { "h0", "h1", "h2", "h3" };
	static const char *const sub[] = { "h1", "h3" };
	static const char *const cols[] = { "a", "b" }, *const other[] = { "a", "c" };
	static const size_t first[] = { 0, 2 }, again[] = { 0, 1 }, map[] = { 1, 3 };
	struct merge *m = filled(4, first, 2, names, cols, 2);
	struct merge *m2 = filled(2, again, 2, sub, cols, 2), *m3;
	char *cause = NULL, *got;

	CHECK_EQ(merge_clock(m2, "h3", 5, 6, 7, &cause), 0);
	CHECK_EQ(merge_absorb(m, m2, map, 2, &cause), 0);
	/* host 1 of the second fan-out was its index 0: values 0 and 1 */
	got = one(merge_db(m), "SELECT group_concat(node || ':' || a, ' ') FROM "
			       "(SELECT * FROM results ORDER BY rowid)");
	CHECK_STR(got, "h0:0 h0:1 h1:0 h1:1 h2:20 h2:21 h3:10 h3:11");
	free(got);
	got = one(merge_db(m), "SELECT offset_ns || ',' || rtt_ns FROM clock WHERE node = 'h3'");
	CHECK_STR(got, "5,6");
	free(got);
	merge_free(m2);
	/* other columns than the first answers': refused, nothing added */
	m3 = filled(2, again, 2, sub, other, 2);
	CHECK_EQ(merge_absorb(m, m3, map, 2, &cause), -EINVAL);
	CHECK(cause && strstr(cause, "columns"));
	free(cause);
	cause = NULL;
	got = one(merge_db(m), "SELECT count(*) FROM results");
	CHECK_STR(got, "8");
	free(got);
	merge_free(m3);
	merge_free(m);
	/* nobody answered the first fan-out: the second's columns make results */
	m = filled(4, first, 0, names, cols, 2);
	CHECK(!merge_has_table(m));
	m2 = filled(2, again, 2, sub, cols, 2);
	CHECK_EQ(merge_absorb(m, m2, map, 2, &cause), 0);
	CHECK(merge_has_table(m));
	got = one(merge_db(m), "SELECT group_concat(node || ':' || b, ' ') FROM "
			       "(SELECT * FROM results ORDER BY rowid)");
	CHECK_STR(got, "h1:1 h1:1 h3:1 h3:1");
	free(got);
	merge_free(m2);
	merge_free(m);
	free(cause);
}

int main(void)
{
	test_missing_table();
	test_sql();
	test_absorb();
	return check_done("fanout_compat");
}
