/* SPDX-License-Identifier: MIT */
#include "compat.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sqlite3.h>

#include "cause.h"
#include "clock.h"
#include "fqsql.h"
#include "gather.h"
#include "strbuf.h"

/* Tables a node lacks, by index into the schema's list (one bit each). */
#define COMPAT_MAX 64

/* The schema's tables and their columns, from an empty trace in memory. */
struct schema {
	sqlite3 *db;
	char *name[COMPAT_MAX];
	size_t n;
};

static void schema_close(struct schema *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->name[i]);
	sqlite3_close(s->db);
	memset(s, 0, sizeof(*s));
}

static int schema_open(struct schema *s)
{
	sqlite3_stmt *st = NULL;
	char *cause = NULL;
	int err = -EIO;

	memset(s, 0, sizeof(*s));
	if (sqlite3_open_v2(":memory:", &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL))
		goto out;
	/* (its functions too: the node SQL is prepared here for its column names) */
	if (fqsql_schema_apply(s->db, &cause) || fqsql_register(s->db))
		goto out;
	if (sqlite3_prepare_v2(s->db,
			       "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name",
			       -1, &st, NULL))
		goto out;
	while (sqlite3_step(st) == SQLITE_ROW && s->n < COMPAT_MAX) {
		s->name[s->n] = strdup((const char *)sqlite3_column_text(st, 0));
		if (!s->name[s->n]) {
			err = -ENOMEM;
			goto out;
		}
		s->n++;
	}
	err = 0;
out:
	free(cause);
	sqlite3_finalize(st);
	if (err)
		schema_close(s);
	return err;
}

static int schema_find(const struct schema *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcasecmp(s->name[i], name))
			return (int)i;
	return -1;
}

/* The message's table name, "main." dropped, into buf; NULL if none. */
static const char *named_table(const char *message, char *buf, size_t len)
{
	static const char key[] = "no such table: ";
	const char *p = message ? strstr(message, key) : NULL;
	size_t n = 0;

	if (!p)
		return NULL;
	p += sizeof(key) - 1;
	if (!strncasecmp(p, "main.", 5))
		p += 5;
	while (n + 1 < len && (isalnum((unsigned char)p[n]) || p[n] == '_'))
		buf[n] = p[n], n++;
	buf[n] = '\0';
	return n ? buf : NULL;
}

const char *compat_missing_table(const char *message, char *buf, size_t len)
{
	struct schema s;
	int k;

	if (!named_table(message, buf, len) || schema_open(&s))
		return NULL;
	k = schema_find(&s, buf);
	if (k >= 0)
		snprintf(buf, len, "%s", s.name[k]);
	schema_close(&s);
	return k >= 0 ? buf : NULL;
}

/* Past whitespace and comments: where the statement's first word starts. */
static const char *skip_blank(const char *p)
{
	for (;;) {
		while (isspace((unsigned char)*p))
			p++;
		if (p[0] == '-' && p[1] == '-') {
			p += strcspn(p, "\n");
		} else if (p[0] == '/' && p[1] == '*') {
			const char *e = strstr(p + 2, "*/");

			p = e ? e + 2 : p + strlen(p);
		} else {
			return p;
		}
	}
}

/* p starts with the keyword kw (case aside), a whole word: its end, else NULL. */
static const char *keyword(const char *p, const char *kw)
{
	size_t n = strlen(kw);

	if (strncasecmp(p, kw, n) || isalnum((unsigned char)p[n]) || p[n] == '_')
		return NULL;
	return p + n;
}

/* `"t"("a","b") AS (SELECT NULL,NULL LIMIT 0)` for table t of s. */
static int shim(struct strbuf *b, const struct schema *s, const char *table)
{
	sqlite3_stmt *st = NULL;
	size_t ncols = 0;
	char *q;

	if (schema_find(s, table) < 0)
		return -ENOENT;
	if (sqlite3_prepare_v2(s->db, "SELECT name FROM pragma_table_info(?1) ORDER BY cid", -1,
			       &st, NULL))
		return -EIO;
	sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
	q = sqlite3_mprintf("\"%w\"(", table);
	sb_puts(b, q ? q : "");
	sqlite3_free(q);
	while (sqlite3_step(st) == SQLITE_ROW) {
		q = sqlite3_mprintf("%s\"%w\"", ncols++ ? "," : "",
				    (const char *)sqlite3_column_text(st, 0));
		sb_puts(b, q ? q : "");
		sqlite3_free(q);
	}
	sqlite3_finalize(st);
	sb_puts(b, ") AS (SELECT ");
	for (size_t i = 0; i < ncols; i++)
		sb_puts(b, i ? ",NULL" : "NULL");
	sb_puts(b, " LIMIT 0)");
	return ncols ? 0 : -EIO;
}

