/* SPDX-License-Identifier: MIT */
/*
 * Result printing: table, csv, tsv, json, ndjson. Rows stream through a
 * buffer (table buffers the cells to size its columns); json and ndjson
 * carry the coverage object too, so no format can hide missing nodes.
 */
#ifndef FLEETQ_OUTPUT_H
#define FLEETQ_OUTPUT_H

#include <stddef.h>

#include "wire.h"

enum fq_format { FQ_FMT_TABLE, FQ_FMT_CSV, FQ_FMT_TSV, FQ_FMT_JSON, FQ_FMT_NDJSON };

/* "table", "csv", ... -> enum fq_format, or -1. */
int output_format_parse(const char *name);

struct output;

/* Writes to fd; fd < 0 keeps everything in memory for output_text(). */
struct output *output_new(int fd, int format);
void output_free(struct output *o);

/*
 * json and ndjson carry rows only by default, as objects keyed by column name
 * (json: one array of them), so that a jq pipeline sees rows alone; the
 * coverage is on stderr. With coverage (--with-coverage): json is one object
 * {"columns":[...],"rows":[[...]],"coverage":{...}}, ndjson ends with a
 * {"coverage":{...}} line. Call before output_begin().
 */
void output_with_coverage(struct output *o);

int output_begin(struct output *o, size_t ncols, const char *const *names);
/* ncols values; TEXT/BLOB bytes are copied or written before returning. */
int output_row(struct output *o, const struct wire_value *vals);
/* coverage_json: the object from coverage_json(), or NULL; only written with
 * output_with_coverage(). Flushes. */
int output_end(struct output *o, const char *coverage_json);
/* In-memory mode: everything written so far (owned by o). */
const char *output_text(struct output *o);

/* Shortest "%.Ng" (N = 15..17) that reads back as d; "Infinity", "NaN". */
void output_fmt_double(char buf[40], double d);

#endif
