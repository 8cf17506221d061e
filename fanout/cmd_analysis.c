/* SPDX-License-Identifier: MIT */
/*
 * fleetq stragglers, netcheck and timeline: the subcommands whose node and merge SQL come
 * from the analysis files (sql/analysis), over a window. Each prepares its plan before the
 * hosts are read (--show-sql ends there), then runs commands.c's one fan-out and reads
 * the merge: a report, rows, bars, --watch's changes, or a Perfetto trace.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "analysis.h"
#include "bars.h"
#include "clock.h"
#include "commands_int.h"
#include "coverage.h"
#include "merge.h"
#include "timeline.h"
#include "watch.h"
#include "why.h"

/*
 * "Nothing found" is a verdict only over every rank of every communicator
 * looked at: none at all (no such job, a window before the trace) or part
 * of a communicator (-w naming some of the job's nodes) is no verdict. The
 * line that says what to check (malloc'd), or NULL when the rows cover it.
 */
static char *analysis_short(const struct an_seen *s, const struct query_opts *q,
			    size_t nodes)
{
	char *m = NULL, job[160] = "", win[96];
	int r;

	if (!s->known)
		return NULL;
	if (q->job)
		snprintf(job, sizeof(job), " of job %s", q->job);
	if (q->comm)
		snprintf(job + strlen(job), sizeof(job) - strlen(job), "%s communicator %s",
			 q->job ? " in" : " of", q->comm);
	if (q->since_ns)
		snprintf(win, sizeof(win), "the last %s", q->since_text ? q->since_text : "60s");
	else
		snprintf(win, sizeof(win), "all time");
	if (!s->ranks && s->p2p_only)
		r = asprintf(&m, "only send/recv%s in %s on %zu node%s, no collective to compare "
				 "ranks by: stragglers judges collectives", job, win, nodes,
			     nodes == 1 ? "" : "s");
	else if (!s->ranks && s->unplaced)
		r = asprintf(&m, "%lld collectives%s in %s on %zu node%s, on communicators made "
				 "before agentd started, which it could not place without fleetq's "
				 "NCCL profiler plugin (NCCL_PROFILER_PLUGIN, docs/analysis.md)",
			     s->unplaced, job, win, nodes, nodes == 1 ? "" : "s");
	else if (!s->ranks)
		r = asprintf(&m, "no collectives%s in %s on %zu node%s: check %s", job, win,
			     nodes, nodes == 1 ? "" : "s",
			     q->since_ns ? q->job ? "--job/--since" : "--since"
			     : q->job	 ? "--job and the hosts (-w)"
					 : "the hosts (-w) and that their agents trace");
	else if (s->partial)
		r = asprintf(&m, "%d of %d ranks of communicator %s answered%s: query every node "
				 "of the job",
			     s->answered, s->declared, s->comm,
			     s->partial > 1 ? " (and more communicators are short)" : "");
	else if (s->counted && s->colls < AN_FEW_COLLS && s->p2p > s->colls)
		/* a clean verdict over a barrier or two would say nothing of the send/recv */
		r = asprintf(&m, "only %d collective%s a rank beside %d send/recv%s in %s on %zu "
				 "node%s, too few to compare ranks by: stragglers judges collectives",
			     s->colls, s->colls == 1 ? "" : "s", s->p2p, job, win, nodes,
			     nodes == 1 ? "" : "s");
	else if (s->counted && s->colls < AN_FEW_COLLS)
		/* an idle stretch: "clean" over a barrier or two would be a verdict on nothing */
		r = asprintf(&m, "only %d collective%s a rank%s in %s on %zu node%s, too few to "
				 "%s (%d at least)%s",
			     s->colls, s->colls == 1 ? "" : "s", job, win, nodes,
			     nodes == 1 ? "" : "s",
			     s->netcheck ? "find slow ones in" : "compare ranks by", AN_FEW_COLLS,
			     q->max_seqs > 0 && s->colls >= q->max_seqs ? ": raise --max-seqs"
			     : q->since_ns				  ? ": widen --since"
									  : "");
	else
		return NULL;
	return r < 0 ? strdup("too few ranks answered") : m;
}

