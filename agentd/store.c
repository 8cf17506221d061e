/* SPDX-License-Identifier: MIT */
/*
 * The trace store. Producers (the tracer's ring-buffer callback, the IB
 * poller) copy records into a bounded lock-free MPSC ring of fixed-size slots;
 * one writer thread drains the ring into SQLite in batched transactions.
 *
 * Why this shape:
 * - store_put() must never block the tracer: a full ring drops and counts.
 * - No malloc per record: each slot carries the record and an inline arena
 *   for its strings; only strings that do not fit (long cmdlines) are
 *   allocated, once per record.
 * - The ring is Vyukov's bounded queue (per-slot sequence numbers): producers
 *   claim a slot with one CAS, the single consumer needs no atomic RMW at all.
 * - The writer binds straight from the slot (SQLITE_STATIC) with one cached
 *   statement per table and commits every batch_rows rows or batch_ms.
 * - A failed commit (disk full, I/O error) drops that batch (counted) and the
 *   writer keeps going, so writing resumes by itself when space returns.
 * - Checkpoints (WAL pages copied into the file, and their fsyncs) run on a thread
 *   of their own with its own connection: done by the writer in its commit, as
 *   SQLite's auto-checkpoint does, they stalled it for 200+ ms on a busy disk, long
 *   enough to fill the queue at 200k events/s. A passive checkpoint and the writer's
 *   appends to the WAL run side by side. The WAL only starts over when a write
 *   transaction begins with every frame checkpointed, which a writer that never
 *   pauses would rarely see: past CKPT_WAIT_PAGES the writer waits, once, for a pass
 *   that covers its last commit (the tail since the previous pass).
 *
 * The store's files: see store_int.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
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
#include "store.h"
#include "store_int.h"

#define DEFAULT_BATCH_ROWS 8192
#define DEFAULT_BATCH_MS 200
/* 32k slots of 256 bytes: 8 MiB, 160 ms at 200k events/s. 16k measured more drops in
 * bench/drops.sh on a 2-core box under CPU contention (the writer starved, not stalled). */
#define DEFAULT_QUEUE_ROWS 32768
#define MAX_QUEUE_ROWS (1 << 24)

/* One ring slot: 4 cache lines, the record, then its strings (64 bytes: the names of
 * ops, datatypes, CUDA calls; a long cmdline or two IPv6 addresses take the heap). */
#define SLOT_SIZE 256

struct slot_hdr {
	_Atomic uint64_t seq;
	_Atomic int64_t enq_ns; /* CLOCK_MONOTONIC; atomic: store_get_stats peeks at it */
	char *heap;             /* strings that did not fit the arena, or NULL */
	struct rec r;
};

struct slot {
	struct slot_hdr h;
	char arena[SLOT_SIZE - sizeof(struct slot_hdr)];
};

_Static_assert(sizeof(struct slot) == SLOT_SIZE, "slot size");
/* A collective's names (op, datatype, redop: about 24 bytes) fit; longer strings take the heap. */
_Static_assert(SLOT_SIZE - sizeof(struct slot_hdr) >= 48, "slot arena too small");

/*
 * Where the strings of each record kind are: the TEXT columns of rec_tables[]. Once, when
 * the store opens; 0, or -E2BIG when a kind has more than a slot's REC_STRINGS.
 */
static int str_fields(struct store *s)
{
	for (int k = REC_PROCESS; k <= REC_KIND_MAX; k++) {
		const struct rec_table *t = &rec_tables[k];

		for (int i = 0; i < t->ncol; i++) {
			if (t->col[i].type != COL_TEXT)
				continue;
			if (s->nstr[k] == REC_STRINGS)
				return -E2BIG;
			s->str_off[k][s->nstr[k]++] = t->col[i].off;
		}
	}
	return 0;
}

/* The string fields of r (a kind store_put accepts), as pointers to the struct members;
 * returns how many. */
