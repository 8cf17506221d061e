/* SPDX-License-Identifier: MIT */
/*
 * Coverage: what became of every node of one fan-out, the one-line summary
 * for stderr, the JSON object for json/ndjson output, and the exit code.
 */
#ifndef FLEETQ_COVERAGE_H
#define FLEETQ_COVERAGE_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* Exit codes: stable API, documented in fleetq --help and fleetq(1). */
enum fq_exit {
	FQ_EXIT_OK = 0,
	FQ_EXIT_GATE = 1,     /* reserved: an analysis or gate tripped */
	FQ_EXIT_USAGE = 2,    /* usage, configuration or local error */
	FQ_EXIT_COVERAGE = 3, /* fewer nodes answered fully than --min-coverage asks */
	FQ_EXIT_TLS = 4,      /* TLS/authentication failed on at least one node */
	FQ_EXIT_HANG = 5,     /* stragglers: a hung rank (wins over 1, 4 and 3) */
};

/* A node's outcome: the wire's (wire.h), shown in fleetq's words by outcome_name(). */
enum fq_outcome {
	FQ_PENDING = WIRE_OUT_PENDING,
	FQ_OK = WIRE_OUT_OK,
	FQ_TRUNCATED = WIRE_OUT_TRUNCATED,
	FQ_TIMEOUT = WIRE_OUT_TIMEOUT,
	FQ_UNREACHABLE = WIRE_OUT_UNREACHABLE,
	FQ_TLS = WIRE_OUT_TLS,
	FQ_SQL = WIRE_OUT_SQL,
	FQ_PROTOCOL = WIRE_OUT_PROTOCOL,
	FQ_COLUMNS = WIRE_OUT_COLUMNS,
	FQ_PARTIAL = WIRE_OUT_PARTIAL,
	FQ_AGENT = WIRE_OUT_AGENT,
	FQ_INTERRUPTED = WIRE_OUT_INTERRUPTED,
	FQ_BUSY = WIRE_OUT_BUSY,
	FQ_NOUTCOMES = WIRE_NOUTCOMES
};

const char *outcome_name(int outcome); /* "ok", "timeout", "sql error", ... */

struct coverage;

/* names[i] must outlive the coverage. NULL and errno on failure. */
struct coverage *coverage_new(size_t n, const char *const *names);
void coverage_free(struct coverage *c);

/* Records node i's outcome; message (may be NULL) is copied. */
void coverage_set(struct coverage *c, size_t i, int outcome, int64_t rows, const char *message);
/* Node i's END status (enum wire_status), after coverage_set. */
void coverage_set_status(struct coverage *c, size_t i, int status);
int coverage_status(const struct coverage *c, size_t i); /* 0: none or ok */
/* 1 when every node that answered refused the query itself (syntax, missing
 * table, a write: END sql error or denied): the user's mistake, exit 2. */
int coverage_user_sql_error(const struct coverage *c);
/* Nodes ok whose rows the user's --max-rows cut (END row limit at exactly that many). */
size_t coverage_limited(const struct coverage *c);
int coverage_outcome(const struct coverage *c, size_t i);
/* Node i's message (why it failed), or NULL; owned by c. */
const char *coverage_message(const struct coverage *c, size_t i);
/* Rows node i sent (merged or not). */
int64_t coverage_rows(const struct coverage *c, size_t i);
size_t coverage_count(const struct coverage *c, int outcome);
size_t coverage_total(const struct coverage *c);

/* "coverage: 14/16 nodes ok, 1234 rows; timeout: gpu[03,07] (...); ..." (malloc'd). */
char *coverage_summary(const struct coverage *c);
/* When no node is ok and all failed alike: "sql error on all 4 nodes: no such
 * table: foo" (malloc'd); else NULL. */
char *coverage_common_failure(const struct coverage *c);
/* {"total":16,"ok":14,"fraction":0.875,"rows":1234,"failures":[...]} (malloc'd). */
char *coverage_json(const struct coverage *c);
/* FQ_EXIT_TLS if any node failed TLS, else FQ_EXIT_COVERAGE below min, else 0. */
int coverage_exit(const struct coverage *c, double min_fraction);

#endif