static char *shimmed(const struct schema *s, const char *sql, const char *const *tables,
		     size_t n, int *err)
{
	struct strbuf b = STRBUF_INIT;
	const char *start = skip_blank(sql), *rest = keyword(start, "WITH");

	*err = 0;
	if (rest) {
		const char *r = keyword(skip_blank(rest), "RECURSIVE");

		if (r)
			rest = r;
		sb_add(&b, sql, (size_t)(rest - sql));
		sb_putc(&b, ' ');
	} else {
		rest = start;
		sb_add(&b, sql, (size_t)(start - sql));
		sb_puts(&b, "WITH ");
	}
	for (size_t i = 0; i < n && !*err; i++) {
		if (i)
			sb_puts(&b, ", ");
		*err = shim(&b, s, tables[i]);
	}
	sb_puts(&b, keyword(start, "WITH") ? ",\n" : "\n");
	sb_puts(&b, rest);
	if (!*err && b.oom)
		*err = -ENOMEM;
	if (*err) {
		sb_release(&b);
		return NULL;
	}
	return sb_detach(&b);
}

char *compat_sql(const char *sql, const char *const *tables, size_t n, int *err)
{
	struct schema s;
	char *out;

	*err = schema_open(&s);
	if (*err)
		return NULL;
	out = shimmed(&s, sql, tables, n, err);
	schema_close(&s);
	return out;
}

/* One group: the nodes lacking the same tables, asked again within left_ms (0: fp's). */
static int ask_again(const struct fanout_params *fp, int64_t left_ms, const struct schema *s,
		     uint64_t mask, const size_t *host, size_t k, struct merge *m,
		     struct coverage *cov, char **cause)
{
	const char **names = calloc(k, sizeof(*names)), *tabs[COMPAT_MAX];
	const char *const *want;
	const char **local = NULL;
	struct fanout_params p = *fp;
	sqlite3_stmt *st = NULL;
	size_t nwant = 0;
	struct coverage *c2 = NULL;
	struct merge *m2 = NULL;
	struct fanout *fo = NULL;
	size_t nt = 0;
	char *sql = NULL;
	int err = -ENOMEM;

	if (!names)
		goto out;
	for (size_t i = 0; i < s->n; i++)
		if (mask & (1ULL << i))
			tabs[nt++] = s->name[i];
	sql = shimmed(s, fp->sql, tabs, nt, &err);
	if (!sql)
		goto out;
	for (size_t j = 0; j < k; j++)
		names[j] = fp->hosts[host[j]];
	p.hosts = names;
	p.nhosts = k;
	p.sql = sql;
	p.progress = 0;
	if (left_ms > 0 && (p.timeout_ms <= 0 || left_ms < p.timeout_ms))
		p.timeout_ms = left_ms;
	if (p.connect_timeout_ms > p.timeout_ms)
		p.connect_timeout_ms = p.timeout_ms;
	fo = fanout_new(&p, cause);
	m2 = merge_new(cause);
	c2 = coverage_new(k, names);
	if (!fo || !m2 || !c2) {
		err = *cause ? -EIO : fq_fail(cause, -ENOMEM, "out of memory");
		goto out;
	}
	/*
	 * the first answers' columns win, or where none came, those of the query on an empty
	 * trace of this schema: a node that sends others fails alone
	 */
	want = merge_has_table(m) ? merge_set_names(m, 0, &nwant) : NULL;
	if (!want && !sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) &&
	    sqlite3_column_count(st) > 0) {
		nwant = (size_t)sqlite3_column_count(st);
		local = calloc(nwant, sizeof(*local));
		for (size_t i = 0; local && i < nwant; i++)
			local[i] = sqlite3_column_name(st, (int)i);
		want = local;
	}
	err = gather_run_want(fo, &p, m2, c2, want, nwant, cause);
	if (err)
		goto out;
	err = merge_absorb(m, m2, host, k, cause);
	if (err == -EINVAL) {
		/* (none sent them) another column set than the first answers': theirs wins */
		for (size_t j = 0; j < k; j++)
			if (coverage_outcome(c2, j) == FQ_OK ||
			    coverage_outcome(c2, j) == FQ_TRUNCATED)
				coverage_set(c2, j, FQ_COLUMNS, coverage_rows(c2, j), *cause);
		free(*cause);
		*cause = NULL;
		err = 0;
	}
	if (err)
		goto out;
	for (size_t j = 0; j < k; j++) {
		coverage_set(cov, host[j], coverage_outcome(c2, j), coverage_rows(c2, j),
			     coverage_message(c2, j));
		coverage_set_status(cov, host[j], coverage_status(c2, j));
	}