static int rec_strings(const struct store *s, struct rec *r, const char **f[REC_STRINGS])
{
	int n = s->nstr[r->kind];

	for (int i = 0; i < n; i++)
		f[i] = (const char **)((char *)&r->u + s->str_off[r->kind][i]);
	return n;
}

int store_put(struct store *s, const struct rec *r)
{
	const char **f[REC_STRINGS];
	size_t len[REC_STRINGS], total = 0;
	struct slot *sl;
	uint64_t pos, seq;
	char *dst;
	int i, n;

	if (r->kind < REC_PROCESS || r->kind > REC_KIND_MAX)
		return -EINVAL;

	pos = atomic_load_explicit(&s->tail, memory_order_relaxed);
	for (;;) {
		int64_t dif;

		sl = &s->ring[pos & s->mask];
		seq = atomic_load_explicit(&sl->h.seq, memory_order_acquire);
		dif = (int64_t)(seq - pos);
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&s->tail, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed))
				break;
		} else if (dif < 0) {
			atomic_fetch_add_explicit(&s->drops_full, 1, memory_order_relaxed);
			return -ENOBUFS;
		} else {
			pos = atomic_load_explicit(&s->tail, memory_order_relaxed);
		}
	}

	/* The slot is ours: copy the record, then its strings into the arena
	 * (or one allocation when they do not fit) and repoint the fields. */
	sl->h.r = *r;
	sl->h.heap = NULL;
	n = rec_strings(s, &sl->h.r, f);
	for (i = 0; i < n; i++) {
		len[i] = *f[i] ? strlen(*f[i]) + 1 : 0;
		total += len[i];
	}
	dst = sl->arena;
	if (total > sizeof(sl->arena)) {
		dst = sl->h.heap = malloc(total);
		if (!dst)
			sl->h.r.kind = 0; /* published as a hole the writer skips and counts */
	}
	for (i = 0; dst && i < n; i++) {
		if (!len[i])
			continue;
		memcpy(dst, *f[i], len[i]);
		*f[i] = dst;
		dst += len[i];
	}
	if (r->kind == REC_COMM)
		sl->h.r.u.comm.comm_hash[16] = '\0';
	else if (r->kind == REC_COLLECTIVE)
		sl->h.r.u.collective.comm_hash[16] = '\0';
	atomic_store_explicit(&sl->h.enq_ns, clock_ns(CLOCK_MONOTONIC), memory_order_relaxed);
	atomic_store_explicit(&sl->h.seq, pos + 1, memory_order_release);

	/* Pairs with the writer's fence between setting 'sleeping' and looking at
	 * the ring: one of the two sees the other, so no wakeup is lost. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&s->sleeping, memory_order_relaxed) &&
	    pos + 1 - atomic_load_explicit(&s->head, memory_order_relaxed) >=
		    atomic_load_explicit(&s->wake_at, memory_order_relaxed)) {
		pthread_mutex_lock(&s->mu);
		pthread_cond_signal(&s->wake);
		pthread_mutex_unlock(&s->mu);
	}
	return sl->h.r.kind ? 0 : -ENOMEM;
}

/* Errors that cost one row (bad values), as opposed to the transaction. */
static bool row_error(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_CONSTRAINT:
	case SQLITE_MISMATCH:
	case SQLITE_TOOBIG:
	case SQLITE_RANGE:
		return true;
	}
	return false;
}

