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
#include "store_file.h"

#define DEFAULT_BATCH_ROWS 8192
#define DEFAULT_BATCH_MS 200
/* 32k slots of 256 bytes: 8 MiB, 160 ms at 200k events/s. 16k measured more drops in
 * bench/drops.sh on a 2-core box under CPU contention (the writer starved, not stalled). */
#define DEFAULT_QUEUE_ROWS 32768
#define MAX_QUEUE_ROWS (1 << 24)
#define RETAIN_INTERVAL_NS (10 * 1000000000LL)
/* WAL pages after a commit that ask the checkpointer for a pass (SQLite's default) */
#define CKPT_PAGES 1000
/* ... and that make the writer wait for one, so the WAL starts over (32 MiB of 4 KiB
 * pages; journal_size_limit then truncates it) */
#define CKPT_WAIT_PAGES 8192
#define CKPT_WAIT_NS (1000 * 1000000LL)
/* Rows one retention pass deletes per table at most: keeps a pass short so
 * the writer gets back to the queue before it fills; the next pass follows
 * right after the next batch. */
#define RETAIN_CHUNK 100000
/* Share of the stored time span that a size-retention pass deletes. */
#define RETAIN_SIZE_PCT 10
/* The writer's page cache. Schema version 2 writes the right edge of each table and of
 * collectives' two indexes: a few hot pages. 2 MiB measured as fast as 8 MiB
 * (bench_ingest, BENCH_CACHE_KIB) and is 6 MiB less of agentd's RSS under load. */
#define CACHE_KIB 2048
#ifndef FLEETQ_VERSION
#define FLEETQ_VERSION "unknown"
#endif

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

enum {
	ST_BEGIN,
	ST_COMMIT,
	ST_ROLLBACK,
	ST_META,
	ST_PROCESS,
	ST_COMM,
	ST_COMM_DESTROY,
	ST_COLLECTIVE,
	ST_CUDA,
	ST_OFFCPU,
	ST_TCP,
	ST_IB,
	ST_GROUP,
	ST_KERNEL,
	ST_GPU,
	ST_PROCESS_GPU,
	ST_MAX
};

