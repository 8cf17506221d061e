/* SPDX-License-Identifier: MIT */
#include "gate.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coverage.h"
#include "fqsql.h"
#include "gather.h"
#include "merge.h"
#include "output.h"
#include "strbuf.h"

#define BASELINE_FORMAT "fleetq-gate-baseline"
#define BASELINE_VERSION 1
#define DEFAULT_SINCE_NS (600 * 1000000000ll)

/* The world communicator: the one with the most ranks (a job's smaller ones are subsets). */
#define WORLD "nranks = (SELECT max(nranks) FROM collectives)"
#define BUCKET                                                                              \
	"CASE WHEN bytes IS NULL THEN '?' WHEN bytes < 65536 THEN '<64KiB' "                \
	"WHEN bytes < 1048576 THEN '<1MiB' WHEN bytes < 16777216 THEN '<16MiB' "            \
	"ELSE '>=16MiB' END"
#define SYNC_PER_RANK                                                                       \
	"WITH r AS (SELECT node, pid, min(rank) AS rank, min(ts_ns) AS t0, max(ts_ns) AS t1 " \
	"FROM collectives WHERE " WORLD " GROUP BY node, pid) "                              \
	"SELECT r.rank AS rank, coalesce(sum(c.dur_ns), 0) AS wait_ns, "                    \
	"max(max(r.t1 - r.t0), 1) AS wall_ns FROM r LEFT JOIN cuda_calls c ON c.node = r.node " \
	"AND c.pid = r.pid AND c.kind = 'sync' AND c.ts_ns BETWEEN r.t0 AND r.t1 GROUP BY r.rank"

/*
 * Built-in metrics. Collective durations are NCCL's enqueue time (docs/schema.md): a
 * regression there is the library or launch path getting slower, not a straggler. The
 * skew metrics are clock-independent (busy gap, sync wait), as DESIGN.md asks.
 */
static const struct builtin {
	const char *name;
	int higher;
	const char *sql;
} builtins[] = {
	{ "coll_p50_us", 0,
	  "SELECT op, " BUCKET " AS size, p50(dur_ns) / 1e3 FROM collectives GROUP BY 1, 2" },
	{ "coll_p99_us", 0,
	  "SELECT op, " BUCKET " AS size, p99(dur_ns) / 1e3 FROM collectives GROUP BY 1, 2" },
	{ "busy_gap_us", 0,
	  "SELECT rank, median(busy_ns) / 1e3 FROM collectives WHERE busy_ns IS NOT NULL AND "
	  WORLD " GROUP BY rank" },
	{ "busy_skew", 0,
	  "SELECT max(g) / median(g) FROM (SELECT median(busy_ns) AS g FROM collectives "
	  "WHERE busy_ns IS NOT NULL AND " WORLD " GROUP BY rank)" },
	{ "sync_wait_share", 0, "SELECT rank, wait_ns * 1.0 / wall_ns FROM (" SYNC_PER_RANK ")" },
	{ "sync_wait_skew", 0,
	  "SELECT max(wait_ns) / max(median(wait_ns), 1) FROM (" SYNC_PER_RANK ")" },
	{ "tcp_retransmits", 0, "SELECT count(*) FROM tcp_retransmits" },
	{ "ib_errors", 0,
	  "SELECT coalesce(sum(delta), 0) FROM ib_counters WHERE counter IN ('port_rcv_errors', "
	  "'symbol_error', 'link_downed', 'port_xmit_discards', 'local_link_integrity_errors', "
	  "'local_ack_timeout_err', 'packet_seq_err')" },
};
#define NBUILTINS (sizeof(builtins) / sizeof(builtins[0]))
/*
 * What a gate measures when nothing is named: all but sync_wait_skew, whose max over ranks
 * tripped on clean runs of an oversubscribed CI host (bench/gate/false-failures.sh).
 */
#define DEFAULT_BUILTINS                                                                      \
	"coll_p50_us,coll_p99_us,busy_gap_us,busy_skew,sync_wait_share,tcp_retransmits,ib_errors"

struct metric {
	char *name, *sql;
	int higher, builtin;
};

/* A trace table, its columns (from the schema) and which of them some metric reads. */
#define MAX_TABLES 16
#define MAX_COLS 32
struct table {
	char *name;
	char *cols[MAX_COLS];
	int ncols;
	uint32_t need;
	int has_ts, has_pid, fetched;
};

struct gate {
	const struct gate_args *a;
	struct metric *m;
	size_t nm;
	struct table t[MAX_TABLES];
	int nt;
	double tol, k;
	int samples;
	/* the baseline */
	char *btext;
	int have_base;
	int64_t bnodes, branks, bsamples;
	/* this run */
	int64_t ranks;
	sqlite3 *db;
};

__attribute__((format(printf, 1, 2))) static int gate_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fleetq: gate: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return FQ_EXIT_USAGE;
}

int gate_parse_tolerance(const char *s, double *frac)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || (*end && strcmp(end, "%")) || !(v >= 0) || v > 1000)
		return -EINVAL;
	*frac = v / 100;
	return 0;
}

static void gate_release(struct gate *g)
{
	for (size_t i = 0; i < g->nm; i++) {
		free(g->m[i].name);
		free(g->m[i].sql);
	}
	free(g->m);
	for (int i = 0; i < g->nt; i++) {
		free(g->t[i].name);
		for (int k = 0; k < g->t[i].ncols; k++)
			free(g->t[i].cols[k]);
	}
	free(g->btext);
}

static int valid_name(const char *s, size_t n)
{
	if (!n || !(s[0] == '_' || ((s[0] | 0x20) >= 'a' && (s[0] | 0x20) <= 'z')))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-",
			    s[i]))
			return 0;
	return 1;
}

static int add_metric(struct gate *g, const char *name, size_t nlen, const char *sql, int higher,
		      int builtin)
{
	struct metric *m;

	for (size_t i = 0; i < g->nm; i++)
		if (strlen(g->m[i].name) == nlen && !strncmp(g->m[i].name, name, nlen))
			return gate_error("metric '%.*s' named twice: give each metric its own "
					  "name",
					  (int)nlen, name);
	m = realloc(g->m, (g->nm + 1) * sizeof(*m));
	if (!m)
		return gate_error("out of memory");
	g->m = m;
	m = &g->m[g->nm];
	m->name = strndup(name, nlen);
	m->sql = strdup(sql);
	m->higher = higher;
	m->builtin = builtin;
	if (!m->name || !m->sql) {
		free(m->name);
		free(m->sql);
		return gate_error("out of memory");
	}
	g->nm++;
	return -1;
}

/* "NAME=SQL", "NAME:higher=SQL", "NAME:lower=SQL". */
static int parse_metric(struct gate *g, const char *spec)
{
	const char *eq = strchr(spec, '='), *colon;
	size_t nlen;
	int higher = 0;

	if (!eq)
		return gate_error("--metric '%s': write NAME=SQL, e.g. --metric "
				  "\"ar_p99_us=SELECT p99(dur_ns)/1e3 FROM collectives\"",
				  spec);
	colon = memchr(spec, ':', eq - spec);
	nlen = colon ? (size_t)(colon - spec) : (size_t)(eq - spec);
	if (colon) {
		size_t dl = eq - colon - 1;

		if (dl == 6 && !strncmp(colon + 1, "higher", 6))
			higher = 1;
		else if (!(dl == 5 && !strncmp(colon + 1, "lower", 5)))
			return gate_error("--metric '%.*s': unknown direction '%.*s': use "
					  "NAME:higher=SQL or NAME:lower=SQL",
					  (int)(eq - spec), spec, (int)dl, colon + 1);
	}
	if (!valid_name(spec, nlen))
		return gate_error("--metric: invalid name '%.*s': use letters, digits, '_', "
				  "'.' and '-', starting with a letter",
				  (int)nlen, spec);
	if (!eq[1])
		return gate_error("--metric '%.*s': no SQL after '='", (int)nlen, spec);
	return add_metric(g, spec, nlen, eq + 1, higher, 0);
}