int step_reset(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

void meta_put_int(struct store *s, const char *key, int64_t v)
{
	sqlite3_stmt *st = s->st[ST_META];

	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	bind_i64(st, 2, v); /* REC_NULL: NULL, as in records */
	step_reset(st);
}

void meta_put_text(struct store *s, const char *key, const char *v)
{
	sqlite3_stmt *st = s->st[ST_META];

	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	bind_text(st, 2, v);
	step_reset(st);
}

static void meta_free(struct meta_kv *m)
{
	while (m) {
		struct meta_kv *next = m->next;

		free(m->text);
		free(m);
		m = next;
	}
}

void write_failed(struct store *s, int rc)
{
	atomic_fetch_add_explicit(&s->write_errors, 1, memory_order_relaxed);
	if (!s->failing)
		log_line("cannot write trace store '%s': %s; dropping records until writes succeed "
			 "(free disk space or give the store a size limit)",
			 s->path, sqlite3_errstr(rc));
	s->failing = true;
}

/* Ends the open batch: failed (rc != 0) means roll back and count its rows as dropped. */
static void txn_end(struct store *s, int rc)
{
	struct meta_kv *meta = NULL;
	int64_t lag = 0, oldest;
	uint64_t meta_gen = 0;

	if (!s->txn_open)
		return;
	if (rc == SQLITE_OK) {
		pthread_mutex_lock(&s->mu);
		meta = s->meta;
		s->meta = NULL;
		meta_gen = s->meta_gen;
		pthread_mutex_unlock(&s->mu);
		for (struct meta_kv *m = meta; m; m = m->next) {
			if (m->is_text)
				meta_put_text(s, m->key, m->text);
			else
				meta_put_int(s, m->key, m->i);
		}
		oldest = atomic_load_explicit(&s->txn_oldest_ns, memory_order_relaxed);
		if (oldest)
			lag = clock_ns(CLOCK_MONOTONIC) - oldest;
		meta_put_int(s, "store_rows",
			     atomic_load_explicit(&s->rows, memory_order_relaxed) + s->in_txn);
		meta_put_int(s, "store_drops",
			     atomic_load_explicit(&s->drops_full, memory_order_relaxed) +
				     atomic_load_explicit(&s->drops_write, memory_order_relaxed));
		meta_put_int(s, "store_write_errors",
			     atomic_load_explicit(&s->write_errors, memory_order_relaxed));
		meta_put_int(s, "ts_nudged",
			     atomic_load_explicit(&s->ts_nudged, memory_order_relaxed) +
				     s->nudged_txn);
		meta_put_int(s, "store_lag_ns", lag);
		meta_put_int(s, "store_commit_ns", clock_ns(CLOCK_REALTIME));
		rc = step_reset(s->st[ST_COMMIT]);
	}
	if (rc == SQLITE_OK && s->wal_pages >= CKPT_WAIT_PAGES) {
		/* the next write transaction then finds the WAL checkpointed: it starts over */
		ckpt_request(s, true);
		s->wal_pages = 0;
	}
	if (rc == SQLITE_OK) {
		atomic_fetch_add_explicit(&s->rows, s->in_txn, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->ts_nudged, s->nudged_txn, memory_order_relaxed);
		if (s->failing)
			log_line("writing trace store '%s' again", s->path);
		s->failing = false;
		meta_free(meta);
	} else {
		if (!sqlite3_get_autocommit(s->db))
			step_reset(s->st[ST_ROLLBACK]);
		atomic_fetch_add_explicit(&s->drops_write, s->in_txn, memory_order_relaxed);
		write_failed(s, rc);
		if (meta) {
			/* user meta survives a failed commit: try again with the next one */
			struct meta_kv **tailp = &meta;

			while (*tailp)
				tailp = &(*tailp)->next;
			pthread_mutex_lock(&s->mu);
			*tailp = s->meta;
			s->meta = meta;
			pthread_mutex_unlock(&s->mu);
		}
	}
	if (meta_gen) {
		/* tried: a flusher stops waiting (and sees the write error if it failed) */
		pthread_mutex_lock(&s->mu);
		if (s->meta_done < meta_gen)
			s->meta_done = meta_gen;
		pthread_cond_broadcast(&s->done);
		pthread_mutex_unlock(&s->mu);
	}
	s->txn_open = false;
	s->in_txn = 0;
	s->nudged_txn = 0;
	atomic_store_explicit(&s->txn_oldest_ns, 0, memory_order_relaxed);
}

static int txn_begin(struct store *s)
{
	int rc;

	if (!s->db)
		return SQLITE_CANTOPEN; /* no file to write: store_roll.c said why */
	rc = step_reset(s->st[ST_BEGIN]);
	if (rc != SQLITE_OK) {
		write_failed(s, rc);
		return rc;
	}
	s->txn_open = true;
	s->in_txn = 0;
	s->nudged_txn = 0;
	return SQLITE_OK;
}

/*
 * The ts_ns field of r when r goes to a table keyed by time (rec_tables[]: ts_key; schema
 * version 2): a row whose ts_ns is taken is moved to the next free nanosecond, never dropped.
 */
static int64_t *rec_key_ts(struct rec *r)
{
	const struct rec_table *t = &rec_tables[r->kind];

	return t->ts_key ? (int64_t *)((char *)&r->u + t->col[0].off) : NULL;
}

/*
 * The first ts_ns >= ts not taken in the table of kind (a ts_key one): the end
 * of the run of taken nanoseconds that starts at ts, walked through the table's
 * b-tree. Two events of one nanosecond are rare; a run of them (a clock that
 * stood still) costs one query here rather than one failed insert per taken
 * nanosecond.
 */
static int64_t key_next_free(struct store *s, int kind, int64_t ts)
{
	const char *table = rec_tables[kind].name;
	sqlite3_stmt **gap = &s->gap[kind];
	char sql[256];
	int64_t next = ts + 1;

	if (!*gap) {
		snprintf(sql, sizeof(sql),
			 "SELECT a.ts_ns + 1 FROM %s AS a WHERE a.ts_ns >= ?1 AND NOT EXISTS "
			 "(SELECT 1 FROM %s AS b WHERE b.ts_ns = a.ts_ns + 1) "
			 "ORDER BY a.ts_ns LIMIT 1",
			 table, table);
		if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, gap, NULL) !=
		    SQLITE_OK)
			return next;
	}
	sqlite3_bind_int64(*gap, 1, ts);
	if (sqlite3_step(*gap) == SQLITE_ROW && sqlite3_column_type(*gap, 0) == SQLITE_INTEGER)
		next = sqlite3_column_int64(*gap, 0);
	sqlite3_reset(*gap);
	return next > ts ? next : ts + 1;
}