static const char *const stmt_sql[ST_MAX] = {
	[ST_BEGIN] = "BEGIN",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_META] = "INSERT INTO meta (key, value) VALUES (?1, ?2) "
		    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
	/* One statement does both the first sighting and the exit update: a
	 * record's NULL fields leave what is stored alone. */
	[ST_PROCESS] = "INSERT INTO processes (pid, start_ns, exit_ns, exit_code, ppid, comm, "
		       "cmdline, cgroup, cgroup_id, rank, local_rank, world_size, job_id) "
		       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) "
		       "ON CONFLICT (pid, start_ns) DO UPDATE SET "
		       "exit_ns = coalesce(excluded.exit_ns, exit_ns), "
		       "exit_code = coalesce(excluded.exit_code, exit_code), "
		       "ppid = coalesce(excluded.ppid, ppid), "
		       "comm = coalesce(excluded.comm, comm), "
		       "cmdline = coalesce(excluded.cmdline, cmdline), "
		       "cgroup = coalesce(excluded.cgroup, cgroup), "
		       "cgroup_id = coalesce(excluded.cgroup_id, cgroup_id), "
		       "rank = coalesce(excluded.rank, rank), "
		       "local_rank = coalesce(excluded.local_rank, local_rank), "
		       "world_size = coalesce(excluded.world_size, world_size), "
		       "job_id = coalesce(excluded.job_id, job_id)",
	[ST_COMM] = "INSERT INTO comms (ts_ns, dur_ns, pid, tid, comm_ptr, comm_hash, rank, "
		    "nranks, fn, ret, nccl_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
		    "?11)",
	[ST_COMM_DESTROY] = "UPDATE comms SET destroyed_ns = ?1 WHERE rowid = "
			    "(SELECT rowid FROM comms WHERE pid = ?2 AND comm_ptr = ?3 "
			    "ORDER BY ts_ns DESC, rowid DESC LIMIT 1)",
	[ST_COLLECTIVE] = "INSERT INTO collectives (ts_ns, dur_ns, pid, tid, comm_ptr, comm_hash, "
			  "rank, nranks, seq, op, count, bytes, datatype, redop, peer, stream, "
			  "busy_ns, ret, sync_ns, gap_ns, cpu_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
			  "?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
	[ST_CUDA] = "INSERT INTO cuda_calls (ts_ns, dur_ns, pid, tid, api, kind, bytes, stream, "
		    "ret) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
	[ST_OFFCPU] = "INSERT INTO offcpu (ts_ns, dur_ns, pid, tid, reason) "
		      "VALUES (?1, ?2, ?3, ?4, ?5)",
	[ST_TCP] = "INSERT INTO tcp_retransmits (ts_ns, pid, saddr, sport, daddr, dport, state) "
		   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[ST_IB] = "INSERT INTO ib_counters (ts_ns, device, port, counter, value, delta) "
		  "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	[ST_GROUP] = "INSERT INTO nccl_groups (ts_ns, dur_ns, end_dur_ns, pid, tid, ncalls, ret) "
		     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[ST_KERNEL] = "INSERT INTO nccl_kernels (ts_ns, host_dur_ns, pid, rank, nranks, nccl_comm, "
		      "comm_hash, op, seq, count, nchannels, gpu_start_ns, gpu_dur_ns, gpu_ch_ns, "
		      "partial) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, "
		      "?15)",
	[ST_GPU] = "INSERT INTO gpu_samples (ts_ns, gpu_index, gpu_uuid, pci_bus_id, "
		   "sm_clock_mhz, mem_clock_mhz, sm_clock_max_mhz, mem_clock_max_mhz, "
		   "clock_reasons, temp_c, power_mw, power_limit_mw, util_gpu_pct, util_mem_pct, "
		   "ecc_uncorrected, ecc_corrected, remap_corrected, remap_uncorrected, "
		   "remap_pending, remap_failed, xid_count, xid_last, pcie_gen, pcie_width, "
		   "pcie_gen_max, pcie_width_max, pcie_replays, nvlink_replay, nvlink_recovery, "
		   "nvlink_crc) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
		   "?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, "
		   "?29, ?30)",
	/* first sighting wins: the row says since when the process has used the GPU */
	[ST_PROCESS_GPU] = "INSERT OR IGNORE INTO process_gpus (pid, start_ns, gpu_index, "
			   "gpu_uuid, source, ts_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
};

/* Tables with an index on ts_ns: retention deletes from these by time. */
static const char *const ts_tables[] = {
	"collectives", "cuda_calls", "offcpu", "tcp_retransmits", "ib_counters", "nccl_groups",
	"nccl_kernels", "gpu_samples",
};
#define N_TS_TABLES (sizeof(ts_tables) / sizeof(ts_tables[0]))

/*
 * Tables keyed by ts_ns (INTEGER PRIMARY KEY, schema version 2): a row whose ts_ns is
 * taken is moved to the next free nanosecond, never dropped.
 */
static const char *const key_tables[] = { "collectives", "cuda_calls", "offcpu",
					  "tcp_retransmits", "nccl_kernels" };
#define N_KEY_TABLES (sizeof(key_tables) / sizeof(key_tables[0]))

struct meta_kv {
	struct meta_kv *next;
	bool is_text;
	int64_t i;
	char *text;
	char key[];
};

struct store {
	/* producers */
	_Atomic uint64_t tail __attribute__((aligned(64)));
	_Atomic int64_t drops_full;
	_Atomic int sleeping;     /* the writer waits on wake */
	_Atomic uint64_t wake_at; /* ... and wants a signal at this queue depth */

	/* consumer, published for producers and stats */
	_Atomic uint64_t head __attribute__((aligned(64)));
	_Atomic int64_t rows, drops_write, write_errors, retained, ts_nudged;
	_Atomic int64_t txn_oldest_ns; /* enqueue time of the open batch's first record, or 0 */

	struct slot *ring;
	uint64_t mask;
	int batch_rows;
	int64_t batch_ns;
	int64_t retain_bytes, retain_age_s;
	char *path;