/*
 * The analysis files' plan (and, for stragglers, the evidence of why), with the window
 * and the node and merge parameters. all names the merge's "every row" parameter.
 * -1 to go on, or an exit status (--show-sql ends here).
 */
static int load_plan(struct run *r, const char *all, int with_why)
{
	struct query_opts *q = r->q;
	int64_t len = q->since_ns < 0 ? 60000000000ll : q->since_ns;
	int64_t start = len ? clock_ns(CLOCK_REALTIME) - len : 0;
	long long seqs = q->max_seqs < 0 ? DEFAULT_MAX_SEQS : q->max_seqs;
	int err;

	if (len)
		snprintf(r->window, sizeof(r->window), "last %s",
			 q->since_text ? q->since_text : "60s");
	else
		snprintf(r->window, sizeof(r->window), "all time");
	if (seqs)
		snprintf(r->window + strlen(r->window), sizeof(r->window) - strlen(r->window),
			 ", newest %lld seqs", seqs);
	r->np[r->nnp++] = (struct an_param){
		":max_seqs",
		seqs ? (struct wire_value){ .type = WIRE_INT, .i = seqs }
		     : (struct wire_value){ .type = WIRE_NULL },
		seqs ? "per communicator, the newest N sequence numbers (--max-seqs)"
		     : "no bound (--max-seqs 0)",
	};
	r->np[r->nnp++] = (struct an_param){
		":since_ns",
		{ .type = WIRE_INT, .i = start },
		len ? "coordinator clock now minus the window, plus each node's "
		      "clock offset"
		    : "all time",
	};
	r->np[r->nnp++] = (struct an_param){ ":job",
					     q->job ? (struct wire_value){ .type = WIRE_TEXT,
									   .p = q->job,
									   .n = strlen(q->job) }
						    : (struct wire_value){ .type = WIRE_NULL },
					     NULL };
	r->np[r->nnp++] = (struct an_param){ ":comm",
					     q->comm ? (struct wire_value){ .type = WIRE_TEXT,
									    .p = q->comm,
									    .n = strlen(q->comm) }
						     : (struct wire_value){ .type = WIRE_NULL },
					     NULL };
	r->mp[r->nmp++] = (struct an_param){
		":threshold",
		q->threshold > 0 ? (struct wire_value){ .type = WIRE_REAL, .d = q->threshold }
				 : (struct wire_value){ .type = WIRE_NULL },
		NULL,
	};
	r->mp[r->nmp++] = (struct an_param){
		":min_effect",
		q->min_effect > 0 ? (struct wire_value){ .type = WIRE_REAL, .d = q->min_effect / 100 }
				  : (struct wire_value){ .type = WIRE_NULL },
		NULL,
	};
	r->mp[r->nmp++] = (struct an_param){
		":effect_steps",
		q->effect_steps >= 0 ? (struct wire_value){ .type = WIRE_REAL, .d = q->effect_steps }
				     : (struct wire_value){ .type = WIRE_NULL },
		NULL,
	};
	r->mp[r->nmp++] = (struct an_param){
		":busy_idle",
		q->busy_idle >= 0 ? (struct wire_value){ .type = WIRE_REAL, .d = q->busy_idle / 100 }
				  : (struct wire_value){ .type = WIRE_NULL },
		NULL,
	};
	r->mp[r->nmp++] = (struct an_param){
		all,
		q->all || r->bars || r->near || r->widen_ok
			? (struct wire_value){ .type = WIRE_INT, .i = 1 }
				  : (struct wire_value){ .type = WIRE_NULL },
		NULL,
	};
	err = an_plan_load(&r->plan, r->c->name, r->np, r->nnp, len ? ":since_ns" : NULL,
			   &r->cause);
	/* The evidence files are checked now too: a broken one fails before any fan-out. */
	if (!err && with_why)
		err = an_plan_load(&r->why, "why", r->np, r->nnp, len ? ":since_ns" : NULL,
				   &r->cause);
	/* A folder of files adapted before why.*.sql existed: the verdict alone. */
	if (err == -ENOENT && with_why && r->plan.merge_sql) {
		if (!q->quiet)
			fprintf(stderr, "fleetq: stragglers: no evidence of why: %s\n", r->cause);
		free(r->cause);
		r->cause = NULL;
		an_plan_release(&r->why);
		err = 0;
	}
	if (err)
		return usage_error("%s", r->cause ? r->cause : strerror(-err));
	if (q->show_sql) {
		an_plan_show(&r->plan, stdout, r->np, r->nnp, r->mp, r->nmp);
		if (r->why.node_sql)
			why_show(&r->why, stdout);
		return fflush(stdout) ? FQ_EXIT_USAGE : FQ_EXIT_OK;
	}
	q->sql = r->plan.node_sql;
	return -1;
}


