/* SPDX-License-Identifier: MIT */
/*
 * fleetq gate: the planner. Which trace tables and columns the metrics read (found by
 * preparing each metric's SQL under an authorizer), the node SQL that fetches them, and
 * --show-sql.
 */
#include "gate_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coverage.h"
#include "fqsql.h"
#include "sqlfiles.h"
#include "strbuf.h"

/*
 * The job's processes, each over its own life, not its pid (pids are reused): the CTE jobproc
 * of sql/analysis/jobproc.sql, the analyses' own rule, loaded as they load it (an adapted copy
 * in $FLEETQ_SQL_DIR counts here too). It reads the job from prm.job: here ?2. The file holds
 * one CTE of a WITH list, ending in a comma; here it ends the list, so the comma goes, and so
 * do the file's comment lines around it (the SQL goes to every node).
 * Appends "WITH prm ..., jobproc ... " to b; 0, or -errno with *cause.
 */
static int job_proc(struct strbuf *b, char **cause)
{
	char *origin = NULL, *s = sqlfile_load("jobproc.sql", &origin, cause);
	const char *p = s;
	size_t n;
	int err = 0;

	if (!s)
		return -(errno ? errno : ENOENT);
	/* the leading comment lines (and blank ones) */
	while (*p == '-' || *p == '\n' || *p == '\r' || *p == ' ' || *p == '\t') {
		if (*p == '-' && p[1] != '-')
			break;
		p += *p == '-' ? strcspn(p, "\n") : 1;
	}
	/* the trailing ones, then the comma */
	n = strlen(p);
	for (;;) {
		const char *bol;

		while (n && strchr(" \t\r\n", p[n - 1]))
			n--;
		for (bol = p + n; bol > p && bol[-1] != '\n'; bol--)
			;
		if (strncmp(bol, "--", 2))
			break;
		n = (size_t)(bol - p);
	}
	if (!n || p[n - 1] != ',') {
		err = fq_fail(cause, -EINVAL, "%s: want one CTE ending in ',' (jobproc AS (...),)",
			      origin ? origin : "jobproc.sql");
		goto out;
	}
	sb_puts(b, "WITH prm AS (SELECT ?2 AS job),\n");
	sb_add(b, p, n - 1);
	sb_puts(b, "\n");
out:
	free(origin);
	free(s);
	return err;
}

static int read_auth(void *arg, int action, const char *a1, const char *a2, const char *db,
		     const char *trigger)
{
	struct gate *g = arg;

	(void)db;
	(void)trigger;
	if (action != SQLITE_READ || !a1 || !a2)
		return SQLITE_OK;
	for (int i = 0; i < g->nt; i++)
		if (!strcasecmp(g->t[i].name, a1))
			for (int k = 0; k < g->t[i].ncols; k++)
				if (!strcasecmp(g->t[i].cols[k], a2))
					g->t[i].need |= 1u << k;
	return SQLITE_OK;
}

static int need_col(struct table *t, const char *col)
{
	for (int k = 0; k < t->ncols; k++)
		if (!strcmp(t->cols[k], col)) {
			t->need |= 1u << k;
			return 1;
		}
	return 0;
}

static struct table *table_named(struct gate *g, const char *name)
{
	for (int i = 0; i < g->nt; i++)
		if (!strcmp(g->t[i].name, name))
			return &g->t[i];
	return NULL;
}

/*
 * count(*) reads a table without reading a column, so the authorizer never hears of it:
 * the tables a statement opens are in its program (OpenRead's root page).
 */
static int tables_opened(struct gate *g, sqlite3 *db, const char *sql)
{
	sqlite3_stmt *ex = NULL, *nm = NULL;
	char *q = sqlite3_mprintf("EXPLAIN %s", sql);
	int ret = -1;

	if (!q || sqlite3_prepare_v2(db, q, -1, &ex, NULL) ||
	    sqlite3_prepare_v2(db, "SELECT tbl_name FROM main.sqlite_schema WHERE rootpage = ?", -1,
			       &nm, NULL)) {
		ret = gate_error("cannot explain a metric: %s", sqlite3_errmsg(db));
		goto out;
	}
	while (sqlite3_step(ex) == SQLITE_ROW) {
		const char *op = (const char *)sqlite3_column_text(ex, 1);
		struct table *t;

		if (!op || strcmp(op, "OpenRead") || sqlite3_column_int(ex, 4) != 0)
			continue;
		sqlite3_bind_int64(nm, 1, sqlite3_column_int64(ex, 3));
		if (sqlite3_step(nm) == SQLITE_ROW) {
			t = table_named(g, (const char *)sqlite3_column_text(nm, 0));
			/* any one column gives the right row count */
			if (t && !t->need && !need_col(t, "ts_ns"))
				t->need = 1;
		}
		sqlite3_reset(nm);
	}
out:
	sqlite3_free(q);
	sqlite3_finalize(ex);
	sqlite3_finalize(nm);
	return ret;
}