	sqlite3 *db;
	sqlite3_stmt *st[ST_MAX];
	sqlite3_stmt *gap[N_KEY_TABLES]; /* first free ts_ns at or after ?1, made when needed */
	pthread_t thread;
	bool thread_started;
	sqlite3 *ckpt_db; /* the checkpointer's connection, or NULL: the writer checkpoints */
	pthread_t ckpt_thread;
	bool ckpt_started;
	int wal_pages; /* frames in the WAL after the writer's last commit */

	/* writer-only */
	bool txn_open, failing, row_warned;
	int in_txn;
	int64_t nudged_txn; /* rows of the open batch whose ts_ns was moved */
	int64_t next_retain_ns;
	uint64_t wr_head;

	/* under mu */
	pthread_mutex_t mu;
	pthread_cond_t wake; /* writer waits here */
	pthread_cond_t done; /* store_flush / store_retain_now wait here */
	pthread_cond_t ckpt_wake; /* the checkpointer waits here */
	uint64_t ckpt_req, ckpt_done; /* passes asked for / the last one done (its request) */
	bool ckpt_stop;
	uint64_t committed;    /* every record before this position is committed or dropped */
	uint64_t flush_target; /* a flusher waits for committed >= this */
	uint64_t retain_req, retain_done;
	int retain_rc;
	bool stop;
	struct meta_kv *meta;
	uint64_t meta_gen, meta_done; /* meta set / meta written (or tried) */
};

/* The string fields of r, as pointers to the struct members; returns how many. */
static int rec_strings(struct rec *r, const char **f[4])
{
	switch (r->kind) {
	case REC_PROCESS:
		f[0] = &r->u.process.comm;
		f[1] = &r->u.process.cmdline;
		f[2] = &r->u.process.cgroup;
		f[3] = &r->u.process.job_id;
		return 4;
	case REC_COMM:
		f[0] = &r->u.comm.fn;
		return 1;
	case REC_COMM_DESTROY:
		return 0;
	case REC_COLLECTIVE:
		f[0] = &r->u.collective.op;
		f[1] = &r->u.collective.datatype;
		f[2] = &r->u.collective.redop;
		return 3;
	case REC_CUDA:
		f[0] = &r->u.cuda.api;
		f[1] = &r->u.cuda.kind;
		return 2;
	case REC_OFFCPU:
		f[0] = &r->u.offcpu.reason;
		return 1;
	case REC_TCP:
		f[0] = &r->u.tcp.saddr;
		f[1] = &r->u.tcp.daddr;
		f[2] = &r->u.tcp.state;
		return 3;
	case REC_IB:
		f[0] = &r->u.ib.device;
		f[1] = &r->u.ib.counter;
		return 2;
	case REC_GROUP:
		return 0;
	case REC_KERNEL:
		f[0] = &r->u.kernel.op;
		return 1;
	case REC_GPU:
		f[0] = &r->u.gpu.uuid;
		f[1] = &r->u.gpu.pci_bus_id;
		return 2;
	case REC_PROCESS_GPU:
		f[0] = &r->u.process_gpu.gpu_uuid;
		f[1] = &r->u.process_gpu.source;
		return 2;
	default:
		return -1;
	}
}