static int add_builtins(struct gate *g, const char *list)
{
	const char *p = list;

	while (*p) {
		size_t n = strcspn(p, ",");
		int found = 0;

		for (size_t i = 0; i < NBUILTINS; i++)
			if ((n == 3 && !strncmp(p, "all", 3)) ||
			    (strlen(builtins[i].name) == n && !strncmp(p, builtins[i].name, n))) {
				int r = -1;

				found = 1;
				for (size_t k = 0; k < g->nm; k++)
					if (!strcmp(g->m[k].name, builtins[i].name))
						r = 0; /* "all" after a named one */
				if (r < 0)
					r = add_metric(g, builtins[i].name,
						       strlen(builtins[i].name), builtins[i].sql,
						       builtins[i].higher, 1);
				if (r > 0)
					return r;
			}
		if (!found) {
			struct strbuf b = STRBUF_INIT;

			for (size_t i = 0; i < NBUILTINS; i++)
				sb_printf(&b, "%s%s", i ? ", " : "", builtins[i].name);
			gate_error("--builtin: unknown metric '%.*s': use all or some of %s",
				   (int)n, p, b.s ? b.s : "");
			sb_release(&b);
			return FQ_EXIT_USAGE;
		}
		p += n;
		if (*p)
			p++;
	}
	return -1;
}

/* ---- which tables and columns the metrics read ---- */

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
static int plan_tables(struct gate *g)
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
 */
static char *fetch_sql(const struct table *t)
{
	struct strbuf b = STRBUF_INIT;
	int first = 1;

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
	else if (t->has_pid)
		sb_puts(&b, " AND (?2 IS NULL OR pid IN (SELECT pid FROM processes WHERE job_id = "
			    "?2))");
	else
		sb_puts(&b, " AND (?2 IS NULL OR 1)");
	return sb_detach(&b);
}

static int setup(struct gate *g, const struct gate_args *a)
{
	int r;

	g->a = a;
	g->tol = a->tolerance >= 0 ? a->tolerance : 0.10;
	g->k = a->mad_k >= 0 ? a->mad_k : 3;
	g->samples = a->samples > 0 ? a->samples : 1;
	for (size_t i = 0; i < a->nmetrics; i++)
		if ((r = parse_metric(g, a->metrics[i])) >= 0)
			return r;
	if (a->builtin && (r = add_builtins(g, a->builtin)) >= 0)
		return r;
	return -1;
}

int gate_show_sql(const struct gate_args *a)
{
	struct gate g = { 0 };
	int ret;

	ret = setup(&g, a);
	if (ret < 0 && !g.nm && !a->builtin)
		ret = add_builtins(&g, DEFAULT_BUILTINS);
	if (ret < 0)
		ret = plan_tables(&g);
	if (ret >= 0)
		goto out;
	printf("-- node SQL, one fan-out per table; ?1 = window start on the node's clock "
	       "(NULL: all time), ?2 = --job (NULL: all)\n");
	for (int i = 0; i < g.nt; i++)
		if (g.t[i].need) {
			char *s = fetch_sql(&g.t[i]);

			printf("-- table %s\n%s;\n", g.t[i].name, s ? s : "(out of memory)");
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

/* ---- the baseline file ---- */

static char *read_file(const char *path, char **why)
{
	struct strbuf b = STRBUF_INIT;
	char tmp[65536];
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f) {
		*why = strerror(errno);
		return NULL;
	}
	while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
		sb_add(&b, tmp, n);
	if (ferror(f)) {
		*why = strerror(errno);
		fclose(f);
		sb_release(&b);
		return NULL;
	}
	fclose(f);
	if (!b.s)
		sb_puts(&b, "");
	return sb_detach(&b);
}

static int exec1(sqlite3 *db, const char *sql, const char *text)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

	if (rc == SQLITE_OK && text)
		sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK) {
		while ((rc = sqlite3_step(st)) == SQLITE_ROW)
			;
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	}
	sqlite3_finalize(st);
	return rc;
}

/*
 * Reads FILE into temp tables of db: gate_bmetric(name, sql, higher, pos) and
 * gate_base(metric, key, rank, value), one row per saved sample.
 */
static int load_baseline(struct gate *g, const char *path)
{
	sqlite3 *db = g->db;
	sqlite3_stmt *st = NULL;
	char *why = NULL;
	int ret = FQ_EXIT_USAGE;

	g->btext = read_file(path, &why);
	if (!g->btext)
		return gate_error("cannot read baseline '%s': %s: record one with fleetq gate "
				  "--save FILE",
				  path, why);
	if (sqlite3_prepare_v2(db, "SELECT json_valid(?1), json_extract(?1, '$.format'), "
				   "json_extract(?1, '$.version'), json_extract(?1, "
				   "'$.shape.node_count'), json_extract(?1, '$.shape.rank_count'), "
				   "json_extract(?1, '$.samples')",
			       -1, &st, NULL)) {
		gate_error("cannot read baseline '%s': %s", path, sqlite3_errmsg(db));
		goto out;
	}
	sqlite3_bind_text(st, 1, g->btext, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_ROW || !sqlite3_column_int(st, 0) ||
	    !sqlite3_column_text(st, 1) ||
	    strcmp((const char *)sqlite3_column_text(st, 1), BASELINE_FORMAT)) {
		gate_error("'%s' is not a fleetq gate baseline: record one with fleetq gate --save "
			   "FILE",
			   path);
		goto out;
	}
	if (sqlite3_column_int(st, 2) != BASELINE_VERSION) {
		gate_error("baseline '%s' has version %d, this fleetq reads %d: record it again "
			   "with this fleetq",
			   path, sqlite3_column_int(st, 2), BASELINE_VERSION);
		goto out;
	}
	g->bnodes = sqlite3_column_int64(st, 3);
	g->branks = sqlite3_column_int64(st, 4);
	g->bsamples = sqlite3_column_int64(st, 5);
	if (g->bsamples < 1)
		g->bsamples = 1;
	if (exec1(db, "CREATE TEMP TABLE gate_bmetric AS SELECT json_extract(value, '$.name') AS "
		      "name, json_extract(value, '$.sql') AS sql, json_extract(value, "
		      "'$.direction') = 'higher' AS higher, json_extract(value, '$.builtin') AS "
		      "builtin, CAST(key AS INTEGER) AS pos FROM json_each(?1, '$.metrics')",
		  g->btext) ||
	    exec1(db, "CREATE TEMP TABLE gate_base AS SELECT json_extract(m.value, '$.name') AS "
		      "metric, coalesce(json_extract(s.value, '$.key'), '') AS key, "
		      "json_extract(s.value, '$.rank') AS rank, v.value AS value, "
		      "CAST(v.key AS INTEGER) AS i FROM json_each(?1, '$.metrics') m, "
		      "json_each(m.value, '$.series') s, json_each(s.value, '$.values') v",
		  g->btext)) {
		gate_error("baseline '%s': %s: record it again with fleetq gate --save", path,
			   sqlite3_errmsg(db));
		goto out;
	}
	g->have_base = 1;
	ret = -1;
out:
	sqlite3_finalize(st);
	return ret;
}

/*
 * With a baseline: no metric named means the baseline's; a metric named must be in it with
 * the same SQL and direction (comparing other SQL against old numbers proves nothing).
 */