/*
 * Prepares every metric against an empty database of the trace schema (each table with a
 * node column, plus clock), recording with an authorizer which columns it reads: those are
 * what the fan-outs fetch. A metric that does not prepare fails here, once.
 */
int gate_plan_tables(struct gate *g)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL, *cs = NULL;
	char *cause = NULL;
	int ret = FQ_EXIT_USAGE, r;

	if (sqlite3_open(":memory:", &db) != SQLITE_OK || fqsql_register(db) ||
	    fqsql_schema_apply(db, &cause) ||
	    sqlite3_prepare_v2(db, "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY "
				   "rowid", -1, &st, NULL) ||
	    sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info(?)", -1, &cs, NULL)) {
		gate_error("cannot load the trace schema: %s", cause ? cause : sqlite3_errmsg(db));
		goto out;
	}
	while (sqlite3_step(st) == SQLITE_ROW && g->nt < MAX_TABLES) {
		struct table *t = &g->t[g->nt++];

		t->name = strdup((const char *)sqlite3_column_text(st, 0));
		if (!t->name)
			goto oom;
		sqlite3_bind_text(cs, 1, t->name, -1, SQLITE_STATIC);
		while (sqlite3_step(cs) == SQLITE_ROW && t->ncols < MAX_COLS) {
			t->cols[t->ncols] = strdup((const char *)sqlite3_column_text(cs, 0));
			if (!t->cols[t->ncols])
				goto oom;
			t->has_ts |= !strcmp(t->cols[t->ncols], "ts_ns");
			t->has_pid |= !strcmp(t->cols[t->ncols], "pid");
			t->ncols++;
		}
		sqlite3_reset(cs);
	}
	sqlite3_finalize(st);
	st = NULL;
	for (int i = 0; i < g->nt; i++) {
		char *sql = sqlite3_mprintf("ALTER TABLE \"%w\" ADD COLUMN node TEXT", g->t[i].name);

		if (!sql || sqlite3_exec(db, sql, NULL, NULL, NULL)) {
			sqlite3_free(sql);
			gate_error("cannot load the trace schema: %s", sqlite3_errmsg(db));
			goto out;
		}
		sqlite3_free(sql);
	}
	if (sqlite3_exec(db, "CREATE TABLE clock(node TEXT, offset_ns INTEGER, rtt_ns INTEGER, samples "
			 "INTEGER)",
			 NULL, NULL, NULL))
		goto oom;
	sqlite3_set_authorizer(db, read_auth, g);
	for (size_t i = 0; i < g->nm; i++) {
		const char *tail = NULL;

		if (sqlite3_prepare_v2(db, g->m[i].sql, -1, &st, &tail) != SQLITE_OK || !st) {
			gate_error("metric '%s': %s: fix its SQL (it runs over the merged trace "
				   "tables: collectives, cuda_calls, ... with a node column)",
				   g->m[i].name, st || sqlite3_errcode(db) ? sqlite3_errmsg(db)
									 : "no statement");
			goto out;
		}
		if (!sqlite3_stmt_readonly(st) || sqlite3_column_count(st) < 1) {
			gate_error("metric '%s': not a SELECT: a metric is one query that returns "
				   "values",
				   g->m[i].name);
			goto out;
		}
		tail += strspn(tail, " \t\r\n;");
		if (*tail) {
			gate_error("metric '%s': more than one statement: a metric is one query",
				   g->m[i].name);
			goto out;
		}
		sqlite3_finalize(st);
		st = NULL;
		if ((r = tables_opened(g, db, g->m[i].sql)) >= 0) {
			ret = r;
			goto out;
		}
	}
	sqlite3_set_authorizer(db, NULL, NULL);
	/*
	 * The rank count (the fleet's shape) and the window of --samples come from
	 * collectives: always fetch its rank and time.
	 */
	if (!table_named(g, "collectives")) {
		gate_error("the trace schema has no table collectives: rebuild fleetq");
		goto out;
	}
	need_col(table_named(g, "collectives"), "rank");
	need_col(table_named(g, "collectives"), "ts_ns");
	for (int i = 0; i < g->nt; i++)
		if (g->t[i].need && g->t[i].has_ts && g->samples > 1)
			need_col(&g->t[i], "ts_ns");
	ret = -1;
	goto out;
