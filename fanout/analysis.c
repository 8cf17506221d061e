/* SPDX-License-Identifier: MIT */
#include "analysis.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqsql.h"
#include "rowcol.h"
#include "sqlfiles.h"
#include "strbuf.h"
#include "why.h"


/* ":since_ns", "@since_ns" and "$since_ns" are one name to a user adapting a file. */
static int same_param(const char *a, const char *b)
{
	return a && b && *a && *b && !strcmp(a + 1, b + 1);
}

static int bind_value(sqlite3_stmt *st, int idx, const struct wire_value *v)
{
	switch (v->type) {
	case WIRE_INT:
		return sqlite3_bind_int64(st, idx, v->i);
	case WIRE_REAL:
		return sqlite3_bind_double(st, idx, v->d);
	case WIRE_TEXT:
		return sqlite3_bind_text64(st, idx, v->p, v->n, SQLITE_TRANSIENT, SQLITE_UTF8);
	case WIRE_BLOB:
		return sqlite3_bind_blob64(st, idx, v->p, v->n, SQLITE_TRANSIENT);
	default:
		return sqlite3_bind_null(st, idx);
	}
}

void an_plan_release(struct an_plan *p)
{
	free(p->node_sql);
	free(p->merge_sql);
	free(p->node_origin);
	free(p->merge_origin);
	for (size_t i = 0; p->param_names && i < p->nparams; i++)
		free(p->param_names[i]);
	free(p->param_names);
	free(p->params);
	memset(p, 0, sizeof(*p));
}

int an_plan_load(struct an_plan *p, const char *name, const struct an_param *node_params,
		 size_t n, const char *clock_name, char **cause)
{
	sqlite3 *db = NULL, *mdb = NULL;
	sqlite3_stmt *st = NULL, *mst = NULL;
	struct strbuf b = STRBUF_INIT;
	char fn[128], *why = NULL;
	int err = -ENOMEM, np, nc, rc;

	memset(p, 0, sizeof(*p));
	*cause = NULL;
	snprintf(fn, sizeof(fn), "%s.node.sql", name);
	p->node_sql = sqlfile_load(fn, &p->node_origin, cause);
	if (!p->node_sql) {
		err = -errno;
		goto out;
	}
	snprintf(fn, sizeof(fn), "%s.merge.sql", name);
	p->merge_sql = sqlfile_load(fn, &p->merge_origin, cause);
	if (!p->merge_sql) {
		err = -errno;
		goto out;
	}
	/* The node file against an empty trace of this version's schema. */
	if (sqlite3_open(":memory:", &db) != SQLITE_OK || fqsql_register(db) ||
	    fqsql_schema_apply(db, &why)) {
		err = fq_fail(cause, -EIO, "cannot check the analysis SQL: %s",
			   why ? why : sqlite3_errmsg(db));
		goto out;
	}
	rc = sqlite3_prepare_v2(db, p->node_sql, -1, &st, NULL);
	if (rc != SQLITE_OK || !st) {
		err = fq_fail(cause, -EINVAL, "%s: %s: fix the file (or unset FLEETQ_SQL_DIR)",
			   p->node_origin, rc ? sqlite3_errmsg(db) : "no statement");
		goto out;
	}
	np = sqlite3_bind_parameter_count(st);
	p->params = calloc(np ? np : 1, sizeof(*p->params));
	p->param_names = calloc(np ? np : 1, sizeof(*p->param_names));
	if (!p->params || !p->param_names)
		goto out;
	p->nparams = np;
	for (int i = 0; i < np; i++) {
		const char *pn = sqlite3_bind_parameter_name(st, i + 1);

		p->params[i].type = WIRE_NULL;
		if (!pn)
			continue;
		p->param_names[i] = strdup(pn);
		if (!p->param_names[i])
			goto out;
		for (size_t k = 0; k < n; k++)
			if (same_param(pn, node_params[k].name))
				p->params[i] = node_params[k].v;
		if (clock_name && same_param(pn, clock_name) && p->params[i].type == WIRE_INT)
			p->clock_param = i + 1;
	}
	/* The merge file against a results table of the node file's columns. */
	nc = sqlite3_column_count(st);
	sb_puts(&b, "CREATE TABLE results(\"node\"");
	for (int i = 0; i < nc; i++) {
		char *q = sqlite3_mprintf(",\"%w\"", sqlite3_column_name(st, i));

		sb_puts(&b, q ? q : "");
		sqlite3_free(q);
	}
	sb_puts(&b, "); CREATE TABLE clock(node TEXT, offset_ns INTEGER, rtt_ns INTEGER, "
		    "samples INTEGER);");
	if (b.oom)
		goto out;
	if (sqlite3_open(":memory:", &mdb) != SQLITE_OK || fqsql_register(mdb) ||
	    sqlite3_exec(mdb, b.s, NULL, NULL, NULL) != SQLITE_OK) {
		err = fq_fail(cause, -EIO, "cannot check the merge SQL: %s", sqlite3_errmsg(mdb));
		goto out;
	}
	rc = sqlite3_prepare_v2(mdb, p->merge_sql, -1, &mst, NULL);
	if (rc != SQLITE_OK || !mst) {
		err = fq_fail(cause, -EINVAL, "%s: %s: fix the file (or unset FLEETQ_SQL_DIR)",
			   p->merge_origin, rc ? sqlite3_errmsg(mdb) : "no statement");
		goto out;
	}
	err = 0;
out:
	sqlite3_finalize(st);
	sqlite3_finalize(mst);
	sqlite3_close(db);
	sqlite3_close(mdb);
	sb_release(&b);
	free(why);
	if (err && !*cause && err == -ENOMEM)
		*cause = strdup("out of memory");
	return err;
}