int prepare_stragglers(struct run *r)
{
	struct query_opts *q = r->q;

	if (q->bars == BARS_ALWAYS && r->format != FMT_REPORT)
		return usage_error("--bars draws under the report: drop --format (or --bars)");
	if (q->watch_ns && r->format != FMT_REPORT)
		return usage_error("--watch prints what changes: drop --format");
	/* The bars need every rank's row: the merge gives them all, the report reads findings. */
	r->bars = r->format == FMT_REPORT && !q->watch_ns &&
		  (q->bars == BARS_ALWAYS || (q->bars == BARS_AUTO && isatty(STDOUT_FILENO)));
	/* ... and so does the line under a clean verdict (which rank came closest) */
	r->near = r->format == FMT_REPORT && !q->watch_ns && !q->all;
	/* ... and the check that the default span was long enough, in every format */
	r->widen_ok = !q->watch_ns && q->max_seqs < 0;
	return load_plan(r, ":all_ranks", 1);
}

int prepare_netcheck(struct run *r)
{
	return load_plan(r, ":all_rows", 0);
}

int prepare_timeline(struct run *r)
{
	int ret;

	if (r->format != FMT_REPORT)
		return usage_error("timeline writes a Perfetto/Chrome trace (JSON): drop --format");
	ret = load_plan(r, ":all_rows", 0);
	if (ret >= 0)
		return ret;
	/* A path that cannot be written fails before any node is asked. */
	if (!(r->tl = timeline_open(r->q->output, &r->cause)))
		return usage_error("%s", r->cause);
	return -1;
}

int run_timeline(struct run *r)
{
	struct merge *m;
	int ret, err;

	if ((ret = run_fanout(r)) >= 0)
		return ret;
	m = r->m;
	err = timeline_emit(merge_has_table(m) ? merge_db(m) : NULL, r->plan.merge_sql, r->tl,
			    r->q->output, r->window, r->q->quiet, &r->short_of, &r->cause);
	r->tl = NULL;
	ret = err ? usage_error("%s", r->cause ? r->cause : strerror(-err)) : 0;
	return run_finish(r, ret);
}

/*
 * stragglers on the default --max-seqs, its merge done: whether a longer span could name a
 * rank the cut one did not (r->widen_to, r->widen_steps; cmd_run() asks again). Only over
 * every node's full answer, where some rank had the whole cut's collectives.
 */
static int want_wider(struct run *r)
{
	struct query_opts *q = r->q;
	size_t answered = coverage_count(r->cov, FQ_OK);

	if (!answered || answered != coverage_total(r->cov) || coverage_limited(r->cov))
		return 0;
	/* (what the rows cover is read once: run_analysis() keeps it for the report) */
	r->seen_done = 1;
	if (an_seen(merge_db(r->m), 0, &r->seen)) {
		an_seen_release(&r->seen);
		r->seen_done = 0;
		return 0;
	}
	if (!r->seen.counted || r->seen.colls < DEFAULT_MAX_SEQS)
		return 0;
	r->widen_to = an_widen(merge_db(r->m), DEFAULT_MAX_SEQS,
			       q->effect_steps >= 0 ? q->effect_steps : 100,
			       (long long)WIDEN_MAX_FACTOR * DEFAULT_MAX_SEQS, &r->widen_steps);
	return r->widen_to > 0;
}

