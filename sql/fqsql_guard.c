/* SPDX-License-Identifier: MIT */
/*
 * The read-only guard agentd runs every query behind (DESIGN.md section 6).
 *
 * Layers, each enough on its own for writes: SQLITE_OPEN_READONLY, PRAGMA
 * query_only, defensive mode, and an authorizer that denies anything but
 * reads. Limits bound what a read may cost: string/blob length, SQL length,
 * no ATTACH slots, an optional heap limit, and a deadline checked from the
 * progress handler.
 *
 * Per-connection state (deadline, why the authorizer denied) hangs off a
 * collation whose destructor SQLite calls at close, so it is freed however the
 * connection is closed; a small registry maps sqlite3 * to it.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "cause.h"
#include "clock.h"
#include "fqsql.h"

#define PROGRESS_OPS 1000
#define BUSY_TIMEOUT_MS 2000
#define READONLY_WHY "agentd serves read-only SQL"

struct fqsql_state {
	sqlite3 *db;
	struct fqsql_state *next;
	int64_t deadline_ns; /* read from the progress handler: __atomic */
	int deadline_hit;
	int guarded;
	char denied[256]; /* first reason the authorizer gave for the current statement */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fqsql_state *registry;

static struct fqsql_state *state_find(sqlite3 *db)
{
	struct fqsql_state *s;

	pthread_mutex_lock(&registry_lock);
	for (s = registry; s && s->db != db; s = s->next)
		;
	pthread_mutex_unlock(&registry_lock);
	return s;
}