static void show_value(FILE *f, const struct wire_value *v)
{
	switch (v->type) {
	case WIRE_INT:
		fprintf(f, "%" PRId64, v->i);
		break;
	case WIRE_REAL:
		fprintf(f, "%g", v->d);
		break;
	case WIRE_TEXT:
		fprintf(f, "'%.*s'", (int)v->n, (const char *)v->p);
		break;
	default:
		fputs("NULL", f);
	}
}

static void show_params(FILE *f, const struct an_param *ps, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "--   %s = ", ps[i].name);
		show_value(f, &ps[i].v);
		if (ps[i].v.type == WIRE_NULL)
			fputs(" (the file's default)", f);
		if (ps[i].note)
			fprintf(f, " (%s)", ps[i].note);
		fputc('\n', f);
	}
}

void an_plan_show(const struct an_plan *p, FILE *f, const struct an_param *node_params,
		  size_t nn, const struct an_param *merge_params, size_t nm)
{
	size_t len;

	fprintf(f, "-- node SQL, run on every node: %s\n-- parameters:\n", p->node_origin);
	show_params(f, node_params, nn);
	for (size_t i = 0; i < p->nparams; i++) {
		int known = 0;

		for (size_t k = 0; k < nn; k++)
			known |= same_param(p->param_names[i], node_params[k].name);
		if (!known)
			fprintf(f, "--   %s = NULL (not set by fleetq)\n",
				p->param_names[i] ? p->param_names[i] : "?");
	}
	len = strlen(p->node_sql);
	fprintf(f, "%s%s", p->node_sql, len && p->node_sql[len - 1] != '\n' ? "\n" : "");
	fprintf(f, "\n-- merge SQL, run over tables results and clock: %s\n-- parameters:\n",
		p->merge_origin);
	show_params(f, merge_params, nm);
	len = strlen(p->merge_sql);
	fprintf(f, "%s%s", p->merge_sql, len && p->merge_sql[len - 1] != '\n' ? "\n" : "");
}

int an_merge(sqlite3 *db, const char *merge_sql, const struct an_param *ps, size_t n,
	     char **cause)
{
	sqlite3_stmt *st = NULL;
	char *sql = NULL;
	int err = 0, rc;

	*cause = NULL;
	/* Kept as a table: the report and the machine formats read the same rows. */
	if (asprintf(&sql, "CREATE TEMP TABLE fq_analysis AS %s", merge_sql) < 0)
		return fq_fail(cause, -ENOMEM, "out of memory");
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		err = fq_fail(cause, -EINVAL, "merge SQL: %s", sqlite3_errmsg(db));
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		int idx = sqlite3_bind_parameter_index(st, ps[i].name);

		if (idx)
			bind_value(st, idx, &ps[i].v);
	}
	rc = sqlite3_step(st);
	if (rc != SQLITE_DONE)
		err = fq_fail(cause, -EINVAL, "merge SQL: %s", sqlite3_errmsg(db));
out:
	sqlite3_finalize(st);
	free(sql);
	return err;
}

void an_findings_release(struct an_findings *f)
{
	free(f->first);
	memset(f, 0, sizeof(*f));
}

static const char *or_q(const char *s)
{
	return s ? s : "?";
}

