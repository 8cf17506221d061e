/* SPDX-License-Identifier: MIT */
#include "output.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strbuf.h"

/* Rows are written out once this much output is buffered. */
#define FLUSH_AT (128u << 10)

struct output {
	int fd;
	int format;
	size_t ncols;
	char **names;
	int tty;
	struct strbuf buf;
	int err; /* first write error, sticky */
	size_t nrows;
	/* table: every cell, NUL-terminated, one after another */
	struct strbuf cells;
	unsigned char *numeric; /* per column: every non-NULL value was a number */
	int with_coverage; /* json, ndjson: the older shapes, with the coverage */
};

static const char *const format_names[] = {
	[FQ_FMT_TABLE] = "table", [FQ_FMT_CSV] = "csv",	      [FQ_FMT_TSV] = "tsv",
	[FQ_FMT_JSON] = "json",	  [FQ_FMT_NDJSON] = "ndjson",
};

int output_format_parse(const char *name)
{
	for (size_t i = 0; i < sizeof(format_names) / sizeof(format_names[0]); i++)
		if (!strcmp(name, format_names[i]))
			return (int)i;
	return -1;
}

struct output *output_new(int fd, int format)
{
	struct output *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->fd = fd;
	o->format = format;
	/* tsv or csv on a terminal: control bytes escaped as in a table. */
	o->tty = isatty(fd);
	return o;
}

void output_with_coverage(struct output *o)
{
	o->with_coverage = 1;
}

void output_free(struct output *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < o->ncols; i++)
		free(o->names[i]);
	free(o->names);
	free(o->numeric);
	sb_release(&o->buf);
	sb_release(&o->cells);
	free(o);
}

const char *output_text(struct output *o)
{
	return o->buf.s ? o->buf.s : "";
}

static int flush(struct output *o)
{
	size_t off = 0;

	if (o->buf.oom || o->cells.oom)
		return o->err = -ENOMEM;
	if (o->fd < 0 || o->err)
		return o->err;
	while (off < o->buf.len) {
		ssize_t n = write(o->fd, o->buf.s + off, o->buf.len - off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return o->err = -errno;
		}
		off += n;
	}
	o->buf.len = 0;
	return 0;
}

void output_fmt_double(char buf[40], double d)
{
	if (isnan(d)) {
		strcpy(buf, "NaN");
		return;
	}
	if (isinf(d)) {
		strcpy(buf, d > 0 ? "Infinity" : "-Infinity");
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, 40, "%.*g", prec, d);
		if (prec == 17 || strtod(buf, NULL) == d)
			break;
	}
	/* Keep a real looking like one: 1.0, not 1, as SQLite prints it. */
	if (!strpbrk(buf, ".en"))
		strcat(buf, ".0");
}

static size_t fmt_int(char *buf, int64_t v)
{
	char tmp[24];
	size_t n = 0, k = 0;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;

	do {
		tmp[n++] = '0' + u % 10;
		u /= 10;
	} while (u);
	if (v < 0)
		buf[k++] = '-';
	while (n)
		buf[k++] = tmp[--n];
	return k;
}

static void put_hex(struct strbuf *b, const void *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = p;

	if (sb_grow(b, 2 * n))
		return;
	for (size_t i = 0; i < n; i++) {
		b->s[b->len++] = hex[s[i] >> 4];
		b->s[b->len++] = hex[s[i] & 15];
	}
	b->s[b->len] = 0;
}

/* tsv and table cells: backslash escapes keep one value on one line. */
static void put_escaped(struct strbuf *b, const char *s, size_t n)
{
	size_t i = 0, run;

	while (i < n) {
		for (run = i; run < n && s[run] != '\t' && s[run] != '\n' && s[run] != '\r' &&
			      s[run] != '\\';
		     run++)
			;
		sb_add(b, s + i, run - i);
		if (run == n)
			break;
		sb_putc(b, '\\');
		sb_putc(b, s[run] == '\t'   ? 't'
			   : s[run] == '\n' ? 'n'
			   : s[run] == '\r' ? 'r'
					    : '\\');
		i = run + 1;
	}
}

/* table cells go to a terminal: no control characters get through raw. */
static void put_table_text(struct strbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];

		if (c == '\t' || c == '\n' || c == '\r' || c == '\\') {
			put_escaped(b, s + i, 1);
		} else if (c < 0x20 || c == 0x7f) {
			char esc[4] = { '\\', 'x', hex[c >> 4], hex[c & 15] };

			sb_add(b, esc, 4);
		} else {
			sb_putc(b, c);
		}
	}
}

static void put_csv_text(struct strbuf *b, const char *s, size_t n)
{
	/* RFC 4180: quote fields holding a separator, quote or line break; the
	 * empty string is quoted so it differs from NULL. */
	if (n && !memchr(s, ',', n) && !memchr(s, '"', n) && !memchr(s, '\n', n) &&
	    !memchr(s, '\r', n)) {
		sb_add(b, s, n);
		return;
	}
	sb_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"')
			sb_putc(b, '"');
		sb_putc(b, s[i]);
	}
	sb_putc(b, '"');
}

