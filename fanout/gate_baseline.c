/* SPDX-License-Identifier: MIT */
/*
 * fleetq gate: the baseline file. Loading a baseline (JSON, read by SQLite's json1) and
 * matching its metrics and shape, and --save: writing one, or adding a run to it.
 */
#include "gate_int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coverage.h"
#include "output.h"
#include "strbuf.h"

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
int gate_load_baseline(struct gate *g, const char *path)
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
int gate_match_baseline(struct gate *g, const char *path)
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
		    (r = gate_add_metric(g, name, strlen(name), sql, higher,
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
 * gate_save() writes PATH.tmp beside path and renames it, --junit writes path: its
 * folder must take a new file, and path must not be a folder. Returns -1 to go
 * on, else 2.
 */
int gate_save_writable(const char *path, const char *what, const char *opt)
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

int gate_save(struct gate *g, const struct fanout_params *fp, struct fanout *first,
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
