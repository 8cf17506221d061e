/* SPDX-License-Identifier: MIT */
/*
 * fleetq gate: the whole gate. gate_main() checks the arguments, then runs the pieces in
 * order: catalogue (gate_metric.c), baseline (gate_baseline.c), planner (gate_plan.c),
 * fetch (gate_fetch.c), evaluation (gate_eval.c), report (gate_report.c). gate_int.h is
 * the state they share.
 */
#include "gate_int.h"

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "coverage.h"
#include "merge.h"
#include "output.h"

int gate_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fleetq: gate: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return FQ_EXIT_USAGE;
}

void gate_release(struct gate *g)
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

int gate_setup(struct gate *g, const struct gate_args *a)
{
	int r;

	g->a = a;
	g->tol = a->tolerance >= 0 ? a->tolerance : 0.10;
	g->k = a->mad_k >= 0 ? a->mad_k : 3;
	g->samples = a->samples > 0 ? a->samples : 1;
	for (size_t i = 0; i < a->nmetrics; i++)
		if ((r = gate_parse_metric(g, a->metrics[i])) >= 0)
			return r;
	if (a->builtin && (r = gate_add_builtins(g, a->builtin)) >= 0)
		return r;
	return -1;
}

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
	if (a->save && (ret = gate_save_writable(a->save, "baseline", "save")) >= 0)
		goto out;
	if (a->junit && a->save) {
		ret = gate_error("--junit reports a comparison: use it with --baseline");
		goto out;
	}
	if (a->junit && (ret = gate_save_writable(a->junit, "junit file", "junit")) >= 0)
		goto out;
	if (a->append && !a->save) {
		ret = gate_error("--append goes with --save FILE: it adds this run to FILE");
		goto out;
	}
	if (a->format == GATE_FMT_JUNIT && a->save) {
		ret = gate_error("--format junit reports a comparison: use it with --baseline");
		goto out;
	}
	ret = gate_setup(&g, a);
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
		if ((ret = gate_load_baseline(&g, bpath)) >= 0)
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
		if ((ret = gate_match_baseline(&g, bpath)) >= 0)
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
	if (!g.nm && (ret = gate_add_builtins(&g, DEFAULT_BUILTINS)) >= 0)
		goto out;
	if ((ret = gate_plan_tables(&g)) >= 0)
		goto out;
	ret = FQ_EXIT_USAGE;
	/* A closed stdout must not kill us (and SSL writes must not either). */
	signal(SIGPIPE, SIG_IGN);
	if ((ret = gate_fetch(&g, fp, m, cov, &first)) >= 0)
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
	if ((ret = gate_evaluate(&g)) >= 0)
		goto done;
	ret = FQ_EXIT_USAGE;
	if (a->save) {
		if ((ret = gate_save(&g, fp, first, a->save)) >= 0)
			goto done;
		if (a->format == GATE_FMT_REPORT)
			ret = gate_print_rows(g.db, FQ_FMT_TABLE,
					      "SELECT metric, nullif(key, '') AS key, rank, "
					      "median(value) AS value FROM temp.gate_now n JOIN "
					      "temp.gate_metric m ON m.name = n.metric GROUP BY "
					      "metric, key, rank ORDER BY m.pos, key, rank",
					      NULL);
		else
			ret = gate_print_rows(g.db, a->format,
					      "SELECT metric, nullif(key, '') AS key, rank, "
					      "sample, value FROM temp.gate_now ORDER BY rowid",
					      cov_json);
	} else {
		if ((ret = gate_compare(&g)) >= 0)
			goto done;
		bad = gate_summarize(&g, 1);
		if (a->format == GATE_FMT_REPORT)
			ret = gate_print_report(&g);
		else if (a->format == GATE_FMT_JUNIT)
			ret = gate_print_junit(&g, bad, stdout, "the output");
		else
			ret = gate_print_rows(g.db, a->format,
					      "SELECT " GATE_COLS ", baseline_mad, "
					      "baseline_samples FROM temp.gate ORDER BY rowid",
					      cov_json);
		if (ret < 0 && a->junit)
			ret = gate_write_junit(&g, bad, a->junit);
		gate_summarize(&g, a->quiet);
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