oom:
	gate_error("out of memory");
out:
	free(cause);
	sqlite3_finalize(st);
	sqlite3_finalize(cs);
	sqlite3_close(db);
	return ret;
}

/*
 * The node-side SQL for one table: the columns some metric reads, in the window (?1: its
 * start, on the node's clock; NULL: all time) and the job (?2: SLURM_JOB_ID; NULL: all).
 * Both parameters appear in every statement: the agent binds all it is sent.
 * A row is the job's when its process was, at its ts_ns: pids are reused (job_proc).
 * NULL with *cause (caller frees) when jobproc.sql cannot be read, or out of memory.
 */
char *gate_fetch_sql(const struct table *t, char **cause)
{
	struct strbuf b = STRBUF_INIT;
	int first = 1;

	*cause = NULL;
	if (t->has_pid && t->has_ts && job_proc(&b, cause)) {
		sb_release(&b);
		return NULL;
	}
	sb_puts(&b, "SELECT ");
	for (int k = 0; k < t->ncols; k++)
		if (t->need & 1u << k) {
			sb_printf(&b, "%s\"%s\"", first ? "" : ", ", t->cols[k]);
			first = 0;
		}
	sb_printf(&b, " FROM \"%s\" WHERE ", t->name);
	if (t->has_ts)
		sb_puts(&b, "(?1 IS NULL OR ts_ns >= ?1)");
	else if (!strcmp(t->name, "processes"))
		sb_puts(&b, "(?1 IS NULL OR coalesce(exit_ns, 9223372036854775807) >= ?1)");
	else
		sb_puts(&b, "(?1 IS NULL OR 1)");
	if (!strcmp(t->name, "processes"))
		sb_puts(&b, " AND (?2 IS NULL OR job_id = ?2)");
	else if (t->has_pid && t->has_ts)
		sb_printf(&b, " AND (?2 IS NULL OR EXISTS (SELECT 1 FROM jobproc j WHERE j.pid = "
			      "\"%s\".pid AND \"%s\".ts_ns BETWEEN j.lo AND j.hi))",
			  t->name, t->name);
	else if (t->has_pid)
		sb_puts(&b, " AND (?2 IS NULL OR pid IN (SELECT pid FROM processes WHERE job_id = "
			    "?2))");
	else
		sb_puts(&b, " AND (?2 IS NULL OR 1)");
	if (b.oom) {
		sb_release(&b);
		fq_fail(cause, -ENOMEM, "out of memory");
		return NULL;
	}
	return sb_detach(&b);
}

int gate_show_sql(const struct gate_args *a)
{
	struct gate g = { 0 };
	int ret;

	ret = gate_setup(&g, a);
	if (ret < 0 && !g.nm && !a->builtin)
		ret = gate_add_builtins(&g, DEFAULT_BUILTINS);
	if (ret < 0)
		ret = gate_plan_tables(&g);
	if (ret >= 0)
		goto out;
	printf("-- node SQL, one fan-out per table; ?1 = window start on the node's clock "
	       "(NULL: all time), ?2 = --job (NULL: all)\n");
	for (int i = 0; i < g.nt; i++)
		if (g.t[i].need) {
			char *cause = NULL, *s = gate_fetch_sql(&g.t[i], &cause);

			if (!s) {
				ret = gate_error("table %s: %s", g.t[i].name,
						 cause ? cause : "out of memory");
				free(cause);
				goto out;
			}
			printf("-- table %s\n%s;\n", g.t[i].name, s);
			free(s);
		}
	printf("\n-- metrics, run over the merged tables (each with a node column)\n");
	for (size_t i = 0; i < g.nm; i++)
		printf("-- %s (%s is worse%s)\n%s;\n", g.m[i].name,
		       g.m[i].higher ? "lower" : "higher", g.m[i].builtin ? ", built in" : "",
		       g.m[i].sql);
	ret = fflush(stdout) ? FQ_EXIT_USAGE : FQ_EXIT_OK;
out:
	gate_release(&g);
	return ret;
}
