/* SPDX-License-Identifier: MIT */
/*
 * The trace store: one SQLite file in WAL mode, written by one writer thread
 * in batched transactions, readable by queries while it is written.
 */
#ifndef FLEETQ_AGENTD_STORE_H
#define FLEETQ_AGENTD_STORE_H

#include <stdint.h>
#include "records.h"

struct store_opts {
	const char *path;
	const char *node;       /* meta 'node' */
	/* meta 'clock_source', e.g. "realtime (bpf_ktime_get_tai_ns - tai offset)" */
	const char *clock_source;
	int64_t retain_bytes;   /* 0: unlimited */
	int64_t retain_age_s;   /* 0: unlimited */
	int batch_rows;         /* commit after this many rows (0: default) */
	int batch_ms;           /* ... or after this long (0: default) */
	int64_t queue_rows;     /* queue capacity before store_put drops (0: default) */
	int cache_kib;          /* the writer's SQLite page cache (0: default) */
};

struct store_stats {
	int64_t queued;       /* records accepted by store_put */
	int64_t rows;         /* rows committed */
	int64_t drops;        /* records dropped (queue full, write failure) */
	int64_t lag_ns;       /* age of the oldest record not yet committed, 0 if none */
	int64_t write_errors; /* failed commits (e.g. disk full); writing resumes when possible */
	int64_t retained;     /* rows deleted by retention (age or size) */
	int64_t ts_nudged;    /* rows stored with ts_ns moved forward to a free nanosecond */
};

struct store;

/* Opens (creating if needed) the trace file, applies the schema, starts the writer thread. */
struct store *store_open(const struct store_opts *o, char **cause);
/* Copies r (and its strings) into the queue. Thread-safe. 0, or -ENOBUFS when dropped (counted). */
int store_put(struct store *s, const struct rec *r);
/* Sets meta key to an integer or text value (written with the next batch). */
int store_set_meta_int(struct store *s, const char *key, int64_t v);
int store_set_meta_text(struct store *s, const char *key, const char *v);
void store_get_stats(struct store *s, struct store_stats *st);
/* Blocks until everything queued before the call is committed. */
int store_flush(struct store *s);
/*
 * Runs a retention pass now (the writer also runs one every ~10 s) and waits
 * for it: deletes what retain_age_s / retain_bytes say must go. 0 or -errno.
 */
int store_retain_now(struct store *s);
/*
 * The name (comms.comm_hash) an earlier agentd on this trace file gave process pid's
 * communicator that NCCL hashes nccl_hash: 1 with name set (16 hex digits), or 0. agentd
 * restarted while the job ran places that communicator by NCCL's hash (trace_adopt.c) and
 * keeps the name its rows had before. Read from the file when the store opened (its newest
 * STORE_NAMES comms rows that carry both hashes); thread-safe.
 */
#define STORE_NAMES 4096
int store_comm_name(const struct store *s, uint32_t pid, uint64_t nccl_hash, char name[17]);
/* Flushes, stops the writer, closes. NULL is fine. */
void store_close(struct store *s);

#endif
