/* SPDX-License-Identifier: MIT */
/*
 * fleetq gate, inside: the state its pieces share (struct gate), and the functions one
 * piece calls in another. gate.h is the face the CLI sees.
 */
#ifndef FLEETQ_GATE_INT_H
#define FLEETQ_GATE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sqlite3.h>

#include "coverage.h"
#include "fanout.h"
#include "gate.h"
#include "merge.h"

#define BASELINE_FORMAT "fleetq-gate-baseline"
#define BASELINE_VERSION 1
#define DEFAULT_SINCE_NS (600 * 1000000000ll)

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

#define GATE_COLS "metric, key, rank, baseline, now, change_pct, \"limit\", verdict"

/* A message on stderr, "fleetq: gate: " first; returns FQ_EXIT_USAGE. */
__attribute__((format(printf, 1, 2))) int gate_error(const char *fmt, ...);

/* gate_metric.c */
int gate_add_metric(struct gate *g, const char *name, size_t nlen, const char *sql, int higher,
		      int builtin);
int gate_parse_metric(struct gate *g, const char *spec);
int gate_add_builtins(struct gate *g, const char *list);

/* gate_plan.c */
int gate_plan_tables(struct gate *g);
char *gate_fetch_sql(const struct table *t, char **cause);

/* gate_baseline.c */
int gate_load_baseline(struct gate *g, const char *path);
int gate_match_baseline(struct gate *g, const char *path);
int gate_save_writable(const char *path, const char *what, const char *opt);
int gate_save(struct gate *g, const struct fanout_params *fp, struct fanout *first,
		const char *path);

/* gate_fetch.c */
int gate_fetch(struct gate *g, struct fanout_params *fp, struct merge *m,
		 struct coverage *cov, struct fanout **first);

/* gate_eval.c */
int gate_evaluate(struct gate *g);
int gate_compare(struct gate *g);

/* gate_report.c */
int gate_print_report(struct gate *g);
int gate_print_junit(struct gate *g, int nfail, FILE *f, const char *path);
int gate_write_junit(struct gate *g, int nfail, const char *path);
int gate_print_rows(sqlite3 *db, int format, const char *sql, const char *cov_json);
int gate_summarize(struct gate *g, int quiet);

/* gate.c */
int gate_error(const char *fmt, ...);
void gate_release(struct gate *g);
int gate_setup(struct gate *g, const struct gate_args *a);

#endif