/* csv on a terminal: the control bytes of the text escaped first, then quoted. */
static void put_csv_tty(struct strbuf *b, const char *s, size_t n)
{
	struct strbuf t = STRBUF_INIT;

	sb_printable(&t, s, n);
	if (t.oom)
		b->oom = 1;
	else
		put_csv_text(b, t.s ? t.s : "", t.len);
	sb_release(&t);
}

/* One value in a text format (csv, tsv, table). */
static void put_value(struct output *o, struct strbuf *b, const struct wire_value *v)
{
	char num[40];

	switch (v->type) {
	case WIRE_NULL:
		break;
	case WIRE_INT:
		if (!sb_grow(b, 24)) {
			b->len += fmt_int(b->s + b->len, v->i);
			b->s[b->len] = 0;
		}
		break;
	case WIRE_REAL:
		output_fmt_double(num, v->d);
		sb_puts(b, num);
		break;
	case WIRE_TEXT:
		if (o->format == FQ_FMT_CSV && o->tty)
			put_csv_tty(b, v->p, v->n);
		else if (o->format == FQ_FMT_CSV)
			put_csv_text(b, v->p, v->n);
		else if (o->format == FQ_FMT_TABLE || o->tty)
			put_table_text(b, v->p, v->n);
		else
			put_escaped(b, v->p, v->n);
		break;
	case WIRE_BLOB:
		sb_puts(b, "x'");
		put_hex(b, v->p, v->n);
		sb_putc(b, '\'');
		break;
	}
}

static void put_json_value(struct strbuf *b, const struct wire_value *v)
{
	char num[40];

	switch (v->type) {
	case WIRE_INT:
		if (!sb_grow(b, 24)) {
			b->len += fmt_int(b->s + b->len, v->i);
			b->s[b->len] = 0;
		}
		break;
	case WIRE_REAL:
		output_fmt_double(num, v->d);
		/* JSON has no NaN or infinities: they travel as strings. */
		if (!isfinite(v->d))
			sb_json_str(b, num, strlen(num));
		else
			sb_puts(b, num);
		break;
	case WIRE_TEXT:
		sb_json_str(b, v->p, v->n);
		break;
	case WIRE_BLOB:
		sb_putc(b, '"');
		put_hex(b, v->p, v->n);
		sb_putc(b, '"');
		break;
	default:
		sb_puts(b, "null");
	}
}

int output_begin(struct output *o, size_t ncols, const char *const *names)
{
	o->names = calloc(ncols ? ncols : 1, sizeof(*o->names));
	o->numeric = calloc(ncols ? ncols : 1, 1);
	if (!o->names || !o->numeric)
		return -ENOMEM;
	for (size_t i = 0; i < ncols; i++) {
		/* The table prints its header as kept here: escaped like its cells. */
		if (o->format == FQ_FMT_TABLE) {
			struct strbuf nb = STRBUF_INIT;

			put_table_text(&nb, names[i], strlen(names[i]));
			o->names[i] = nb.s ? sb_detach(&nb) : strdup("");
		} else {
			o->names[i] = strdup(names[i]);
		}
		if (!o->names[i])
			return -ENOMEM;
		o->numeric[i] = 1;
		o->ncols = i + 1;
	}
	switch (o->format) {
	case FQ_FMT_CSV:
	case FQ_FMT_TSV:
		if (!ncols)
			break;
		for (size_t i = 0; i < ncols; i++) {
			struct wire_value v = { .type = WIRE_TEXT,
						.p = names[i],
						.n = strlen(names[i]) };

			if (i)
				sb_putc(&o->buf, o->format == FQ_FMT_CSV ? ',' : '\t');
			put_value(o, &o->buf, &v);
		}
		sb_putc(&o->buf, '\n');
		break;
	case FQ_FMT_JSON:
		if (!o->with_coverage) {
			sb_putc(&o->buf, '[');
			break;
		}
		sb_puts(&o->buf, "{\"columns\":[");
		for (size_t i = 0; i < ncols; i++) {
			if (i)
				sb_putc(&o->buf, ',');
			sb_json_str(&o->buf, names[i], strlen(names[i]));
		}
		sb_puts(&o->buf, "],\"rows\":[");
		break;
	}
	return o->buf.oom ? -ENOMEM : 0;
}

/* One row as an object keyed by column name, between open and close. */
static void put_json_object(struct output *o, struct strbuf *b, const struct wire_value *vals,
			    const char *open, const char *close)
{
	sb_puts(b, open);
	for (size_t i = 0; i < o->ncols; i++) {
		if (i)
			sb_putc(b, ',');
		sb_json_str(b, o->names[i], strlen(o->names[i]));
		sb_putc(b, ':');
		put_json_value(b, &vals[i]);
	}
	sb_puts(b, close);
}

