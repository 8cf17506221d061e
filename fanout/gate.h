/* SPDX-License-Identifier: MIT */
/*
 * fleetq gate: CI regression gates over named metrics. A metric is SQL that runs on the
 * coordinator over the union of the nodes' trace tables it reads (fetched by one fan-out
 * per table, with a node column added); --save records its values and the fleet's shape
 * in a JSON baseline, --baseline compares a new run against it. docs/gate.md has the
 * design, the file format and how to pick a tolerance.
 */
#ifndef FLEETQ_GATE_H
#define FLEETQ_GATE_H

#include <stddef.h>
#include <stdint.h>
#include <sqlite3.h>

#include "fanout.h"

/* --format junit: gate only; the rest of the formats are enum fq_format. */
#define GATE_FMT_JUNIT 100
/* No --format: a report for people. */
#define GATE_FMT_REPORT (-1)

struct gate_args {
	const char *save, *baseline; /* exactly one */
	int append;		     /* --save: add a run to FILE */
	const char **metrics;	     /* "NAME[:higher|:lower]=SQL" */
	size_t nmetrics;
	const char *builtin; /* "all" or a comma list, NULL: none named */
	int samples;	     /* time slices per run; 0: the baseline's, else 1 */
	double tolerance;    /* fraction; < 0: 0.10 */
	double mad_k;	     /* < 0: 3 */
	int64_t since_ns;    /* < 0: default (10 min); 0: all time */
	const char *since_text, *job;
	int format; /* enum fq_format, GATE_FMT_JUNIT or GATE_FMT_REPORT */
	int quiet;
	double min_coverage;
	const char *fail_if; /* may be NULL */
	const char *junit;   /* --junit FILE: the comparison as JUnit XML too, or NULL */
	int with_coverage;   /* json, ndjson: the older shapes, with the coverage */
	const char *version; /* fleetq's */
};

/* "10%", "10" (both ten percent), "2.5%". 0 or -EINVAL. */
int gate_parse_tolerance(const char *s, double *frac);

/* --show-sql: the per-table fetch SQL and each metric's SQL; exit status. */
int gate_show_sql(const struct gate_args *a);

/*
 * Runs the gate over fp's hosts (fp->sql, params and clock_param are set here). Prints
 * the report or rows on stdout, summaries on stderr. Returns the exit status.
 */
int gate_main(const struct gate_args *a, struct fanout_params *fp);

/*
 * --fail-if: runs sql over db; each row it returns is printed on stderr as a table (stdout
 * keeps the normal output, parseable). *rows gets the count. 0, or -EINVAL with *cause
 * (the SQL does not prepare or step).
 */
int gate_fail_if(sqlite3 *db, const char *sql, long long *rows, char **cause);

#endif
