/* SPDX-License-Identifier: MIT */
#include "gather.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

/* One host, as fleetq sees it. */
struct gleaf {
	int64_t rows;
	int done;
	int has_cols; /* sent COLUMNS (through its relay too) */
	int deferred; /* done before the column sets were settled: keep is its wish */
	int keep;
};

struct gather {
	struct fanout *fo;
	const struct fanout_params *p;
	struct merge *m;
	struct coverage *cov;
	struct direct *direct; /* the caller's, or NULL */
	struct direct *dq;     /* rows in hostlist order: direct, or the merge's (ours) */
	struct gleaf *leaves;
	size_t nh;
	int failed; /* a callback of ours stopped the fan-out */
	/*
	 * Nodes may answer with different columns (two versions of the trace
	 * schema, a hostile node): the set most hosts answered with wins, ties to
	 * the one whose first host comes first in the hostlist, whoever was
	 * fastest. Until more than half of the hosts sent one set, or every host
	 * has sent its columns or ended, rows wait (the direct queue holds them)
	 * and nothing prints.
	 */
	size_t unsettled; /* hosts with neither COLUMNS nor an end yet */
	int settled;
	int majority; /* a set has more than half of all hosts: settle now */
	/* The column set that wins whenever a host sends it (gather_run_want), or NULL. */
	const char *const *want;
	size_t nwant;
	int winner;   /* the winning column set (merge_set_of()), or -1 */
	/* Hosts per column set: past half of all hosts a set has won already. */
	size_t set_hosts[MERGE_SETS_MAX];
};

/* How set k differs from the winning one, for its hosts' coverage line. */
static const char *set_differs(struct gather *g, int k, char *buf, size_t len)
{
	size_t na, nb, agree = g->set_hosts[g->winner], i;
	const char *const *a = merge_set_names(g->m, k, &na);
	const char *const *b = merge_set_names(g->m, g->winner, &nb);

	for (i = 0; i < na && i < nb && !strcmp(a[i], b[i]); i++)
		;
	if (na != nb)
		snprintf(buf, len, "%zu columns, the %zu node%s that agree have %zu", na, agree,
			 agree == 1 ? "" : "s", nb);
	else
		snprintf(buf, len, "column %zu is '%s', the %zu node%s that agree have '%s'",
			 i + 1, i < na ? a[i] : "?", agree, agree == 1 ? "" : "s",
			 i < nb ? b[i] : "?");
	return buf;
}

/* Set k is the wanted one. */
static int is_wanted(struct gather *g, int k)
{
	size_t n;
	const char *const *names = merge_set_names(g->m, k, &n);

	if (!g->want || n != g->nwant)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], g->want[i]))
			return 0;
	return 1;
}

/*
 * Every host has sent its columns or ended (or most agree): the column set
 * most hosts sent wins (ties: the set of the first host in the hostlist), the
 * others' hosts are "columns differ", and the rows that waited go on.
 * 0 or -ENOMEM.
 */
static int settle(struct gather *g)
{
	size_t ns = merge_sets(g->m), *count = NULL, *first = NULL;
	char why[256];
	int err = 0;

	g->settled = 1;
	g->winner = -1;
	if (ns) {
		count = calloc(ns, sizeof(*count));
		first = calloc(ns, sizeof(*first));
		if (!count || !first) {
			free(count);
			free(first);
			return -ENOMEM;
		}
		for (size_t h = g->nh; h-- > 0;) {
			int k = merge_set_of(g->m, h);

			if (k >= 0) {
				count[k]++;
				first[k] = h;
			}
		}
		g->winner = 0;
		for (size_t k = 1; k < ns; k++)
			if (count[k] > count[g->winner] ||
			    (count[k] == count[g->winner] && first[k] < first[g->winner]))
				g->winner = (int)k;
		for (size_t k = 0; k < ns && g->want; k++)
			if (is_wanted(g, (int)k) && count[k])
				g->winner = (int)k;
		free(count);
		free(first);
	}
	if (g->dq && ns) {
		size_t tn;
		const char *const *tnames = merge_set_columns(g->m, g->winner, &tn);

		if (direct_begin(g->dq, tn, tnames))
			return -ENOMEM;
	}
	/* The losers still running stop; those that ended lose their rows. */
	for (size_t h = 0; h < g->nh && ns > 1; h++) {
		int k = merge_set_of(g->m, h);

		if (k >= 0 && k != g->winner)
			fanout_stop(g->fo, h, FQ_COLUMNS, set_differs(g, k, why, sizeof(why)));
	}
	for (size_t h = 0; h < g->nh; h++) {
		struct gleaf *l = &g->leaves[h];
		int k = merge_set_of(g->m, h), o = coverage_outcome(g->cov, h);

		if (l->deferred && k != g->winner && (o == FQ_OK || o == FQ_TRUNCATED)) {
			coverage_set(g->cov, h, FQ_COLUMNS, l->rows,
				     set_differs(g, k, why, sizeof(why)));
			fanout_forget_rows(g->fo, h);
		}
		if (l->deferred && g->dq && direct_done(g->dq, h, l->keep && k == g->winner))
			err = -ENOMEM;
		l->deferred = 0;
	}
	return err;
}

static int stop(struct gather *g, int err)
{
	if (err)
		g->failed = 1;
	return err;
}

static int g_step(void *ctx, char **cause)
{
	struct gather *g = ctx;

	*cause = NULL;
	if (g->settled || (g->unsettled && !g->majority))
		return 0;
	return stop(g, settle(g));
}