/* Ranks and communicators that answered, from the node rows (0 when unknown). */
static void count_ranks(sqlite3 *db, int netcheck, struct an_findings *fd)
{
	sqlite3_stmt *st = NULL;
	/* stragglers: the nodes' 'rank' rows, one per rank */
	const char *sql =
		netcheck ? "SELECT count(*), count(DISTINCT comm_hash) FROM (SELECT DISTINCT "
			   "comm_hash, node, rank, pid FROM results WHERE source = 'span')"
			 : "SELECT count(*), count(DISTINCT comm_hash) FROM (SELECT DISTINCT "
			   "comm_hash, node, rank, pid FROM results WHERE kind = 'rank')";

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		fd->ranks = sqlite3_column_int(st, 0);
		fd->comms = sqlite3_column_int(st, 1);
	}
	sqlite3_finalize(st);
	st = NULL;
	/*
	 * What the verdict covers in time: --max-seqs keeps each communicator's newest seqs,
	 * which may be far less than --since (FSDP: ~750 collectives a second). The 'seq'
	 * rows' enqueue times, one per (communicator, seq) and node: each node's on its own
	 * clock (a node whose clock is off must not stretch it), the longest per communicator.
	 */
	if (!netcheck &&
	    sqlite3_prepare_v2(db, "SELECT min(sp), max(sp) FROM (SELECT max(sp) AS sp FROM "
				   "(SELECT comm_hash, max(ts_ns) - min(ts_ns) AS sp FROM results "
				   "WHERE kind = 'seq' GROUP BY comm_hash, node) GROUP BY comm_hash)",
			       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		fd->span_lo = sqlite3_column_double(st, 0) / 1e9;
		fd->span_hi = sqlite3_column_double(st, 1) / 1e9;
	}
	sqlite3_finalize(st);
}

static int is_hung(const char *verdict)
{
	return verdict && (!strcmp(verdict, "hung") || !strcmp(verdict, "desync"));
}

/*
 * The rank a person knows: the job's (RANK of the process), where the node knows it; a
 * pipeline's or a tensor-parallel group's communicator numbers its ranks from 0.
 */
static const char *job_rank(sqlite3_stmt *st)
{
	return row_has(st, "job_rank") ? row_txt(st, "job_rank") : or_q(row_txt(st, "rank"));
}

/* ", rank 1 in communicator" where that differs from the job's rank, else ", communicator". */
static void comm_rank(FILE *out, sqlite3_stmt *st)
{
	const char *r = row_txt(st, "rank");

	if (row_has(st, "job_rank") && (!r || strcmp(r, row_txt(st, "job_rank"))))
		fprintf(out, ", rank %s in communicator", or_q(r));
	else
		fputs(", communicator", out);
}

static void set_first(struct an_findings *fd, sqlite3_stmt *st)
{
	if (!fd->first && asprintf(&fd->first, "rank %s on %s", job_rank(st),
				   or_q(row_txt(st, "node"))) < 0)
		fd->first = NULL;
}

/* Walks temp.fq_analysis; report(out, st) prints one row (NULL: count only). */
static int walk(sqlite3 *db, int netcheck, FILE *out, struct an_findings *fd,
		void (*report)(FILE *out, sqlite3_stmt *st))
{
	sqlite3_stmt *st = NULL;
	int rc;

	memset(fd, 0, sizeof(*fd));
	count_ranks(db, netcheck, fd);
	if (sqlite3_prepare_v2(db, "SELECT * FROM temp.fq_analysis ORDER BY rowid", -1, &st,
			       NULL) != SQLITE_OK)
		return -EIO;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (netcheck) {
			if (row_has(st, "flagged") && row_dbl(st, "flagged") != 0) {
				fd->flagged++;
				set_first(fd, st);
			}
		} else {
			const char *v = row_txt(st, "verdict");

			if (is_hung(v))
				fd->hung++;
			else if (v && !strcmp(v, "straggler"))
				fd->stragglers++;
			if (is_hung(v) || (v && !strcmp(v, "straggler")))
				set_first(fd, st);
		}
		if (report && out)
			report(out, st);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -EIO;
}

int an_count(sqlite3 *db, int netcheck, struct an_findings *fd)
{
	return walk(db, netcheck, NULL, fd, NULL);
}

/* The closest rank's second line where its kernels lean its way on all-gathers or
 * reduce-scatters (FSDP): its peers wait on it at every layer, under their own compute,
 * so the kernels' effect (the step's largest wait) can be a fraction of its cost (a GPU
 * slower all through its step cost a CNN 14.2 %, its kernels said 2.2 %), and the most it
 * can cost is what their kernels waited in all (57 % there). Empty where not so, and where
 * that is under twice the effect. */
