/* SPDX-License-Identifier: MIT */
/*
 * printf() and format() on query connections: SQLite's own, behind a check
 * that bounds what one call may cost (docs/security.md, "one SQL function call").
 *
 * A function call runs no progress callback, and SQLite 3.40's printf repeats
 * a %c conversion's character once per unit of precision, going on after the
 * string outgrew SQLITE_LIMIT_LENGTH or an allocation failed:
 * printf('%.2000000000c', 'x') spent 12 s returning NULL past a 1 s deadline.
 * So a call whose %c precisions add up past the length limit (its result
 * would be over it anyway) fails at once with SQLITE_TOOBIG, which leaves at
 * most the limit's worth of repeats to any call; and once the query's deadline
 * passed (or the query was stopped), every later call fails at once with
 * SQLITE_NOMEM, as a refused allocation would, so a row of many calls that
 * each allocate too little to meet the budget's own deadline check stops at
 * the first.
 *
 * A call that passes runs SQLite's printf unchanged, on a private in-memory
 * connection: the query connection's own function hides the built-in of the
 * same name, and the built-in is not reachable otherwise.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqsql.h"

struct fmt_runner {
	sqlite3 *db;	    /* the private connection, opened at the first call */
	sqlite3_stmt **st;  /* SELECT printf(?,...) by argument count */
	int nst;
};

/*
 * How many times SQLite's printf would repeat %c characters for this format and
 * these arguments. Reads the format as sqlite3_str_vappendf() (3.40) does, to
 * take the same arguments for '*' widths and precisions and for conversions.
 */
static int64_t char_repeats(const char *f, int argc, sqlite3_value **argv)
{
	int64_t n = 0;
	int used = 0;

#define NEXT_INT() (used < argc ? sqlite3_value_int64(argv[used++]) : 0)
	for (; *f; f++) {
		int64_t prec = -1;
		int done = 0;
		char c;

		if (*f != '%')
			continue;
		c = *++f;
		if (!c)
			break;
		do {
			switch (c) {
			case '-': case '+': case ' ': case '#': case '!': case '0': case ',':
				break;
			case 'l':
				c = *++f;
				if (c == 'l')
					c = *++f;
				done = 1;
				break;
			case '1': case '2': case '3': case '4': case '5': case '6': case '7':
			case '8': case '9':
				while ((c = *++f) >= '0' && c <= '9')
					;
				if (c != '.' && c != 'l')
					done = 1;
				else
					f--;
				break;
			case '*':
				(void)NEXT_INT();
				if ((c = f[1]) != '.' && c != 'l') {
					c = *++f;
					done = 1;
				}
				break;
			case '.':
				c = *++f;
				if (c == '*') {
					int p = (int)NEXT_INT();

					prec = p < 0 ? (p >= -2147483647 ? -(int64_t)p : -1) : p;
					c = *++f;
				} else {
					unsigned px = 0;

					for (; c >= '0' && c <= '9'; c = *++f)
						px = px * 10 + (unsigned)(c - '0');
					prec = px & 0x7fffffff;
				}
				if (c == 'l')
					--f;
				else
					done = 1;
				break;
			default:
				done = 1;
				break;
			}
		} while (!done && (c = *++f) != 0);
		if (!c)
			break;
		if (c == 'c' && prec > 1)
			n += prec - 1;
		/* the conversions that take an argument; T, S and unknown ones end the format */
		if (strchr("dsgzqQwcouxXfeEGipr", c))
			used += used < argc;
		else if (c != 'n' && c != '%')
			break;
	}
#undef NEXT_INT
	return n;
}

/* The statement that runs SQLite's printf with argc arguments; NULL when it cannot. */
static sqlite3_stmt *runner_stmt(struct fmt_runner *r, int argc)
{
	const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
	char *sql;
	int len;

	if (!r->db && sqlite3_open_v2(":memory:", &r->db, flags, NULL) != SQLITE_OK) {
		sqlite3_close(r->db);
		r->db = NULL;
		return NULL;
	}
	if (argc >= r->nst) {
		sqlite3_stmt **st = realloc(r->st, (size_t)(argc + 1) * sizeof(*st));

		if (!st)
			return NULL;
		memset(st + r->nst, 0, (size_t)(argc + 1 - r->nst) * sizeof(*st));
		r->st = st;
		r->nst = argc + 1;
	}
	if (r->st[argc])
		return r->st[argc];
	sql = malloc((size_t)argc * 2 + 16);
	if (!sql)
		return NULL;
	len = sprintf(sql, "SELECT printf(");
	for (int i = 0; i < argc; i++)
		len += sprintf(sql + len, i ? ",?" : "?");
	strcpy(sql + len, ")");
	if (sqlite3_prepare_v3(r->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &r->st[argc], NULL) !=
	    SQLITE_OK)
		r->st[argc] = NULL;
	free(sql);
	return r->st[argc];
}