int store_put(struct store *s, const struct rec *r)
{
	const char **f[4];
	size_t len[4], total = 0;
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
	n = rec_strings(&sl->h.r, f);
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

static inline void bind_i64(sqlite3_stmt *st, int i, int64_t v)
{
	if (v == REC_NULL)
		sqlite3_bind_null(st, i);
	else
		sqlite3_bind_int64(st, i, v);
}

static inline void bind_text(sqlite3_stmt *st, int i, const char *v)
{
	if (!v)
		sqlite3_bind_null(st, i);
	else
		sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
}

static inline void bind_hash(sqlite3_stmt *st, int i, const char *v)
{
	bind_text(st, i, v[0] ? v : NULL);
}

static sqlite3_stmt *bind_group(struct store *s, const struct rec_group *g)
{
	sqlite3_stmt *st = s->st[ST_GROUP];

	bind_i64(st, 1, g->ts_ns);
	bind_i64(st, 2, g->dur_ns);
	bind_i64(st, 3, g->end_dur_ns);
	bind_i64(st, 4, g->pid);
	bind_i64(st, 5, g->tid);
	bind_i64(st, 6, g->ncalls);
	bind_i64(st, 7, g->ret);
	return st;
}

static sqlite3_stmt *bind_kernel(struct store *s, const struct rec_kernel *k)
{
	sqlite3_stmt *st = s->st[ST_KERNEL];

	bind_i64(st, 1, k->ts_ns);
	bind_i64(st, 2, k->host_dur_ns);
	bind_i64(st, 3, k->pid);
	bind_i64(st, 4, k->rank);
	bind_i64(st, 5, k->nranks);
	bind_hash(st, 6, k->nccl_comm);
	bind_hash(st, 7, k->comm_hash);
	bind_text(st, 8, k->op);
	bind_i64(st, 9, k->seq);
	bind_i64(st, 10, k->count);
	bind_i64(st, 11, k->nchannels);
	bind_i64(st, 12, k->gpu_start_ns);
	bind_i64(st, 13, k->gpu_dur_ns);
	bind_i64(st, 14, k->gpu_ch_ns);
	bind_i64(st, 15, k->partial);
	return st;
}

static inline void bind_i32(sqlite3_stmt *st, int i, int32_t v)
{
	if (v == REC_NULL32)
		sqlite3_bind_null(st, i);
	else
		sqlite3_bind_int64(st, i, v);
}

static sqlite3_stmt *bind_gpu(struct store *s, const struct rec_gpu *g)
{
	sqlite3_stmt *st = s->st[ST_GPU];

	bind_i64(st, 1, g->ts_ns);
	bind_i32(st, 2, g->gpu_index);
	bind_text(st, 3, g->uuid);
	bind_text(st, 4, g->pci_bus_id);
	bind_i32(st, 5, g->sm_clock_mhz);
	bind_i32(st, 6, g->mem_clock_mhz);
	bind_i32(st, 7, g->sm_clock_max_mhz);
	bind_i32(st, 8, g->mem_clock_max_mhz);
	bind_i64(st, 9, g->clock_reasons);
	bind_i32(st, 10, g->temp_c);
	bind_i32(st, 11, g->power_mw);
	bind_i32(st, 12, g->power_limit_mw);
	bind_i32(st, 13, g->util_gpu_pct);
	bind_i32(st, 14, g->util_mem_pct);
	bind_i64(st, 15, g->ecc_uncorrected);
	bind_i64(st, 16, g->ecc_corrected);
	bind_i32(st, 17, g->remap_corrected);
	bind_i32(st, 18, g->remap_uncorrected);
	bind_i32(st, 19, g->remap_pending);
	bind_i32(st, 20, g->remap_failed);
	bind_i64(st, 21, g->xid_count);
	bind_i32(st, 22, g->xid_last);
	bind_i32(st, 23, g->pcie_gen);
	bind_i32(st, 24, g->pcie_width);
	bind_i32(st, 25, g->pcie_gen_max);
	bind_i32(st, 26, g->pcie_width_max);
	bind_i32(st, 27, g->pcie_replays);
	bind_i64(st, 28, g->nvlink_replay);
	bind_i64(st, 29, g->nvlink_recovery);
	bind_i64(st, 30, g->nvlink_crc);
	return st;
}

static sqlite3_stmt *bind_process_gpu(struct store *s, const struct rec_process_gpu *p)
{
	sqlite3_stmt *st = s->st[ST_PROCESS_GPU];

	bind_i64(st, 1, p->pid);
	bind_i64(st, 2, p->start_ns);
	bind_i64(st, 3, p->gpu_index);
	bind_text(st, 4, p->gpu_uuid);
	bind_text(st, 5, p->source);
	bind_i64(st, 6, p->ts_ns);
	return st;
}

/* Binds r to its statement; returns the statement. */
static sqlite3_stmt *bind_rec(struct store *s, const struct rec *r)
{
	sqlite3_stmt *st;

	switch (r->kind) {
	case REC_PROCESS: {
		const struct rec_process *p = &r->u.process;

		st = s->st[ST_PROCESS];
		bind_i64(st, 1, p->pid);
		bind_i64(st, 2, p->start_ns);
		bind_i64(st, 3, p->exit_ns);
		bind_i64(st, 4, p->exit_code);
		bind_i64(st, 5, p->ppid);
		bind_text(st, 6, p->comm);
		bind_text(st, 7, p->cmdline);
		bind_text(st, 8, p->cgroup);
		bind_i64(st, 9, p->cgroup_id);
		bind_i64(st, 10, p->rank);
		bind_i64(st, 11, p->local_rank);
		bind_i64(st, 12, p->world_size);
		bind_text(st, 13, p->job_id);
		return st;
	}
	case REC_COMM: {
		const struct rec_comm *c = &r->u.comm;

		st = s->st[ST_COMM];
		bind_i64(st, 1, c->ts_ns);
		bind_i64(st, 2, c->dur_ns);
		bind_i64(st, 3, c->pid);
		bind_i64(st, 4, c->tid);
		bind_i64(st, 5, c->comm_ptr);
		bind_hash(st, 6, c->comm_hash);
		bind_i64(st, 7, c->rank);
		bind_i64(st, 8, c->nranks);
		bind_text(st, 9, c->fn);
		bind_i64(st, 10, c->ret);
		bind_hash(st, 11, c->nccl_hash);
		return st;
	}
	case REC_COMM_DESTROY: {
		const struct rec_comm_destroy *d = &r->u.comm_destroy;

		st = s->st[ST_COMM_DESTROY];
		bind_i64(st, 1, d->ts_ns);
		bind_i64(st, 2, d->pid);
		bind_i64(st, 3, d->comm_ptr);
		return st;
	}
	case REC_COLLECTIVE: {
		const struct rec_collective *c = &r->u.collective;

		st = s->st[ST_COLLECTIVE];
		bind_i64(st, 1, c->ts_ns);
		bind_i64(st, 2, c->dur_ns);
		bind_i64(st, 3, c->pid);
		bind_i64(st, 4, c->tid);
		bind_i64(st, 5, c->comm_ptr);
		bind_hash(st, 6, c->comm_hash);
		bind_i64(st, 7, c->rank);
		bind_i64(st, 8, c->nranks);
		bind_i64(st, 9, c->seq);
		bind_text(st, 10, c->op);
		bind_i64(st, 11, c->count);
		bind_i64(st, 12, c->bytes);
		bind_text(st, 13, c->datatype);
		bind_text(st, 14, c->redop);
		bind_i64(st, 15, c->peer);
		bind_i64(st, 16, c->stream);
		bind_i64(st, 17, c->busy_ns);
		bind_i64(st, 18, c->ret);
		bind_i64(st, 19, c->sync_ns);
		bind_i64(st, 20, c->gap_ns);
		bind_i64(st, 21, c->cpu_ns);
		return st;
	}
	case REC_CUDA: {
		const struct rec_cuda *c = &r->u.cuda;

		st = s->st[ST_CUDA];
		bind_i64(st, 1, c->ts_ns);
		bind_i64(st, 2, c->dur_ns);
		bind_i64(st, 3, c->pid);
		bind_i64(st, 4, c->tid);
		bind_text(st, 5, c->api);
		bind_text(st, 6, c->kind);
		bind_i64(st, 7, c->bytes);
		bind_i64(st, 8, c->stream);
		bind_i64(st, 9, c->ret);
		return st;
	}
	case REC_OFFCPU: {
		const struct rec_offcpu *o = &r->u.offcpu;

		st = s->st[ST_OFFCPU];
		bind_i64(st, 1, o->ts_ns);
		bind_i64(st, 2, o->dur_ns);
		bind_i64(st, 3, o->pid);
		bind_i64(st, 4, o->tid);
		bind_text(st, 5, o->reason);
		return st;
	}
	case REC_TCP: {
		const struct rec_tcp *t = &r->u.tcp;

		st = s->st[ST_TCP];
		bind_i64(st, 1, t->ts_ns);
		bind_i64(st, 2, t->pid);
		bind_text(st, 3, t->saddr);
		bind_i64(st, 4, t->sport);
		bind_text(st, 5, t->daddr);
		bind_i64(st, 6, t->dport);
		bind_text(st, 7, t->state);
		return st;
	}
	case REC_IB: {
		const struct rec_ib *b = &r->u.ib;

		st = s->st[ST_IB];
		bind_i64(st, 1, b->ts_ns);
		bind_text(st, 2, b->device);
		bind_i64(st, 3, b->port);
		bind_text(st, 4, b->counter);
		bind_i64(st, 5, b->value);
		bind_i64(st, 6, b->delta);
		return st;
	}
	case REC_GROUP:
		return bind_group(s, &r->u.group);
	case REC_KERNEL:
		return bind_kernel(s, &r->u.kernel);
	case REC_GPU:
		return bind_gpu(s, &r->u.gpu);
	case REC_PROCESS_GPU:
		return bind_process_gpu(s, &r->u.process_gpu);
	}
	return NULL; /* store_put refuses other kinds */
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

static int step_reset(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static void meta_put_int(struct store *s, const char *key, int64_t v)
{
	sqlite3_stmt *st = s->st[ST_META];

	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	bind_i64(st, 2, v); /* REC_NULL: NULL, as in records */
	step_reset(st);
}

static void meta_put_text(struct store *s, const char *key, const char *v)
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

static void write_failed(struct store *s, int rc)
{
	atomic_fetch_add_explicit(&s->write_errors, 1, memory_order_relaxed);
	if (!s->failing)
		log_line("cannot write trace store '%s': %s; dropping records until writes succeed "
			 "(free disk space or give the store a size limit)",
			 s->path, sqlite3_errstr(rc));
	s->failing = true;
}

static void ckpt_request(struct store *s, bool wait);

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
	int rc = step_reset(s->st[ST_BEGIN]);

	if (rc != SQLITE_OK) {
		write_failed(s, rc);
		return rc;
	}
	s->txn_open = true;
	s->in_txn = 0;
	s->nudged_txn = 0;
	return SQLITE_OK;
}

/* The ts_ns field of r and its key_tables index, when r goes to a table keyed by time. */
static int64_t *rec_key_ts(struct rec *r, int *table)
{
	switch (r->kind) {
	case REC_COLLECTIVE:
		*table = 0;
		return &r->u.collective.ts_ns;
	case REC_CUDA:
		*table = 1;
		return &r->u.cuda.ts_ns;
	case REC_OFFCPU:
		*table = 2;
		return &r->u.offcpu.ts_ns;
	case REC_TCP:
		*table = 3;
		return &r->u.tcp.ts_ns;
	case REC_KERNEL:
		*table = 4;
		return &r->u.kernel.ts_ns;
	default:
		return NULL;
	}
}

/*
 * The first ts_ns >= ts not taken in key table t: the end of the run of taken
 * nanoseconds that starts at ts, walked through the table's b-tree. Two events of
 * one nanosecond are rare; a run of them (a clock that stood still) costs one
 * query here rather than one failed insert per taken nanosecond.
 */
static int64_t key_next_free(struct store *s, int t, int64_t ts)
{
	char sql[256];
	int64_t next = ts + 1;

	if (!s->gap[t]) {
		snprintf(sql, sizeof(sql),
			 "SELECT a.ts_ns + 1 FROM %s AS a WHERE a.ts_ns >= ?1 AND NOT EXISTS "
			 "(SELECT 1 FROM %s AS b WHERE b.ts_ns = a.ts_ns + 1) "
			 "ORDER BY a.ts_ns LIMIT 1",
			 key_tables[t], key_tables[t]);
		if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->gap[t],
				       NULL) != SQLITE_OK)
			return next;
	}
	sqlite3_bind_int64(s->gap[t], 1, ts);
	if (sqlite3_step(s->gap[t]) == SQLITE_ROW &&
	    sqlite3_column_type(s->gap[t], 0) == SQLITE_INTEGER)
		next = sqlite3_column_int64(s->gap[t], 0);
	sqlite3_reset(s->gap[t]);
	return next > ts ? next : ts + 1;
}

