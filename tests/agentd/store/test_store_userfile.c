/* SPDX-License-Identifier: MIT */
/*
 * The store writes only into a file it created (issue 14): --db pointing at a
 * user's SQLite file (rollback mode, table t), an Ingero investigation file,
 * a file with its own meta or collectives table, a trace of schema 99, or not
 * an SQLite file at all, is refused with a one-line cause before any byte
 * changes (no WAL switch, no table added, no -wal file). A schema-1 trace
 * moves aside byte for byte. A new path, an empty file and an SQLite file
 * without tables are written.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"
#include "store_test.h"

/* The whole file, malloc'd; *n its size. */
static char *slurp(const char *path, size_t *n)
{
	struct stat sb;
	char *buf;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &sb))
		DIE("cannot read %s: %s", path, strerror(errno));
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf || read(fd, buf, (size_t)sb.st_size) != sb.st_size)
		DIE("cannot read %s", path);
	close(fd);
	*n = (size_t)sb.st_size;
	return buf;
}

static void make(const char *path, const char *sql)
{
	sqlite3 *db;
	char *err = NULL;

	unlink(path);
	if (sqlite3_open(path, &db) != SQLITE_OK ||
	    sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
		DIE("cannot make %s: %s", path, err ? err : sqlite3_errmsg(db));
	sqlite3_close(db);
}

static int exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* store_open refuses path; its bytes stay, no -wal appears; the cause has want. */
static void refused(const char *path, const char *want)
{
	struct store_opts o = { .node = "n", .path = path };
	char *before, *after, *cause = NULL, wal[600];
	size_t nb, na;
	struct store *s;

	snprintf(wal, sizeof(wal), "%s-wal", path);
	before = slurp(path, &nb);
	s = store_open(&o, &cause);
	CHECK(!s);
	if (!cause || !strstr(cause, want)) {
		fprintf(stderr, "%s: cause '%s' lacks '%s'\n", path, cause ? cause : "(none)",
			want);
		check_failures++;
	}
	CHECK(!cause || !strchr(cause, '\n'));
	store_close(s);
	after = slurp(path, &na);
	if (nb != na || memcmp(before, after, nb)) {
		fprintf(stderr, "%s: changed by a refused store_open\n", path);
		check_failures++;
	}
	CHECK(!exists(wal));
	free(before);
	free(after);
	free(cause);
}

static void opened(const char *path)
{
	struct store_opts o = { .node = "n", .path = path };
	char *cause = NULL;
	struct store *s = store_open(&o, &cause);

	if (!s) {
		fprintf(stderr, "%s: refused: %s\n", path, cause ? cause : "?");
		check_failures++;
	}
	store_close(s);
	free(cause);
}

int main(void)
{
	char *dir = test_tmpdir(), p[512], moved[600];
	const char *ours = "point --db at a new path, or serve this file read-only with --no-trace";
	char *before, *after;
	size_t nb, na;
	int fd;

	snprintf(p, sizeof(p), "%s/user.db", dir);
	make(p, "CREATE TABLE t (a, b); INSERT INTO t VALUES (1, 'x'), (2, 'y')");
	refused(p, ours);
	refused(p, "is not a fleetq trace file");

	/* Ingero's investigation database: its own tables, no meta */
	snprintf(p, sizeof(p), "%s/ingero.db", dir);
	make(p, "CREATE TABLE events (ts INTEGER, pid INTEGER, tid INTEGER, cmd TEXT, "
		"event TEXT, duration INTEGER, stack_id INTEGER);"
		"CREATE TABLE stacks (id INTEGER PRIMARY KEY, stack TEXT);"
		"CREATE TABLE process_names (id INTEGER PRIMARY KEY, name TEXT);"
		"INSERT INTO events VALUES (1, 2, 3, 'python', 'cudaMalloc', 10, 1)");
	refused(p, ours);

	/* a meta table of its own shape, and a collectives table */
	snprintf(p, sizeof(p), "%s/meta-other.db", dir);
	make(p, "CREATE TABLE meta (id INTEGER PRIMARY KEY, name TEXT);"
		"CREATE TABLE collectives (x); INSERT INTO meta VALUES (1, 'mine')");
	refused(p, "no meta table of ours");
	snprintf(p, sizeof(p), "%s/meta-kv.db", dir);
	make(p, "CREATE TABLE meta (key TEXT PRIMARY KEY, value);"
		"INSERT INTO meta VALUES ('owner', 'me'); CREATE TABLE collectives (x)");
	refused(p, "names no schema_version");
	snprintf(p, sizeof(p), "%s/meta-text.db", dir);
	make(p, "CREATE TABLE meta (key TEXT PRIMARY KEY, value);"
		"INSERT INTO meta VALUES ('schema_version', 'one')");
	refused(p, "names no schema_version");

	/* a newer trace, in WAL mode as agentd leaves it */
	snprintf(p, sizeof(p), "%s/v99.db", dir);
	make(p, "CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
		"INSERT INTO meta VALUES ('schema_version', 99)");
	refused(p, "has schema version 99, newer than this agent's");

	/* not an SQLite file */
	snprintf(p, sizeof(p), "%s/notes.txt", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, "my notes, not a database\n", 25) != 25)
		DIE("cannot write %s", p);
	close(fd);
	refused(p, "is not an SQLite file");

	/* schema 1 (rollback mode, as a user's copy would be): moved aside unchanged */
	snprintf(p, sizeof(p), "%s/v1.db", dir);
	make(p, "CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
		"INSERT INTO meta VALUES ('schema_version', 1), ('node', 'old');"
		"CREATE TABLE collectives (ts_ns INTEGER NOT NULL, dur_ns INTEGER NOT NULL, "
		"pid INTEGER NOT NULL, tid INTEGER NOT NULL, seq INTEGER);"
		"INSERT INTO collectives VALUES (1, 1, 2, 3, 4)");
	before = slurp(p, &nb);
	opened(p);
	snprintf(moved, sizeof(moved), "%s.v1", p);
	after = slurp(moved, &na);
	if (nb != na || memcmp(before, after, nb)) {
		fprintf(stderr, "%s: moved aside, but not byte for byte\n", moved);
		check_failures++;
	}
	free(before);
	free(after);

	/* what the store may write: a new path, an empty file, an SQLite file without tables */
	snprintf(p, sizeof(p), "%s/new.db", dir);
	opened(p);
	opened(p); /* and its own file again */
	snprintf(p, sizeof(p), "%s/empty.db", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	close(fd);
	opened(p);
	snprintf(p, sizeof(p), "%s/blank.db", dir);
	make(p, "PRAGMA user_version = 0; VACUUM");
	opened(p);

	test_rmrf(dir);
	free(dir);
	if (check_failures)
		fprintf(stderr, "test_store_userfile: %d failures\n", check_failures);
	return check_failures ? 1 : 0;
}