int output_row(struct output *o, const struct wire_value *vals)
{
	struct strbuf *b = &o->buf;

	switch (o->format) {
	case FQ_FMT_CSV:
	case FQ_FMT_TSV:
		for (size_t i = 0; i < o->ncols; i++) {
			if (i)
				sb_putc(b, o->format == FQ_FMT_CSV ? ',' : '\t');
			put_value(o, b, &vals[i]);
		}
		sb_putc(b, '\n');
		break;
	case FQ_FMT_JSON:
		if (!o->with_coverage) {
			put_json_object(o, b, vals, o->nrows ? ",\n{" : "{", "}");
			break;
		}
		sb_puts(b, o->nrows ? ",[" : "[");
		for (size_t i = 0; i < o->ncols; i++) {
			if (i)
				sb_putc(b, ',');
			put_json_value(b, &vals[i]);
		}
		sb_putc(b, ']');
		break;
	case FQ_FMT_NDJSON:
		put_json_object(o, b, vals, "{", "}\n");
		break;
	case FQ_FMT_TABLE:
		for (size_t i = 0; i < o->ncols; i++) {
			put_value(o, &o->cells, &vals[i]);
			sb_add(&o->cells, "", 1);
			if (vals[i].type != WIRE_NULL && vals[i].type != WIRE_INT &&
			    vals[i].type != WIRE_REAL)
				o->numeric[i] = 0;
		}
		break;
	}
	o->nrows++;
	if (b->len >= FLUSH_AT)
		return flush(o);
	return b->oom || o->cells.oom ? -ENOMEM : 0;
}

/* Display width: UTF-8 code points (wide characters count one; good enough). */
static size_t width_of(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		w += ((unsigned char)*s & 0xc0) != 0x80;
	return w;
}

static void pad(struct strbuf *b, size_t n)
{
	while (n--)
		sb_putc(b, ' ');
}

static int table_write(struct output *o)
{
	size_t *w = calloc(o->ncols ? o->ncols : 1, sizeof(*w));
	const char *p;
	size_t r, c;

	if (!w)
		return -ENOMEM;
	if (o->cells.oom) {
		free(w);
		return -ENOMEM;
	}
	for (c = 0; c < o->ncols; c++)
		w[c] = width_of(o->names[c]);
	p = o->cells.s;
	for (r = 0; r < o->nrows; r++)
		for (c = 0; c < o->ncols; c++) {
			size_t cw = width_of(p);

			if (cw > w[c])
				w[c] = cw;
			p += strlen(p) + 1;
		}
	for (c = 0; c < o->ncols; c++) {
		size_t cw = width_of(o->names[c]);

		if (c)
			sb_puts(&o->buf, "  ");
		if (o->numeric[c])
			pad(&o->buf, w[c] - cw);
		sb_puts(&o->buf, o->names[c]);
		if (!o->numeric[c] && c + 1 < o->ncols)
			pad(&o->buf, w[c] - cw);
	}
	if (o->ncols)
		sb_putc(&o->buf, '\n');
	for (c = 0; c < o->ncols; c++) {
		if (c)
			sb_puts(&o->buf, "  ");
		for (size_t i = 0; i < w[c]; i++)
			sb_putc(&o->buf, '-');
	}
	if (o->ncols)
		sb_putc(&o->buf, '\n');
	p = o->cells.s;
	for (r = 0; r < o->nrows; r++) {
		for (c = 0; c < o->ncols; c++) {
			size_t len = strlen(p), cw = width_of(p);

			if (c)
				sb_puts(&o->buf, "  ");
			if (o->numeric[c])
				pad(&o->buf, w[c] - cw);
			sb_add(&o->buf, p, len);
			if (!o->numeric[c] && c + 1 < o->ncols)
				pad(&o->buf, w[c] - cw);
			p += len + 1;
		}
		sb_putc(&o->buf, '\n');
		if (o->buf.len >= FLUSH_AT && flush(o))
			break;
	}
	free(w);
	return o->err;
}

int output_end(struct output *o, const char *coverage_json)
{
	switch (o->format) {
	case FQ_FMT_TABLE:
		if (table_write(o))
			return o->err;
		break;
	case FQ_FMT_JSON:
		if (!o->with_coverage) {
			sb_puts(&o->buf, o->names ? "]\n" : "[]\n");
			break;
		}
		if (!o->names)
			sb_puts(&o->buf, "{\"columns\":[],\"rows\":[");
		sb_puts(&o->buf, "]");
		if (coverage_json) {
			sb_puts(&o->buf, ",\"coverage\":");
			sb_puts(&o->buf, coverage_json);
		}
		sb_puts(&o->buf, "}\n");
		break;
	case FQ_FMT_NDJSON:
		if (coverage_json && o->with_coverage) {
			sb_puts(&o->buf, "{\"coverage\":");
			sb_puts(&o->buf, coverage_json);
			sb_puts(&o->buf, "}\n");
		}
		break;
	}
	return flush(o);
}