/* Called by SQLite when the connection closes. */
static void state_destroy(void *arg)
{
	struct fqsql_state *s = arg, **pp;

	pthread_mutex_lock(&registry_lock);
	for (pp = &registry; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	pthread_mutex_unlock(&registry_lock);
	free(s);
}

static int state_collate(void *arg, int n1, const void *a, int n2, const void *b)
{
	int r = memcmp(a, b, n1 < n2 ? n1 : n2);

	return r ? r : n1 - n2;
}

static int progress(void *arg)
{
	struct fqsql_state *s = arg;
	int64_t deadline = __atomic_load_n(&s->deadline_ns, __ATOMIC_RELAXED);

	if (!deadline || clock_ns(CLOCK_MONOTONIC) < deadline)
		return 0;
	s->deadline_hit = 1;
	return 1;
}

/* The state of db, created (with the progress handler) on first use. NULL+errno. */
static struct fqsql_state *state_get(sqlite3 *db)
{
	struct fqsql_state *s = state_find(db);

	if (s)
		return s;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->db = db;
	if (sqlite3_create_collation_v2(db, "fqsql_state", SQLITE_UTF8, s, state_collate,
					state_destroy) != SQLITE_OK) {
		free(s);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&registry_lock);
	s->next = registry;
	registry = s;
	pthread_mutex_unlock(&registry_lock);
	sqlite3_progress_handler(db, PROGRESS_OPS, progress, s);
	return s;
}

void fqsql_set_deadline(sqlite3 *db, int64_t deadline_ns)
{
	struct fqsql_state *s = state_get(db);

	if (!s)
		return;
	s->deadline_hit = 0;
	__atomic_store_n(&s->deadline_ns, deadline_ns, __ATOMIC_RELAXED);
}

int fqsql_deadline_passed(sqlite3 *db)
{
	struct fqsql_state *s = state_find(db);

	return s ? s->deadline_hit : 0;
}

/*
 * PRAGMAs a query may run. The first group reads the schema and may name a
 * table or index; the second reads a value and would set it given an
 * argument, so it is allowed only without one.
 */
static const char *const pragma_introspect[] = {
	"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
	"foreign_key_list",
};
static const char *const pragma_value[] = {
	"user_version", "schema_version", "page_count", "page_size", "freelist_count",
	"function_list",
};

/* Functions and tables that touch files, load code, or change settings. */
static const char *const denied_functions[] = {
	"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "zipfile",
	"zipfile_cds", "sqlar_compress", "sqlar_uncompress", "lsmode", "fsdir",
};
static const char *const denied_tables[] = {
	"fsdir", "zipfile", "sqlite_dbpage", "sqlar",
};

static int in_list(const char *name, const char *const *list, size_t n)
{
	for (size_t i = 0; name && i < n; i++)
		if (!strcasecmp(name, list[i]))
			return 1;
	return 0;
}

#define IN_LIST(name, list) in_list(name, list, sizeof(list) / sizeof(list[0]))

static int pragma_allowed(const char *name, const char *arg)
{
	if (IN_LIST(name, pragma_introspect))
		return 1;
	return !arg && IN_LIST(name, pragma_value);
}

__attribute__((format(printf, 2, 3)))
static int deny(struct fqsql_state *s, const char *fmt, ...)
{
	va_list ap;

	if (!s->denied[0]) {
		va_start(ap, fmt);
		vsnprintf(s->denied, sizeof(s->denied), fmt, ap);
		va_end(ap);
	}
	return SQLITE_DENY;
}

#define Q(x) ((x) ? (x) : "")

/*
 * CREATE, DROP and ANALYZE are denied by their first write to sqlite_master,
 * before SQLite asks about the statement itself: fqsql_prepare names the
 * statement from its text instead.
 */
#define SCHEMA_CHANGE "\001"

static int is_schema_table(const char *t)
{
	return t && (!strcasecmp(t, "sqlite_master") || !strcasecmp(t, "sqlite_temp_master") ||
		     !strcasecmp(t, "sqlite_schema") || !strcasecmp(t, "sqlite_temp_schema"));
}

static int authorize(void *arg, int action, const char *a1, const char *a2, const char *db,
		     const char *trigger)
{
	struct fqsql_state *s = arg;

	switch (action) {
	case SQLITE_SELECT:
	case SQLITE_RECURSIVE:
		return SQLITE_OK;
	case SQLITE_READ:
		if (a1 && !strncasecmp(a1, "pragma_", 7) && !pragma_allowed(a1 + 7, NULL))
			return deny(s, "denied: table-valued pragma %s() (" READONLY_WHY ")", a1);
		if (IN_LIST(a1, denied_tables))
			return deny(s, "denied: table '%s' (" READONLY_WHY ")", a1);
		return SQLITE_OK;
	case SQLITE_FUNCTION:
		if (IN_LIST(a2, denied_functions))
			return deny(s, "denied: function %s() (" READONLY_WHY ")", a2);
		return SQLITE_OK;
	case SQLITE_PRAGMA:
		if (pragma_allowed(a1, a2))
			return SQLITE_OK;
		if (a2)
			return deny(s, "denied: PRAGMA %s = %s (" READONLY_WHY ")", a1, a2);
		return deny(s, "denied: PRAGMA %s (not on the read-only list: table_info, "
			    "table_xinfo, table_list, index_list, index_info, user_version, ...)", a1);
	case SQLITE_INSERT:
		if (is_schema_table(a1))
			return deny(s, SCHEMA_CHANGE);
		return deny(s, "denied: INSERT into '%s' (" READONLY_WHY ")", Q(a1));
	case SQLITE_UPDATE:
		/*
		 * SQLite asks this for sqlite_master's columns the first time a
		 * statement uses an eponymous virtual table (json_each, pragma_*);
		 * the read-only open, query_only and the sqlite3_stmt_readonly()
		 * check in fqsql_prepare stop a real UPDATE of the schema.
		 */
		if (is_schema_table(a1))
			return SQLITE_OK;
		return deny(s, "denied: UPDATE of '%s' (" READONLY_WHY ")", Q(a1));
	case SQLITE_DELETE:
		if (is_schema_table(a1))
			return deny(s, SCHEMA_CHANGE);
		return deny(s, "denied: DELETE from '%s' (" READONLY_WHY ")", Q(a1));
	case SQLITE_ATTACH:
		return deny(s, "denied: ATTACH '%s' (" READONLY_WHY ": query one file)", Q(a1));
	case SQLITE_DETACH:
		return deny(s, "denied: DETACH '%s' (" READONLY_WHY ")", Q(a1));
	case SQLITE_TRANSACTION:
		return deny(s, "denied: %s (each query runs in its own read transaction)", Q(a1));
	case SQLITE_SAVEPOINT:
		return deny(s, "denied: SAVEPOINT %s '%s' (each query runs in its own read "
			    "transaction)", Q(a1), Q(a2));
	case SQLITE_ALTER_TABLE:
		return deny(s, "denied: ALTER TABLE '%s' (" READONLY_WHY ")", Q(a2));
	case SQLITE_ANALYZE:
		return deny(s, "denied: ANALYZE (" READONLY_WHY ")");
	case SQLITE_REINDEX:
		return deny(s, "denied: REINDEX '%s' (" READONLY_WHY ")", Q(a1));
	case SQLITE_CREATE_INDEX:
	case SQLITE_CREATE_TEMP_INDEX:
		return deny(s, "denied: CREATE INDEX '%s' (" READONLY_WHY ")", Q(a1));
	case SQLITE_CREATE_TABLE:
	case SQLITE_CREATE_TEMP_TABLE:
		return deny(s, "denied: CREATE TABLE '%s' (" READONLY_WHY ")", Q(a1));
	case SQLITE_CREATE_TRIGGER:
	case SQLITE_CREATE_TEMP_TRIGGER:
		return deny(s, "denied: CREATE TRIGGER '%s' (" READONLY_WHY ")", Q(a1));
	case SQLITE_CREATE_VIEW:
	case SQLITE_CREATE_TEMP_VIEW:
		return deny(s, "denied: CREATE VIEW '%s' (" READONLY_WHY ": use a subquery or "
			    "WITH)", Q(a1));
	case SQLITE_CREATE_VTABLE:
		return deny(s, "denied: CREATE VIRTUAL TABLE '%s' (" READONLY_WHY ")", Q(a1));
	case SQLITE_DROP_INDEX:
	case SQLITE_DROP_TEMP_INDEX:
	case SQLITE_DROP_TABLE:
	case SQLITE_DROP_TEMP_TABLE:
	case SQLITE_DROP_TRIGGER:
	case SQLITE_DROP_TEMP_TRIGGER:
	case SQLITE_DROP_VIEW:
	case SQLITE_DROP_TEMP_VIEW:
	case SQLITE_DROP_VTABLE:
		return deny(s, "denied: DROP '%s' (" READONLY_WHY ")", Q(a1));
	default:
		return deny(s, "denied: statement (authorizer action %d; " READONLY_WHY ")",
			    action);
	}
}

static void set_limits(sqlite3 *db, const struct fqsql_limits *lim)
{
	int64_t len = lim && lim->max_length > 0 ? lim->max_length : FQSQL_DEFAULT_MAX_LENGTH;

	sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
	sqlite3_limit(db, SQLITE_LIMIT_LENGTH, len > INT_MAX ? INT_MAX : (int)len);
	sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, FQSQL_MAX_SQL_LENGTH);
	if (lim && lim->max_vdbe_op > 0)
		sqlite3_limit(db, SQLITE_LIMIT_VDBE_OP, lim->max_vdbe_op);
	if (lim && lim->heap_limit > 0)
		sqlite3_hard_heap_limit64(lim->heap_limit);
}