static int match_baseline(struct gate *g, const char *path)
{
	sqlite3_stmt *st = NULL;
	int ret = FQ_EXIT_USAGE, r;

	if (sqlite3_prepare_v2(g->db, "SELECT name, sql, higher, builtin FROM temp.gate_bmetric "
				      "ORDER BY pos",
			       -1, &st, NULL))
		return gate_error("baseline '%s': %s", path, sqlite3_errmsg(g->db));
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		const char *sql = (const char *)sqlite3_column_text(st, 1);
		int higher = sqlite3_column_int(st, 2), found = 0;

		if (!name || !sql) {
			gate_error("baseline '%s': a metric without name or sql: record it again",
				   path);
			goto out;
		}
		for (size_t i = 0; i < g->nm; i++)
			if (!strcmp(g->m[i].name, name)) {
				found = 1;
				if (strcmp(g->m[i].sql, sql) || g->m[i].higher != higher) {
					gate_error("metric '%s' differs from the one in baseline "
						   "'%s' (SQL or direction): record a new baseline "
						   "or use another name",
						   name, path);
					goto out;
				}
			}
		if (!found && !g->a->nmetrics && !g->a->builtin &&
		    (r = add_metric(g, name, strlen(name), sql, higher,
				    sqlite3_column_int(st, 3))) >= 0) {
			ret = r;
			goto out;
		}
	}
	if (g->a->baseline)
		for (size_t i = 0; i < g->nm; i++) {
			sqlite3_stmt *q = NULL;
			int n = 0;

			if (!sqlite3_prepare_v2(g->db, "SELECT count(*) FROM temp.gate_bmetric WHERE "
						       "name = ?",
						-1, &q, NULL)) {
				sqlite3_bind_text(q, 1, g->m[i].name, -1, SQLITE_STATIC);
				if (sqlite3_step(q) == SQLITE_ROW)
					n = sqlite3_column_int(q, 0);
			}
			sqlite3_finalize(q);
			if (!n) {
				gate_error("metric '%s' is not in baseline '%s': add it with "
					   "fleetq gate --save FILE",
					   g->m[i].name, path);
				goto out;
			}
		}
	ret = -1;
out:
	sqlite3_finalize(st);
	return ret;
}

/* ---- fan-outs ---- */

/* Folds one fan-out's coverage into the gate's: a node is ok only if ok in every one. */
static void fold_coverage(struct coverage *all, const struct coverage *one, size_t n, int first)
{
	for (size_t i = 0; i < n; i++) {
		int o = coverage_outcome(one, i);
		int64_t rows = coverage_rows(one, i) + (first ? 0 : coverage_rows(all, i));

		if (first || (coverage_outcome(all, i) == FQ_OK && o != FQ_OK)) {
			coverage_set(all, i, o, rows, coverage_message(one, i));
		} else {
			/* coverage_set frees the old message before copying the new one */
			const char *msg = coverage_message(all, i);
			char *keep = msg ? strdup(msg) : NULL;

			coverage_set(all, i, coverage_outcome(all, i), rows, keep);
			free(keep);
		}
	}
}

static int create_empty(sqlite3 *db, const struct table *t)
{
	struct strbuf b = STRBUF_INIT;
	int rc;

	sb_printf(&b, "CREATE TABLE \"%s\"(node", t->name);
	for (int k = 0; k < t->ncols; k++)
		if (t->need & 1u << k)
			sb_printf(&b, ", \"%s\"", t->cols[k]);
	sb_puts(&b, ")");
	rc = b.oom ? SQLITE_NOMEM : sqlite3_exec(db, b.s, NULL, NULL, NULL);
	sb_release(&b);
	return rc;
}

/*
 * One fan-out per table some metric reads, into tables of the same name in m. The first
 * fan-out's HELLOs are kept in *first (for the shape). Returns -1 or an exit status.
 */
static int fetch(struct gate *g, struct fanout_params *fp, struct merge *m,
		 struct coverage *cov, struct fanout **first)
{
	struct wire_value params[2];
	int64_t len = g->a->since_ns < 0 ? DEFAULT_SINCE_NS : g->a->since_ns;
	struct timespec ts;
	int nfan = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	params[0] = len ? (struct wire_value){ .type = WIRE_INT,
					       .i = (int64_t)ts.tv_sec * 1000000000 +
						    ts.tv_nsec - len }
			: (struct wire_value){ .type = WIRE_NULL };
	params[1] = g->a->job ? (struct wire_value){ .type = WIRE_TEXT,
						     .p = g->a->job,
						     .n = strlen(g->a->job) }
			      : (struct wire_value){ .type = WIRE_NULL };
	fp->params = params;
	fp->nparams = 2;
	fp->clock_param = len ? 1 : 0;
	for (int i = 0; i < g->nt; i++) {
		struct table *t = &g->t[i];
		struct coverage *one = NULL;
		struct fanout *fo = NULL;
		char *sql, *cause = NULL;
		int err;

		if (!t->need)
			continue;
		sql = fetch_sql(t);
		one = coverage_new(fp->nhosts, fp->hosts);
		fp->sql = sql;
		fo = sql && one ? fanout_new(fp, &cause) : NULL;
		err = fo ? gather_run(fo, fp, m, one, NULL, &cause) : -ENOMEM;
		if (!err)
			err = merge_rename(m, t->name, &cause);
		if (!err) {
			sqlite3_stmt *st = NULL;
			int exists = 0;

			if (!sqlite3_prepare_v2(merge_db(m), "SELECT 1 FROM main.sqlite_schema "
							     "WHERE name = ?",
						-1, &st, NULL)) {
				sqlite3_bind_text(st, 1, t->name, -1, SQLITE_STATIC);
				exists = sqlite3_step(st) == SQLITE_ROW;
			}
			sqlite3_finalize(st);
			if (!exists && create_empty(merge_db(m), t))
				err = -EIO;
		}
		fp->sql = NULL;
		free(sql);
		if (err) {
			gate_error("fetching table %s: %s", t->name,
				   cause ? cause : strerror(err < 0 ? -err : ENOMEM));
			free(cause);
			coverage_free(one);
			fanout_free(fo);
			return FQ_EXIT_USAGE;
		}
		t->fetched = 1;
		fold_coverage(cov, one, fp->nhosts, !nfan++);
		coverage_free(one);
		if (!*first)
			*first = fo;
		else
			fanout_free(fo);
	}
	fp->params = NULL;
	fp->nparams = 0;
	return -1;
}

/* ---- metrics ---- */

/*
 * Restricts the time-stamped tables to slice s of n of the job's span (collectives, on the
 * coordinator's clock: each node's ts_ns less its offset) with temp views of the same names,
 * which shadow the fetched tables. n == 1: drops them.
 */
