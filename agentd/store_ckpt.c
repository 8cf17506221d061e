/* SPDX-License-Identifier: MIT */
/*
 * The store's checkpointer: passive checkpoints on a thread and a connection of
 * their own, asked for by the writer's WAL hook (see the design note in store.c).
 */
#include <errno.h>
#include <time.h>

#include <sqlite3.h>

#include "clock.h"
#include "store_int.h"

#define CKPT_WAIT_NS (1000 * 1000000LL)

/*
 * Asks for a passive checkpoint: on the checkpointer's thread, or here without one.
 * wait: until a pass that started after this call is done (at most CKPT_WAIT_NS).
 */
void ckpt_request(struct store *s, bool wait)
{
	struct timespec ts;
	uint64_t gen;
	int64_t t;

	if (!s->ckpt_started) {
		sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (wait || s->ckpt_done == s->ckpt_req) {
		gen = ++s->ckpt_req;
		pthread_cond_signal(&s->ckpt_wake);
		t = clock_ns(CLOCK_MONOTONIC) + CKPT_WAIT_NS;
		ts.tv_sec = t / 1000000000LL;
		ts.tv_nsec = t % 1000000000LL;
		while (wait && s->ckpt_done < gen &&
		       pthread_cond_timedwait(&s->done, &s->mu, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&s->mu);
}

/* After each of the writer's commits (in place of SQLite's auto-checkpoint). */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
	struct store *s = arg;

	(void)db, (void)name;
	s->wal_pages = pages;
	if (pages >= CKPT_PAGES)
		ckpt_request(s, false);
	return SQLITE_OK;
}

static void *ckpt_main(void *arg)
{
	struct store *s = arg;

	uint64_t gen;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->ckpt_done == s->ckpt_req && !s->ckpt_stop)
			pthread_cond_wait(&s->ckpt_wake, &s->mu);
		if (s->ckpt_stop)
			break;
		gen = s->ckpt_req;
		pthread_mutex_unlock(&s->mu);
		/* errors (disk full) leave the WAL longer; the writer reports its own */
		sqlite3_wal_checkpoint_v2(s->ckpt_db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
		pthread_mutex_lock(&s->mu);
		s->ckpt_done = gen;
		pthread_cond_broadcast(&s->done);
	}
	/* a writer waiting for a pass stops waiting */
	s->ckpt_done = s->ckpt_req;
	pthread_cond_broadcast(&s->done);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/*
 * Opens the checkpointer's connection and hands checkpoints to it. Without one
 * (cannot open, cannot start a thread) the writer keeps SQLite's auto-checkpoint.
 */
void ckpt_start(struct store *s, const char *path)
{
	s->ckpt_stop = false; /* started again after the file rolled over (store_roll.c) */
	if (sqlite3_open_v2(path, &s->ckpt_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
			    NULL) != SQLITE_OK ||
	    sqlite3_exec(s->ckpt_db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL) != SQLITE_OK ||
	    pthread_create(&s->ckpt_thread, NULL, ckpt_main, s)) {
		sqlite3_close(s->ckpt_db);
		s->ckpt_db = NULL;
		return;
	}
	s->ckpt_started = true;
	sqlite3_wal_hook(s->db, wal_hook, s);
}

void ckpt_stop(struct store *s)
{
	stop_thread(s, s->ckpt_thread, &s->ckpt_started, &s->ckpt_stop, &s->ckpt_wake);
	sqlite3_close(s->ckpt_db);
	s->ckpt_db = NULL;
}
