/* SPDX-License-Identifier: MIT */
/*
 * fleetq gate: the report. The side-by-side table, JUnit XML, rows in the machine formats,
 * the summary line on stderr, and --fail-if.
 */
#include "gate_int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"
#include "strbuf.h"

static void fmt_num(char *buf, size_t n, sqlite3_stmt *st, int col)
{
	double d = sqlite3_column_double(st, col), a = fabs(d);

	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		snprintf(buf, n, "-");
	else if (a >= 100 || d == (double)(int64_t)d)
		snprintf(buf, n, "%.1f", d);
	else if (a >= 1)
		snprintf(buf, n, "%.3f", d);
	else
		snprintf(buf, n, "%.4g", d);
}

static void fmt_change(char *buf, size_t n, sqlite3_stmt *st, int col, int verdict_col)
{
	const char *v = (const char *)sqlite3_column_text(st, verdict_col);

	if (sqlite3_column_type(st, col) != SQLITE_NULL)
		snprintf(buf, n, "%+.1f%%", sqlite3_column_double(st, col));
	else if (v && (!strcmp(v, "regressed") || !strcmp(v, "improved")))
		snprintf(buf, n, "from 0");
	else
		snprintf(buf, n, "-");
}

static void series_name(char *buf, size_t n, sqlite3_stmt *st)
{
	const char *m = (const char *)sqlite3_column_text(st, 0);
	const char *k = (const char *)sqlite3_column_text(st, 1);

	if (k)
		snprintf(buf, n, "%s[%s]", m, k);
	else
		snprintf(buf, n, "%s", m);
}

static void rank_text(char *buf, size_t n, sqlite3_stmt *st, int col)
{
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		snprintf(buf, n, "-");
	else
		snprintf(buf, n, "%lld", (long long)sqlite3_column_int64(st, col));
}

/* The side-by-side report: metric, rank, baseline, now, change, verdict. */
int gate_print_report(struct gate *g)
{
	static const char *const names[] = { "metric", "rank", "baseline", "now", "change",
					     "verdict" };
	struct output *o = output_new(STDOUT_FILENO, FQ_FMT_TABLE);
	sqlite3_stmt *st = NULL;
	int err = -ENOMEM;

	if (!o || sqlite3_prepare_v2(g->db, "SELECT " GATE_COLS " FROM temp.gate ORDER BY rowid",
				     -1, &st, NULL))
		goto out;
	err = output_begin(o, 6, names);
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		char c[6][160];
		struct wire_value v[6];

		series_name(c[0], sizeof(c[0]), st);
		rank_text(c[1], sizeof(c[1]), st, 2);
		fmt_num(c[2], sizeof(c[2]), st, 3);
		fmt_num(c[3], sizeof(c[3]), st, 4);
		fmt_change(c[4], sizeof(c[4]), st, 5, 7);
		snprintf(c[5], sizeof(c[5]), "%s", (const char *)sqlite3_column_text(st, 7));
		for (int i = 0; i < 6; i++)
			v[i] = (struct wire_value){ .type = WIRE_TEXT, .p = c[i], .n = strlen(c[i]) };
		err = output_row(o, v);
	}
	if (!err)
		err = output_end(o, NULL);
out:
	sqlite3_finalize(st);
	output_free(o);
	return err && err != -EPIPE ? gate_error("cannot write the report: %s", strerror(-err))
				    : -1;
}

static void xml_str(struct strbuf *b, const char *s)
{
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '&')
			sb_puts(b, "&amp;");
		else if (c == '<')
			sb_puts(b, "&lt;");
		else if (c == '>')
			sb_puts(b, "&gt;");
		else if (c == '"')
			sb_puts(b, "&quot;");
		else if (c < 0x20 && c != '\n' && c != '\t')
			sb_putc(b, ' '); /* not allowed in XML 1.0 */
		else
			sb_putc(b, (char)c);
	}
}

/* One line per failing series, for the failure message and the stderr summary. */
static void failure_text(char *buf, size_t n, sqlite3_stmt *st, double tol)
{
	char name[160], rank[32], base[48], now[48], change[48];

	series_name(name, sizeof(name), st);
	rank_text(rank, sizeof(rank), st, 2);
	fmt_num(base, sizeof(base), st, 3);
	fmt_num(now, sizeof(now), st, 4);
	fmt_change(change, sizeof(change), st, 5, 7);
	if (!strcmp((const char *)sqlite3_column_text(st, 7), "missing"))
		snprintf(buf, n, "%s%s%s missing (baseline %s)", name,
			 strcmp(rank, "-") ? " rank " : "", strcmp(rank, "-") ? rank : "", base);
	else
		snprintf(buf, n, "%s%s%s %s (baseline %s, now %s, tolerance %g%%)", name,
			 strcmp(rank, "-") ? " rank " : "", strcmp(rank, "-") ? rank : "", change,
			 base, now, tol * 100);
}