int fqsql_init_process(void)
{
	return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) == SQLITE_OK ? 0 : -EBUSY;
}

int fqsql_open_readonly(const char *path, const struct fqsql_limits *lim, sqlite3 **out,
			char **cause)
{
	sqlite3 *db = NULL;
	struct fqsql_state *s;
	struct stat sb;
	const char *vfs;
	char *err = NULL;
	int on = 1, off = 0, ret = 0, rc;

	if (cause)
		*cause = NULL;
	if (out)
		*out = NULL;
	if (!path || !out)
		return fq_fail(cause, -EINVAL, "no trace file given: pass its path");
	/* SQLite would say "unable to open database file" for all of these: say which */
	if (stat(path, &sb) < 0)
		return fq_fail(cause, -errno, "cannot open trace file '%s': %s: check "
			       "agentd's --db path", path, strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return fq_fail(cause, -EINVAL, "trace file '%s' is not a regular file: check "
			       "agentd's --db path", path);
	vfs = fqsql_tmpvfs();
	if (!vfs)
		return fq_fail(cause, -ENOMEM, "cannot open trace file '%s': cannot set up "
			       "temporary storage in memory", path);
	rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, vfs);
	if (rc != SQLITE_OK) {
		ret = fq_fail(cause, rc == SQLITE_NOMEM ? -ENOMEM : -EIO,
			      "cannot open trace file '%s' read-only: %s", path,
			      db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		goto fail;
	}
	sqlite3_extended_result_codes(db, 1);
	if (sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, on, NULL) != SQLITE_OK ||
	    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, off, NULL) !=
		    SQLITE_OK ||
	    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, off, NULL) != SQLITE_OK) {
		ret = fq_fail(cause, -ENOTSUP, "cannot make '%s' read-only: this SQLite (%s) "
			      "lacks defensive mode: use SQLite >= 3.31", path,
			      sqlite3_libversion());
		goto fail;
	}
	set_limits(db, lim);
	sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
	/*
	 * query_only first: the authorizer installed below would deny this PRAGMA
	 * too. Temporary tables and sorts spill to "files" that the VFS keeps in
	 * memory, where a memory budget (fqsql_mem_begin) bounds them, rather than
	 * to /var/tmp unbounded. temp_store = MEMORY would keep them in memory too,
	 * but makes the sorter allocate each record on its own (fqsql_tmpvfs.c).
	 */
	if (sqlite3_exec(db, "PRAGMA query_only = 1; PRAGMA temp_store = FILE", NULL, NULL,
			 &err) != SQLITE_OK) {
		ret = fq_fail(cause, -EIO, "cannot make '%s' read-only: %s", path, err);
		goto fail;
	}
	/* Reading the schema now turns "not a database" into an error at open, not at query */
	if (sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", NULL, NULL, &err) != SQLITE_OK) {
		ret = fq_fail(cause, -EIO, "cannot read trace file '%s': %s: is it a fleetq "
			      "trace (SQLite) file?", path, err);
		goto fail;
	}
	ret = fqsql_register(db);
	if (!ret)
		ret = fqsql_register_printf(db);
	if (ret < 0) {
		fq_fail(cause, ret, "cannot register SQL functions on '%s': %s", path,
			strerror(-ret));
		goto fail;
	}
	s = state_get(db);
	if (!s) {
		ret = fq_fail(cause, -ENOMEM, "cannot guard '%s': out of memory", path);
		goto fail;
	}
	s->guarded = 1;
	sqlite3_set_authorizer(db, authorize, s);
	*out = db;
	return 0;
