/* SPDX-License-Identifier: MIT */
/* The direct output: hostlist order whatever order hosts finish in, failed hosts'
 * rows dropped, relayed rows split into frames, NaN printed as the merge's NULL.
 * The same into the merge database: the same rows, in the same order. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "direct.h"
#include "merge.h"
#include "output.h"
#include "strbuf.h"
#include "wire.h"

static const char *const hosts[] = { "h0", "h1", "h2" };
static const char *const names[] = { "node", "a", "b" };

/* A ROWS frame of n rows (i, "x<i>") from first. */
static void frame(struct wire_buf *b, int first, int n)
{
	struct wire_rows w;
	char s[16];

	wire_buf_reset(b);
	wire_rows_begin(&w, b, 2);
	for (int i = first; i < first + n; i++) {
		struct wire_value v[2] = { { .type = WIRE_INT, .i = i },
					   { .type = WIRE_TEXT, .p = s } };

		v[1].n = (size_t)snprintf(s, sizeof(s), "x%d", i);
		wire_rows_add(&w, v);
	}
	wire_rows_finish(&w);
}

/* The merge's results table as csv text, in row id order (malloc'd). */
static char *merged_text(struct merge *m)
{
	struct strbuf t = STRBUF_INIT;
	sqlite3_stmt *st = NULL;

	sb_puts(&t, "node,a,b\n");
	CHECK(sqlite3_prepare_v2(merge_db(m),
				 "SELECT node || ',' || coalesce(a, '') || ',' || b FROM results "
				 "ORDER BY rowid",
				 -1, &st, NULL) == SQLITE_OK);
	while (st && sqlite3_step(st) == SQLITE_ROW)
		sb_printf(&t, "%s\n", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return t.s;
}

/* Runs one scenario (merge: into m instead of the output, frames held up to held_max
 * bytes); returns the csv text (malloc'd). */
static char *scenario(int hold, struct merge *m, size_t held_max)
{
	struct output *o = output_new(-1, FQ_FMT_CSV);
	struct direct *d = m ? direct_new_merge(m, 3, hosts, held_max)
			     : direct_new(o, 3, hosts, hold);
	struct wire_buf b;
	char *text, *cause = NULL;

	wire_buf_init(&b);
	CHECK(d != NULL);
	CHECK(!m || merge_hosts(m, 3) == 0);
	CHECK(!m || merge_columns(m, 0, 3, 2, names + 1, &cause) == 0);
	CHECK(direct_begin(d, 3, names) == 0);
	/* h2 finishes first, h1 fails after sending rows, h0 (relayed rows) last. */
	frame(&b, 20, 2);
	CHECK(direct_frame(d, 2, b.data, b.len) == 0);
	frame(&b, 10, 3);
	CHECK(direct_frame(d, 1, b.data, b.len) == 0);
	CHECK(direct_done(d, 2, 1) == 0);
	CHECK(direct_done(d, 1, 0) == 0);
	for (int i = 0; i < 5000; i++) {
		/* enough bytes for several frames */
		static const char pad[] = "a row long enough to need several frames";
		struct wire_value v[2] = { { .type = WIRE_REAL, .d = i ? i : NAN },
					   { .type = WIRE_TEXT, .p = pad, .n = sizeof(pad) - 1 } };

		CHECK(direct_row(d, 0, 2, v) == 0);
	}
	CHECK(direct_done(d, 0, 1) == 0);
	if (m) {
		CHECK(direct_drain(d, &cause) == 0 && merge_choose(m, 0, &cause) == 0 &&
		      merge_finish(m, &cause) == 0);
		text = merged_text(m);
	} else {
		CHECK(direct_end(d, NULL) == 0);
		text = strdup(output_text(o));
	}
	free(cause);
	direct_free(d);
	output_free(o);
	wire_buf_release(&b);
	return text;
}

int main(void)
{
	char *cause = NULL;
	struct merge *m = merge_new(&cause), *ms = merge_new(&cause);
	char *held = scenario(1, NULL, 0), *live = scenario(0, NULL, 0);
	char *merged = scenario(0, m, DIRECT_HELD_MAX), *line;
	/* over the cap from the first frame on: h1's rows go in, then the writer drops them */
	char *spilled = scenario(0, ms, 1);
	struct strbuf want = STRBUF_INIT;

	sb_puts(&want, "node,a,b\n");
	sb_puts(&want, "h0,,a row long enough to need several frames\n");
	for (int i = 1; i < 5000; i++)
		sb_printf(&want, "h0,%d.0,a row long enough to need several frames\n", i);
	sb_puts(&want, "h2,20,x20\nh2,21,x21\n");
	CHECK(held && want.s && !strcmp(held, want.s));
	CHECK(live && !strcmp(live, want.s));
	CHECK(merged && !strcmp(merged, want.s));
	CHECK(spilled && !strcmp(spilled, want.s));
	line = held ? strstr(held, "h1,") : NULL;
	CHECK(line == NULL);

	/* Nothing ever began: no columns, no rows. */
	{
		struct output *o = output_new(-1, FQ_FMT_JSON);
		struct direct *d = direct_new(o, 3, hosts, 0);

		CHECK(direct_end(d, "{}") == 0);
		CHECK_STR(output_text(o), "[]\n");
		direct_free(d);
		output_free(o);
		o = output_new(-1, FQ_FMT_JSON);
		output_with_coverage(o);
		d = direct_new(o, 3, hosts, 0);
		CHECK(direct_end(d, "{}") == 0);
		CHECK_STR(output_text(o), "{\"columns\":[],\"rows\":[],\"coverage\":{}}\n");
		direct_free(d);
		output_free(o);
	}
	/* A host that never finished keeps nothing. */
	{
		struct output *o = output_new(-1, FQ_FMT_TSV);
		struct direct *d = direct_new(o, 3, hosts, 0);
		struct wire_buf b;

		wire_buf_init(&b);
		CHECK(direct_begin(d, 3, names) == 0);
		frame(&b, 0, 1);
		CHECK(direct_frame(d, 0, b.data, b.len) == 0);
		CHECK(direct_frame(d, 1, b.data, b.len) == 0);
		CHECK(direct_done(d, 1, 1) == 0);
		CHECK(direct_end(d, NULL) == 0);
		CHECK_STR(output_text(o), "node\ta\tb\nh1\t0\tx0\n");
		direct_free(d);
		output_free(o);
		wire_buf_release(&b);
	}
	/* An insert fails (a value over the merge's length limit): the writer says so, and the
	 * drain hands over the merge's words. */
	{
		struct merge *mm = merge_new(&cause);
		struct direct *d = direct_new_merge(mm, 3, hosts, DIRECT_HELD_MAX);
		struct wire_buf b;
		int err;

		wire_buf_init(&b);
		CHECK(d && merge_hosts(mm, 3) == 0);
		CHECK(merge_columns(mm, 0, 3, 2, names + 1, &cause) == 0);
		sqlite3_limit(merge_db(mm), SQLITE_LIMIT_LENGTH, 2);
		CHECK(direct_begin(d, 3, names) == 0);
		frame(&b, 100, 1);
		CHECK(direct_frame(d, 0, b.data, b.len) == 0);
		CHECK(direct_done(d, 0, 1) == 0);
		for (int i = 0; i < 1000 && !direct_failed(d); i++)
			usleep(1000);
		CHECK(direct_failed(d));
		err = direct_drain(d, &cause);
		/* (the table is made at the first row: its CREATE may be what fails) */
		CHECK(err == -EIO && cause &&
		      (strstr(cause, "cannot insert") || strstr(cause, "cannot create")));
		free(cause);
		cause = NULL;
		direct_free(d);
		merge_free(mm);
		wire_buf_release(&b);
	}
	free(held);
	free(live);
	free(merged);
	free(spilled);
	merge_free(m);
	merge_free(ms);
	sb_release(&want);
	return check_done(NULL);
}
