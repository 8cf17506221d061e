/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver.h"
#include "fqsql.h"

static char *slurp(const char *path);

/* An included file from the folder of the file that names it (fqsql_load_fn). */
static char *load_beside(const char *name, void *arg, char **cause)
{
	const char *path = arg, *slash = strrchr(path, '/');
	char *inc = NULL, *s;

	if (asprintf(&inc, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path, name) < 0)
		return NULL;
	s = slurp(inc);
	if (!s && asprintf(cause, "cannot read '%s': %s", inc, strerror(errno)) < 0)
		*cause = NULL;
	free(inc);
	return s;
}

/* The file, its include lines expanded as fleetq does (fanout/sqlfiles.c). */
char *an_slurp(const char *path)
{
	char *s = slurp(path), *out = NULL, *cause = NULL;

	if (!s)
		return NULL;
	if (fqsql_expand_includes(s, load_beside, (void *)path, &out, &cause)) {
		fprintf(stderr, "an-run: %s: %s\n", path, cause ? cause : "cannot expand");
		free(cause);
	}
	free(s);
	return out;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *s = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (s = malloc((size_t)n + 1))) {
		if (fread(s, 1, (size_t)n, f) != (size_t)n) {
			free(s);
			s = NULL;
		} else {
			s[n] = 0;
		}
	}
	fclose(f);
	return s;
}

int an_exec(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	char *err = NULL;
	int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);

	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, sql, NULL, NULL, &err);
	if (rc != SQLITE_OK)
		fprintf(stderr, "cannot change '%s': %s\n", path, err ? err : sqlite3_errmsg(db));
	sqlite3_free(err);
	sqlite3_close(db);
	return rc == SQLITE_OK ? 0 : -1;
}

static void bind_params(sqlite3_stmt *st, const char *const *params)
{
	for (size_t i = 0; params && params[i]; i++) {
		const char *eq = strchr(params[i], '=');
		char name[128], *end;
		long long ll;
		double d;
		int idx;

		if (!eq || (size_t)(eq - params[i]) >= sizeof(name) - 1)
			continue;
		snprintf(name, sizeof(name), ":%.*s", (int)(eq - params[i]), params[i]);
		idx = sqlite3_bind_parameter_index(st, name);
		if (!idx)
			continue;
		eq++;
		errno = 0;
		ll = strtoll(eq, &end, 0);
		if (*eq && !*end && !errno) {
			sqlite3_bind_int64(st, idx, ll);
			continue;
		}
		d = strtod(eq, &end);
		if (*eq && !*end)
			sqlite3_bind_double(st, idx, d);
		else if (!strcmp(eq, "NULL"))
			sqlite3_bind_null(st, idx);
		else
			sqlite3_bind_text(st, idx, eq, -1, SQLITE_TRANSIENT);
	}
}

static int fail(char **cause, const char *what, const char *where, const char *why)
{
	if (asprintf(cause, "%s '%s': %s", what, where, why) < 0)
		*cause = NULL;
	return -1;
}

