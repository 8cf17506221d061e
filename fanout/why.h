/* SPDX-License-Identifier: MIT */
/*
 * Why a rank is slow (fleetq stragglers): after the verdict, a second fan-out of
 * why.node.sql to the same hosts, why.merge.sql over its rows, and the evidence joined to
 * the verdict's rows as more columns (docs/analysis.md, "Why: the evidence").
 */
#ifndef FLEETQ_WHY_H
#define FLEETQ_WHY_H

#include <stdio.h>
#include <sqlite3.h>

#include "analysis.h"
#include "fanout.h"

/* --show-sql: the evidence files, after the verdict's. */
void why_show(const struct an_plan *p, FILE *f);

/*
 * When temp.fq_analysis in db holds a rank that is not hung: runs plan (why.node.sql with
 * the verdict's parameters) on fp's hosts, why.merge.sql over the rows (merge_params bound
 * by name, as the verdict's: its :threshold), and remakes
 * temp.fq_analysis with the evidence columns appended (NULL where a node sent none).
 * 0 (also when there was nothing to explain) or -errno with *cause; on error
 * temp.fq_analysis is as it was.
 */
int why_attach(sqlite3 *db, const struct an_plan *plan, const struct fanout_params *fp,
	       const struct an_param *merge_params, size_t n, char **cause);

/* The report's lines for one row of temp.fq_analysis: nothing when it has no evidence. */
void why_report(FILE *out, sqlite3_stmt *st);

#endif
