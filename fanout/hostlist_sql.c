/* SPDX-License-Identifier: MIT */
/*
 * hostlist() lives beside the fold it calls (hostlist.c), not in sql/: the
 * agents never fold host names, and sql/ knows nothing of the CLI's parts.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hostlist.h"
#include "hostlist_sql.h"

struct names {
	char **v;
	size_t n, cap;
};

static void names_free(struct names *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	free(s);
}

/* NULLs are skipped, as count(x) skips them; other values count as their text. */
static void hl_step(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	struct names **pp = sqlite3_aggregate_context(ctx, sizeof(*pp));
	const unsigned char *t;
	struct names *s;

	(void)argc;
	if (!pp)
		goto oom;
	if (sqlite3_value_type(argv[0]) == SQLITE_NULL)
		return;
	if (!*pp && !(*pp = calloc(1, sizeof(**pp))))
		goto oom;
	s = *pp;
	t = sqlite3_value_text(argv[0]);
	if (!t)
		goto oom;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		char **v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			goto oom;
		s->v = v;
		s->cap = cap;
	}
	if (!(s->v[s->n] = strdup((const char *)t)))
		goto oom;
	s->n++;
	return;
oom:
	sqlite3_result_error_nomem(ctx);
}

static void hl_final(sqlite3_context *ctx)
{
	struct names **pp = sqlite3_aggregate_context(ctx, 0);
	struct names *s = pp ? *pp : NULL;
	char *folded;

	if (!s) {
		sqlite3_result_null(ctx); /* no rows, or only NULLs */
		return;
	}
	folded = hostlist_fold((const char *const *)s->v, s->n);
	if (folded)
		sqlite3_result_text(ctx, folded, -1, free);
	else
		sqlite3_result_error_nomem(ctx);
	names_free(s);
}

int hostlist_sql_register(sqlite3 *db)
{
	return sqlite3_create_function(db, "hostlist", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
				       NULL, hl_step, hl_final) == SQLITE_OK
		       ? 0
		       : -EIO;
}
