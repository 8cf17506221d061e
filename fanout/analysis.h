/* SPDX-License-Identifier: MIT */
/*
 * Built-in analyses (fleetq stragglers, fleetq netcheck): a node .sql file
 * fanned out with its parameters, a merge .sql file over the merged rows and
 * the clock table, and the report a person reads.
 */
#ifndef FLEETQ_ANALYSIS_H
#define FLEETQ_ANALYSIS_H

#include <stddef.h>
#include <stdio.h>
#include <sqlite3.h>

#include "wire.h"

/* A named parameter (":since_ns") and its value; WIRE_NULL leaves the file's default. */
struct an_param {
	const char *name;
	struct wire_value v;
	const char *note; /* for --show-sql, may be NULL */
};

struct an_plan {
	char *node_sql, *merge_sql;
	char *node_origin, *merge_origin; /* path or "built in" */
	/* Positional values for the node SQL as the agents bind them (?1..?N). */
	struct wire_value *params;
	size_t nparams;
	size_t clock_param; /* 1-based index of the window start, or 0 */
	char **param_names; /* nparams names (NULL for a bare '?') */
};

/*
 * Loads "<name>.node.sql" and "<name>.merge.sql" and checks both locally
 * (node SQL against the trace schema, merge SQL against a results table of
 * the node SQL's columns), so a broken file fails here, once, not on every
 * node. node_params are matched by name; parameters the caller does not know
 * stay NULL. clock_name names the parameter holding a window start on the
 * coordinator's clock (shifted per node), or NULL. 0 or -errno with *cause.
 */
int an_plan_load(struct an_plan *p, const char *name, const struct an_param *node_params,
		 size_t n, const char *clock_name, char **cause);
void an_plan_release(struct an_plan *p);

/* --show-sql: both files with the parameter values. */
void an_plan_show(const struct an_plan *p, FILE *f, const struct an_param *node_params,
		  size_t nn, const struct an_param *merge_params, size_t nm);

/*
 * Runs merge_sql over db into the table temp.fq_analysis (its rows in the
 * query's order, by rowid), binding merge_params by name. 0 or -EINVAL with
 * *cause (the merge query failed).
 */
int an_merge(sqlite3 *db, const char *merge_sql, const struct an_param *merge_params, size_t n,
	     char **cause);

/* Findings in temp.fq_analysis, for the exit status and the summary line. */
struct an_findings {
	int hung, stragglers, flagged; /* flagged: netcheck rows */
	int ranks, comms;	       /* ranks and communicators that answered */
	char *first;		       /* "rank 6 on node1" of the top finding, or NULL */
	/* stragglers: seconds from the first to the last collective judged, the shortest
	 * and longest over the communicators (0 when unknown) */
	double span_lo, span_hi;
};
void an_findings_release(struct an_findings *f);

/*
 * Human reports on out; fill *fd. window: "the last 60s", "all time"; short_of: why the
 * rows are no verdict (the clean line says so instead), or NULL.
 */
int an_report_stragglers(sqlite3 *db, FILE *out, const char *window, const char *short_of,
			 struct an_findings *fd);
int an_report_netcheck(sqlite3 *db, FILE *out, const char *window, const char *short_of,
		       struct an_findings *fd);
/* ": 1.3 s of collectives judged" (the span of fd), or "" when unknown; in buf. */
const char *an_judged(const struct an_findings *fd, char *buf, size_t n);
/* The same counts without a report (machine formats). */
int an_count(sqlite3 *db, int netcheck, struct an_findings *fd);
/*
 * stragglers, before the rows of ranks not named go: the line that says which of them came
 * closest to a verdict and by how much (malloc'd), or NULL when none stood out. *grown: 1
 * when that rank fell under a bar grown for a short span (bar_steps), else 0.
 */
char *an_near(sqlite3 *db, int *grown);
/*
 * stragglers, a clean verdict over spans of seqs newest collectives: the seqs that would
 * span effect_steps steps (10 % more, in hundreds, at most max_seqs) where some rank fell
 * under a bar grown for a short span but is at or above the bar of a full one (a longer
 * span could name it), with that span's steps in *steps; else 0.
 */
long long an_widen(sqlite3 *db, long long seqs, double effect_steps, long long max_seqs,
		   long long *steps);

/*
 * Fewer collectives a rank than this in every communicator is no verdict: a window over an
 * idle stretch (a checkpoint, an evaluation without collectives, the job's end) or a
 * pipeline of one rank a stage, whose window holds send/recv and a barrier or two. The
 * kernels' signal itself asks 16 of an op; netcheck's slow windows (the slowest tenth)
 * would be one or two.
 */
#define AN_FEW_COLLS 16

/*
 * What the node rows in table results cover: an analysis that saw no rank,
 * or only some ranks of a communicator, has no verdict to give.
 */
struct an_seen {
	int known;	      /* the rows carry comm_hash, rank and nranks */
	int ranks, comms;     /* distinct (communicator, rank) pairs, communicators */
	int partial;	      /* communicators with fewer ranks answering than declared */
	char *comm;	      /* the first of them (malloc'd) ... */
	int answered, declared; /* ... its ranks that answered, and its nranks */
	int p2p_only;	      /* no rank, but Send/Recv in the window ('p2p' rows) */
	int netcheck;	      /* the rows are netcheck's (else stragglers') */
	int counted;	      /* colls and p2p were counted */
	int colls, p2p;	      /* the most collectives, and Send/Recv, of any rank in the window */
	long long unplaced;   /* collectives in the window agentd could not place ('now' rows) */
};
int an_seen(sqlite3 *db, int netcheck, struct an_seen *s);
void an_seen_release(struct an_seen *s);

#endif