static int slice_views(struct gate *g, int s, int n, int64_t lo, int64_t hi)
{
	for (int i = 0; i < g->nt; i++) {
		const struct table *t = &g->t[i];
		int64_t a = lo + (int64_t)((double)(hi - lo) * s / n);
		int64_t b = s == n - 1 ? hi + 1 : lo + (int64_t)((double)(hi - lo) * (s + 1) / n);
		char *sql;
		int rc;

		if (!t->fetched || !t->has_ts)
			continue;
		sql = sqlite3_mprintf("DROP VIEW IF EXISTS temp.\"%w\"", t->name);
		rc = sql ? sqlite3_exec(g->db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
		sqlite3_free(sql);
		if (rc)
			return -EIO;
		if (n == 1)
			continue;
		sql = sqlite3_mprintf("CREATE TEMP VIEW \"%w\" AS SELECT * FROM main.\"%w\" AS x "
				      "WHERE x.ts_ns - coalesce((SELECT offset_ns FROM main.clock c "
				      "WHERE c.node = x.node), 0) BETWEEN %lld AND %lld",
				      t->name, t->name, (long long)a, (long long)b - 1);
		rc = sql ? sqlite3_exec(g->db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
		sqlite3_free(sql);
		if (rc)
			return -EIO;
	}
	return 0;
}

/*
 * Runs one metric and records its values for sample s in temp.gate_now. The shape rules
 * (docs/gate.md): the last column is the value; a column named rank makes it per rank;
 * any other columns before the value are a key (e.g. op, size); one column is a scalar.
 */
static int eval_metric(struct gate *g, const struct metric *m, int s, sqlite3_stmt *ins)
{
	sqlite3_stmt *st = NULL;
	struct strbuf key = STRBUF_INIT;
	int n, rankcol = -1, rc, rows = 0, ret = FQ_EXIT_USAGE;

	if (sqlite3_prepare_v2(g->db, m->sql, -1, &st, NULL) != SQLITE_OK) {
		gate_error("metric '%s': %s: fix its SQL", m->name, sqlite3_errmsg(g->db));
		goto out;
	}
	n = sqlite3_column_count(st);
	for (int i = 0; i < n - 1; i++)
		if (!strcasecmp(sqlite3_column_name(st, i), "rank"))
			rankcol = i;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int vt = sqlite3_column_type(st, n - 1);

		if (n == 1 && rows) {
			gate_error("metric '%s' returns more than one row of one column: return "
				   "one value, or add a rank or key column before it",
				   m->name);
			goto out;
		}
		rows++;
		if (vt == SQLITE_TEXT || vt == SQLITE_BLOB) {
			gate_error("metric '%s': its value (the last column, '%s') is not a "
				   "number: '%s'",
				   m->name, sqlite3_column_name(st, n - 1),
				   vt == SQLITE_TEXT ? (const char *)sqlite3_column_text(st, n - 1)
						     : "(blob)");
			goto out;
		}
		key.len = 0;
		sb_puts(&key, "");
		for (int i = 0; i < n - 1; i++) {
			const char *v = (const char *)sqlite3_column_text(st, i);

			if (i == rankcol)
				continue;
			sb_printf(&key, "%s%s", key.len ? "," : "", v ? v : "NULL");
		}
		sqlite3_bind_text(ins, 1, m->name, -1, SQLITE_STATIC);
		sqlite3_bind_text(ins, 2, key.s ? key.s : "", -1, SQLITE_STATIC);
		if (rankcol >= 0 && sqlite3_column_type(st, rankcol) != SQLITE_NULL)
			sqlite3_bind_int64(ins, 3, sqlite3_column_int64(st, rankcol));
		else
			sqlite3_bind_null(ins, 3);
		sqlite3_bind_int(ins, 4, s);
		if (vt == SQLITE_NULL)
			sqlite3_bind_null(ins, 5);
		else
			sqlite3_bind_double(ins, 5, sqlite3_column_double(st, n - 1));
		rc = sqlite3_step(ins);
		sqlite3_reset(ins);
		if (rc == SQLITE_CONSTRAINT) {
			gate_error("metric '%s' returns %s%s%s%s twice: GROUP BY the rank and key "
				   "columns",
				   m->name, *key.s ? "key " : "", key.s,
				   *key.s && rankcol >= 0 ? " and " : "",
				   rankcol >= 0 ? "the same rank" : "");
			goto out;
		}
		if (rc != SQLITE_DONE) {
			gate_error("cannot record metric '%s': %s", m->name, sqlite3_errmsg(g->db));
			goto out;
		}
	}
	if (rc != SQLITE_DONE) {
		gate_error("metric '%s': %s", m->name, sqlite3_errmsg(g->db));
		goto out;
	}
	if (!rows && n == 1) {
		/* a scalar over no rows is "no value", still a series to compare */
		sqlite3_bind_text(ins, 1, m->name, -1, SQLITE_STATIC);
		sqlite3_bind_text(ins, 2, "", -1, SQLITE_STATIC);
		sqlite3_bind_null(ins, 3);
		sqlite3_bind_int(ins, 4, s);
		sqlite3_bind_null(ins, 5);
		rc = sqlite3_step(ins);
		sqlite3_reset(ins);
		if (rc != SQLITE_DONE) {
			gate_error("cannot record metric '%s': %s", m->name, sqlite3_errmsg(g->db));
			goto out;
		}
	}
	ret = -1;
out:
	sb_release(&key);
	sqlite3_finalize(st);
	return ret;
}

static int evaluate(struct gate *g)
{
	sqlite3_stmt *st = NULL, *ins = NULL;
	int64_t lo = 0, hi = 0;
	int ret = FQ_EXIT_USAGE;

	if (sqlite3_exec(g->db,
			 "CREATE TEMP TABLE gate_now(metric TEXT, key TEXT, rank INTEGER, sample "
			 "INTEGER, value REAL); CREATE UNIQUE INDEX temp.gate_now_series ON "
			 "gate_now(metric, key, coalesce(rank, -9223372036854775807 - 1), sample); "
			 "CREATE TEMP TABLE IF NOT EXISTS gate_base(metric, key, rank, value, i); "
			 "CREATE TEMP TABLE gate_metric(name TEXT, higher INTEGER, pos INTEGER)",
			 NULL, NULL, NULL) ||
	    sqlite3_prepare_v2(g->db, "INSERT INTO temp.gate_now VALUES (?, ?, ?, ?, ?)", -1, &ins,
			       NULL)) {
		gate_error("cannot set up the metrics: %s", sqlite3_errmsg(g->db));
		goto out;
	}
	for (size_t i = 0; i < g->nm; i++) {
		char *sql = sqlite3_mprintf("INSERT INTO temp.gate_metric VALUES ('%q', %d, %d)",
					    g->m[i].name, g->m[i].higher, (int)i);

		if (!sql || sqlite3_exec(g->db, sql, NULL, NULL, NULL)) {
			sqlite3_free(sql);
			gate_error("cannot set up the metrics: %s", sqlite3_errmsg(g->db));
			goto out;
		}
		sqlite3_free(sql);
	}
	if (g->samples > 1) {
		if (sqlite3_prepare_v2(g->db, "SELECT min(x.ts_ns - coalesce(c.offset_ns, 0)), "
					      "max(x.ts_ns - coalesce(c.offset_ns, 0)) FROM "
					      "main.collectives x LEFT JOIN main.clock c ON c.node "
					      "= x.node",
				       -1, &st, NULL) ||
		    sqlite3_step(st) != SQLITE_ROW) {
			gate_error("cannot find the job's span: %s", sqlite3_errmsg(g->db));
			goto out;
		}
		lo = sqlite3_column_int64(st, 0);
		hi = sqlite3_column_int64(st, 1);
	}
	for (int s = 0; s < g->samples; s++) {
		if (slice_views(g, s, g->samples, lo, hi)) {
			gate_error("cannot slice the window: %s", sqlite3_errmsg(g->db));
			goto out;
		}
		for (size_t i = 0; i < g->nm; i++) {
			int r = eval_metric(g, &g->m[i], s, ins);

			if (r >= 0) {
				ret = r;
				goto out;
			}
		}
	}
	if (g->samples > 1 && slice_views(g, 0, 1, 0, 0)) {
		gate_error("cannot drop the slices: %s", sqlite3_errmsg(g->db));
		goto out;
	}
	ret = -1;
out:
	sqlite3_finalize(st);
	sqlite3_finalize(ins);
	return ret;
}

/* ---- saving ---- */

static void json_num(struct strbuf *b, sqlite3_stmt *st, int col)
{
	char buf[40];
	double d = sqlite3_column_double(st, col);

	if (sqlite3_column_type(st, col) == SQLITE_NULL || !isfinite(d)) {
		sb_puts(b, "null");
		return;
	}
	output_fmt_double(buf, d);
	sb_puts(b, buf);
}

static void json_strz(struct strbuf *b, const char *s)
{
	if (s)
		sb_json_str(b, s, strlen(s));
	else
		sb_puts(b, "null");
}

static void utc_now(char buf[32])
{
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static const char *metric_shape(sqlite3 *db, const char *name)
{
	sqlite3_stmt *st = NULL;
	int keyed = 0, ranked = 0;

	if (!sqlite3_prepare_v2(db, "SELECT max(key <> ''), max(rank IS NOT NULL) FROM "
				    "(SELECT key, rank FROM temp.gate_now WHERE metric = ?1 UNION "
				    "ALL SELECT key, rank FROM temp.gate_base WHERE metric = ?1)",
				-1, &st, NULL)) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW) {
			keyed = sqlite3_column_int(st, 0);
			ranked = sqlite3_column_int(st, 1);
		}
	}
	sqlite3_finalize(st);
	return keyed && ranked ? "keyed per rank" : keyed ? "keyed" : ranked ? "per rank" : "scalar";
}

/*
 * save() writes PATH.tmp beside path and renames it, --junit writes path: its
 * folder must take a new file, and path must not be a folder. Returns -1 to go
 * on, else 2.
 */