int gate_print_junit(struct gate *g, int nfail, FILE *f, const char *path)
{
	struct strbuf b = STRBUF_INIT;
	sqlite3_stmt *st = NULL;
	int n = 0, ret = -1;
	size_t off;

	if (sqlite3_prepare_v2(g->db, "SELECT " GATE_COLS " FROM temp.gate ORDER BY rowid", -1,
			       &st, NULL))
		return gate_error("cannot read the comparison: %s", sqlite3_errmsg(g->db));
	sb_puts(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
	off = b.len;
	while (sqlite3_step(st) == SQLITE_ROW) {
		char name[160], rank[32], msg[512];
		const char *v = (const char *)sqlite3_column_text(st, 7);

		series_name(name, sizeof(name), st);
		rank_text(rank, sizeof(rank), st, 2);
		sb_puts(&b, "    <testcase classname=\"fleetq.gate.");
		xml_str(&b, name);
		sb_puts(&b, "\" name=\"");
		if (strcmp(rank, "-"))
			sb_printf(&b, "rank %s", rank);
		else
			xml_str(&b, name);
		sb_puts(&b, "\" time=\"0\">");
		if (!strcmp(v, "regressed") || !strcmp(v, "missing")) {
			failure_text(msg, sizeof(msg), st, g->tol);
			sb_puts(&b, "\n      <failure type=\"");
			sb_puts(&b, v);
			sb_puts(&b, "\" message=\"");
			xml_str(&b, msg);
			sb_puts(&b, "\">");
			xml_str(&b, msg);
			sb_puts(&b, "</failure>\n    ");
		} else {
			sb_puts(&b, "\n      <system-out>");
			xml_str(&b, v);
			sb_puts(&b, "</system-out>\n    ");
		}
		sb_puts(&b, "</testcase>\n");
		n++;
	}
	sqlite3_finalize(st);
	sb_puts(&b, "  </testsuite>\n</testsuites>\n");
	{
		/* the header needs the counts: build it and splice it in */
		struct strbuf h = STRBUF_INIT;
		char *body = NULL;

		sb_printf(&h, "<testsuites name=\"fleetq gate\" tests=\"%d\" failures=\"%d\">\n  "
			      "<testsuite name=\"fleetq gate\" tests=\"%d\" failures=\"%d\" "
			      "errors=\"0\" skipped=\"0\">\n",
			  n, nfail, n, nfail);
		if (!b.oom && !h.oom) {
			body = strdup(b.s + off);
			b.len = off;
			b.s[off] = 0;
			sb_puts(&b, h.s);
			if (body)
				sb_puts(&b, body);
			else
				b.oom = 1;
		}
		free(body);
		sb_release(&h);
	}
	if (b.oom)
		ret = gate_error("out of memory");
	else if (fwrite(b.s, 1, b.len, f) != b.len || fflush(f))
		ret = gate_error("cannot write %s: %s", path, strerror(errno));
	sb_release(&b);
	return ret;
}

/* --junit FILE: the same comparison as the report, into FILE. */
int gate_write_junit(struct gate *g, int nfail, const char *path)
{
	FILE *f = fopen(path, "w");
	int ret;

	if (!f)
		return gate_error("cannot write junit file '%s': %s: check --junit", path,
				  strerror(errno));
	ret = gate_print_junit(g, nfail, f, path);
	if (fclose(f) && ret < 0)
		ret = gate_error("cannot write junit file '%s': %s: check --junit", path,
				 strerror(errno));
	return ret;
}

/* Machine formats: the rows of a table as the output module writes them. */
int gate_print_rows(sqlite3 *db, int format, const char *sql, const char *cov_json)
{
	struct output *o = output_new(STDOUT_FILENO, format);
	sqlite3_stmt *st = NULL;
	struct wire_value v[16];

	if (o && cov_json)
		output_with_coverage(o);
	const char *names[16];
	int n, err = -ENOMEM;

	if (!o || sqlite3_prepare_v2(db, sql, -1, &st, NULL))
		goto out;
	n = sqlite3_column_count(st);
	n = n > 16 ? 16 : n;
	for (int i = 0; i < n; i++)
		names[i] = sqlite3_column_name(st, i);
	err = output_begin(o, n, names);
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		for (int i = 0; i < n; i++) {
			switch (sqlite3_column_type(st, i)) {
			case SQLITE_INTEGER:
				v[i] = (struct wire_value){ .type = WIRE_INT,
							    .i = sqlite3_column_int64(st, i) };
				break;
			case SQLITE_FLOAT:
				v[i] = (struct wire_value){ .type = WIRE_REAL,
							    .d = sqlite3_column_double(st, i) };
				break;
			case SQLITE_NULL:
				v[i] = (struct wire_value){ .type = WIRE_NULL };
				break;
			default:
				v[i] = (struct wire_value){ .type = WIRE_TEXT,
							    .p = sqlite3_column_text(st, i),
							    .n = sqlite3_column_bytes(st, i) };
			}
		}
		err = output_row(o, v);
	}
	if (!err)
		err = output_end(o, cov_json);
out:
	sqlite3_finalize(st);
	output_free(o);
	return err && err != -EPIPE ? gate_error("cannot write the output: %s", strerror(-err))
				    : -1;
}

