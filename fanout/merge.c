/* SPDX-License-Identifier: MIT */
#include "merge.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqsql.h"
#include "strbuf.h"

/* Row id = node index << ROW_BITS | row number. */
#define ROW_BITS 40
/* Commit this often so one huge transaction does not pile up. */
#define COMMIT_EVERY 65536

struct merge {
	sqlite3 *db;
	sqlite3_stmt *ins;
	size_t ncols;
	char **names; /* the first node's column names, as sent */
	char **cols;  /* the table's column names: node, then names made unique */
	int in_txn;
	size_t pending;
	const char *rowid; /* the name of the internal row id no column hides */
};

static int db_fail(sqlite3 *db, const char *what, char **cause)
{
	if (cause && asprintf(cause, "merge database: %s: %s", what, sqlite3_errmsg(db)) < 0)
		*cause = NULL;
	return -EIO;
}

struct merge *merge_new(char **cause)
{
	struct merge *m = calloc(1, sizeof(*m));
	int err;

	*cause = NULL;
	if (!m)
		return NULL;
	/* One thread uses it: no per-call connection mutex. */
	if (sqlite3_open_v2(":memory:", &m->db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL)) {
		db_fail(m->db, "cannot open", cause);
		goto fail;
	}
	/*
	 * Nothing here needs to survive a crash: no journal, no syncs. Sorts for the
	 * --merge SQL and the analyses (GROUP BY over every row) stay in memory: with
	 * SQLite's defaults, a sort past 2 MiB went to temporary files.
	 */
	if (sqlite3_exec(m->db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; "
			 "PRAGMA temp_store=MEMORY; PRAGMA cache_size=-65536;", NULL, NULL,
			 NULL)) {
		db_fail(m->db, "cannot configure", cause);
		goto fail;
	}
	/* Clock offsets, for the analyses and for users' own corrections. */
	if (sqlite3_exec(m->db,
			 "CREATE TABLE clock(node TEXT PRIMARY KEY, offset_ns INTEGER, rtt_ns INTEGER, "
			 "samples INTEGER)",
			 NULL, NULL, NULL)) {
		db_fail(m->db, "cannot create table clock", cause);
		goto fail;
	}
	err = fqsql_register(m->db);
	if (err) {
		if (asprintf(cause, "merge database: cannot register SQL functions: %s",
			     strerror(-err)) < 0)
			*cause = NULL;
		goto fail;
	}
	return m;
fail:
	merge_free(m);
	errno = EIO;
	return NULL;
}

static void forget_columns(struct merge *m)
{
	for (size_t i = 0; i < m->ncols; i++)
		free(m->names[i]);
	for (size_t i = 0; m->cols && i <= m->ncols; i++)
		free(m->cols[i]);
	free(m->names);
	free(m->cols);
	m->names = NULL;
	m->cols = NULL;
	m->ncols = 0;
}

void merge_free(struct merge *m)
{
	if (!m)
		return;
	sqlite3_finalize(m->ins);
	sqlite3_close(m->db);
	forget_columns(m);
	free(m);
}

sqlite3 *merge_db(struct merge *m)
{
	return m->db;
}

int merge_has_table(const struct merge *m)
{
	return m->ins != NULL;
}

const char *const *merge_table_columns(const struct merge *m, size_t *n)
{
	*n = m->ins ? m->ncols + 1 : 0;
	return m->ins ? (const char *const *)m->cols : NULL;
}

static void sb_ident(struct strbuf *b, const char *s)
{
	sb_putc(b, '"');
	for (; *s; s++) {
		if (*s == '"')
			sb_putc(b, '"');
		sb_putc(b, *s);
	}
	sb_putc(b, '"');
}

/*
 * The column names taken so far, case-insensitively (as SQLite compares
 * them), each with the next suffix worth trying after it: a node sending
 * 4,000 columns of one name costs linear time, not cubic.
 */
struct taken {
	struct taken_slot {
		const char *name;
		int next; /* "name_K" is taken for every K below this */
	} *slot;
	size_t cap;
};

static uint64_t ihash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)tolower((unsigned char)*s)) * 1099511628211ull;
	return h;
}

static struct taken_slot *taken_find(struct taken *t, const char *s)
{
	size_t i = (size_t)ihash(s) & (t->cap - 1);

	while (t->slot[i].name && strcasecmp(t->slot[i].name, s))
		i = (i + 1) & (t->cap - 1);
	return &t->slot[i];
}

/*
 * SQLite's row id has three names, and a column of one of them hides it: the
 * merge writes and drops rows by the first name no column takes. When the
 * node's columns take all three, its "oid" becomes "oid_2" (the others keep
 * their names: a query asking for rowid means the node's column).
 */
