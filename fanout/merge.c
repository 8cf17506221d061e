/* SPDX-License-Identifier: MIT */
#include "merge.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqsql.h"
#include "hostlist_sql.h"
#include "strbuf.h"

/* Row id = node index << ROW_BITS | row number. */
#define ROW_BITS 40
/* Commit this often so one huge transaction does not pile up. */
#define COMMIT_EVERY 65536

/*
 * One column set some nodes answered with: its table (created by the writer
 * at its first row, or by merge_choose(): one connection, one thread at a
 * time) and its insert.
 */
struct tab {
	sqlite3_stmt *ins;
	size_t ncols;
	char **names;	   /* the node's column names, as sent */
	char **cols;	   /* the table's column names: node, then names made unique */
	const char *rowid; /* the name of the internal row id no column hides */
	int created;
	char name[32];	   /* fq_cols_N until merge_choose() names the winner results */
};

struct merge {
	sqlite3 *db;
	struct tab t[MERGE_SETS_MAX]; /* column sets in the order they first arrived */
	size_t nt;
	int *host_tab; /* per host index: its column set, or -1 */
	size_t nhosts;
	int chosen; /* 1 after merge_choose(): t[0] is table results */
	int in_txn;
	size_t pending;
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
	if (!err)
		err = hostlist_sql_register(m->db);
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

static void tab_release(struct tab *t)
{
	sqlite3_finalize(t->ins);
	for (size_t i = 0; t->names && i < t->ncols; i++)
		free(t->names[i]);
	for (size_t i = 0; t->cols && i <= t->ncols; i++)
		free(t->cols[i]);
	free(t->names);
	free(t->cols);
	memset(t, 0, sizeof(*t));
}

static void forget_columns(struct merge *m)
{
	for (size_t i = 0; i < m->nt; i++)
		tab_release(&m->t[i]);
	free(m->host_tab);
	m->nt = 0;
	m->host_tab = NULL;
	m->nhosts = 0;
	m->chosen = 0;
}

void merge_free(struct merge *m)
{
	if (!m)
		return;
	forget_columns(m);
	sqlite3_close(m->db);
	free(m);
}

sqlite3 *merge_db(struct merge *m)
{
	return m->db;
}

int merge_has_table(const struct merge *m)
{
	return m->nt > 0;
}

const char *const *merge_table_columns(const struct merge *m, size_t *n)
{
	*n = m->nt ? m->t[0].ncols + 1 : 0;
	return m->nt ? (const char *const *)m->t[0].cols : NULL;
}

const char *const *merge_set_columns(const struct merge *m, int k, size_t *n)
{
	*n = k >= 0 && (size_t)k < m->nt ? m->t[k].ncols + 1 : 0;
	return *n ? (const char *const *)m->t[k].cols : NULL;
}

const char *const *merge_set_names(const struct merge *m, int k, size_t *n)
{
	*n = k >= 0 && (size_t)k < m->nt ? m->t[k].ncols : 0;
	return k >= 0 && (size_t)k < m->nt ? (const char *const *)m->t[k].names : NULL;
}

int merge_set_of(const struct merge *m, size_t host)
{
	return host < m->nhosts ? m->host_tab[host] : -1;
}

size_t merge_sets(const struct merge *m)
{
	return m->nt;
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

static int make_cols(struct tab *tb, size_t ncols, const char *const *names)
{
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
	tb->rowid = rowid_name(ncols, names);
	if (!tb->rowid)
		tb->rowid = reserve = "oid";
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
	/* SELECT * FROM results names its columns so: kept for merge_table_columns(). */
	tb->cols = uniq;
	uniq = NULL;
	err = 0;
out:
	free(t.slot);
	if (uniq)
		for (i = 0; i <= ncols; i++)
			free(uniq[i]);
	free(uniq);
	return err;
}

static int tab_insert(struct merge *m, struct tab *tb, char **cause);

/* The table of a column set and its insert, on the thread that writes. */
static int tab_create(struct merge *m, struct tab *tb, char **cause)
{
	struct strbuf b = STRBUF_INIT;
	int err = -ENOMEM;
	size_t i;

	sb_puts(&b, "CREATE TABLE ");
	sb_puts(&b, tb->name);
	sb_putc(&b, '(');
	for (i = 0; i <= tb->ncols; i++) {
		if (i)
			sb_putc(&b, ',');
		sb_ident(&b, tb->cols[i]);
	}
	sb_puts(&b, ")");
	if (b.oom)
		goto out;
	if (sqlite3_exec(m->db, b.s, NULL, NULL, NULL)) {
		err = db_fail(m->db, "cannot create table results", cause);
		goto out;
	}
	tb->created = 1;
	err = tab_insert(m, tb, cause);
out:
	sb_release(&b);
	return err;
}

/* The insert of a column set's table: rowid, node, the columns. */
static int tab_insert(struct merge *m, struct tab *tb, char **cause)
{
	struct strbuf b = STRBUF_INIT;
	int err = -ENOMEM;
	size_t i;

	sb_puts(&b, "INSERT INTO ");
	sb_puts(&b, tb->name);
	sb_putc(&b, '(');
	sb_puts(&b, tb->rowid);
	for (i = 0; i <= tb->ncols; i++) {
		sb_putc(&b, ',');
		sb_ident(&b, tb->cols[i]);
	}
	sb_puts(&b, ") VALUES(?");
	for (i = 0; i <= tb->ncols; i++)
		sb_puts(&b, ",?");
	sb_puts(&b, ")");
	if (b.oom)
		goto out;
	if (sqlite3_prepare_v2(m->db, b.s, -1, &tb->ins, NULL)) {
		err = db_fail(m->db, "cannot prepare insert", cause);
		goto out;
	}
	err = 0;
out:
	sb_release(&b);
	return err;
}

static int same_set(const struct tab *tb, size_t ncols, const char *const *names)
{
	if (tb->ncols != ncols)
		return 0;
	for (size_t i = 0; i < ncols; i++)
		if (strcmp(names[i], tb->names[i]))
			return 0;
	return 1;
}

int merge_columns(struct merge *m, size_t first, size_t count, size_t ncols,
		  const char *const *names, char **cause)
{
	struct tab *tb;
	size_t k;
	int err;

	*cause = NULL;
	if (first + count > m->nhosts)
		return fq_fail(cause, -EINVAL, "merge database: host %zu of %zu", first + count,
			       m->nhosts);
	for (k = 0; k < m->nt && !same_set(&m->t[k], ncols, names); k++)
		;
	if (k < m->nt)
		goto found;
	/* More than SQLite's table holds fails this node, not the run. */
	if (ncols + 1 > (size_t)sqlite3_limit(m->db, SQLITE_LIMIT_COLUMN, -1)) {
		if (asprintf(cause, "%zu columns, more than the merge holds (%d)", ncols,
			     sqlite3_limit(m->db, SQLITE_LIMIT_COLUMN, -1) - 1) < 0)
			*cause = NULL;
		return -EINVAL;
	}
	if (m->nt == MERGE_SETS_MAX) {
		if (asprintf(cause, "another column set, past the %d one fan-out keeps apart",
			     MERGE_SETS_MAX) < 0)
			*cause = NULL;
		return -EINVAL;
	}
	tb = &m->t[m->nt];
	memset(tb, 0, sizeof(*tb));
	snprintf(tb->name, sizeof(tb->name), "fq_cols_%zu", m->nt);
	tb->names = calloc(ncols ? ncols : 1, sizeof(*tb->names));
	if (!tb->names)
		return -ENOMEM;
	m->nt++;
	for (size_t i = 0; i < ncols; i++) {
		tb->names[i] = strdup(names[i]);
		if (!tb->names[i])
			return -ENOMEM;
		tb->ncols = i + 1;
	}
	err = make_cols(tb, ncols, names);
	if (err)
		return err;
found:
	for (size_t h = first; h < first + count; h++)
		m->host_tab[h] = (int)k;
	return (int)k;
}

int merge_hosts(struct merge *m, size_t n)
{
	int *ht = malloc((n ? n : 1) * sizeof(*ht));

	if (!ht)
		return -ENOMEM;
	for (size_t h = 0; h < n; h++)
		ht[h] = -1;
	free(m->host_tab);
	m->host_tab = ht;
	m->nhosts = n;
	return 0;
}

int merge_choose(struct merge *m, int k, char **cause)
{
	struct tab keep;
	char sql[96];

	*cause = NULL;
	if (m->chosen || !m->nt)
		return 0;
	if (k < 0 || (size_t)k >= m->nt)
		k = 0;
	if (m->in_txn && merge_finish(m, cause))
		return -EIO;
	for (size_t i = 0; i < m->nt; i++) {
		if ((int)i == k || !m->t[i].created)
			continue;
		snprintf(sql, sizeof(sql), "DROP TABLE %s", m->t[i].name);
		sqlite3_finalize(m->t[i].ins);
		m->t[i].ins = NULL;
		if (sqlite3_exec(m->db, sql, NULL, NULL, NULL))
			return db_fail(m->db, "cannot drop a column set's table", cause);
	}
	/* An answer of no rows still makes a table: SELECT * FROM results works. */
	if (!m->t[k].created && tab_create(m, &m->t[k], cause))
		return -EIO;
	sqlite3_finalize(m->t[k].ins);
	m->t[k].ins = NULL;
	snprintf(sql, sizeof(sql), "ALTER TABLE %s RENAME TO results", m->t[k].name);
	if (sqlite3_exec(m->db, sql, NULL, NULL, NULL))
		return db_fail(m->db, "cannot name table results", cause);
	snprintf(m->t[k].name, sizeof(m->t[k].name), "results");
	keep = m->t[k];
	m->t[k] = m->t[0];
	m->t[0] = keep;
	for (size_t i = 1; i < m->nt; i++)
		tab_release(&m->t[i]);
	m->nt = 1;
	m->chosen = 1;
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

static struct tab *host_tab(struct merge *m, size_t idx)
{
	return idx < m->nhosts && m->host_tab[idx] >= 0 ? &m->t[m->host_tab[idx]] : NULL;
}

int merge_row(struct merge *m, size_t idx, const char *node, int64_t seq,
	      const struct wire_value *vals, char **cause)
{
	struct tab *tb = host_tab(m, idx);
	sqlite3_stmt *st;
	int rc = SQLITE_OK, err;

	if (!tb || m->chosen)
		return fq_fail(cause, -EINVAL, "merge database: a row of a host without columns");
	err = begin(m, cause);
	if (!err && !tb->created)
		err = tab_create(m, tb, cause);
	if (err)
		return err;
	st = tb->ins;
	sqlite3_bind_int64(st, 1, (int64_t)idx << ROW_BITS | seq);
	sqlite3_bind_text(st, 2, node, -1, SQLITE_STATIC);
	for (size_t i = 0; i < tb->ncols && rc == SQLITE_OK; i++) {
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
	struct tab *tb = host_tab(m, idx);
	sqlite3_stmt *st = NULL;
	char *sql;
	int err = 0, rc;

	if (!tb || !tb->created)
		return 0;
	sql = sqlite3_mprintf("DELETE FROM %s WHERE %s BETWEEN ? AND ?", tb->name, tb->rowid);
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

int merge_absorb(struct merge *m, struct merge *src, const size_t *host, size_t n,
		 char **cause)
{
	sqlite3_stmt *sel = NULL, *clk = NULL;
	struct tab *tb, *from;
	int err = 0, rc = SQLITE_ROW, k = 0, fresh = !m->nt;
	char *sql;

	*cause = NULL;
	if (src->nt) {
		if (!src->chosen && merge_choose(src, 0, cause))
			return -EIO;
		from = &src->t[0];
		/* nobody answered the first time: the first answer's columns */
		for (size_t j = 0; fresh && j < n; j++)
			k = merge_columns(m, host[j], 1, from->ncols,
					  (const char *const *)from->names, cause);
		if (k < 0)
			return k;
		if (!m->chosen && merge_choose(m, k, cause))
			return -EIO;
		tb = &m->t[0];
		if (!same_set(tb, from->ncols, (const char *const *)from->names))
			return fq_fail(cause, -EINVAL, "%zu columns, the nodes that answered first have %zu",
				       from->ncols, tb->ncols);
		if ((m->in_txn && merge_finish(m, cause)) || tab_insert(m, tb, cause) ||
		    begin(m, cause))
			return -EIO;
		sql = sqlite3_mprintf("SELECT %s, * FROM results", from->rowid);
		if (!sql || sqlite3_prepare_v2(src->db, sql, -1, &sel, NULL)) {
			err = sql ? db_fail(src->db, "cannot read the rows asked again", cause)
				  : -ENOMEM;
			rc = SQLITE_DONE;
		}
		sqlite3_free(sql);
		while (rc == SQLITE_ROW && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
			int64_t id = sqlite3_column_int64(sel, 0);
			size_t j = (size_t)(id >> ROW_BITS);

			if (j >= n)
				continue;
			sqlite3_bind_int64(tb->ins, 1,
					   (int64_t)host[j] << ROW_BITS |
						   (id & (((int64_t)1 << ROW_BITS) - 1)));
			for (size_t i = 0; i <= tb->ncols; i++)
				sqlite3_bind_value(tb->ins, (int)i + 2, sqlite3_column_value(sel, (int)i + 1));
			if (sqlite3_step(tb->ins) != SQLITE_DONE) {
				err = db_fail(m->db, "cannot insert", cause);
				rc = SQLITE_DONE;
			}
			sqlite3_reset(tb->ins);
		}
		if (!err && rc != SQLITE_DONE)
			err = db_fail(src->db, "cannot read the rows asked again", cause);
		sqlite3_finalize(sel);
		sqlite3_finalize(tb->ins);
		tb->ins = NULL;
		if (err)
			return err;
		if (merge_finish(m, cause))
			return -EIO;
	}
	/* their clocks, as this fan-out measured them */
	if (sqlite3_prepare_v2(src->db, "SELECT node, offset_ns, rtt_ns, samples FROM clock", -1,
			       &clk, NULL))
		return db_fail(src->db, "cannot read the clocks", cause);
	while (!err && sqlite3_step(clk) == SQLITE_ROW)
		err = merge_clock(m, (const char *)sqlite3_column_text(clk, 0),
				  sqlite3_column_int64(clk, 1), sqlite3_column_int64(clk, 2),
				  sqlite3_column_int64(clk, 3), cause);
	sqlite3_finalize(clk);
	return err;
}

int merge_rename(struct merge *m, const char *name, char **cause)
{
	struct strbuf b = STRBUF_INIT;
	int err = 0;

	*cause = NULL;
	if (!m->nt)
		return 0;
	if (!m->chosen && merge_choose(m, 0, cause))
		return -EIO;
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