/* "fleetq gate: 8 metrics, 52 checks, 1 regressed: busy_gap_us rank 6 +33.1% (...)" */
int gate_summarize(struct gate *g, int quiet)
{
	sqlite3_stmt *st = NULL;
	struct strbuf b = STRBUF_INIT;
	int checks = 0, bad = 0, shown = 0;

	if (sqlite3_prepare_v2(g->db, "SELECT " GATE_COLS " FROM temp.gate ORDER BY "
				      "verdict <> 'regressed', abs(change_pct) DESC, rowid",
			       -1, &st, NULL))
		return -1;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *v = (const char *)sqlite3_column_text(st, 7);
		char msg[512];

		checks++;
		if (strcmp(v, "regressed") && strcmp(v, "missing"))
			continue;
		bad++;
		if (shown++ < 3) {
			failure_text(msg, sizeof(msg), st, g->tol);
			sb_printf(&b, "%s%s", shown > 1 ? "; " : "", msg);
		}
	}
	sqlite3_finalize(st);
	if (!quiet) {
		if (bad)
			fprintf(stderr,
				"fleetq gate: %zu metric%s, %d check%s, %d regressed: %s%s\n", g->nm,
				g->nm == 1 ? "" : "s", checks, checks == 1 ? "" : "s", bad,
				b.s ? b.s : "", bad > 3 ? "; ..." : "");
		else
			fprintf(stderr, "fleetq gate: %zu metric%s, %d check%s, none regressed "
					"(tolerance %g%%, %" PRId64 " rank%s)\n",
				g->nm, g->nm == 1 ? "" : "s", checks, checks == 1 ? "" : "s",
				g->tol * 100, g->ranks, g->ranks == 1 ? "" : "s");
	}
	sb_release(&b);
	return bad;
}

int gate_fail_if(sqlite3 *db, const char *sql, long long *rows, char **cause)
{
	struct output *o = output_new(-1, FQ_FMT_TABLE);
	sqlite3_stmt *st = NULL;
	struct wire_value v[32];
	const char *names[32];
	int n, rc, err = 0;

	*rows = 0;
	*cause = NULL;
	if (!o)
		return -ENOMEM;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK || !st) {
		if (asprintf(cause, "--fail-if: %s: fix the SQL (it runs over the merged tables: "
				    "results and clock, or gate's)",
			     st || sqlite3_errcode(db) ? sqlite3_errmsg(db) : "no statement") < 0)
			*cause = NULL;
		err = -EINVAL;
		goto out;
	}
	n = sqlite3_column_count(st);
	n = n > 32 ? 32 : n;
	for (int i = 0; i < n; i++)
		names[i] = sqlite3_column_name(st, i);
	output_begin(o, n, names);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (int i = 0; i < n; i++) {
			int t = sqlite3_column_type(st, i);

			if (t == SQLITE_INTEGER)
				v[i] = (struct wire_value){ .type = WIRE_INT,
							    .i = sqlite3_column_int64(st, i) };
			else if (t == SQLITE_FLOAT)
				v[i] = (struct wire_value){ .type = WIRE_REAL,
							    .d = sqlite3_column_double(st, i) };
			else if (t == SQLITE_NULL)
				v[i] = (struct wire_value){ .type = WIRE_NULL };
			else
				v[i] = (struct wire_value){ .type = WIRE_TEXT,
							    .p = sqlite3_column_text(st, i),
							    .n = sqlite3_column_bytes(st, i) };
		}
		output_row(o, v);
		(*rows)++;
	}
	if (rc != SQLITE_DONE) {
		if (asprintf(cause, "--fail-if: %s", sqlite3_errmsg(db)) < 0)
			*cause = NULL;
		err = -EINVAL;
		goto out;
	}
	output_end(o, NULL);
	if (*rows)
		fprintf(stderr, "fleetq: --fail-if: %lld row%s:\n%s", *rows, *rows == 1 ? "" : "s",
			output_text(o));
out:
	sqlite3_finalize(st);
	output_free(o);
	return err;
}