/*
 * Steps r's bound statement. A row keyed by ts_ns whose nanosecond is taken goes
 * to the next free one (counted in meta 'ts_nudged'): the writer never drops an
 * event for sharing a nanosecond with another.
 */
static int step_rec(struct store *s, struct rec *r, sqlite3_stmt *st)
{
	int rc = step_reset(st);
	int64_t *ts;

	if (rc != SQLITE_CONSTRAINT_PRIMARYKEY || !(ts = rec_key_ts(r)))
		return rc;
	for (int tries = 0; rc == SQLITE_CONSTRAINT_PRIMARYKEY && *ts < INT64_MAX; tries++) {
		/* the next nanosecond first: usually free; else skip the whole run */
		*ts = tries ? key_next_free(s, r->kind, *ts) : *ts + 1;
		sqlite3_bind_int64(st, 1, *ts); /* ts_ns is ?1 (rec_key_ts) */
		rc = step_reset(st);
	}
	if (rc == SQLITE_OK)
		s->nudged_txn++;
	return rc;
}

/* Moves up to max ready records from the ring into the open batch; returns how many. */
static int drain(struct store *s, int max)
{
	uint64_t head = s->wr_head;
	int n = 0;

	while (n < max) {
		struct slot *sl = &s->ring[head & s->mask];
		sqlite3_stmt *st;
		int rc;

		if (atomic_load_explicit(&sl->h.seq, memory_order_acquire) != head + 1)
			break;
		if (!s->txn_open && txn_begin(s) == SQLITE_OK)
			atomic_store_explicit(&s->txn_oldest_ns,
					      atomic_load_explicit(&sl->h.enq_ns,
								   memory_order_relaxed),
					      memory_order_relaxed);
		st = s->txn_open ? bind_rec(s, &sl->h.r) : NULL;
		if (st) {
			rc = step_rec(s, &sl->h.r, st);
			if (rc == SQLITE_OK) {
				s->in_txn++;
			} else if (row_error(rc)) {
				atomic_fetch_add_explicit(&s->drops_write, 1, memory_order_relaxed);
				if (!s->row_warned)
					log_line("trace store '%s': dropping a record of kind "
						 "%d: %s (a tracer bug: report it)",
						 s->path, sl->h.r.kind, sqlite3_errmsg(s->db));
				s->row_warned = true;
			} else {
				s->in_txn++; /* counted as dropped with the batch */
				txn_end(s, rc);
			}
		} else {
			atomic_fetch_add_explicit(&s->drops_write, 1, memory_order_relaxed);
		}
		free(sl->h.heap);
		atomic_store_explicit(&sl->h.seq, head + s->mask + 1, memory_order_release);
		head++;
		n++;
		if ((n & 63) == 0)
			atomic_store_explicit(&s->head, head, memory_order_relaxed);
	}
	s->wr_head = head;
	atomic_store_explicit(&s->head, head, memory_order_relaxed);
	return n;
}

