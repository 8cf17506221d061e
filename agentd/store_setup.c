/* SPDX-License-Identifier: MIT */
/*
 * Opening the store's file: whose it is (store_file.c), an older trace moved
 * aside, the schema applied, the writer's pragmas, its statements prepared, and
 * the meta that describes this agent run.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cause.h"
#include "clock.h"
#include "fqsql.h"
#include "log.h"
#include "store_file.h"
#include "store_int.h"

/* The writer's page cache. Schema version 2 writes the right edge of each table and of
 * collectives' two indexes: a few hot pages. 2 MiB measured as fast as 8 MiB
 * (bench_ingest, BENCH_CACHE_KIB) and is 6 MiB less of agentd's RSS under load. */
#define CACHE_KIB 2048
#ifndef FLEETQ_VERSION
#define FLEETQ_VERSION "unknown"
#endif

static int exec_sql(sqlite3 *db, const char *sql, char **cause, const char *path)
{
	char *err = NULL;
	int rc;

	rc = sqlite3_exec(db, sql, NULL, NULL, &err);
	if (rc != SQLITE_OK) {
		fq_fail(cause, 0, "cannot set up trace store '%s': %s: %s; check the file is a "
				  "fleetq trace store on a writable local disk",
			path, sql, err ? err : sqlite3_errstr(rc));
		sqlite3_free(err);
		return -EIO;
	}
	return 0;
}

/* Opens o->path and sets the writer's pragmas. */
static int store_open_db(struct store *s, const struct store_opts *o, char **cause)
{
	char sql[256];
	int rc;

	rc = sqlite3_open_v2(o->path, &s->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		fq_fail(cause, 0, "cannot open trace store '%s': %s; check the directory exists "
				  "and is writable",
			o->path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
		return -EIO;
	}
	sqlite3_extended_result_codes(s->db, 1);
	/* a reader's checkpoint or a stray writer may hold the lock briefly */
	sqlite3_busy_timeout(s->db, 1000);
	/* auto_vacuum only takes on a file without tables: before the schema */
	snprintf(sql, sizeof(sql),
		 "PRAGMA auto_vacuum = INCREMENTAL; PRAGMA journal_mode = WAL; "
		 "PRAGMA synchronous = NORMAL; PRAGMA cache_size = -%d; "
		 "PRAGMA journal_size_limit = %d",
		 o->cache_kib > 0 ? o->cache_kib : CACHE_KIB, 64 << 20);
	return exec_sql(s->db, sql, cause, o->path);
}

/*
 * Renames a trace file of an older schema (and its -wal, -shm) to the first free
 * "<path>.v<version>[.<n>]": its rows stay readable there, and the new file never
 * mixes tables of two shapes. The file is not opened for writing first: it
 * moves byte for byte as it was (version from store_file_check()).
 */
static int store_move_aside(struct store *s, const char *path, int64_t version, char **cause)
{
	static const char *const sfx[] = { "-wal", "-shm" };
	char to[4096], from[4096];
	int err = 0;

	if (s->db)
		exec_int(s->db, "SELECT value FROM meta WHERE key = 'schema_version'", &version);
	sqlite3_close(s->db);
	s->db = NULL;
	for (int n = 0; n < 1000; n++) {
		if (n)
			snprintf(to, sizeof(to), "%s.v%" PRId64 ".%d", path, version, n);
		else
			snprintf(to, sizeof(to), "%s.v%" PRId64, path, version);
		if (access(to, F_OK) && errno == ENOENT)
			break;
		to[0] = '\0';
	}
	if (!to[0] || rename(path, to)) {
		err = to[0] ? -errno : -EEXIST;
		fq_fail(cause, 0, "trace store '%s' has schema version %" PRId64 " and cannot be "
				  "moved aside (%s): move or delete it and restart agentd",
			path, version, strerror(-err));
		return err;
	}
	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		size_t tl = strlen(to);


		snprintf(from, sizeof(from), "%s%s", path, sfx[i]);
		snprintf(to + tl, sizeof(to) - tl, "%s", sfx[i]);
		if (rename(from, to) && errno != ENOENT)
			unlink(from);
		to[tl] = '\0';
	}
	log_line("trace store '%s' has schema version %" PRId64 " (this agent writes %d): "
		 "moved it to '%s' and started a new file",
		 path, version, FQSQL_SCHEMA_VERSION, to);
	return 0;
}

/*
 * meta 'host_id': the running kernel's boot id. Agents that report the same one read one
 * clock, so the straggler analysis compares their ranks' enqueue times with no offset and no
 * uncertainty (sql/analysis/stragglers.merge.sql).
 */
