/* SPDX-License-Identifier: MIT */
#include "timeline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fqsql.h"
#include "output.h"
#include "strbuf.h"

FILE *timeline_open(const char *path, char **cause)
{
	FILE *f;

	*cause = NULL;
	if (!path || !strcmp(path, "-"))
		return stdout;
	f = fopen(path, "we");
	if (!f)
		fq_fail(cause, -errno, "cannot open '%s': %s", path, strerror(errno));
	return f;
}

int timeline_close(FILE *f, const char *path, char **cause)
{
	int bad;

	*cause = NULL;
	if (!f || f == stdout)
		return 0;
	bad = ferror(f);
	if (fclose(f) || bad)
		return fq_fail(cause, -EIO, "cannot write '%s': %s", path, strerror(errno));
	return 0;
}

/* One column as a JSON value; args is JSON already (the merge SQL made it with json_object). */
static void put_value(struct strbuf *b, sqlite3_stmt *st, int i, int raw)
{
	const char *s;
	char num[40];

	switch (sqlite3_column_type(st, i)) {
	case SQLITE_INTEGER:
		sb_printf(b, "%" PRId64, (int64_t)sqlite3_column_int64(st, i));
		break;
	case SQLITE_FLOAT:
		output_fmt_double(num, sqlite3_column_double(st, i));
		/* JSON has no Infinity or NaN */
		if (strchr("-0123456789", num[0]) && !strchr(num, 'n'))
			sb_puts(b, num);
		else
			sb_puts(b, "null");
		break;
	default:
		s = (const char *)sqlite3_column_text(st, i);
		if (raw)
			sb_add(b, s, (size_t)sqlite3_column_bytes(st, i));
		else
			sb_json_str(b, s ? s : "", (size_t)sqlite3_column_bytes(st, i));
	}
}

int timeline_write(sqlite3 *db, const char *merge_sql, FILE *f, const char *window,
		   long long *events, char **cause)
{
	struct strbuf b = STRBUF_INIT;
	sqlite3_stmt *st = NULL;
	int err = 0, rc = SQLITE_DONE, ncols, args = -1;

	*cause = NULL;
	*events = 0;
	/* no database (no node answered): an empty trace */
	if (db && sqlite3_prepare_v2(db, merge_sql, -1, &st, NULL) != SQLITE_OK) {
		err = fq_fail(cause, -EINVAL, "merge SQL: %s", sqlite3_errmsg(db));
		goto out;
	}
	ncols = st ? sqlite3_column_count(st) : 0;
	for (int i = 0; i < ncols; i++)
		if (!strcmp(sqlite3_column_name(st, i), "args"))
			args = i;
	if (fputs("{\"traceEvents\":[", f) == EOF)
		goto write_err;
	/* One event at a time: b holds a row, never the trace. */
	while (st && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		int first = 1;

		b.len = 0;
		sb_puts(&b, *events ? ",\n{" : "\n{");
		for (int i = 0; i < ncols; i++) {
			const char *name = sqlite3_column_name(st, i);

			if (sqlite3_column_type(st, i) == SQLITE_NULL)
				continue;
			if (!first)
				sb_putc(&b, ',');
			first = 0;
			sb_json_str(&b, name, strlen(name));
			sb_putc(&b, ':');
			put_value(&b, st, i,
				  i == args && sqlite3_column_type(st, i) == SQLITE_TEXT);
		}
		sb_putc(&b, '}');
		if (b.oom) {
			err = fq_fail(cause, -ENOMEM, "out of memory");
			goto out;
		}
		if (fwrite(b.s, 1, b.len, f) != b.len)
			goto write_err;
		++*events;
	}
	if (rc != SQLITE_DONE) {
		err = fq_fail(cause, -EINVAL, "merge SQL: %s", sqlite3_errmsg(db));
		goto out;
	}
	b.len = 0;
	sb_puts(&b, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":"
		    "{\"generator\":\"fleetq timeline\",\"window\":");
	sb_json_str(&b, window, strlen(window));
	sb_puts(&b, "}}\n");
	if (b.oom) {
		err = fq_fail(cause, -ENOMEM, "out of memory");
		goto out;
	}
	if (fwrite(b.s, 1, b.len, f) != b.len || fflush(f))
		goto write_err;
	goto out;
write_err:
	err = fq_fail(cause, -EIO, "cannot write the timeline: %s", strerror(errno));
out:
	sqlite3_finalize(st);
	sb_release(&b);
	return err;
}

int timeline_emit(sqlite3 *db, const char *merge_sql, FILE *f, const char *path,
		  const char *window, int quiet, char **short_of, char **cause)
{
	sqlite3_stmt *st = NULL;
	long long events = 0;
	int err, ranks = 0;

	*short_of = NULL;
	if (db && sqlite3_prepare_v2(db, "SELECT count(*) FROM (SELECT DISTINCT node, comm_hash, "
				     "rank, pid FROM results WHERE kind = 'coll')",
				     -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		ranks = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	err = timeline_write(db, merge_sql, f, window, &events, cause);
	if (!err) {
		err = timeline_close(f, path, cause);
	} else {
		char *ignored = NULL;

		timeline_close(f, path, &ignored);
		free(ignored);
	}
	if (err)
		return err;
	if (db && !ranks && asprintf(short_of, "timeline: no collectives in the window (%s): "
				     "check --since and --job", window) < 0)
		*short_of = NULL;
	if (!quiet && ranks)
		fprintf(stderr, "fleetq: timeline: %lld events of %d rank%s, %s%s%s\n", events,
			ranks, ranks == 1 ? "" : "s", window,
			path && strcmp(path, "-") ? ", in " : "",
			path && strcmp(path, "-") ? path : "");
	return 0;
}