static int g_columns(void *ctx, size_t first, size_t count, size_t ncols,
		     const char *const *names, char **cause)
{
	struct gather *g = ctx;
	int set = merge_columns(g->m, first, count, ncols, names, cause);
	char why[256];

	if (set == -EINVAL)
		return set;
	if (set < 0)
		return stop(g, set);
	if (g->settled && set != g->winner) {
		*cause = strdup(set_differs(g, set, why, sizeof(why)));
		return -EINVAL;
	}
	g->set_hosts[set] += count;
	for (size_t h = first; h < first + count && !g->settled; h++)
		if (!g->leaves[h].has_cols && !g->leaves[h].done) {
			g->leaves[h].has_cols = 1;
			g->unsettled--;
		}
	/* More than half of all hosts agree: no other set can win, rows go on now (the
	 * wanted set wins at its first host) */
	if (!g->settled && (g->want ? is_wanted(g, set) : 2 * g->set_hosts[set] > g->nh))
		g->majority = 1;
	return 0;
}

static int g_frame(void *ctx, size_t h, const void *frame, size_t len, char **cause)
{
	struct gather *g = ctx;

	*cause = NULL;
	return stop(g, direct_frame(g->dq, h, frame, len));
}

static int g_row(void *ctx, size_t h, int64_t index, size_t ncols, const struct wire_value *vals,
		 char **cause)
{
	struct gather *g = ctx;

	*cause = NULL;
	return stop(g, direct_row(g->dq, h, ncols, vals));
}

static int g_done(void *ctx, size_t h, int outcome, int64_t rows, const char *msg, int status,
		  char **cause)
{
	struct gather *g = ctx;
	struct gleaf *l = &g->leaves[h];
	int ok = outcome == FQ_OK || outcome == FQ_TRUNCATED, err = 0;

	*cause = NULL;
	l->done = 1;
	l->rows = rows;
	/* Only a node that ended cleanly keeps its rows: anything else would
	 * pass a partial answer off as complete; and only one of the winning
	 * column set (settle()). */
	if (!g->settled) {
		l->deferred = 1;
		l->keep = ok;
	} else if (direct_done(g->dq, h, ok && merge_set_of(g->m, h) == g->winner)) {
		err = -ENOMEM;
	}
	if (!g->settled && !l->has_cols)
		g->unsettled--;
	/* The merge's writer failed (an insert): stop now, not at the deadline. */
	if (g->dq != g->direct && !err && !g->failed && direct_failed(g->dq)) {
		err = direct_drain(g->dq, cause);
		if (!*cause && asprintf(cause, "merge database: %s", strerror(-err)) < 0)
			*cause = NULL;
		err = -EIO;
	}
	coverage_set(g->cov, h, outcome, rows, msg);
	coverage_set_status(g->cov, h, status);
	return stop(g, err);
}

static int run(struct fanout *fo, const struct fanout_params *p, struct merge *m,
	       struct coverage *cov, struct direct *direct, const char *const *want, size_t nwant,
	       char **cause)
{
	struct gather g = { .fo = fo, .p = p, .m = m, .cov = cov, .direct = direct,
			    .nh = p->nhosts, .want = want, .nwant = nwant };
	struct fanout_sink sink = {
		.ctx = &g,
		.columns = g_columns,
		.frame = g_frame,
		.row = g_row,
		.done = g_done,
		.step = g_step,
		.outcome_name = outcome_name,
	};
	int err;

	*cause = NULL;
	g.settled = !p->sql;
	g.unsettled = g.settled ? 0 : g.nh;
	g.winner = g.settled ? 0 : -1;
	g.leaves = calloc(g.nh ? g.nh : 1, sizeof(*g.leaves));
	if (!g.leaves || merge_hosts(m, g.nh)) {
		err = fq_fail(cause, -ENOMEM, "out of memory");
		goto out;
	}
	g.dq = direct ? direct : direct_new_merge(m, g.nh, p->hosts, DIRECT_HELD_MAX);
	if (!g.dq) {
		err = fq_fail(cause, -ENOMEM, "out of memory");
		goto out;
	}
	err = fanout_run(fo, &sink, cause);
	/* (every host has ended by now, unless the run stopped short) */
	if (!err && !g.settled && settle(&g))
		err = fq_fail(cause, -EIO, "out of memory");
	if (!err && g.dq != direct)
		err = direct_drain(g.dq, cause);
	if (!err && g.winner >= 0)
		err = merge_choose(m, g.winner, cause);
	if (!err)
		err = merge_finish(m, cause);
	for (size_t i = 0; i < g.nh && !err; i++) {
		const struct fanout_node_info *in = fanout_node_info(fo, i);

		if (in->samples)
			err = merge_clock(m, p->hosts[i], in->offset_ns, in->rtt_ns, in->samples,
					  cause);
	}
out:
	if (g.dq != direct)
		direct_free(g.dq);
	free(g.leaves);
	return err;
}

int gather_run(struct fanout *fo, const struct fanout_params *p, struct merge *m,
	       struct coverage *cov, struct direct *direct, char **cause)
{
	return run(fo, p, m, cov, direct, NULL, 0, cause);
}

int gather_run_want(struct fanout *fo, const struct fanout_params *p, struct merge *m,
		    struct coverage *cov, const char *const *want, size_t nwant, char **cause)
{
	return run(fo, p, m, cov, NULL, want, nwant, cause);
}
