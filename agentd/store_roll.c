/* SPDX-License-Identifier: MIT */
/*
 * The trace file renamed away under a running agentd, as log-rotation tools do
 * (mv trace.db trace.db.1, perhaps creating a new file at the path). Queries
 * serve whatever --db names (query_pool.c reopens on a new inode), so the
 * writer follows the path too, by the rule it keeps at start (store_file.c):
 * it writes only into a file it created, an empty one, or its own trace.
 *
 * Between batches, once a second, the writer compares the path's inode with
 * its file's. When they differ it checkpoints the whole WAL into the file and
 * closes it, and removes its -wal and -shm from the path's names (or, when a
 * query held the checkpoint back, moves them beside the file's new name), so
 * that the renamed file is whole and nothing that comes to the path picks up a
 * WAL not its own.
 * Then the path goes through the door again: absent or empty, a new trace file
 * starts there; anything else is not written, records are dropped (counted)
 * and the writer looks again each second. The new file gets the old one's
 * meta for the keys it does not set itself (probes, seq_semantics, gpu_status:
 * set once by the tracer, read by HELLO and the analyses).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "log.h"
#include "store_int.h"

#define ROLL_CHECK_NS 1000000000LL

struct roll_meta {
	char *key;
	sqlite3_value *v;
};

static const char *const sfx[ROLL_FILES] = { "", "-wal", "-shm" };

void roll_note(struct store *s)
{
	char p[PATH_MAX];
	struct stat sb;

	for (int i = 0; i < ROLL_FILES; i++) {
		snprintf(p, sizeof(p), "%s%s", s->path, sfx[i]);
		if (stat(p, &sb))
			memset(&sb, 0, sizeof(sb));
		s->roll_dev[i] = sb.st_dev;
		s->roll_ino[i] = sb.st_ino;
	}
}

void roll_free(struct store *s)
{
	for (int i = 0; i < s->ncarry; i++) {
		free(s->carry[i].key);
		sqlite3_value_free(s->carry[i].v);
	}
	free(s->carry);
	s->carry = NULL;
	s->ncarry = 0;
}

/* Keeps the meta of the file about to close, for the next (best effort: meta only). */
static void carry_take(struct store *s)
{
	sqlite3_stmt *st = NULL;
	int cap = 0;

	roll_free(s);
	if (sqlite3_prepare_v2(s->db, "SELECT key, value FROM meta", -1, &st, NULL) != SQLITE_OK)
		return;
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct roll_meta m = { 0 };

		if (s->ncarry == cap) {
			struct roll_meta *c = realloc(s->carry, (size_t)(cap ? cap * 2 : 32) *
								sizeof(*c));

			if (!c)
				break;
			s->carry = c;
			cap = cap ? cap * 2 : 32;
		}
		m.key = strdup((const char *)sqlite3_column_text(st, 0));
		m.v = sqlite3_value_dup(sqlite3_column_value(st, 1));
		if (!m.key || !m.v) {
			free(m.key);
			sqlite3_value_free(m.v);
			break;
		}
		s->carry[s->ncarry++] = m;
	}
	sqlite3_finalize(st);
}

/* Writes the kept meta into the new file, under the keys it has not set. */
static void carry_put(struct store *s)
{
	static const char sql[] = "INSERT OR IGNORE INTO meta (key, value) VALUES (?1, ?2)";
	sqlite3_stmt *st = NULL;

	if (s->ncarry && sqlite3_exec(s->db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK) {
		if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK) {
			for (int i = 0; i < s->ncarry; i++) {
				sqlite3_bind_text(st, 1, s->carry[i].key, -1, SQLITE_STATIC);
				sqlite3_bind_value(st, 2, s->carry[i].v);
				step_reset(st);
			}
		}
		sqlite3_finalize(st);
		sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
	}
	roll_free(s);
}

/* The name the writer's file has now (by its inode, among this process's open files). */
static int renamed_to(struct store *s, char *out, size_t len)
{
	char link[300];
	struct dirent *e;
	struct stat sb;
	DIR *d = opendir("/proc/self/fd");
	ssize_t n;
	int ret = -ENOENT;

	if (!d)
		return -errno;
	while (ret && (e = readdir(d))) {
		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		if (stat(link, &sb) || sb.st_dev != s->roll_dev[0] || sb.st_ino != s->roll_ino[0] ||
		    sb.st_nlink == 0)
			continue;
		n = readlink(link, out, len - 1);
		if (n > 0) {
			out[n] = '\0';
			ret = 0;
		}
	}
	closedir(d);
	return ret;
}

/* Closes the writer's file; its -wal and -shm left at the path's names move beside it. */
static void roll_close(struct store *s)
{
	char to[PATH_MAX], from[PATH_MAX], *gone = NULL;
	struct stat sb;
	int have_to = renamed_to(s, to, sizeof(to) - 8) == 0, whole;

	ckpt_stop(s);
	for (int i = 0; i < ST_MAX; i++) {
		sqlite3_finalize(s->st[i]);
		s->st[i] = NULL;
	}
	for (int i = 0; i <= REC_KIND_MAX; i++) {
		sqlite3_finalize(s->gap[i]);
		s->gap[i] = NULL;
	}
	/* Queries' connections to the file keep its close from checkpointing: do it here */
	whole = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL) ==
		SQLITE_OK;
	sqlite3_close(s->db);
	s->db = NULL;
	for (int i = 1; i < ROLL_FILES; i++) {
		snprintf(from, sizeof(from), "%s%s", s->path, sfx[i]);
		if (stat(from, &sb) || sb.st_dev != s->roll_dev[i] || sb.st_ino != s->roll_ino[i])
			continue;
		if (have_to && !whole) {
			size_t tl = strlen(to);

			snprintf(to + tl, sizeof(to) - tl, "%s", sfx[i]);
			if (rename(from, to))
				unlink(from);
			to[tl] = '\0';
		} else {
			unlink(from);
		}
	}
	if (!have_to)
		gone = "deleted";
	log_line("trace store '%s' was renamed away (now %s%s%s): closed it", s->path,
		 gone ? "" : "'", gone ? gone : to, gone ? "" : "'");
	s->roll_dev[0] = 0;
	s->roll_ino[0] = 0;
}

void roll_check(struct store *s, int64_t now)
{
	char *cause = NULL;
	struct stat sb;
	int err;

	if (now < s->next_roll_ns)
		return;
	s->next_roll_ns = now + ROLL_CHECK_NS;
	if (stat(s->path, &sb)) {
		if (errno != ENOENT)
			return; /* cannot tell: go on with the file we have */
	} else if (s->db && sb.st_dev == s->roll_dev[0] && sb.st_ino == s->roll_ino[0]) {
		return;
	}
	if (s->db) {
		carry_take(s);
		roll_close(s);
	}
	err = store_setup_db(s, &s->opts, &cause);
	if (!err) {
		carry_put(s);
		ckpt_start(s, s->path);
		roll_note(s);
		log_line("trace store '%s': writing a new trace file there", s->path);
		s->roll_warned = false;
		s->failing = false;
	} else {
		for (int i = 0; i < ST_MAX; i++) {
			sqlite3_finalize(s->st[i]);
			s->st[i] = NULL;
		}
		sqlite3_close(s->db);
		s->db = NULL;
		if (!s->roll_warned)
			log_line("%s; dropping records until the path is free or empty",
				 cause ? cause : "cannot open the trace store");
		s->roll_warned = true;
	}
	free(cause);
}