static const char *rowid_name(size_t ncols, const char *const *names)
{
	static const char *const aliases[] = { "rowid", "_rowid_", "oid" };

	for (size_t a = 0; a < 3; a++) {
		size_t i = 0;

		while (i < ncols && strcasecmp(names[i], aliases[a]))
			i++;
		if (i == ncols)
			return aliases[a];
	}
	return NULL;
}

static int create_table(struct merge *m, size_t ncols, const char *const *names, char **cause)
{
	struct strbuf b = STRBUF_INIT;
	char **uniq = calloc(ncols + 1, sizeof(*uniq));
	const char *reserve = NULL;
	struct taken t = { NULL, 16 };
	int err = -ENOMEM;
	size_t i;

	while (t.cap < 2 * (ncols + 2))
		t.cap *= 2;
	t.slot = calloc(t.cap, sizeof(*t.slot));
	if (!uniq || !t.slot)
		goto out;
	m->rowid = rowid_name(ncols, names);
	if (!m->rowid)
		m->rowid = reserve = "oid";
	/* SQLite column names are case-insensitive: "x" and "X" clash too. */
	uniq[0] = strdup("node");
	if (!uniq[0])
		goto out;
	taken_find(&t, "node")->name = uniq[0];
	if (reserve)
		taken_find(&t, reserve)->name = reserve;
	for (i = 0; i < ncols; i++) {
		struct taken_slot *base = taken_find(&t, names[i]), *slot = base;
		char *s = strdup(names[i]);
		int k = base->next > 2 ? base->next : 2;

		while (s && slot->name) {
			free(s);
			if (asprintf(&s, "%s_%d", names[i], k++) < 0)
				s = NULL;
			else
				slot = taken_find(&t, s);
		}
		if (!s)
			goto out;
		if (base != slot)
			base->next = k;
		slot->name = s;
		uniq[i + 1] = s;
	}
	sb_puts(&b, "CREATE TABLE results(");
	for (i = 0; i <= ncols; i++) {
		if (i)
			sb_putc(&b, ',');
		sb_ident(&b, uniq[i]);
	}
	sb_puts(&b, ")");
	if (b.oom)
		goto out;
	if (sqlite3_exec(m->db, b.s, NULL, NULL, NULL)) {
		err = db_fail(m->db, "cannot create table results", cause);
		goto out;
	}
	b.len = 0;
	sb_puts(&b, "INSERT INTO results(");
	sb_puts(&b, m->rowid);
	for (i = 0; i <= ncols; i++) {
		sb_putc(&b, ',');
		sb_ident(&b, uniq[i]);
	}
	sb_puts(&b, ") VALUES(?");
	for (i = 0; i <= ncols; i++)
		sb_puts(&b, ",?");
	sb_puts(&b, ")");
	if (b.oom)
		goto out;
	if (sqlite3_prepare_v2(m->db, b.s, -1, &m->ins, NULL)) {
		err = db_fail(m->db, "cannot prepare insert", cause);
		goto out;
	}
	/* SELECT * FROM results names its columns so: kept for merge_table_columns(). */
	m->cols = uniq;
	uniq = NULL;
	err = 0;
out:
	free(t.slot);
	if (uniq)
		for (i = 0; i <= ncols; i++)
			free(uniq[i]);
	free(uniq);
	sb_release(&b);
	return err;
}

int merge_columns(struct merge *m, size_t ncols, const char *const *names, char **cause)
{
	int err;

	*cause = NULL;
	if (m->ins) {
		if (ncols != m->ncols) {
			if (asprintf(cause, "%zu columns, first node had %zu", ncols, m->ncols) < 0)
				*cause = NULL;
			return -EINVAL;
		}
		for (size_t i = 0; i < ncols; i++)
			if (strcmp(names[i], m->names[i])) {
				if (asprintf(cause, "column %zu is '%s', first node had '%s'",
					     i + 1, names[i], m->names[i]) < 0)
					*cause = NULL;
				return -EINVAL;
			}
		return 0;
	}
	/* More than SQLite's table holds fails this node, not the run. */
	if (ncols + 1 > (size_t)sqlite3_limit(m->db, SQLITE_LIMIT_COLUMN, -1)) {
		if (asprintf(cause, "%zu columns, more than the merge holds (%d)", ncols,
			     sqlite3_limit(m->db, SQLITE_LIMIT_COLUMN, -1) - 1) < 0)
			*cause = NULL;
		return -EINVAL;
	}
	m->names = calloc(ncols ? ncols : 1, sizeof(*m->names));
	if (!m->names)
		return -ENOMEM;
	for (size_t i = 0; i < ncols; i++) {
		m->names[i] = strdup(names[i]);
		if (!m->names[i])
			return -ENOMEM;
		m->ncols = i + 1;
	}
	err = create_table(m, ncols, names, cause);
	if (err)
		return err;
	return 0;
}