/* stragglers and netcheck: the merge's analysis, its report or rows, --watch's changes. */
static int run_analysis(struct run *r, int net)
{
	struct query_opts *q = r->q;
	struct merge *m;
	size_t answered;
	int ret, err, cov_short;

	if ((ret = run_fanout(r)) >= 0)
		return ret;
	m = r->m;
	ret = 0;
	if (merge_has_table(m)) {
		err = an_merge(merge_db(m), r->plan.merge_sql, r->mp, r->nmp, &r->cause);
		if (err) {
			ret = usage_error("%s: %s", r->plan.merge_origin,
					  r->cause ? r->cause : strerror(-err));
			goto done;
		}
		/* a clean verdict the default --max-seqs cut short: asked again, wider */
		if (r->widen_ok && !fq_interrupted && want_wider(r)) {
			ret = 0;
			goto done_quiet;
		}
		if (r->near)
			r->near_text = an_near(merge_db(m), &r->near_grown);
		if (r->bars)
			r->bar_text = bars_take(merge_db(m), q->threshold > 0 ? q->threshold : 3.5,
						q->all);
		else if ((r->near || r->widen_ok) && !q->all)
			sqlite3_exec(merge_db(m), "DELETE FROM temp.fq_analysis WHERE verdict = 'ok'",
				     NULL, NULL, NULL);
		/* Why: the verdict stands without it, so a failure is only said. */
		free(r->cause);
		r->cause = NULL;
		if (r->why.node_sql && !q->watch &&
		    why_attach(merge_db(m), &r->why, &r->fp, r->mp, r->nmp, &r->cause) &&
		    !fq_interrupted)
			fprintf(stderr, "fleetq: stragglers: no evidence of why: %s\n",
				r->cause ? r->cause : "out of memory");
	}
	answered = coverage_count(r->cov, FQ_OK) + coverage_count(r->cov, FQ_TRUNCATED);
	/* nodes that did not answer fully: no verdict (the coverage says which) */
	cov_short = coverage_exit(r->cov, q->min_coverage);
	err = 0;
	/* what the rows cover first: the report's clean line is no verdict where they fall short */
	if (merge_has_table(m) && answered) {
		err = r->seen_done ? 0 : an_seen(merge_db(m), net, &r->seen);
		/* A verdict over the first N rows of a node is none. */
		if (!err && coverage_limited(r->cov) &&
		    asprintf(&r->short_of, "--max-rows %lld cut the rows of %zu node%s: "
					   "drop --max-rows for a verdict",
			     q->max_rows, coverage_limited(r->cov),
			     coverage_limited(r->cov) == 1 ? "" : "s") < 0)
			r->short_of = NULL;
		/* Short coverage says it first: the missing ranks follow from it. */
		if (!err && !r->short_of && !cov_short)
			r->short_of = analysis_short(&r->seen, q, answered);
	}
	if (!err && r->format == FMT_REPORT && merge_has_table(m) && answered && !q->watch) {
		char cov[96];
		const char *why = r->short_of;

		if (!why && cov_short) {
			snprintf(cov, sizeof(cov), "%zu of %zu nodes answered fully (see the coverage)",
				 coverage_count(r->cov, FQ_OK), coverage_total(r->cov));
			why = cov;
		}
		err = !net ? an_report_stragglers(merge_db(m), stdout, r->window, why, &r->fd)
			   : an_report_netcheck(merge_db(m), stdout, r->window, why, &r->fd);
	} else if (!err && merge_has_table(m))
		err = an_count(merge_db(m), net, &r->fd);
	if (err) {
		ret = usage_error("cannot read the analysis: %s", sqlite3_errmsg(merge_db(m)));
		goto done;
	}
	/* a span widened past the default --max-seqs says so, with the verdict it gave */
	if (q->widened_from && answered && r->format == FMT_REPORT)
		printf("  (the newest %lld collectives of a communicator spanned %lld steps, under "
		       "--effect-steps: judged its newest %lld)\n",
		       q->widened_from, q->widened_steps, q->max_seqs);
	else if (q->widened_from && answered && !q->quiet)
		fprintf(stderr, "fleetq: stragglers: the newest %lld collectives of a communicator "
				"spanned %lld steps, under --effect-steps: judged its newest %lld\n",
			q->widened_from, q->widened_steps, q->max_seqs);
	/* a clean verdict's margin: a finding, or no verdict, says more than it */
	if (r->near_text && answered && !r->short_of && !r->fd.hung && !r->fd.stragglers &&
	    !cov_short) {
		long long seqs = q->max_seqs < 0 ? DEFAULT_MAX_SEQS : q->max_seqs;

		fputs(r->near_text, stdout);
		/* under a bar that grew because --max-seqs cut the span short (an FSDP step of
		 * 24 collectives: 1000 seqs are 42 steps), a longer span is the remedy */
		if (r->near_grown && seqs > 0 && r->seen.counted && r->seen.colls >= seqs)
			printf("  (the span was each communicator's newest %lld collectives, and the "
			       "bar grows as a span's steps fall under --effect-steps: --max-seqs "
			       "%lld judges more of the window)\n",
			       seqs, 4 * seqs);
	}
	if (r->bar_text && answered)
		fputs(r->bar_text, stdout);
	/* (before the summary on stderr, in a file that holds both) */
	fflush(stdout);
	/* a fan-out cut short by Ctrl-C would read as ranks that left */
	if (q->watch && !fq_interrupted &&
	    watch_step(q->watch, merge_has_table(m) && answered ? merge_db(m) : NULL, r->cov,
		       r->hosts, r->fp.nhosts)) {
		ret = usage_error("out of memory");
		goto done;
	}
	if (r->format == FMT_REPORT && (!merge_has_table(m) || !answered) && !q->watch)
		printf("no answer: no node ran the %s query (see the coverage)\n", r->c->name);
	else if (r->format != FMT_REPORT)
		ret = print_results(m, r->out,
				    merge_has_table(m)
					    ? "SELECT * FROM temp.fq_analysis ORDER BY rowid"
					    : NULL,
				    r->plan.merge_origin, r->cov_json, q);
done:
	return run_finish(r, ret);
done_quiet:
	return ret;
}