static int save_writable(const char *path, const char *what, const char *opt)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : NULL;
	struct stat sb;
	int ret = -1;

	if (slash && !dir)
		return gate_error("out of memory");
	if (access(dir ? dir : ".", W_OK | X_OK))
		ret = gate_error("cannot write %s '%s': folder '%s': %s: check --%s", what, path,
				 dir ? dir : ".", strerror(errno), opt);
	else if (!stat(path, &sb) && S_ISDIR(sb.st_mode))
		ret = gate_error("cannot write %s '%s': it is a folder: check --%s", what, path,
				 opt);
	else if (!access(path, F_OK) && access(path, W_OK))
		ret = gate_error("cannot write %s '%s': %s: check --%s", what, path,
				 strerror(errno), opt);
	free(dir);
	return ret;
}

static int save(struct gate *g, const struct fanout_params *fp, struct fanout *first,
		const char *path)
{
	struct strbuf b = STRBUF_INIT;
	sqlite3_stmt *st = NULL;
	char now[32], *tmp = NULL;
	const char *created = NULL;
	FILE *f = NULL;
	int ret = FQ_EXIT_USAGE, nruns = 0;

	utc_now(now);
	if (g->have_base && !sqlite3_prepare_v2(g->db, "SELECT json_extract(?1, '$.created')", -1,
						&st, NULL)) {
		sqlite3_bind_text(st, 1, g->btext, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
			created = strdupa((const char *)sqlite3_column_text(st, 0));
	}
	sqlite3_finalize(st);
	st = NULL;
	sb_printf(&b, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"fleetq\": ",
		  BASELINE_FORMAT, BASELINE_VERSION);
	json_strz(&b, g->a->version);
	sb_printf(&b, ",\n  \"created\": \"%s\",\n  \"updated\": \"%s\",\n", created ? created : now,
		  now);
	sb_printf(&b, "  \"shape\": {\"node_count\": %zu, \"rank_count\": %" PRId64 "},\n",
		  fp->nhosts, g->ranks);
	sb_printf(&b, "  \"samples\": %d,\n  \"tolerance_hint\": %g,\n  \"window\": {\"since\": ",
		  g->samples, g->tol);
	json_strz(&b, g->a->since_ns == 0 ? "all" : g->a->since_text ? g->a->since_text : "10m");
	sb_puts(&b, ", \"job\": ");
	json_strz(&b, g->a->job);
	sb_puts(&b, "},\n  \"runs\": [\n");
	if (g->have_base &&
	    !sqlite3_prepare_v2(g->db, "SELECT value FROM json_each(?1, '$.runs')", -1, &st, NULL)) {
		sqlite3_bind_text(st, 1, g->btext, -1, SQLITE_STATIC);
		while (sqlite3_step(st) == SQLITE_ROW)
			sb_printf(&b, "%s    %s", nruns++ ? ",\n" : "",
				  (const char *)sqlite3_column_text(st, 0));
	}
	sqlite3_finalize(st);
	st = NULL;
	sb_printf(&b, "%s    {\"date\": \"%s\", \"fleetq\": ", nruns++ ? ",\n" : "", now);
	json_strz(&b, g->a->version);
	sb_printf(&b, ", \"rank_count\": %" PRId64 ", \"nodes\": [", g->ranks);
	for (size_t i = 0; i < fp->nhosts; i++) {
		const struct fanout_node_info *in = first ? fanout_node_info(first, i) : NULL;

		sb_puts(&b, i ? ", {\"host\": " : "{\"host\": ");
		json_strz(&b, fp->hosts[i]);
		sb_puts(&b, ", \"name\": ");
		json_strz(&b, in ? in->node : NULL);
		sb_puts(&b, ", \"agent\": ");
		json_strz(&b, in ? in->agent_version : NULL);
		if (in && in->hello)
			sb_printf(&b, ", \"schema\": %" PRId64, in->schema_version);
		else
			sb_puts(&b, ", \"schema\": null");
		sb_puts(&b, ", \"clock\": ");
		json_strz(&b, in ? in->clock_source : NULL);
		sb_puts(&b, "}");
	}
	sb_puts(&b, "]}\n  ],\n  \"metrics\": [\n");
	if (sqlite3_prepare_v2(g->db, "SELECT key, rank, value FROM (SELECT key, rank, value, 0 AS "
				      "src, i FROM temp.gate_base WHERE metric = ?1 UNION ALL SELECT "
				      "key, rank, value, 1, sample FROM temp.gate_now WHERE metric "
				      "= ?1) ORDER BY key, rank, src, i",
			       -1, &st, NULL)) {
		gate_error("cannot collect the values: %s", sqlite3_errmsg(g->db));
		goto out;
	}
	for (size_t i = 0; i < g->nm; i++) {
		const struct metric *m = &g->m[i];
		char *pkey = NULL;
		int nser = 0, nval = 0, has_prev = 0;
		int64_t prank = 0;
		int prank_null = 0;

		sb_printf(&b, "    {\"name\": \"%s\", \"direction\": \"%s\", \"builtin\": %s, "
			      "\"shape\": \"%s\",\n     \"sql\": ",
			  m->name, m->higher ? "higher" : "lower", m->builtin ? "true" : "false",
			  metric_shape(g->db, m->name));
		json_strz(&b, m->sql);
		sb_puts(&b, ",\n     \"series\": [");
		sqlite3_bind_text(st, 1, m->name, -1, SQLITE_STATIC);
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *k = (const char *)sqlite3_column_text(st, 0);
			int rnull = sqlite3_column_type(st, 1) == SQLITE_NULL;
			int64_t r = sqlite3_column_int64(st, 1);

			k = k ? k : "";
			if (!has_prev || strcmp(k, pkey) || rnull != prank_null ||
			    (!rnull && r != prank)) {
				if (has_prev)
					sb_puts(&b, "]}");
				sb_puts(&b, nser++ ? ",\n       {\"key\": " : "\n       {\"key\": ");
				if (*k)
					json_strz(&b, k);
				else
					sb_puts(&b, "null");
				if (rnull)
					sb_puts(&b, ", \"rank\": null, \"values\": [");
				else
					sb_printf(&b, ", \"rank\": %" PRId64 ", \"values\": [", r);
				free(pkey);
				pkey = strdup(k);
				prank = r;
				prank_null = rnull;
				has_prev = 1;
				nval = 0;
			}
			if (nval++)
				sb_puts(&b, ", ");
			json_num(&b, st, 2);
		}
		free(pkey);
		sqlite3_reset(st);
		sb_printf(&b, "%s]}%s\n", has_prev ? "]}" : "", i + 1 < g->nm ? "," : "");
	}
	sb_puts(&b, "  ]\n}\n");
	if (b.oom) {
		gate_error("out of memory");
		goto out;
	}
	if (asprintf(&tmp, "%s.tmp", path) < 0) {
		tmp = NULL;
		gate_error("out of memory");
		goto out;
	}
	/* write beside and rename: a CI job killed mid-write leaves the old baseline */
	f = fopen(tmp, "w");
	if (!f || fwrite(b.s, 1, b.len, f) != b.len || fclose(f)) {
		gate_error("cannot write baseline '%s': %s: check the path and the free space",
			   tmp, strerror(errno));
		f = NULL;
		unlink(tmp);
		goto out;
	}
	f = NULL;
	if (rename(tmp, path)) {
		gate_error("cannot write baseline '%s': %s", path, strerror(errno));
		unlink(tmp);
		goto out;
	}
	if (!g->a->quiet)
		fprintf(stderr, "fleetq: gate: saved %zu metric%s, run %d (%d sample%s), %zu "
				"node%s, %" PRId64 " rank%s, to %s\n",
			g->nm, g->nm == 1 ? "" : "s", nruns, g->samples, g->samples == 1 ? "" : "s",
			fp->nhosts, fp->nhosts == 1 ? "" : "s", g->ranks, g->ranks == 1 ? "" : "s",
			path);
	ret = -1;
out:
	sqlite3_finalize(st);
	free(tmp);
	sb_release(&b);
	return ret;
}

/* ---- comparing ---- */