static int begin(struct merge *m, char **cause)
{
	if (m->in_txn)
		return 0;
	if (sqlite3_exec(m->db, "BEGIN", NULL, NULL, NULL))
		return db_fail(m->db, "cannot begin", cause);
	m->in_txn = 1;
	return 0;
}

int merge_finish(struct merge *m, char **cause)
{
	if (!m->in_txn)
		return 0;
	m->in_txn = 0;
	m->pending = 0;
	if (sqlite3_exec(m->db, "COMMIT", NULL, NULL, NULL))
		return db_fail(m->db, "cannot commit", cause);
	return 0;
}

int merge_row(struct merge *m, size_t idx, const char *node, int64_t seq,
	      const struct wire_value *vals, char **cause)
{
	sqlite3_stmt *st = m->ins;
	int rc = SQLITE_OK, err;

	err = begin(m, cause);
	if (err)
		return err;
	sqlite3_bind_int64(st, 1, (int64_t)idx << ROW_BITS | seq);
	sqlite3_bind_text(st, 2, node, -1, SQLITE_STATIC);
	for (size_t i = 0; i < m->ncols && rc == SQLITE_OK; i++) {
		const struct wire_value *v = &vals[i];
		int col = (int)i + 3;

		switch (v->type) {
		case WIRE_INT:
			rc = sqlite3_bind_int64(st, col, v->i);
			break;
		case WIRE_REAL:
			rc = sqlite3_bind_double(st, col, v->d);
			break;
		case WIRE_TEXT:
			rc = sqlite3_bind_text64(st, col, v->p, v->n, SQLITE_STATIC, SQLITE_UTF8);
			break;
		case WIRE_BLOB:
			rc = sqlite3_bind_blob64(st, col, v->p, v->n, SQLITE_STATIC);
			break;
		default:
			rc = sqlite3_bind_null(st, col);
		}
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	/*
	 * Text and blobs are bound SQLITE_STATIC: they point into the caller's
	 * frame, which outlives the step; every parameter is bound again before
	 * the next one, so nothing reads them after this.
	 */
	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return db_fail(m->db, "cannot insert", cause);
	if (++m->pending >= COMMIT_EVERY)
		return merge_finish(m, cause);
	return 0;
}

int merge_drop(struct merge *m, size_t idx, char **cause)
{
	sqlite3_stmt *st = NULL;
	char *sql;
	int err = 0, rc;

	if (!m->ins)
		return 0;
	sql = sqlite3_mprintf("DELETE FROM results WHERE %s BETWEEN ? AND ?", m->rowid);
	if (!sql)
		return -ENOMEM;
	rc = sqlite3_prepare_v2(m->db, sql, -1, &st, NULL);
	sqlite3_free(sql);
	if (rc)
		return db_fail(m->db, "cannot prepare delete", cause);
	sqlite3_bind_int64(st, 1, (int64_t)idx << ROW_BITS);
	sqlite3_bind_int64(st, 2, ((int64_t)(idx + 1) << ROW_BITS) - 1);
	if (sqlite3_step(st) != SQLITE_DONE)
		err = db_fail(m->db, "cannot drop rows", cause);
	sqlite3_finalize(st);
	return err;
}

int merge_clock(struct merge *m, const char *node, int64_t offset_ns, int64_t rtt_ns,
		int64_t samples, char **cause)
{
	sqlite3_stmt *st = NULL;
	int err = 0;

	*cause = NULL;
	if (sqlite3_prepare_v2(m->db, "INSERT OR REPLACE INTO clock VALUES(?, ?, ?, ?)", -1,
			       &st, NULL))
		return db_fail(m->db, "cannot prepare clock insert", cause);
	sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, offset_ns);
	sqlite3_bind_int64(st, 3, rtt_ns);
	sqlite3_bind_int64(st, 4, samples);
	if (sqlite3_step(st) != SQLITE_DONE)
		err = db_fail(m->db, "cannot insert clock", cause);
	sqlite3_finalize(st);
	return err;
}

int merge_rename(struct merge *m, const char *name, char **cause)
{
	struct strbuf b = STRBUF_INIT;
	int err = 0;

	*cause = NULL;
	if (!m->ins)
		return 0;
	if (m->in_txn && merge_finish(m, cause))
		return -EIO;
	sqlite3_finalize(m->ins);
	m->ins = NULL;
	forget_columns(m);
	sb_puts(&b, "ALTER TABLE results RENAME TO ");
	sb_ident(&b, name);
	if (b.oom)
		err = -ENOMEM;
	else if (sqlite3_exec(m->db, b.s, NULL, NULL, NULL))
		err = db_fail(m->db, "cannot rename table results", cause);
	sb_release(&b);
	return err;
}