fail:
	sqlite3_free(err);
	sqlite3_close_v2(db);
	return ret;
}

int fqsql_rearm(sqlite3 *db, const struct fqsql_limits *lim)
{
	struct fqsql_state *s = state_find(db);
	int on = 1, off = 0;

	if (!s || !s->guarded || !sqlite3_get_autocommit(db))
		return -EINVAL;
	for (sqlite3_stmt *st = sqlite3_next_stmt(db, NULL); st; st = sqlite3_next_stmt(db, st))
		if (sqlite3_stmt_busy(st))
			return -EINVAL;
	if (sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, on, NULL) != SQLITE_OK ||
	    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, off, NULL) !=
		    SQLITE_OK ||
	    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, off, NULL) != SQLITE_OK)
		return -ENOTSUP;
	set_limits(db, lim);
	/*
	 * The authorizer and query_only stay as fqsql_open_readonly set them: no
	 * statement can change them (the authorizer denies every PRAGMA that writes,
	 * query_only included, and SQL cannot reach sqlite3_set_authorizer). Setting
	 * them again would expire every prepared statement of the connection, and
	 * the one agentd keeps for a repeated query would be compiled again.
	 */
	s->denied[0] = 0;
	s->deadline_hit = 0;
	__atomic_store_n(&s->deadline_ns, 0, __ATOMIC_RELAXED);
	return 0;
}

/* True when sql holds only whitespace, comments and semicolons. */
static int only_trivia(const char *p)
{
	while (*p) {
		if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' ||
		    *p == '\v' || *p == ';') {
			p++;
		} else if (p[0] == '-' && p[1] == '-') {
			p += strcspn(p, "\n");
		} else if (p[0] == '/' && p[1] == '*') {
			const char *end = strstr(p + 2, "*/");

			/* SQLite also accepts a comment left open at the end */
			if (!end)
				return 1;
			p = end + 2;
		} else {
			return 0;
		}
	}
	return 1;
}

static const char *skip_trivia(const char *sql)
{
	for (;;) {
		if (*sql == ' ' || *sql == '\t' || *sql == '\n' || *sql == '\r' || *sql == '(' ||
		    *sql == ';')
			sql++;
		else if (sql[0] == '-' && sql[1] == '-')
			sql += strcspn(sql, "\n");
		else if (sql[0] == '/' && sql[1] == '*' && strstr(sql + 2, "*/"))
			sql = strstr(sql + 2, "*/") + 2;
		else
			return sql;
	}
}

/*
 * The statement's leading keywords, uppercased, for "denied: VACUUM" or
 * "denied: CREATE TEMP TABLE": one word, up to three after CREATE or DROP.
 */
static void statement_words(const char *sql, char *buf, size_t n)
{
	size_t i = 0;
	int words = 1;

	buf[0] = 0;
	for (int w = 0; w < words; w++) {
		size_t start;

		sql = skip_trivia(sql);
		if (!((*sql >= 'A' && *sql <= 'Z') || (*sql >= 'a' && *sql <= 'z')))
			break;
		if (w && i + 1 < n)
			buf[i++] = ' ';
		start = i;
		while (i + 1 < n && ((*sql >= 'A' && *sql <= 'Z') || (*sql >= 'a' && *sql <= 'z')))
			buf[i++] = (char)(*sql++ & ~0x20);
		buf[i] = 0;
		if (w == 0 && (!strcmp(buf, "CREATE") || !strcmp(buf, "DROP")))
			words = 2;
		if (w == 1 && (!strcmp(buf + start, "TEMP") || !strcmp(buf + start, "TEMPORARY") ||
			       !strcmp(buf + start, "UNIQUE") || !strcmp(buf + start, "VIRTUAL")))
			words = 3;
	}
}