static void bounded_printf(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	struct fmt_runner *r = sqlite3_user_data(ctx);
	int limit = sqlite3_limit(sqlite3_context_db_handle(ctx), SQLITE_LIMIT_LENGTH, -1);
	const char *fmt;
	sqlite3_stmt *st;
	int rc, i;

	/* A refused allocation needs no check here: it ends this call's statement by itself */
	if (fqsql_mem_expired()) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	if (argc < 1 || !(fmt = (const char *)sqlite3_value_text(argv[0])))
		return; /* NULL, as SQLite's */
	if (char_repeats(fmt, argc - 1, argv + 1) > limit) {
		sqlite3_result_error_toobig(ctx);
		return;
	}
	st = runner_stmt(r, argc);
	if (!st) {
		sqlite3_result_error_nomem(ctx);
		return;
	}
	sqlite3_limit(r->db, SQLITE_LIMIT_LENGTH, limit);
	/* The arguments outlive the call: bound without a copy */
	for (i = 0, rc = SQLITE_OK; rc == SQLITE_OK && i < argc; i++) {
		switch (sqlite3_value_type(argv[i])) {
		case SQLITE_TEXT:
			rc = sqlite3_bind_text(st, i + 1, (const char *)sqlite3_value_text(argv[i]),
					       sqlite3_value_bytes(argv[i]), SQLITE_STATIC);
			break;
		case SQLITE_BLOB:
			rc = sqlite3_bind_blob(st, i + 1, sqlite3_value_blob(argv[i]),
					       sqlite3_value_bytes(argv[i]), SQLITE_STATIC);
			break;
		default:
			rc = sqlite3_bind_value(st, i + 1, argv[i]);
			break;
		}
	}
	/* Text or NULL. sqlite3_result_value() would drop a failed copy's error: this reports it */
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
	    sqlite3_column_type(st, 0) != SQLITE_NULL)
		sqlite3_result_text64(ctx, (const char *)sqlite3_column_text(st, 0),
				      (sqlite3_uint64)sqlite3_column_bytes(st, 0), SQLITE_TRANSIENT,
				      SQLITE_UTF8);
	/*
	 * An allocation refused inside SQLite's printf gives NULL and marks the
	 * connection, which reset reports: on the query's own connection it would
	 * have ended the statement, so it does.
	 */
	if (rc == SQLITE_OK)
		rc = sqlite3_reset(st);
	else
		sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc == SQLITE_NOMEM)
		sqlite3_result_error_nomem(ctx);
	else if (rc == SQLITE_TOOBIG)
		sqlite3_result_error_toobig(ctx);
	else if (rc != SQLITE_OK)
		sqlite3_result_error(ctx, sqlite3_errstr(rc), -1);
}

/* Called by SQLite when the connection closes. */
static void runner_free(void *arg)
{
	struct fmt_runner *r = arg;

	for (int i = 0; i < r->nst; i++)
		sqlite3_finalize(r->st[i]);
	free(r->st);
	sqlite3_close(r->db);
	free(r);
}

int fqsql_register_printf(sqlite3 *db)
{
	const int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
	struct fmt_runner *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	/* v2 frees r when printf goes, with the connection; format shares it and goes too */
	rc = sqlite3_create_function_v2(db, "printf", -1, flags, r, bounded_printf, NULL, NULL,
					runner_free);
	if (rc == SQLITE_OK)
		rc = sqlite3_create_function_v2(db, "format", -1, flags, r, bounded_printf, NULL,
						NULL, NULL);
	if (rc == SQLITE_NOMEM)
		return -ENOMEM;
	return rc == SQLITE_OK ? 0 : -EINVAL;
}