/* Tells a started thread to stop (its flag under mu, its condition signalled) and joins it. */
void stop_thread(struct store *s, pthread_t thread, bool *started, bool *stop,
		 pthread_cond_t *wake)
{
	if (!*started)
		return;
	pthread_mutex_lock(&s->mu);
	*stop = true;
	pthread_cond_signal(wake);
	pthread_mutex_unlock(&s->mu);
	pthread_join(thread, NULL);
	*started = false;
}

static bool ring_ready(struct store *s)
{
	struct slot *sl = &s->ring[s->wr_head & s->mask];

	return atomic_load_explicit(&sl->h.seq, memory_order_acquire) == s->wr_head + 1;
}

static void *writer_main(void *arg)
{
	struct store *s = arg;
	bool stop, flush_wanted, meta_new;
	int64_t now, deadline;
	uint64_t retain_req;
	struct timespec ts;

	for (;;) {
		int n = drain(s, s->batch_rows - s->in_txn);

		pthread_mutex_lock(&s->mu);
		flush_wanted = s->flush_target > s->committed;
		retain_req = s->retain_req;
		stop = s->stop;
		meta_new = s->meta_gen > s->meta_done;
		pthread_mutex_unlock(&s->mu);

		now = clock_ns(CLOCK_MONOTONIC);
		if (s->txn_open &&
		    (s->in_txn >= s->batch_rows || flush_wanted || stop || meta_new ||
		     retain_req > s->retain_done ||
		     now - atomic_load_explicit(&s->txn_oldest_ns, memory_order_relaxed) >=
			     s->batch_ns))
			txn_end(s, SQLITE_OK);
		if (!s->txn_open) {
			/* new meta with no records to carry it: a batch of its own (meta
			 * that failed to commit waits for the next record batch) */
			if (meta_new && txn_begin(s) == SQLITE_OK)
				txn_end(s, SQLITE_OK);
			pthread_mutex_lock(&s->mu);
			s->committed = s->wr_head;
			pthread_cond_broadcast(&s->done);
			pthread_mutex_unlock(&s->mu);
			roll_check(s, now);
			if (retain_due(s, retain_req, now))
				retain_run(s, retain_req);
		}

		if (stop && !s->txn_open &&
		    s->wr_head == atomic_load_explicit(&s->tail, memory_order_acquire))
			break;
		if (n > 0)
			continue;

		/* Nothing ready: sleep until the batch is due, enough records arrive,
		 * a flush, close or retention is asked for, or retention is due. */
		if (s->txn_open)
			deadline = atomic_load_explicit(&s->txn_oldest_ns, memory_order_relaxed) +
				   s->batch_ns;
		else
			deadline = now + s->batch_ns;
		if ((s->retain_age_s || s->retain_bytes) && deadline > s->next_retain_ns)
			deadline = s->next_retain_ns;
		/* a flush or close still waiting here means a producer is between
		 * claiming a slot and publishing it: look again shortly */
		if (flush_wanted || stop)
			deadline = now + 1000000;
		ts.tv_sec = deadline / 1000000000LL;
		ts.tv_nsec = deadline % 1000000000LL;
		pthread_mutex_lock(&s->mu);
		atomic_store_explicit(&s->sleeping, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		if (!ring_ready(s) && (flush_wanted || s->flush_target <= s->committed) &&
		    s->stop == stop && s->retain_req <= s->retain_done &&
		    s->meta_gen <= s->meta_done)
			pthread_cond_timedwait(&s->wake, &s->mu, &ts);
		atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}

struct store *store_open(const struct store_opts *o, char **cause)
{
	struct store *s = NULL;
	pthread_condattr_t ca;
	uint64_t cap = 1;
	int64_t want;
	int err;

	if (!o || !o->path) {
		fq_fail(cause, 0, "no trace store path given; pass one with --db");
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		err = -ENOMEM;
		goto fail;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->wake, &ca);
	pthread_cond_init(&s->done, &ca);
	pthread_cond_init(&s->ckpt_wake, NULL);
	pthread_condattr_destroy(&ca);

	s->batch_rows = o->batch_rows > 0 ? o->batch_rows : DEFAULT_BATCH_ROWS;
	s->batch_ns = (int64_t)(o->batch_ms > 0 ? o->batch_ms : DEFAULT_BATCH_MS) * 1000000;
	s->retain_bytes = o->retain_bytes > 0 ? o->retain_bytes : 0;
	s->retain_age_s = o->retain_age_s > 0 ? o->retain_age_s : 0;
	want = o->queue_rows > 0 ? o->queue_rows : DEFAULT_QUEUE_ROWS;
	if (want > MAX_QUEUE_ROWS)
		want = MAX_QUEUE_ROWS;
	while (cap < (uint64_t)want)
		cap <<= 1;
	if (cap < 2)
		cap = 2;
	s->mask = cap - 1;
	s->opts = *o;
	s->path = strdup(o->path);
	s->ring = aligned_alloc(64, cap * sizeof(struct slot));
	if (!s->path || !s->ring) {
		err = -ENOMEM;
		goto fail;
	}
	for (uint64_t i = 0; i < cap; i++) {
		atomic_init(&s->ring[i].h.seq, i);
		s->ring[i].h.heap = NULL;
	}
	atomic_init(&s->wake_at, s->batch_rows < 1024 ? (uint64_t)s->batch_rows : 1024);
	err = str_fields(s);
	if (err) {
		fq_fail(cause, 0, "a record kind has more strings than a trace store slot holds "
				  "(%d): a defect of this agent, report it", REC_STRINGS);
		goto fail;
	}

	err = store_setup_db(s, o, cause);
	if (err)
		goto fail;
	store_read_names(s);
	ckpt_start(s, o->path);
	roll_note(s);
	s->next_roll_ns = clock_ns(CLOCK_MONOTONIC) + 1000000000LL;

	err = -pthread_create(&s->thread, NULL, writer_main, s);
	if (err) {
		fq_fail(cause, 0, "cannot start the trace store writer thread: %s", strerror(-err));
		goto fail;
	}
	s->thread_started = true;
	return s;

fail:
	if (err == -ENOMEM && cause && !*cause)
		fq_fail(cause, 0, "out of memory opening trace store '%s'; lower --queue-rows",
			o->path);
	store_close(s);
	errno = -err;
	return NULL;
}

static int meta_add(struct store *s, const char *key, bool is_text, int64_t i, const char *text)
{
	struct meta_kv *m, **p;

	if (!key || !*key)
		return -EINVAL;
	m = calloc(1, sizeof(*m) + strlen(key) + 1);
	if (!m)
		return -ENOMEM;
	strcpy(m->key, key);
	m->is_text = is_text;
	m->i = i;
	if (text) {
		m->text = strdup(text);
		if (!m->text) {
			free(m);
			return -ENOMEM;
		}
	}
	pthread_mutex_lock(&s->mu);
	/* appended: applied in the order set, so the last value of a key wins */
	for (p = &s->meta; *p; p = &(*p)->next)
		;
	*p = m;
	s->meta_gen++;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

int store_set_meta_int(struct store *s, const char *key, int64_t v)
{
	return meta_add(s, key, false, v, NULL);
}

int store_set_meta_text(struct store *s, const char *key, const char *v)
{
	return meta_add(s, key, true, 0, v);
}

void store_get_stats(struct store *s, struct store_stats *st)
{
	int64_t oldest;

	memset(st, 0, sizeof(*st));
	st->queued = (int64_t)atomic_load_explicit(&s->tail, memory_order_relaxed);
	st->rows = atomic_load_explicit(&s->rows, memory_order_relaxed);
	st->drops = atomic_load_explicit(&s->drops_full, memory_order_relaxed) +
		    atomic_load_explicit(&s->drops_write, memory_order_relaxed);
	st->write_errors = atomic_load_explicit(&s->write_errors, memory_order_relaxed);
	st->retained = atomic_load_explicit(&s->retained, memory_order_relaxed);
	st->ts_nudged = atomic_load_explicit(&s->ts_nudged, memory_order_relaxed);
	oldest = atomic_load_explicit(&s->txn_oldest_ns, memory_order_relaxed);
	if (!oldest) {
		/* nothing in a batch yet: the oldest record is still in the ring */
		uint64_t h = atomic_load_explicit(&s->head, memory_order_relaxed);
		struct slot *sl = &s->ring[h & s->mask];

		if (atomic_load_explicit(&sl->h.seq, memory_order_acquire) == h + 1)
			oldest = atomic_load_explicit(&sl->h.enq_ns, memory_order_relaxed);
	}
	if (oldest) {
		st->lag_ns = clock_ns(CLOCK_MONOTONIC) - oldest;
		if (st->lag_ns < 0)
			st->lag_ns = 0;
	}
}

int store_flush(struct store *s)
{
	int64_t errs = atomic_load_explicit(&s->write_errors, memory_order_relaxed);
	uint64_t target = atomic_load_explicit(&s->tail, memory_order_acquire), meta;

	pthread_mutex_lock(&s->mu);
	meta = s->meta_gen;
	if (s->flush_target < target)
		s->flush_target = target;
	pthread_cond_signal(&s->wake);
	while ((s->committed < target || s->meta_done < meta) && s->thread_started)
		pthread_cond_wait(&s->done, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return atomic_load_explicit(&s->write_errors, memory_order_relaxed) > errs ? -EIO : 0;
}

int store_retain_now(struct store *s)
{
	uint64_t gen;
	int rc;

	pthread_mutex_lock(&s->mu);
	gen = ++s->retain_req;
	pthread_cond_signal(&s->wake);
	while (s->retain_done < gen && s->thread_started)
		pthread_cond_wait(&s->done, &s->mu);
	rc = s->retain_rc;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	stop_thread(s, s->thread, &s->thread_started, &s->stop, &s->wake);
	/* before the writer's connection: its close then checkpoints and removes the WAL */
	ckpt_stop(s);
	for (int i = 0; i < ST_MAX; i++)
		sqlite3_finalize(s->st[i]);
	for (int i = 0; i <= REC_KIND_MAX; i++)
		sqlite3_finalize(s->gap[i]);
	if (s->db) {
		/* leaves the file checkpointed, and the -wal removed, for readers */
		sqlite3_close(s->db);
	}
	meta_free(s->meta);
	roll_free(s);
	free(s->names);
	free(s->ring);
	free(s->path);
	pthread_cond_destroy(&s->wake);
	pthread_cond_destroy(&s->done);
	pthread_cond_destroy(&s->ckpt_wake);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