static int compare(struct gate *g)
{
	static const char sql[] =
		"CREATE TEMP TABLE gate AS "
		"WITH b AS (SELECT metric, key, rank, median(value) AS med, "
		"  1.4826 * mad(value) AS mad, "
		"  count(value) AS n FROM temp.gate_base GROUP BY metric, key, rank), "
		"w AS (SELECT metric, key, rank, median(value) AS now FROM temp.gate_now "
		"  GROUP BY metric, key, rank), "
		"k AS (SELECT metric, key, rank FROM b UNION SELECT metric, key, rank FROM w), "
		"j AS (SELECT k.metric, k.key, k.rank, m.pos, m.higher, b.med, b.mad, b.n, w.now, "
		"  CASE WHEN m.higher THEN min(b.med - abs(b.med) * ?1, b.med - ?2 * b.mad) "
		"    ELSE max(b.med + abs(b.med) * ?1, b.med + ?2 * b.mad) END AS lim, "
		"  CASE WHEN m.higher THEN max(b.med + abs(b.med) * ?1, b.med + ?2 * b.mad) "
		"    ELSE min(b.med - abs(b.med) * ?1, b.med - ?2 * b.mad) END AS better "
		"  FROM k JOIN temp.gate_metric m ON m.name = k.metric "
		"  LEFT JOIN b ON b.metric = k.metric AND b.key = k.key AND b.rank IS k.rank "
		"  LEFT JOIN w ON w.metric = k.metric AND w.key = k.key AND w.rank IS k.rank) "
		"SELECT metric, nullif(key, '') AS key, rank, med AS baseline, now, "
		"  CASE WHEN med IS NULL OR now IS NULL THEN NULL WHEN med = 0 THEN "
		"    (CASE WHEN now = 0 THEN 0.0 END) ELSE 100.0 * (now - med) / abs(med) END "
		"    AS change_pct, "
		"  lim AS \"limit\", mad AS baseline_mad, n AS baseline_samples, "
		"  CASE WHEN n IS NULL THEN 'new' WHEN med IS NULL AND now IS NULL THEN 'n/a' "
		"    WHEN now IS NULL THEN 'missing' WHEN med IS NULL THEN 'new' "
		"    WHEN (higher AND now < lim) OR (NOT higher AND now > lim) THEN 'regressed' "
		"    WHEN (higher AND now > better) OR (NOT higher AND now < better) "
		"      THEN 'improved' ELSE 'ok' END AS verdict "
		"FROM j ORDER BY pos, key, rank";
	sqlite3_stmt *st = NULL;
	int rc;

	if (sqlite3_prepare_v2(g->db, sql, -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_double(st, 1, g->tol);
		sqlite3_bind_double(st, 2, g->k);
		rc = sqlite3_step(st);
	} else {
		rc = SQLITE_ERROR;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return gate_error("cannot compare with the baseline: %s", sqlite3_errmsg(g->db));
	return -1;
}

static void fmt_num(char *buf, size_t n, sqlite3_stmt *st, int col)
{
	double d = sqlite3_column_double(st, col), a = fabs(d);

	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		snprintf(buf, n, "-");
	else if (a >= 100 || d == (double)(int64_t)d)
		snprintf(buf, n, "%.1f", d);
	else if (a >= 1)
		snprintf(buf, n, "%.3f", d);
	else
		snprintf(buf, n, "%.4g", d);
}

static void fmt_change(char *buf, size_t n, sqlite3_stmt *st, int col, int verdict_col)
{
	const char *v = (const char *)sqlite3_column_text(st, verdict_col);

	if (sqlite3_column_type(st, col) != SQLITE_NULL)
		snprintf(buf, n, "%+.1f%%", sqlite3_column_double(st, col));
	else if (v && (!strcmp(v, "regressed") || !strcmp(v, "improved")))
		snprintf(buf, n, "from 0");
	else
		snprintf(buf, n, "-");
}

static void series_name(char *buf, size_t n, sqlite3_stmt *st)
{
	const char *m = (const char *)sqlite3_column_text(st, 0);
	const char *k = (const char *)sqlite3_column_text(st, 1);

	if (k)
		snprintf(buf, n, "%s[%s]", m, k);
	else
		snprintf(buf, n, "%s", m);
}

static void rank_text(char *buf, size_t n, sqlite3_stmt *st, int col)
{
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		snprintf(buf, n, "-");
	else
		snprintf(buf, n, "%lld", (long long)sqlite3_column_int64(st, col));
}

#define GATE_COLS "metric, key, rank, baseline, now, change_pct, \"limit\", verdict"

/* The side-by-side report: metric, rank, baseline, now, change, verdict. */
static int print_report(struct gate *g)
{
	static const char *const names[] = { "metric", "rank", "baseline", "now", "change",
					     "verdict" };
	struct output *o = output_new(STDOUT_FILENO, FQ_FMT_TABLE);
	sqlite3_stmt *st = NULL;
	int err = -ENOMEM;

	if (!o || sqlite3_prepare_v2(g->db, "SELECT " GATE_COLS " FROM temp.gate ORDER BY rowid",
				     -1, &st, NULL))
		goto out;
	err = output_begin(o, 6, names);
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		char c[6][160];
		struct wire_value v[6];

		series_name(c[0], sizeof(c[0]), st);
		rank_text(c[1], sizeof(c[1]), st, 2);
		fmt_num(c[2], sizeof(c[2]), st, 3);
		fmt_num(c[3], sizeof(c[3]), st, 4);
		fmt_change(c[4], sizeof(c[4]), st, 5, 7);
		snprintf(c[5], sizeof(c[5]), "%s", (const char *)sqlite3_column_text(st, 7));
		for (int i = 0; i < 6; i++)
			v[i] = (struct wire_value){ .type = WIRE_TEXT, .p = c[i], .n = strlen(c[i]) };
		err = output_row(o, v);
	}
	if (!err)
		err = output_end(o, NULL);
out:
	sqlite3_finalize(st);
	output_free(o);
	return err && err != -EPIPE ? gate_error("cannot write the report: %s", strerror(-err))
				    : -1;
}

static void xml_str(struct strbuf *b, const char *s)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '&')
			sb_puts(b, "&amp;");
		else if (c == '<')
			sb_puts(b, "&lt;");
		else if (c == '>')
			sb_puts(b, "&gt;");
		else if (c == '"')
			sb_puts(b, "&quot;");
		else if (c < 0x20 && c != '\n' && c != '\t')
			sb_putc(b, ' '); /* not allowed in XML 1.0 */
		else
			sb_putc(b, (char)c);
	}
}

/* One line per failing series, for the failure message and the stderr summary. */
static void failure_text(char *buf, size_t n, sqlite3_stmt *st, double tol)
{
	char name[160], rank[32], base[48], now[48], change[48];

	series_name(name, sizeof(name), st);
	rank_text(rank, sizeof(rank), st, 2);
	fmt_num(base, sizeof(base), st, 3);
	fmt_num(now, sizeof(now), st, 4);
	fmt_change(change, sizeof(change), st, 5, 7);
	if (!strcmp((const char *)sqlite3_column_text(st, 7), "missing"))
		snprintf(buf, n, "%s%s%s missing (baseline %s)", name,
			 strcmp(rank, "-") ? " rank " : "", strcmp(rank, "-") ? rank : "", base);
	else
		snprintf(buf, n, "%s%s%s %s (baseline %s, now %s, tolerance %g%%)", name,
			 strcmp(rank, "-") ? " rank " : "", strcmp(rank, "-") ? rank : "", change,
			 base, now, tol * 100);
}