static void meta_put_host_id(struct store *s)
{
	char id[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	if (f && fgets(id, sizeof(id), f)) {
		id[strcspn(id, "\n")] = '\0';
		if (id[0])
			meta_put_text(s, "host_id", id);
	}
	if (f)
		fclose(f);
}

int store_setup_db(struct store *s, const struct store_opts *o, char **cause)
{
	int64_t version;
	int rc, err;

	/* Before the first write: a user's file is refused, an old trace moved aside unchanged. */
	err = store_file_check(o->path, &version, cause);
	if (err == -ESTALE)
		err = store_move_aside(s, o->path, version, cause);
	if (err)
		return err;
	err = store_open_db(s, o, cause);
	if (err)
		return err;
	err = fqsql_schema_apply(s->db, cause);
	if (err == -ESTALE) {
		if (cause) {
			free(*cause);
			*cause = NULL;
		}
		err = store_move_aside(s, o->path, 0, cause);
		if (!err)
			err = store_open_db(s, o, cause);
		if (!err)
			err = fqsql_schema_apply(s->db, cause);
	}
	if (err)
		return err;
	err = store_schema_check(s->db, o->path, rec_tables, cause);
	if (err)
		return err;
	for (int i = 0; i < ST_MAX; i++) {
		char *sql = NULL;

		/* the record kinds' statements are built from their tables */
		if (i >= ST_REC && !(sql = rec_table_sql(&rec_tables[i - ST_REC + REC_PROCESS])))
			return -ENOMEM; /* store_open says so */
		rc = sqlite3_prepare_v3(s->db, sql ? sql : stmt_sql[i], -1,
					SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL);
		free(sql);
		if (rc != SQLITE_OK) {
			fq_fail(cause, 0,
				"trace store '%s' does not have the expected schema (%s); "
				"move it aside and restart agentd",
				o->path, sqlite3_errmsg(s->db));
			return -EINVAL;
		}
	}

	/* meta describing this agent run, committed before store_open returns */
	err = exec_sql(s->db, "BEGIN", cause, o->path);
	if (err)
		return err;
	meta_put_int(s, "schema_version", FQSQL_SCHEMA_VERSION);
	if (o->node)
		meta_put_text(s, "node", o->node);
	if (o->clock_source)
		meta_put_text(s, "clock_source", o->clock_source);
	meta_put_int(s, "agent_start_ns", clock_ns(CLOCK_REALTIME));
	meta_put_int(s, "agent_pid", getpid());
	meta_put_host_id(s);
	meta_put_text(s, "agent_version", FLEETQ_VERSION);
	meta_put_int(s, "retain_bytes", s->retain_bytes);
	meta_put_int(s, "retain_age_s", s->retain_age_s);
	meta_put_int(s, "store_batch_rows", s->batch_rows);
	meta_put_int(s, "store_batch_ms", s->batch_ns / 1000000);
	meta_put_int(s, "store_queue_rows", (int64_t)s->mask + 1);
	return exec_sql(s->db, "COMMIT", cause, o->path);
}

/* ---- an earlier agent's communicator names (store_comm_name) ---- */

_Static_assert(STORE_NAMES == 4096, "store_read_names' LIMIT");

/* column col of st: TEXT of 16 lower-case hex digits, its value in *v; else -1 */
static int hex16(sqlite3_stmt *st, int col, uint64_t *v)
{
	const unsigned char *t;
	uint64_t x = 0;

	if (sqlite3_column_type(st, col) != SQLITE_TEXT || sqlite3_column_bytes(st, col) != 16 ||
	    !(t = sqlite3_column_text(st, col)))
		return -1;
	for (int i = 0; i < 16; i++) {
		int c = t[i], d = c >= '0' && c <= '9' ? c - '0'
				: c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

		if (d < 0)
			return -1;
		x = x << 4 | (uint64_t)d;
	}
	*v = x;
	return 0;
}

struct name_row {
	struct comm_name n;
	int order; /* 0: the newest row */
};

static int name_cmp(const void *a, const void *b)
{
	const struct name_row *x = a, *y = b;

	if (x->n.pid != y->n.pid)
		return x->n.pid < y->n.pid ? -1 : 1;
	if (x->n.nccl_hash != y->n.nccl_hash)
		return x->n.nccl_hash < y->n.nccl_hash ? -1 : 1;
	return x->order - y->order;
}

/*
 * The communicators an earlier agent named in this file whose NCCL hash it knew (its init
 * seen, or an adoption that kept an older name): (pid, NCCL hash) -> comm_hash, the newest
 * row of each. Bounded (STORE_NAMES rows); a row that is not 16 hex digits is skipped.
 * Nothing found, or a failure: no names, and adoption names by NCCL's hash.
 */
void store_read_names(struct store *s)
{
	static const char sql[] =
		"SELECT pid, nccl_hash, comm_hash FROM comms WHERE nccl_hash IS NOT NULL "
		"AND comm_hash IS NOT NULL AND comm_hash <> nccl_hash AND pid BETWEEN 1 AND "
		"4294967295 ORDER BY ts_ns DESC LIMIT 4096";
	struct name_row *rows = NULL;
	sqlite3_stmt *st = NULL;
	int n = 0, k = 0;

	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	rows = calloc(STORE_NAMES, sizeof(*rows));
	if (!rows)
		goto out;
	while (n < STORE_NAMES && sqlite3_step(st) == SQLITE_ROW) {
		struct name_row *r = &rows[n];
		uint64_t unused;

		if (hex16(st, 1, &r->n.nccl_hash) || hex16(st, 2, &unused))
			continue;
		r->n.pid = (uint32_t)sqlite3_column_int64(st, 0);
		memcpy(r->n.name, sqlite3_column_text(st, 2), 17);
		r->order = n++;
	}
	if (!n)
		goto out;
	qsort(rows, n, sizeof(*rows), name_cmp);
	s->names = calloc(n, sizeof(*s->names));
	if (!s->names)
		goto out;
	for (int i = 0; i < n; i++)
		if (!k || rows[i].n.pid != s->names[k - 1].pid ||
		    rows[i].n.nccl_hash != s->names[k - 1].nccl_hash)
			s->names[k++] = rows[i].n;
	s->nnames = k;
out:
	free(rows);
	sqlite3_finalize(st);
}

int store_comm_name(const struct store *s, uint32_t pid, uint64_t nccl_hash, char name[17])
{
	int lo = 0, hi = s ? s->nnames : 0;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		const struct comm_name *c = &s->names[mid];

		if (c->pid < pid || (c->pid == pid && c->nccl_hash < nccl_hash)) {
			lo = mid + 1;
		} else if (c->pid == pid && c->nccl_hash == nccl_hash) {
			memcpy(name, c->name, 17);
			return 1;
		} else {
			hi = mid;
		}
	}
	return 0;
}