static void near_fsdp(sqlite3_stmt *st, char *buf, size_t len)
{
	const char *op = (const char *)sqlite3_column_text(st, 6);

	buf[0] = 0;
	if (sqlite3_column_count(st) < 8 || !op || sqlite3_column_type(st, 7) == SQLITE_NULL ||
	    (strcmp(op, "AllGather") && strcmp(op, "ReduceScatter")) ||
	    sqlite3_column_double(st, 7) < 2 * sqlite3_column_double(st, 3))
		return;
	snprintf(buf, len, "    (all-gathers and reduce-scatters: its peers' kernels waited on it "
			   "%.1f%% of the span in all, overlapping their own compute; what it cost "
			   "the job is not measured)\n", sqlite3_column_double(st, 7));
}

long long an_widen(sqlite3 *db, long long seqs, double effect_steps, long long max_seqs,
		   long long *steps)
{
	/* (a bar grows by sqrt(effect_steps / steps): the full span's is bar_pct over that) */
	static const char sql[] =
		"SELECT bar_steps FROM temp.fq_analysis "
		"WHERE verdict = 'ok' AND near_pct IS NOT NULL AND bar_steps > 0 "
		"AND near_pct < bar_pct AND near_pct >= bar_pct * sqrt(bar_steps / ?1) "
		"AND NOT EXISTS (SELECT 1 FROM temp.fq_analysis WHERE verdict <> 'ok') "
		"ORDER BY near_pct DESC LIMIT 1";
	sqlite3_stmt *st = NULL;
	long long want = 0;

	*steps = 0;
	if (seqs <= 0 || !(effect_steps > 0) ||
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	sqlite3_bind_double(st, 1, effect_steps);
	if (sqlite3_step(st) == SQLITE_ROW) {
		double n = sqlite3_column_double(st, 0);

		*steps = sqlite3_column_int64(st, 0);
		want = (long long)ceil((double)seqs * effect_steps / n * 1.1 / 100) * 100;
		if (want > max_seqs)
			want = max_seqs;
		if (want <= seqs)
			want = 0;
	}
out:
	sqlite3_finalize(st);
	return want;
}

char *an_near(sqlite3 *db, int *grown)
{
	/* (a user's merge file without these columns: no line; without the last two, which
	 * came later, no FSDP line; without z_compute, which came last, the same less it) */
#define NEAR_SQL(z, more)                                                                    \
	"SELECT coalesce(job_rank, rank), node, near_signal, near_pct, bar_pct, "             \
	"CASE near_signal WHEN 'wait' THEN z_wait WHEN 'gpu' THEN z_gpu "                      \
	"WHEN 'pace' THEN z_pace " z "ELSE z_cpu END" more " "                                 \
	"FROM temp.fq_analysis WHERE verdict = 'ok' AND near_pct IS NOT NULL "                 \
	"ORDER BY near_pct DESC LIMIT 1"
	static const char sql[] = NEAR_SQL("WHEN 'compute' THEN z_compute ",
					   ", iif(near_signal = 'gpu', gpu_op, NULL), "
					   "peers_kern_pct"),
			  mid[] = NEAR_SQL("", ", iif(near_signal = 'gpu', gpu_op, NULL), "
					       "peers_kern_pct"),
			  older[] = NEAR_SQL("", "");
#undef NEAR_SQL
	sqlite3_stmt *st = NULL;
	char *line = NULL, fsdp[256];

	*grown = 0;
	/* (the same row: a merge file without bar_steps has no grown bar to say) */
	if (sqlite3_prepare_v2(db,
			       "SELECT near_pct < bar_pct AND bar_steps IS NOT NULL "
			       "FROM temp.fq_analysis WHERE verdict = 'ok' AND near_pct IS NOT NULL "
			       "ORDER BY near_pct DESC LIMIT 1",
			       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		*grown = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK &&
	    sqlite3_prepare_v2(db, mid, -1, &st, NULL) != SQLITE_OK &&
	    sqlite3_prepare_v2(db, older, -1, &st, NULL) != SQLITE_OK)
		return NULL;
	if (sqlite3_step(st) == SQLITE_ROW) {
		const char *sig = (const char *)sqlite3_column_text(st, 2);
		const char *what = !sig			     ? "signal stands"
				   : !strcmp(sig, "wait")    ? "synchronize waits stand"
				   : !strcmp(sig, "gpu")     ? "collective kernels stand"
				   : !strcmp(sig, "pace")    ? "GPU's compute before each step stands"
				   : !strcmp(sig, "compute") ? "GPU's compute stream (least idle) stands"
							     : "CPU work stands";
		/* pace's effect is the uniform slowdown's estimate, not a measured loss */
		const char *model = sig && !strcmp(sig, "pace") ?
					    " if its GPU is slower all through its step," : "";
		double eff = sqlite3_column_double(st, 3), bar = sqlite3_column_double(st, 4);
		char tail[160];

		if (sqlite3_column_type(st, 4) == SQLITE_NULL)
			snprintf(tail, sizeof(tail), "no bar known");
		else if (eff < bar)
			snprintf(tail, sizeof(tail), "under the bar of %.1f%%", bar);
		else
			/* past the bar: the kernels, the pair or the send/recv rules held it back */
			snprintf(tail, sizeof(tail), "past the bar of %.1f%% but held back by the "
						     "other rules (--all shows every rank)", bar);
		near_fsdp(st, fsdp, sizeof(fsdp));
		if (asprintf(&line, "  closest: rank %s on %s: its %s out (z %.2f), %.1f%% "
				    "of the span,%s %s\n%s",
			     sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0)
							: "?",
			     sqlite3_column_text(st, 1) ? (const char *)sqlite3_column_text(st, 1)
							: "?",
			     what, sqlite3_column_double(st, 5), eff, model, tail, fsdp) < 0)
			line = NULL;
	}
	sqlite3_finalize(st);
	return line;
}

/* "late" is in the comma list sigs. */
static int named(const char *sigs, const char *sig)
{
	size_t n = strlen(sig);

	for (const char *s = sigs; s && *s; s = strchr(s, ',')) {
		s += *s == ',';
		if (!strncmp(s, sig, n) && (s[n] == ',' || !s[n]))
			return 1;
	}
	return 0;
}

/* One signal's line: its z and what it measured, "*" when it names the rank. */
static void signal_line(FILE *out, sqlite3_stmt *st, const char *sig, const char *own,
			const char *peer, const char *text)
{
	char zcol[16];

	snprintf(zcol, sizeof(zcol), "z_%s", sig);
	if (!row_has(st, zcol) && !row_has(st, own))
		return;
	fprintf(out, "  %s %-4s", named(row_txt(st, "signals"), sig) ? "*" : " ", sig);
	if (row_has(st, zcol))
		fprintf(out, " z=%+8.2f", row_dbl(st, zcol));
	else
		fprintf(out, " z=%8s", "-");
	if (row_has(st, own)) {
		fprintf(out, "  %.3f ms", row_dbl(st, own));
		if (peer && row_has(st, peer))
			fprintf(out, ", peers %.3f ms", row_dbl(st, peer));
		fprintf(out, " %s", text);
	}
	fputc('\n', out);
}

static void straggler_row(FILE *out, sqlite3_stmt *st)
{
	const char *v = row_txt(st, "verdict");

	if (is_hung(v)) {
		/* The line an epilog greps for. */
		fprintf(out, "hung: rank %s on %s stopped at seq %s (%s)", job_rank(st),
			or_q(row_txt(st, "node")), or_q(row_txt(st, "stopped_at_seq")),
			or_q(row_txt(st, "stopped_op")));
		if (row_has(st, "stopped_s_ago"))
			fprintf(out, ", %.1f s ago", row_dbl(st, "stopped_s_ago"));
		fprintf(out, "\n  pid %s", or_q(row_txt(st, "pid")));
		comm_rank(out, st);
		fprintf(out, " %s (%s ranks), its last collective was seq %s\n",
			or_q(row_txt(st, "comm_hash")), or_q(row_txt(st, "nranks")),
			or_q(row_txt(st, "last_seq")));
		return;
	}
	/* The line an epilog greps for, with the effect: never a z alone. */
	fprintf(out, "%s: rank %s on %s", v && !strcmp(v, "straggler") ? "straggler" : or_q(v),
		job_rank(st), or_q(row_txt(st, "node")));
	/* Its GPU's pace alone: an estimate that assumes a uniform slowdown, not a loss its
	 * peers were measured to take. */
	if (row_has(st, "effect_pct") && row_has(st, "effect_model") &&
	    !strcmp(row_txt(st, "effect_model"), "uniform"))
		fprintf(out, " (costs its job about %.1f%% of the span, if its GPU is slower all "
			     "through its step)", row_dbl(st, "effect_pct"));
	else if (row_has(st, "effect_pct"))
		fprintf(out, " (%s %.1f%% of %s)", v && !strcmp(v, "straggler") ?
			"costs its peers" : "largest effect", row_dbl(st, "effect_pct"),
			row_has(st, "signals") && !strcmp(row_txt(st, "signals"), "late") ?
				"a step" : "the span");
	fputc('\n', out);
	fprintf(out, "  pid %s", or_q(row_txt(st, "pid")));
	comm_rank(out, st);
	fprintf(out, " %s (%s of %s ranks answered", or_q(row_txt(st, "comm_hash")),
		or_q(row_txt(st, "ranks")), or_q(row_txt(st, "nranks")));
	if (row_has(st, "step_ms"))
		fprintf(out, ", step %.3f ms", row_dbl(st, "step_ms"));
	if (row_has(st, "span_s"))
		fprintf(out, ", span %.3f s", row_dbl(st, "span_s"));
	fprintf(out, ")\n");
	if (row_has(st, "signals"))
		fprintf(out, "  signals that name it: %s (method %s)\n", row_txt(st, "signals"),
			or_q(row_txt(st, "method")));
	/* A short span's bar: the same effect names a rank over 200 steps, not over 60. */
	if (row_has(st, "bar_steps"))
		fprintf(out, "  bar: %.1f%% (--min-effect grown for a span of %s steps; "
			     "--effect-steps)\n", row_dbl(st, "bar_pct"), row_txt(st, "bar_steps"));
	signal_line(out, st, "late", "late_ms", NULL,
		    "after the first rank to arrive (median per collective)");
	if (row_has(st, "late_ms")) {
		if (row_has(st, "clock_err_ms"))
			fprintf(out, "%12sclock offset uncertainty %.3f ms\n", "",
				row_dbl(st, "clock_err_ms"));
		else
			fprintf(out, "%12sclock offset uncertainty unknown: lateness names no one "
				     "alone\n", "");
	}
	signal_line(out, st, "wait", "wait_ms", "peer_wait_ms",
		    "a step waiting on the GPU (a straggler waits least)");
	if (row_has(st, "gpu_ms") || row_has(st, "z_gpu")) {
		char what[64];

		snprintf(what, sizeof(what), "per %s kernel on the GPU (shortest: arrives last)",
			 or_q(row_txt(st, "gpu_op")));
		signal_line(out, st, "gpu", "gpu_ms", "peer_gpu_ms", what);
	}
	signal_line(out, st, "cpu", "cpu_ms", "peer_cpu_ms",
		    "a step of CPU work (its threads but NCCL's, outside waits)");
	signal_line(out, st, "pace", "pace_ms", "peer_pace_ms",
		    "of GPU compute before each collective that opens a step (a slower GPU's "
		    "is longer)");
	/* the compute stream (fleetq's CUDA injection library): a share, not a time */
	if (row_has(st, "idle_pct")) {
		fprintf(out, "  %s compute", named(row_txt(st, "signals"), "compute") ? "*" : " ");
		if (row_has(st, "z_compute"))
			fprintf(out, " z=%+8.2f", row_dbl(st, "z_compute"));
		fprintf(out, "  its GPU ran no compute kernel %.1f%% of the span",
			row_dbl(st, "idle_pct"));
		if (row_has(st, "peer_idle_pct"))
			fprintf(out, ", its peers' %.1f%% (a slower GPU idles least)",
				row_dbl(st, "peer_idle_pct"));
		fputc('\n', out);
	}
	why_report(out, st);
	if (row_has(st, "peers_wait_s") && row_dbl(st, "peers_wait_s") > 0)
		fprintf(out, "  cost: peers lost %.3f GPU-seconds waiting on it\n",
			row_dbl(st, "peers_wait_s"));
}

const char *an_judged(const struct an_findings *fd, char *buf, size_t n)
{
	/* "clean" holds for this much of the window, no more */
	if (fd->span_hi > 0 && fd->span_hi - fd->span_lo >= 0.05)
		snprintf(buf, n, ": %.1f-%.1f s of collectives judged", fd->span_lo, fd->span_hi);
	else if (fd->span_hi > 0)
		snprintf(buf, n, ": %.1f s of collectives judged", fd->span_hi);
	else
		buf[0] = '\0';
	return buf;
}

int an_report_stragglers(sqlite3 *db, FILE *out, const char *window, const char *short_of,
			 struct an_findings *fd)
{
	int err = walk(db, 0, out, fd, straggler_row);

	if (!err && !fd->hung && !fd->stragglers && !fd->ranks)
		fprintf(out, "no verdict: no rank in the window, %s\n", window);
	else if (!err && !fd->hung && !fd->stragglers && short_of)
		fprintf(out, "no verdict: %s\n", short_of);
	else if (!err && !fd->hung && !fd->stragglers) {
		char judged[64];

		fprintf(out, "no straggler: %d rank%s in %d communicator%s, %s%s\n", fd->ranks,
			fd->ranks == 1 ? "" : "s", fd->comms, fd->comms == 1 ? "" : "s", window,
			an_judged(fd, judged, sizeof(judged)));
	}
	fflush(out);
	return err;
}

static void netcheck_row(FILE *out, sqlite3_stmt *st)
{
	const char *src = or_q(row_txt(st, "source"));
	int flagged = row_has(st, "flagged") && row_dbl(st, "flagged") != 0;

	fprintf(out, "%s: %s rank %s (pid %s): ", flagged ? "network" : "ok", or_q(row_txt(st, "node")),
		or_q(row_txt(st, "rank")), or_q(row_txt(st, "pid")));
	if (!strcmp(src, "ib"))
		fprintf(out, "InfiniBand %s on %s", or_q(row_txt(st, "counter")),
			or_q(row_txt(st, "detail")));
	else
		fprintf(out, "TCP retransmits%s", !strcmp(src, "tcp_host") ? " (host-wide)" : "");
	if (row_has(st, "rule") && !strcmp(row_txt(st, "rule"), "throughout"))
		/* named for its loss all through the run, not for its slow windows */
		fprintf(out, " throughout the run: %s per collective (%.0f in slow windows, %.0f "
			"outside; %.3f/s, z %s against its peers)", or_q(row_txt(st, "per_coll")),
			row_dbl(st, "in_n"), row_dbl(st, "out_n"), row_dbl(st, "all_per_s"),
			or_q(row_txt(st, "rate_z")));
	else {
		fprintf(out, ": %s in slow windows (%.3f/s, outside %.3f/s",
			or_q(row_txt(st, "in_n")), row_dbl(st, "in_per_s"), row_dbl(st, "out_per_s"));
		if (row_has(st, "ratio"))
			fprintf(out, ", %.1fx", row_dbl(st, "ratio"));
		fprintf(out, "; concentration z %s, z %s)", or_q(row_txt(st, "conc_z")),
			or_q(row_txt(st, "z")));
	}
	if (strcmp(src, "ib") && row_has(st, "detail"))
		fprintf(out, ", flow %s", row_txt(st, "detail"));
	fprintf(out, "\n  communicator %s, %s slow windows, %s ranks\n", or_q(row_txt(st, "comm_hash")),
		or_q(row_txt(st, "windows")), or_q(row_txt(st, "ranks")));
}

int an_report_netcheck(sqlite3 *db, FILE *out, const char *window, const char *short_of,
		       struct an_findings *fd)
{
	int err = walk(db, 1, out, fd, netcheck_row);

	if (!err && !fd->flagged && !fd->ranks)
		fprintf(out, "no verdict: no rank in the window, %s\n", window);
	else if (!err && !fd->flagged && short_of)
		fprintf(out, "no verdict: %s\n", short_of);
	else if (!err && !fd->flagged)
		fprintf(out, "no network trouble: %d rank%s in %d communicator%s, %s\n", fd->ranks,
			fd->ranks == 1 ? "" : "s", fd->comms, fd->comms == 1 ? "" : "s", window);
	fflush(out);
	return err;
}

void an_seen_release(struct an_seen *s)
{
	free(s->comm);
	memset(s, 0, sizeof(*s));
}

/* Prepares head || where || tail into *st; an SQLite result code. */
static int prepare_where(sqlite3 *db, const char *head, const char *where, const char *tail,
			 sqlite3_stmt **st)
{
	char *sql = sqlite3_mprintf("%s%s%s", head, where, tail);
	int rc = sql ? sqlite3_prepare_v2(db, sql, -1, st, NULL) : SQLITE_NOMEM;

	sqlite3_free(sql);
	return rc;
}

/* A count the nodes sent (untrusted: any 64-bit value, or text), as 0..INT_MAX. */
static int count_col(sqlite3_stmt *st, int i)
{
	sqlite3_int64 v = sqlite3_column_int64(st, i);

	return v < 0 ? 0 : v > INT_MAX ? INT_MAX : (int)v;
}

/*
 * What the node rows cover, apart from the verdicts: which ranks of which
 * communicators answered, and the first communicator that declares more
 * ranks (nranks) than answered. Read from the node rows, not the merge's
 * output (which lists only findings unless --all), so that the merge files
 * may change freely; rows without comm_hash, rank and nranks (a user's own
 * files) leave s->known 0.
 */
int an_seen(sqlite3 *db, int netcheck, struct an_seen *s)
{
	/* the rows of the window, as count_ranks() reads them ('last' rows are older) */
	const char *in = netcheck ? "source = 'span'" : "kind = 'rank'";
	/*
	 * A communicator made by ncclCommSplit has no rank on the CPU side: its node's plugin
	 * rows ('kern') of that process and communicator carry it, as the merge reads them.
	 */
	const char *rs = netcheck ? "WITH rs AS (SELECT * FROM results) "
				  : "WITH kr AS (SELECT node, pid, comm_hash, max(rank) AS rank, "
				    "max(nranks) AS nranks FROM results WHERE kind = 'kern' AND "
				    "comm_hash IS NOT NULL GROUP BY node, pid, comm_hash), "
				    "rs AS (SELECT x.kind, x.comm_hash, coalesce(x.rank, k.rank) AS rank, "
				    "coalesce(x.nranks, k.nranks) AS nranks FROM results x LEFT JOIN kr k "
				    "ON (x.rank IS NULL OR x.nranks IS NULL) AND k.node = x.node AND "
				    "k.pid = x.pid AND k.comm_hash = x.comm_hash) ";
	sqlite3_stmt *st = NULL;
	const unsigned char *c;
	char *head;
	int rc;

	memset(s, 0, sizeof(*s));
	head = sqlite3_mprintf("%sSELECT count(*), count(DISTINCT comm_hash) FROM (SELECT DISTINCT "
			       "comm_hash, rank FROM rs WHERE ",
			       rs);
	rc = head ? prepare_where(db, head, in, " AND comm_hash IS NOT NULL AND rank IS NOT NULL)",
				  &st)
		  : SQLITE_NOMEM;
	sqlite3_free(head);
	if (rc == SQLITE_NOMEM)
		return -ENOMEM;
	if (rc != SQLITE_OK)
		return 0;
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_finalize(st);
		return -EIO;
	}
	s->ranks = sqlite3_column_int(st, 0);
	s->comms = sqlite3_column_int(st, 1);
	sqlite3_finalize(st);
	/*
	 * A pipeline of one rank a stage: send/recv, and no collective to compare ranks by,
	 * or only a few (a barrier now and then): the most of either any rank made
	 */
	s->netcheck = netcheck;
	/* (netcheck: each rank's collectives inside and outside its slow windows) */
	if (sqlite3_prepare_v2(db,
			       /* (a rank's newest collective is in no window: + 1) */
			       netcheck ? "SELECT 0, coalesce(max(n), 0), 0 "
					  "FROM (SELECT sum(in_n + out_n) + 1 AS n FROM results "
					  "WHERE source = 'span' "
					  "GROUP BY node, comm_hash, rank, pid)"
					: "SELECT count(*) FILTER (WHERE kind = 'p2p'), "
					  "coalesce(max(n) FILTER (WHERE kind = 'rank'), 0), "
					  "coalesce(max(n) FILTER (WHERE kind = 'p2p'), 0) "
					  "FROM (SELECT kind, sum(n) AS n FROM results "
					  "WHERE kind IN ('rank', 'p2p') "
					  "GROUP BY kind, node, comm_hash, rank, pid)",
			       -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW) {
			s->counted = 1;
			s->p2p_only = !s->ranks && sqlite3_column_int64(st, 0) > 0;
			s->colls = count_col(st, 1);
			s->p2p = count_col(st, 2);
		}
		sqlite3_finalize(st);
	}
	/* collectives on communicators made before agentd, which it could not place */
	if (!netcheck && sqlite3_prepare_v2(db, "SELECT coalesce(sum(n), 0) FROM results "
						"WHERE kind = 'now'", -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW)
			s->unplaced = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	/*
	 * A rank answers once per communicator, on whichever node and pid it ran. Of a
	 * communicator active in the window, a rank whose node sent its newest collective
	 * ('last', over all time) answered too: it was there, with nothing on that
	 * communicator in the window (a pipeline's world communicator carries send/recv and a
	 * barrier now and then; a stopped rank is the merge's 'hung').
	 */
	head = sqlite3_mprintf("%sSELECT comm_hash, count(DISTINCT rank), max(nranks) FROM rs "
			       "WHERE (",
			       rs);
	rc = head ? prepare_where(db, head, in,
			   netcheck ? ") AND comm_hash IS NOT NULL AND rank IS NOT NULL "
				      "GROUP BY comm_hash HAVING count(DISTINCT rank) < max(nranks) "
				      "ORDER BY comm_hash"
				    : " OR kind = 'last') AND comm_hash IS NOT NULL AND rank IS NOT NULL "
				      "AND comm_hash IN (SELECT comm_hash FROM results WHERE "
				      "kind = 'rank') GROUP BY comm_hash "
				      "HAVING count(DISTINCT rank) < max(nranks) ORDER BY comm_hash",
			   &st)
		  : SQLITE_NOMEM;
	sqlite3_free(head);
	if (rc == SQLITE_NOMEM)
		return -ENOMEM;
	if (rc != SQLITE_OK)
		return 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (!s->partial++) {
			c = sqlite3_column_text(st, 0);
			s->comm = strdup(c ? (const char *)c : "?");
			s->answered = count_col(st, 1);
			s->declared = count_col(st, 2);
		}
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return -EIO;
	s->known = 1;
	return s->comm || !s->partial ? 0 : -ENOMEM;
}