static char *node_name(sqlite3 *db, const char *path)
{
	sqlite3_stmt *st = NULL;
	char *s = NULL;

	if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'node'", -1, &st, NULL) ==
		    SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
		s = strdup((const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return s ? s : strdup(path);
}

/* Creates results from the first node's column names, like fanout/merge.c (no types). */
static int make_results(sqlite3 *m, sqlite3_stmt *st, sqlite3_stmt **ins, char **cause)
{
	int n = sqlite3_column_count(st);
	char *create = sqlite3_mprintf("CREATE TABLE results(\"node\"");
	char *insert = sqlite3_mprintf("INSERT INTO results VALUES(?");
	int ret = -1;

	for (int i = 0; i < n && create && insert; i++) {
		char *c = sqlite3_mprintf("%z,\"%w\"", create, sqlite3_column_name(st, i));
		char *s = sqlite3_mprintf("%z,?", insert);

		create = c;
		insert = s;
	}
	if (!create || !insert) {
		fail(cause, "out of memory", "results", "");
		goto out;
	}
	create = sqlite3_mprintf("%z)", create);
	insert = sqlite3_mprintf("%z)", insert);
	if (sqlite3_exec(m, create, NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(m, insert, -1, ins, NULL) != SQLITE_OK) {
		fail(cause, "cannot create", "results", sqlite3_errmsg(m));
		goto out;
	}
	ret = 0;
out:
	sqlite3_free(create);
	sqlite3_free(insert);
	return ret;
}

static int load_node(sqlite3 *m, sqlite3_stmt **ins, const char *sql, const struct an_node *nd,
		     const char *const *params, int guarded, char **name, char **cause)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	char *why = NULL;
	int rc, ret = -1;

	if (guarded) {
		if (fqsql_open_readonly(nd->path, NULL, &db, &why) < 0) {
			fail(cause, "cannot open", nd->path, why);
			goto out;
		}
	} else if (sqlite3_open_v2(nd->path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
		   fqsql_register(db) < 0) {
		fail(cause, "cannot open", nd->path, sqlite3_errmsg(db));
		goto out;
	}
	*name = nd->name ? strdup(nd->name) : node_name(db, nd->path);
	if (guarded ? fqsql_prepare(db, sql, &st, &why) < 0 :
		      sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		fail(cause, "node query on", nd->path, why ? why : sqlite3_errmsg(db));
		goto out;
	}
	bind_params(st, params);
	if (!*ins && make_results(m, st, ins, cause) < 0)
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		sqlite3_bind_text(*ins, 1, *name, -1, SQLITE_TRANSIENT);
		for (int i = 0; i < sqlite3_column_count(st); i++)
			sqlite3_bind_value(*ins, i + 2, sqlite3_column_value(st, i));
		rc = sqlite3_step(*ins);
		sqlite3_reset(*ins);
		if (rc != SQLITE_DONE) {
			fail(cause, "cannot insert rows of", nd->path, sqlite3_errmsg(m));
			goto out;
		}
	}
	if (rc != SQLITE_DONE) {
		fail(cause, "node query on", nd->path, sqlite3_errmsg(db));
		goto out;
	}
	ret = 0;
out:
	free(why);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return ret;
}

static double ms_between(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

int an_run(const char *node_sql, const char *merge_sql, const struct an_node *nodes, size_t n,
	   const char *const *node_params, const char *const *merge_params, int guarded,
	   struct an_rows *out, char **cause)
{
	sqlite3 *m = NULL;
	sqlite3_stmt *ins = NULL, *ck = NULL, *st = NULL;
	size_t cap = 0;
	int rc, ret = -1;

	struct timespec t0, t1, t2;

	memset(out, 0, sizeof(*out));
	*cause = NULL;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (sqlite3_open(":memory:", &m) != SQLITE_OK || fqsql_register(m) < 0 ||
	    sqlite3_exec(m, "CREATE TABLE clock(node TEXT, offset_ns INTEGER, rtt_ns INTEGER)", NULL,
			 NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(m, "INSERT INTO clock VALUES(?, ?, 0)", -1, &ck, NULL) != SQLITE_OK) {
		fail(cause, "cannot open", "merge database", sqlite3_errmsg(m));
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char *name = NULL;

		if (load_node(m, &ins, node_sql, &nodes[i], node_params, guarded, &name, cause) < 0) {
			free(name);
			goto out;
		}
		sqlite3_bind_text(ck, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(ck, 2, nodes[i].offset_ns);
		rc = sqlite3_step(ck);
		sqlite3_reset(ck);
		free(name);
		if (rc != SQLITE_DONE) {
			fail(cause, "cannot insert", "clock", sqlite3_errmsg(m));
			goto out;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (sqlite3_prepare_v2(m, merge_sql, -1, &st, NULL) != SQLITE_OK) {
		fail(cause, "merge query", "prepare", sqlite3_errmsg(m));
		goto out;
	}
	bind_params(st, merge_params);
	out->ncols = (size_t)sqlite3_column_count(st);
	out->names = calloc(out->ncols + 1, sizeof(*out->names));
	for (size_t c = 0; out->names && c < out->ncols; c++)
		out->names[c] = strdup(sqlite3_column_name(st, (int)c));
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (out->nrows == cap) {
			char **p;

			cap = cap ? 2 * cap : 16;
			p = realloc(out->cells, cap * out->ncols * sizeof(*p) + 1);
			if (!p) {
				fail(cause, "out of memory", "merge", "");
				goto out;
			}
			out->cells = p;
		}
		for (size_t c = 0; c < out->ncols; c++) {
			const unsigned char *t = sqlite3_column_text(st, (int)c);

			out->cells[out->nrows * out->ncols + c] = t ? strdup((const char *)t) : NULL;
		}
		out->nrows++;
	}
	if (rc != SQLITE_DONE) {
		fail(cause, "merge query", "step", sqlite3_errmsg(m));
		goto out;
	}
	clock_gettime(CLOCK_MONOTONIC, &t2);
	/* AN_TIMING=1: where the time went, for adapting the files (not a benchmark) */
	if (getenv("AN_TIMING"))
		fprintf(stderr, "an-run: %zu nodes: node queries and inserts %.1f ms, merge %.1f ms\n",
			n, ms_between(&t0, &t1), ms_between(&t1, &t2));
	ret = 0;
out:
	sqlite3_finalize(ins);
	sqlite3_finalize(ck);
	sqlite3_finalize(st);
	sqlite3_close(m);
	return ret;
}

const char *an_get(const struct an_rows *rows, size_t r, const char *col)
{
	if (r >= rows->nrows)
		return NULL;
	for (size_t c = 0; c < rows->ncols; c++)
		if (rows->names[c] && !strcmp(rows->names[c], col))
			return rows->cells[r * rows->ncols + c];
	return NULL;
}

void an_rows_print(const struct an_rows *rows, FILE *f)
{
	for (size_t c = 0; c < rows->ncols; c++)
		fprintf(f, "%s%s", c ? "\t" : "", rows->names[c]);
	fputc('\n', f);
	for (size_t r = 0; r < rows->nrows; r++)
		for (size_t c = 0; c < rows->ncols; c++) {
			const char *v = rows->cells[r * rows->ncols + c];

			fprintf(f, "%s%s", v ? v : "NULL", c + 1 < rows->ncols ? "\t" : "\n");
		}
}

void an_rows_release(struct an_rows *rows)
{
	for (size_t i = 0; rows->cells && i < rows->nrows * rows->ncols; i++)
		free(rows->cells[i]);
	for (size_t c = 0; rows->names && c < rows->ncols; c++)
		free(rows->names[c]);
	free(rows->cells);
	free(rows->names);
	memset(rows, 0, sizeof(*rows));
}