static int print_junit(struct gate *g, int nfail, FILE *f, const char *path)
{
	struct strbuf b = STRBUF_INIT;
	sqlite3_stmt *st = NULL;
	int n = 0, ret = -1;
	size_t off;

	if (sqlite3_prepare_v2(g->db, "SELECT " GATE_COLS " FROM temp.gate ORDER BY rowid", -1,
			       &st, NULL))
		return gate_error("cannot read the comparison: %s", sqlite3_errmsg(g->db));
	sb_puts(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
	off = b.len;
	while (sqlite3_step(st) == SQLITE_ROW) {
		char name[160], rank[32], msg[512];
		const char *v = (const char *)sqlite3_column_text(st, 7);

		series_name(name, sizeof(name), st);
		rank_text(rank, sizeof(rank), st, 2);
		sb_puts(&b, "    <testcase classname=\"fleetq.gate.");
		xml_str(&b, name);
		sb_puts(&b, "\" name=\"");
		if (strcmp(rank, "-"))
			sb_printf(&b, "rank %s", rank);
		else
			xml_str(&b, name);
		sb_puts(&b, "\" time=\"0\">");
		if (!strcmp(v, "regressed") || !strcmp(v, "missing")) {
			failure_text(msg, sizeof(msg), st, g->tol);
			sb_puts(&b, "\n      <failure type=\"");
			sb_puts(&b, v);
			sb_puts(&b, "\" message=\"");
			xml_str(&b, msg);
			sb_puts(&b, "\">");
			xml_str(&b, msg);
			sb_puts(&b, "</failure>\n    ");
		} else {
			sb_puts(&b, "\n      <system-out>");
			xml_str(&b, v);
			sb_puts(&b, "</system-out>\n    ");
		}
		sb_puts(&b, "</testcase>\n");
		n++;
	}
	sqlite3_finalize(st);
	sb_puts(&b, "  </testsuite>\n</testsuites>\n");
	{
		/* the header needs the counts: build it and splice it in */
		struct strbuf h = STRBUF_INIT;
		char *body = NULL;

		sb_printf(&h, "<testsuites name=\"fleetq gate\" tests=\"%d\" failures=\"%d\">\n  "
			      "<testsuite name=\"fleetq gate\" tests=\"%d\" failures=\"%d\" "
			      "errors=\"0\" skipped=\"0\">\n",
			  n, nfail, n, nfail);
		if (!b.oom && !h.oom) {
			body = strdup(b.s + off);
			b.len = off;
			b.s[off] = 0;
			sb_puts(&b, h.s);
			if (body)
				sb_puts(&b, body);
			else
				b.oom = 1;
		}
		free(body);
		sb_release(&h);
	}
	if (b.oom)
		ret = gate_error("out of memory");
	else if (fwrite(b.s, 1, b.len, f) != b.len || fflush(f))
		ret = gate_error("cannot write %s: %s", path, strerror(errno));
	sb_release(&b);
	return ret;
}

/* --junit FILE: the same comparison as the report, into FILE. */
static int write_junit(struct gate *g, int nfail, const char *path)
{
	FILE *f = fopen(path, "w");
	int ret;

	if (!f)
		return gate_error("cannot write junit file '%s': %s: check --junit", path,
				  strerror(errno));
	ret = print_junit(g, nfail, f, path);
	if (fclose(f) && ret < 0)
		ret = gate_error("cannot write junit file '%s': %s: check --junit", path,
				 strerror(errno));
	return ret;
}

/* Machine formats: the rows of a table as the output module writes them. */
static int print_rows(sqlite3 *db, int format, const char *sql, const char *cov_json)
{
	struct output *o = output_new(STDOUT_FILENO, format);
	sqlite3_stmt *st = NULL;
	struct wire_value v[16];

	if (o && cov_json)
		output_with_coverage(o);
	const char *names[16];
	int n, err = -ENOMEM;

	if (!o || sqlite3_prepare_v2(db, sql, -1, &st, NULL))
		goto out;
	n = sqlite3_column_count(st);
	n = n > 16 ? 16 : n;
	for (int i = 0; i < n; i++)
		names[i] = sqlite3_column_name(st, i);
	err = output_begin(o, n, names);
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		for (int i = 0; i < n; i++) {
			switch (sqlite3_column_type(st, i)) {
			case SQLITE_INTEGER:
				v[i] = (struct wire_value){ .type = WIRE_INT,
							    .i = sqlite3_column_int64(st, i) };
				break;
			case SQLITE_FLOAT:
				v[i] = (struct wire_value){ .type = WIRE_REAL,
							    .d = sqlite3_column_double(st, i) };
				break;
			case SQLITE_NULL:
				v[i] = (struct wire_value){ .type = WIRE_NULL };
				break;
			default:
				v[i] = (struct wire_value){ .type = WIRE_TEXT,
							    .p = sqlite3_column_text(st, i),
							    .n = sqlite3_column_bytes(st, i) };
			}
		}
		err = output_row(o, v);
	}
	if (!err)
		err = output_end(o, cov_json);
out:
	sqlite3_finalize(st);
	output_free(o);
	return err && err != -EPIPE ? gate_error("cannot write the output: %s", strerror(-err))
				    : -1;
}

/* "fleetq gate: 8 metrics, 52 checks, 1 regressed: busy_gap_us rank 6 +33.1% (...)" */
static int summarize(struct gate *g, int quiet)
{
	sqlite3_stmt *st = NULL;
	struct strbuf b = STRBUF_INIT;
	int checks = 0, bad = 0, shown = 0;

	if (sqlite3_prepare_v2(g->db, "SELECT " GATE_COLS " FROM temp.gate ORDER BY "
				      "verdict <> 'regressed', abs(change_pct) DESC, rowid",
			       -1, &st, NULL))
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *v = (const char *)sqlite3_column_text(st, 7);
		char msg[512];

		checks++;
		if (strcmp(v, "regressed") && strcmp(v, "missing"))
			continue;
		bad++;
		if (shown++ < 3) {
			failure_text(msg, sizeof(msg), st, g->tol);
			sb_printf(&b, "%s%s", shown > 1 ? "; " : "", msg);
		}
	}
	sqlite3_finalize(st);
	if (!quiet) {
		if (bad)
			fprintf(stderr,
				"fleetq gate: %zu metric%s, %d check%s, %d regressed: %s%s\n", g->nm,
				g->nm == 1 ? "" : "s", checks, checks == 1 ? "" : "s", bad,
				b.s ? b.s : "", bad > 3 ? "; ..." : "");
		else
			fprintf(stderr, "fleetq gate: %zu metric%s, %d check%s, none regressed "
					"(tolerance %g%%, %" PRId64 " rank%s)\n",
				g->nm, g->nm == 1 ? "" : "s", checks, checks == 1 ? "" : "s",
				g->tol * 100, g->ranks, g->ranks == 1 ? "" : "s");
	}
	sb_release(&b);
	return bad;
}

int gate_fail_if(sqlite3 *db, const char *sql, long long *rows, char **cause)
{
	struct output *o = output_new(-1, FQ_FMT_TABLE);
	sqlite3_stmt *st = NULL;
	struct wire_value v[32];
	const char *names[32];
	int n, rc, err = 0;

	*rows = 0;
	*cause = NULL;
	if (!o)
		return -ENOMEM;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK || !st) {
		if (asprintf(cause, "--fail-if: %s: fix the SQL (it runs over the merged tables: "
				    "results and clock, or gate's)",
			     st || sqlite3_errcode(db) ? sqlite3_errmsg(db) : "no statement") < 0)
			*cause = NULL;
		err = -EINVAL;
		goto out;
	}
	n = sqlite3_column_count(st);
	n = n > 32 ? 32 : n;
	for (int i = 0; i < n; i++)
		names[i] = sqlite3_column_name(st, i);
	output_begin(o, n, names);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (int i = 0; i < n; i++) {
			int t = sqlite3_column_type(st, i);

			if (t == SQLITE_INTEGER)
				v[i] = (struct wire_value){ .type = WIRE_INT,
							    .i = sqlite3_column_int64(st, i) };
			else if (t == SQLITE_FLOAT)
				v[i] = (struct wire_value){ .type = WIRE_REAL,
							    .d = sqlite3_column_double(st, i) };
			else if (t == SQLITE_NULL)
				v[i] = (struct wire_value){ .type = WIRE_NULL };
			else
				v[i] = (struct wire_value){ .type = WIRE_TEXT,
							    .p = sqlite3_column_text(st, i),
							    .n = sqlite3_column_bytes(st, i) };
		}
		output_row(o, v);
		(*rows)++;
	}
	if (rc != SQLITE_DONE) {
		if (asprintf(cause, "--fail-if: %s", sqlite3_errmsg(db)) < 0)
			*cause = NULL;
		err = -EINVAL;
		goto out;
	}
	output_end(o, NULL);
	if (*rows)
		fprintf(stderr, "fleetq: --fail-if: %lld row%s:\n%s", *rows, *rows == 1 ? "" : "s",
			output_text(o));