int run_stragglers(struct run *r)
{
	return run_analysis(r, 0);
}

int run_netcheck(struct run *r)
{
	return run_analysis(r, 1);
}

void verdict_stragglers(struct run *r)
{
	const struct an_findings *fd = &r->fd;
	char judged[64];

	if (fd->hung || fd->stragglers)
		fprintf(stderr, "fleetq: stragglers: %d hung, %d straggler%s (first: %s), %s\n",
			fd->hung, fd->stragglers, fd->stragglers == 1 ? "" : "s",
			fd->first ? fd->first : "?", r->window);
	else if (!coverage_exit(r->cov, r->q->min_coverage)) /* (short: no verdict) */
		fprintf(stderr, "fleetq: stragglers: none among %d ranks in %d "
				"communicator%s, %s%s\n",
			fd->ranks, fd->comms, fd->comms == 1 ? "" : "s", r->window,
			an_judged(fd, judged, sizeof(judged)));
}

void verdict_netcheck(struct run *r)
{
	const struct an_findings *fd = &r->fd;

	if (fd->flagged)
		fprintf(stderr, "fleetq: netcheck: %d finding%s (first: %s), %s\n", fd->flagged,
			fd->flagged == 1 ? "" : "s", fd->first ? fd->first : "?", r->window);
	else if (!coverage_exit(r->cov, r->q->min_coverage))
		fprintf(stderr, "fleetq: netcheck: nothing among %d ranks, %s\n", fd->ranks,
			r->window);
}

/* Several fan-outs (one per trace table): gate.c runs them. */