/* The one-line cause for a denied statement. */
static int denied_cause(struct fqsql_state *s, const char *sql, char **cause)
{
	char words[48];

	statement_words(sql, words, sizeof(words));
	if (!s || !s->denied[0] || !strcmp(s->denied, SCHEMA_CHANGE))
		return fq_fail(cause, -EACCES, "denied: %s (" READONLY_WHY ")",
			       words[0] ? words : "statement that writes");
	return fq_fail(cause, -EACCES, "%s", s->denied);
}

static int sqlite_to_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_INTERRUPT:
		return -ETIMEDOUT;
	case SQLITE_TOOBIG:
		return -E2BIG;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_READONLY:
		return -EROFS;
	default:
		return -EIO;
	}
}

int fqsql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out, char **cause)
{
	struct fqsql_state *s = state_find(db);
	sqlite3_stmt *st = NULL;
	const char *tail = NULL;
	int rc, ret = 0;

	if (cause)
		*cause = NULL;
	if (out)
		*out = NULL;
	if (!db || !sql || !out)
		return fq_fail(cause, -EINVAL, "no query given: send one SELECT statement");
	if (s)
		s->denied[0] = 0;
	rc = sqlite3_prepare_v3(db, sql, -1, 0, &st, &tail);
	if (rc != SQLITE_OK) {
		/* a denial can surface as SQLITE_ERROR ("not authorized to use function") */
		if ((rc & 0xff) == SQLITE_AUTH || (s && s->denied[0])) {
			ret = denied_cause(s, sql, cause);
		} else if ((rc & 0xff) == SQLITE_TOOBIG) {
			ret = fq_fail(cause, -E2BIG, "query too long (over %d bytes): shorten it",
				      sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, -1));
		} else {
			ret = sqlite_to_errno(rc);
			ret = fq_fail(cause, ret == -EIO ? -EINVAL : ret, "sql error: %s",
				      sqlite3_errmsg(db));
		}
		goto fail;
	}
	if (!st) {
		ret = fq_fail(cause, -EINVAL, "empty query: send one SELECT statement");
		goto fail;
	}
	if (!only_trivia(tail)) {
		char snippet[41];
		size_t i;

		tail = skip_trivia(tail);
		for (i = 0; i + 1 < sizeof(snippet) && tail[i]; i++)
			snippet[i] = (unsigned char)tail[i] < ' ' ? ' ' : tail[i];
		snippet[i] = 0;
		ret = fq_fail(cause, -EINVAL, "one statement per query: remove \"%s\" after the "
			      "first statement", snippet);
		goto fail;
	}
	/* The authorizer sees no action for VACUUM; anything that would write ends here */
	if (s && s->guarded && !sqlite3_stmt_readonly(st)) {
		ret = denied_cause(NULL, sql, cause);
		goto fail;
	}
	*out = st;
	return 0;
fail:
	sqlite3_finalize(st);
	return ret;
}

int fqsql_step_cause(sqlite3 *db, int rc, char **cause)
{
	struct fqsql_state *s = state_find(db);
	int ret = sqlite_to_errno(rc);

	if (cause)
		*cause = NULL;
	if (ret == -ETIMEDOUT && !(s && s->deadline_hit))
		return fq_fail(cause, -EINTR, "query interrupted");
	switch (ret) {
	case -ETIMEDOUT:
		return fq_fail(cause, ret, "query ran past its deadline: narrow it (WHERE "
			       "ts_ns > ...) or raise the timeout");
	case -E2BIG:
		return fq_fail(cause, ret, "query made a string or blob over %d bytes: "
			       "select less", sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1));
	case -ENOMEM:
		return fq_fail(cause, ret, "query ran out of memory (agentd's heap limit): "
			       "aggregate on the node or select less");
	case -EACCES:
		return fq_fail(cause, ret, "%s", s && s->denied[0] && strcmp(s->denied,
			SCHEMA_CHANGE) ? s->denied : "denied: not a read-only query");
	default:
		return fq_fail(cause, ret, "query failed: %s", sqlite3_errmsg(db));
	}
}

void fqsql_close(sqlite3 *db)
{
	/* v2: statements a caller forgot would otherwise keep the file open silently */
	sqlite3_close_v2(db);
}