out:
	sqlite3_finalize(st);
	output_free(o);
	return err;
}

/* ---- the whole gate ---- */

int gate_main(const struct gate_args *a, struct fanout_params *fp)
{
	struct gate g = { 0 };
	struct merge *m = NULL;
	struct coverage *cov = NULL;
	struct fanout *first = NULL;
	sqlite3_stmt *st = NULL;
	char *cause = NULL, *summary = NULL, *common = NULL, *cov_json = NULL;
	const char *bpath = a->baseline ? a->baseline : a->save;
	size_t ok;
	int ret, bad = 0, cexit;

	if (a->save && a->baseline) {
		ret = gate_error("--save and --baseline conflict: record a baseline (--save FILE) "
				 "or compare with one (--baseline FILE), one at a time");
		goto out;
	}
	if (!a->save == !a->baseline) {
		ret = gate_error("say what to do: --save FILE (record a baseline) or --baseline "
				 "FILE (compare with one)");
		goto out;
	}
	/* A baseline that cannot be written must not cost the fleet a fan-out first. */
	if (a->save && (ret = save_writable(a->save, "baseline", "save")) >= 0)
		goto out;
	if (a->junit && a->save) {
		ret = gate_error("--junit reports a comparison: use it with --baseline");
		goto out;
	}
	if (a->junit && (ret = save_writable(a->junit, "junit file", "junit")) >= 0)
		goto out;
	if (a->append && !a->save) {
		ret = gate_error("--append goes with --save FILE: it adds this run to FILE");
		goto out;
	}
	if (a->format == GATE_FMT_JUNIT && a->save) {
		ret = gate_error("--format junit reports a comparison: use it with --baseline");
		goto out;
	}
	ret = setup(&g, a);
	if (ret >= 0)
		goto out;
	ret = FQ_EXIT_USAGE;
	m = merge_new(&cause);
	cov = coverage_new(fp->nhosts, fp->hosts);
	if (!m || !cov) {
		gate_error("%s", cause ? cause : "out of memory");
		goto out;
	}
	g.db = merge_db(m);
	if (a->baseline || (a->append && access(a->save, F_OK) == 0)) {
		if ((ret = load_baseline(&g, bpath)) >= 0)
			goto out;
		ret = FQ_EXIT_USAGE;
		if (a->samples && a->append && a->samples != g.bsamples) {
			gate_error("--samples %d, but baseline '%s' has %" PRId64 " per run: "
				   "append runs alike",
				   a->samples, bpath, g.bsamples);
			goto out;
		}
		if (!a->samples)
			g.samples = (int)g.bsamples;
		if ((ret = match_baseline(&g, bpath)) >= 0)
			goto out;
		ret = FQ_EXIT_USAGE;
		if ((size_t)g.bnodes != fp->nhosts) {
			gate_error("shape mismatch: %zu nodes now, baseline '%s' has %" PRId64
				   ": run the job on as many nodes, or record a baseline for "
				   "this shape (fleetq gate --save)",
				   fp->nhosts, bpath, g.bnodes);
			goto out;
		}
	}
	if (!g.nm && (ret = add_builtins(&g, DEFAULT_BUILTINS)) >= 0)
		goto out;
	if ((ret = plan_tables(&g)) >= 0)
		goto out;
	ret = FQ_EXIT_USAGE;
	/* A closed stdout must not kill us (and SSL writes must not either). */
	signal(SIGPIPE, SIG_IGN);
	if ((ret = fetch(&g, fp, m, cov, &first)) >= 0)
		goto out;
	ret = FQ_EXIT_USAGE;
	summary = coverage_summary(cov);
	common = coverage_common_failure(cov);
	if ((a->format == FQ_FMT_JSON || a->format == FQ_FMT_NDJSON) && a->with_coverage)
		cov_json = coverage_json(cov);
	if (common)
		fprintf(stderr, "fleetq: %s\n", common);
	ok = coverage_count(cov, FQ_OK);
	cexit = coverage_exit(cov, a->min_coverage);
	if (!ok || (double)ok < a->min_coverage * (double)fp->nhosts) {
		/* a gate that did not see the fleet must not say "no regression" */
		fprintf(stderr, "fleetq: gate: not %s: %zu of %zu nodes answered fully (see the "
				"coverage)\n",
			a->save ? "saved" : "compared", ok, fp->nhosts);
		ret = cexit ? cexit : FQ_EXIT_COVERAGE;
		goto done;
	}
	if (sqlite3_prepare_v2(g.db, "SELECT count(DISTINCT rank) FROM main.collectives", -1, &st,
			       NULL) ||
	    sqlite3_step(st) != SQLITE_ROW) {
		gate_error("cannot count the ranks: %s", sqlite3_errmsg(g.db));
		goto done;
	}
	g.ranks = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	st = NULL;
	if (!g.ranks) {
		fprintf(stderr, "fleetq: gate: no collectives in the window (%s%s%s) on any node: "
				"check --since and --job\n",
			a->since_ns == 0 ? "all time" : "last ",
			a->since_ns == 0 ? "" : a->since_text ? a->since_text : "10m",
			a->job ? ", that job" : "");
		ret = FQ_EXIT_COVERAGE;
		goto done;
	}
	if (g.have_base && ok == fp->nhosts && g.ranks != g.branks) {
		gate_error("shape mismatch: %" PRId64 " ranks now, baseline '%s' has %" PRId64
			   ": run the job with as many ranks, or record a baseline for this "
			   "shape (fleetq gate --save)",
			   g.ranks, bpath, g.branks);
		goto done;
	}
	if ((ret = evaluate(&g)) >= 0)
		goto done;
	ret = FQ_EXIT_USAGE;
	if (a->save) {
		if ((ret = save(&g, fp, first, a->save)) >= 0)
			goto done;
		if (a->format == GATE_FMT_REPORT)
			ret = print_rows(g.db, FQ_FMT_TABLE,
					 "SELECT metric, nullif(key, '') AS key, rank, median(value) "
					 "AS value FROM temp.gate_now n JOIN temp.gate_metric m ON "
					 "m.name = n.metric GROUP BY metric, key, rank ORDER BY "
					 "m.pos, key, rank",
					 NULL);
		else
			ret = print_rows(g.db, a->format,
					 "SELECT metric, nullif(key, '') AS key, rank, sample, value "
					 "FROM temp.gate_now ORDER BY rowid",
					 cov_json);
	} else {
		if ((ret = compare(&g)) >= 0)
			goto done;
		bad = summarize(&g, 1);
		if (a->format == GATE_FMT_REPORT)
			ret = print_report(&g);
		else if (a->format == GATE_FMT_JUNIT)
			ret = print_junit(&g, bad, stdout, "the output");
		else
			ret = print_rows(g.db, a->format,
					 "SELECT " GATE_COLS ", baseline_mad, baseline_samples FROM "
					 "temp.gate ORDER BY rowid",
					 cov_json);
		if (ret < 0 && a->junit)
			ret = write_junit(&g, bad, a->junit);
		summarize(&g, a->quiet);
	}
	if (ret >= 0)
		goto done;
	if (a->fail_if) {
		long long rows;

		if (gate_fail_if(g.db, a->fail_if, &rows, &cause)) {
			ret = gate_error("%s", cause ? cause : "out of memory");
			goto done;
		}
		bad += rows > 0;
	}
	ret = bad ? FQ_EXIT_GATE : cexit;
done:
	if (!a->quiet && summary)
		fprintf(stderr, "%s\n", summary);
out:
	sqlite3_finalize(st);
	free(cause);
	free(summary);
	free(common);
	free(cov_json);
	fanout_free(first);
	coverage_free(cov);
	merge_free(m);
	gate_release(&g);
	return ret;
}