/*
 * Steps r's bound statement. A row keyed by ts_ns whose nanosecond is taken goes
 * to the next free one (counted in meta 'ts_nudged'): the writer never drops an
 * event for sharing a nanosecond with another.
 */
static int step_rec(struct store *s, struct rec *r, sqlite3_stmt *st)
{
	int rc = step_reset(st), t;
	int64_t *ts;

	if (rc != SQLITE_CONSTRAINT_PRIMARYKEY || !(ts = rec_key_ts(r, &t)))
		return rc;
	for (int tries = 0; rc == SQLITE_CONSTRAINT_PRIMARYKEY && *ts < INT64_MAX; tries++) {
		/* the next nanosecond first: usually free; else skip the whole run */
		*ts = tries ? key_next_free(s, t, *ts) : *ts + 1;
		sqlite3_bind_int64(st, 1, *ts);
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

/*
 * Asks for a passive checkpoint: on the checkpointer's thread, or here without one.
 * wait: until a pass that started after this call is done (at most CKPT_WAIT_NS).
 */
static void ckpt_request(struct store *s, bool wait)
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
static void ckpt_start(struct store *s, const char *path)
{
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

/* Tells a started thread to stop (its flag under mu, its condition signalled) and joins it. */
static void stop_thread(struct store *s, pthread_t thread, bool *started, bool *stop,
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

static void ckpt_stop(struct store *s)
{
	stop_thread(s, s->ckpt_thread, &s->ckpt_started, &s->ckpt_stop, &s->ckpt_wake);
	sqlite3_close(s->ckpt_db);
	s->ckpt_db = NULL;
}

static int exec_int(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_type(st, 0) == SQLITE_NULL ? REC_NULL
								 : sqlite3_column_int64(st, 0);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		*out = REC_NULL;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

/*
 * Deletes rows older than cutoff (ts_ns scale), at most RETAIN_CHUNK per table.
 * *more is set when a table had more to delete.
 */
static int retain_before(struct store *s, int64_t cutoff, bool *more)
{
	char sql[256];
	int rc = SQLITE_OK;

	for (size_t i = 0; i < N_TS_TABLES + 3 && rc == SQLITE_OK; i++) {
		sqlite3_stmt *st;
		int n;

		if (i < N_TS_TABLES)
			snprintf(sql, sizeof(sql),
				 "DELETE FROM %s WHERE rowid IN (SELECT rowid FROM %s "
				 "WHERE ts_ns < ?1 ORDER BY ts_ns LIMIT %d)",
				 ts_tables[i], ts_tables[i], RETAIN_CHUNK);
		else if (i == N_TS_TABLES)
			/* a comm still alive describes collectives that are kept: keep it */
			snprintf(sql, sizeof(sql),
				 "DELETE FROM comms WHERE destroyed_ns < ?1");
		else if (i == N_TS_TABLES + 1)
			snprintf(sql, sizeof(sql),
				 "DELETE FROM processes WHERE exit_ns < ?1");
		else
			/* after processes: the GPUs of processes no longer described */
			snprintf(sql, sizeof(sql),
				 "DELETE FROM process_gpus WHERE ts_ns < ?1 AND NOT EXISTS "
				 "(SELECT 1 FROM processes p WHERE p.pid = process_gpus.pid AND "
				 "p.start_ns = process_gpus.start_ns)");
		rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
		if (rc != SQLITE_OK)
			break;
		sqlite3_bind_int64(st, 1, cutoff);
		rc = step_reset(st);
		n = sqlite3_changes(s->db);
		sqlite3_finalize(st);
		if (rc == SQLITE_OK) {
			atomic_fetch_add_explicit(&s->retained, n, memory_order_relaxed);
			if (i < N_TS_TABLES && n >= RETAIN_CHUNK)
				*more = true;
		}
	}
	return rc;
}

static int db_bytes(struct store *s, int64_t *bytes)
{
	int64_t pages = 0, psize = 0; /* GCC -O3 cannot see exec_int() set them */
	int rc;

	rc = exec_int(s->db, "PRAGMA page_count", &pages);
	if (rc == SQLITE_OK)
		rc = exec_int(s->db, "PRAGMA page_size", &psize);
	if (rc == SQLITE_OK)
		*bytes = pages * psize;
	return rc;
}

/* One retention pass, outside any batch. *more: call again soon. */
static int retain_pass(struct store *s, bool *more)
{
	int64_t bytes = 0, lo = INT64_MAX, hi = INT64_MIN, v = 0;
	bool deleted_by_size = false;
	int rc = SQLITE_OK;
	char sql[128];

	*more = false;
	if (!s->retain_age_s && !s->retain_bytes)
		return SQLITE_OK;
	if (s->retain_age_s > 0) {
		rc = retain_before(s, clock_ns(CLOCK_REALTIME) - s->retain_age_s * 1000000000LL,
				   more);
		if (rc != SQLITE_OK)
			goto out;
	}
	if (s->retain_bytes > 0) {
		rc = db_bytes(s, &bytes);
		if (rc != SQLITE_OK || bytes <= s->retain_bytes)
			goto out;
		/* min/max come from the ts_ns indexes: O(log n), unlike count(*) */
		for (size_t i = 0; i < N_TS_TABLES; i++) {
			snprintf(sql, sizeof(sql), "SELECT min(ts_ns) FROM %s", ts_tables[i]);
			if (exec_int(s->db, sql, &v) == SQLITE_OK && v != REC_NULL && v < lo)
				lo = v;
			snprintf(sql, sizeof(sql), "SELECT max(ts_ns) FROM %s", ts_tables[i]);
			if (exec_int(s->db, sql, &v) == SQLITE_OK && v != REC_NULL && v > hi)
				hi = v;
		}
		if (lo > hi)
			goto out;
		/* the oldest RETAIN_SIZE_PCT of the time span, at least one ns */
		v = lo + (int64_t)((double)(hi - lo) * RETAIN_SIZE_PCT / 100) + 1;
		rc = retain_before(s, v, more);
		if (rc != SQLITE_OK)
			goto out;
		deleted_by_size = true;
	}
out:
	if (rc != SQLITE_OK) {
		write_failed(s, rc);
		return rc;
	}
	if (deleted_by_size) {
		sqlite3_exec(s->db, "PRAGMA incremental_vacuum", NULL, NULL, NULL);
		if (db_bytes(s, &bytes) == SQLITE_OK && bytes > s->retain_bytes)
			*more = true;
	}
	ckpt_request(s, false);
	return SQLITE_OK;
}

static bool ring_ready(struct store *s)
{
	struct slot *sl = &s->ring[s->wr_head & s->mask];

	return atomic_load_explicit(&sl->h.seq, memory_order_acquire) == s->wr_head + 1;
}

static bool retain_due(struct store *s, uint64_t retain_req, int64_t now)
{
	if (retain_req > s->retain_done)
		return true;
	return (s->retain_age_s || s->retain_bytes) && now >= s->next_retain_ns;
}

static void retain_run(struct store *s, uint64_t retain_req)
{
	bool more = false;
	int rc, passes = 0;

	/* a background pass does one bounded round; store_retain_now finishes the job */
	do
		rc = retain_pass(s, &more);
	while (rc == SQLITE_OK && more && retain_req > s->retain_done && ++passes < 1000);
	s->next_retain_ns = clock_ns(CLOCK_MONOTONIC) + (more ? 0 : RETAIN_INTERVAL_NS);
	pthread_mutex_lock(&s->mu);
	if (retain_req > s->retain_done) {
		s->retain_done = retain_req;
		s->retain_rc = rc == SQLITE_OK ? 0 : -EIO;
		pthread_cond_broadcast(&s->done);
	}
	pthread_mutex_unlock(&s->mu);
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

static int store_setup_db(struct store *s, const struct store_opts *o, char **cause)
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
	for (int i = 0; i < ST_MAX; i++) {
		rc = sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					&s->st[i], NULL);
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

	err = store_setup_db(s, o, cause);
	if (err)
		goto fail;
	ckpt_start(s, o->path);

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
	for (size_t i = 0; i < N_KEY_TABLES; i++)
		sqlite3_finalize(s->gap[i]);
	if (s->db) {
		/* leaves the file checkpointed, and the -wal removed, for readers */
		sqlite3_close(s->db);
	}
	meta_free(s->meta);
	free(s->ring);
	free(s->path);
	pthread_cond_destroy(&s->wake);
	pthread_cond_destroy(&s->done);
	pthread_cond_destroy(&s->ckpt_wake);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