out:
	fanout_free(fo);
	merge_free(m2);
	coverage_free(c2);
	free(local);
	sqlite3_finalize(st);
	free(sql);
	free(names);
	return err;
}

/* "2 nodes' agents predate tables a, b: read as empty there (...)" (malloc'd), or NULL. */
static char *make_note(const struct schema *s, const uint64_t *lack, size_t nh,
		       const struct coverage *cov)
{
	struct strbuf b = STRBUF_INIT;
	uint64_t all = 0;
	size_t nodes = 0, nt = 0;

	for (size_t h = 0; h < nh; h++)
		if (lack[h] && coverage_outcome(cov, h) == FQ_OK) {
			all |= lack[h];
			nodes++;
		}
	if (!nodes)
		return NULL;
	for (size_t i = 0; i < s->n; i++)
		nt += (all >> i) & 1;
	sb_printf(&b, "%zu %s predate%s table%s ", nodes,
		  nodes == 1 ? "node's agent" : "nodes' agents", nodes == 1 ? "s" : "",
		  nt == 1 ? "" : "s");
	for (size_t i = 0, k = 0; i < s->n; i++)
		if ((all >> i) & 1)
			sb_printf(&b, "%s%s", k++ ? ", " : "", s->name[i]);
	sb_printf(&b, ": read as empty there (what %s holds: not measured; upgrade agentd)",
		  nt == 1 ? "it" : "they");
	return b.oom ? (sb_release(&b), NULL) : sb_detach(&b);
}

int compat_retry(const struct fanout_params *fp, int64_t started_ns, struct merge *m,
		 struct coverage *cov, char **note, char **cause)
{
	size_t n = fp->nhosts ? fp->nhosts : 1;
	uint64_t *lack = calloc(n, sizeof(*lack));
	size_t *host = calloc(n, sizeof(*host));
	char *todo = calloc(n, 1);
	struct schema s = { 0 };
	int err = 0, open = 0;
	size_t groups;

	*note = NULL;
	*cause = NULL;
	if (fp->interrupt && *fp->interrupt)
		goto out;
	if (!lack || !host || !todo) {
		err = fq_fail(cause, -ENOMEM, "out of memory");
		goto out;
	}
	for (int round = 0; round < COMPAT_ROUNDS && !err; round++) {
		int more = 0;

		for (size_t h = 0; h < fp->nhosts; h++) {
			char name[128];
			int k;

			if (coverage_outcome(cov, h) != FQ_SQL ||
			    !named_table(coverage_message(cov, h), name, sizeof(name)))
				continue;
			if (!open && (err = schema_open(&s)) != 0) {
				err = fq_fail(cause, err, "the trace schema: cannot open it in memory");
				goto out;
			}
			open = 1;
			k = schema_find(&s, name);
			/* a table it was asked again without: not our shim's doing, leave it */
			if (k < 0 || (lack[h] & (1ULL << k)))
				continue;
			lack[h] |= 1ULL << k;
			todo[h] = 1;
			more = 1;
		}
		if (!more)
			break;
		/* one fan-out per set of missing tables (a fleet has few agent versions), each
		 * with an equal share of the time left: a group that stalls keeps no other from
		 * its turn */
		groups = 0;
		for (size_t h = 0; h < fp->nhosts; h++) {
			size_t j = 0;

			while (j < h && !(todo[j] && lack[j] == lack[h]))
				j++;
			groups += todo[h] && j == h;
		}
		for (size_t h = 0; h < fp->nhosts && !err; h++) {
			int64_t left;
			size_t k = 0;

			if (!todo[h])
				continue;
			if (fp->interrupt && *fp->interrupt)
				break; /* Ctrl-C: their "no such table" stands */
			for (size_t j = h; j < fp->nhosts; j++) {
				if (todo[j] && lack[j] == lack[h]) {
					todo[j] = 0;
					host[k++] = j;
				}
			}
			left = (fp->timeout_ms - (clock_ns(CLOCK_MONOTONIC) - started_ns) / 1000000) /
			       (int64_t)(groups ? groups : 1);
			groups--;
			/* no time left: their "no such table" stands */
			if (fp->timeout_ms > 0 && left < COMPAT_MIN_MS)
				continue;
			err = ask_again(fp, fp->timeout_ms > 0 ? left : 0, &s, lack[h], host, k, m,
					cov, cause);
		}
	}
	if (!err && open)
		*note = make_note(&s, lack, fp->nhosts, cov);
out:
	if (open)
		schema_close(&s);
	free(lack);
	free(host);
	free(todo);
	return err;
}
