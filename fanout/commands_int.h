/* SPDX-License-Identifier: MIT */
/*
 * fleetq's subcommands, inside: one run's state (struct run) and the steps commands.c
 * shares with the subcommands that live in files of their own (cmd_analysis.c).
 */
#ifndef FLEETQ_COMMANDS_INT_H
#define FLEETQ_COMMANDS_INT_H

#include <signal.h>
#include <stdio.h>

#include "analysis.h"
#include "cli.h"
#include "config.h"
#include "coverage.h"
#include "direct.h"
#include "fanout.h"
#include "hostlist.h"
#include "merge.h"
#include "output.h"

/* No --format on a subcommand: its report for people. */
#define FMT_REPORT (-1)

/* Set by the first Ctrl-C (commands.c's catch_sigint()). */
extern volatile sig_atomic_t fq_interrupted;

/* One run of a subcommand: what its steps share, released in one place (run_release()). */
struct run {
	const struct cmd *c;
	struct query_opts *q;
	struct fq_config conf;
	struct fanout_params fp;
	struct hostlist *hl;
	struct fanout *fo;
	struct merge *m;
	struct coverage *cov;
	struct output *out;
	struct direct *dout;
	struct an_plan plan, why;
	struct an_findings fd;
	struct an_seen seen;
	struct an_param np[5], mp[5];
	size_t nnp, nmp;
	struct wire_value *qvals;
	size_t nqvals;
	const char **hosts;
	char *cause, *sql_buf, *summary, *common, *cov_json, *sess_dir, *short_of;
	char *compat_note; /* nodes whose agents lack a table, asked again (compat.h) */
	char window[96];
	long long fail_rows;
	int format;
	int bars;  /* stragglers: draw the bars */
	int near;  /* stragglers: say which rank came closest below a clean verdict */
	int plain; /* a query printed straight from the wire */
	FILE *tl;
	char *bar_text, *near_text;
	int near_grown; /* near_text's rank fell under a bar grown for a short span */
	/* stragglers on the default --max-seqs: a clean verdict whose closest rank fell under a
	 * bar grown because the span was cut short is asked again over widen_to seqs (cmd_run) */
	int widen_ok;
	int seen_done; /* seen was read (want_wider()) */
	long long widen_to, widen_steps;
};

/*
 * The one fan-out of all but the gate, into the merge (or straight out, a plain query).
 * -1 to go on, or an exit status.
 */
int run_fanout(struct run *r);

/*
 * What every fan-out ends with, after the subcommand's output (ret: its status so far):
 * --fail-if, the messages on stderr, and the exit status.
 */
int run_finish(struct run *r, int ret);

/*
 * Prints the rows of select_sql over the merge database (NULL: no table to
 * read, print no rows). what names it in errors. Returns 0 or an exit status.
 */
int print_results(struct merge *m, struct output *out, const char *select_sql,
		  const char *what, const char *cov_json, struct query_opts *q);

/* cmd_analysis.c: stragglers, netcheck and timeline, the subcommands of analysis files. */
int prepare_stragglers(struct run *r);
int prepare_netcheck(struct run *r);
int prepare_timeline(struct run *r);
int run_stragglers(struct run *r);
int run_netcheck(struct run *r);
int run_timeline(struct run *r);
void verdict_stragglers(struct run *r);
void verdict_netcheck(struct run *r);

#endif
