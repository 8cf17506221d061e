/* SPDX-License-Identifier: MIT */
/*
 * Stand-in libcupti.so.13: the part of CUPTI's Activity API a kernel-time collector uses, with
 * cupti_activity.h's C ABI (CUptiResult codes, callback signatures, record layout), fed by the
 * stand-in libcuda's activity sink (standin.h) instead of a GPU.
 *
 * The contract CUPTI gives a collector, kept here:
 * - Buffers come from the collector: its request callback is called (never under our lock)
 *   when a record needs room, on whichever thread produced the record; a record with no room
 *   (the callback gave no buffer, or one too small) is dropped and counted
 *   (cuptiActivityGetNumDroppedRecords, reset by each call).
 * - Filled buffers go back through the completion callback exactly once each, from a worker
 *   thread of ours ("fqsi-cupti", started on first need) or from the thread that calls
 *   cuptiActivityFlushAll, never with our lock held, so the callback may call any function
 *   here (FlushAll from inside it does not wait for itself). cuptiActivityFlushPeriod(ms) has
 *   the worker wake every ms and hand over full buffers only, as CUPTI documents it: never
 *   the one being filled.
 * - cuptiActivityFlushAll hands over every partly filled buffer from the calling thread and
 *   returns once a delivery of the worker's that was under way has finished too.
 * - Records are CUpti_ActivityKernel4's 144 bytes (the head that Kernel5..9 share, _Static_assert
 *   below), 8-byte aligned from the buffer's first aligned byte; cuptiActivityGetNextRecord
 *   steps by that size. Kind 10 (CONCURRENT_KERNEL) while that kind is enabled, else 3.
 *   A name is interned once per kernel and stays valid for the process's life.
 * - Timestamps: the device clock (CLOCK_MONOTONIC), or the clock of a callback registered
 *   with cuptiActivityRegisterTimestampCallback, by one offset sampled at registration (no
 *   drift). Real CUPTI's default clock on Linux is CLOCK_REALTIME, not CLOCK_MONOTONIC: a
 *   collector must register its own callback or use differences only. cuptiGetTimestamp
 *   reads the records' clock.
 * Only kernel records (kinds 3 and 10) are produced; other kinds enable and do nothing.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "standin.h"

typedef int CUptiResult;

enum {
	CUPTI_SUCCESS = 0,
	CUPTI_ERROR_INVALID_PARAMETER = 1,
	CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
	CUPTI_ERROR_NOT_INITIALIZED = 15,
};

enum {
	CUPTI_ACTIVITY_KIND_KERNEL = 3,
	CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10,
};

typedef void (*buffer_request_fn)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*buffer_complete_fn)(void *context, uint32_t streamId, uint8_t *buffer,
				   size_t size, size_t validSize);

/* CUpti_ActivityKernel4, whose fields up to sharedMemoryExecuted Kernel5..9 keep in place */
struct kernel_record {
	uint32_t kind;
	uint8_t cacheConfig;
	uint8_t sharedMemoryConfig;
	uint16_t registersPerThread;
	uint32_t partitionedGlobalCacheRequested;
	uint32_t partitionedGlobalCacheExecuted;
	uint64_t start;
	uint64_t end;
	uint64_t completed;
	uint32_t deviceId;
	uint32_t contextId;
	uint32_t streamId;
	int32_t gridX, gridY, gridZ;
	int32_t blockX, blockY, blockZ;
	int32_t staticSharedMemory;
	int32_t dynamicSharedMemory;
	uint32_t localMemoryPerThread;
	uint32_t localMemoryTotal;
	uint32_t correlationId;
	int64_t gridId;
	const char *name;
	void *reserved0;
	uint64_t queued;
	uint64_t submitted;
	uint8_t launchType;
	uint8_t isSharedMemoryCarveoutRequested;
	uint8_t sharedMemoryCarveoutRequested;
	uint8_t padding;
	uint32_t sharedMemoryExecuted;
} __attribute__((packed, aligned(8)));

#define REC sizeof(struct kernel_record)
_Static_assert(sizeof(struct kernel_record) == 144, "CUpti_ActivityKernel4 is 144 bytes");
_Static_assert(offsetof(struct kernel_record, start) == 16, "start");
_Static_assert(offsetof(struct kernel_record, end) == 24, "end");
_Static_assert(offsetof(struct kernel_record, completed) == 32, "completed");
_Static_assert(offsetof(struct kernel_record, deviceId) == 40, "deviceId");
_Static_assert(offsetof(struct kernel_record, contextId) == 44, "contextId");
_Static_assert(offsetof(struct kernel_record, streamId) == 48, "streamId");
_Static_assert(offsetof(struct kernel_record, correlationId) == 92, "correlationId");
_Static_assert(offsetof(struct kernel_record, gridId) == 96, "gridId");
_Static_assert(offsetof(struct kernel_record, name) == 104, "name");
_Static_assert(offsetof(struct kernel_record, sharedMemoryExecuted) == 140, "end of Kernel4");

/* One buffer the collector gave us: records from p + first, cap of them, n written. */
struct abuf {
	struct abuf *next;
	uint8_t *p;
	size_t size, first, cap, n;
};

/* A kernel name, copied once so that records outlive the library that named it. */
struct name {
	struct name *next;
	const char *orig;
	char *copy;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* the worker: work or a flush due; FlushAll: a delivery ended */
	buffer_request_fn req;
	buffer_complete_fn done;
	uint32_t kinds; /* kernel kinds enabled, as bits */
	struct abuf *cur;   /* being filled */
	struct abuf *spare; /* requested, empty */
	struct abuf *full, **full_tail;
	size_t dropped;
	uint32_t period_ms;
	uint64_t next_flush;
	bool worker, worker_busy;
	uint64_t worker_batch;
	struct name *names;
} st = { .lock = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic int64_t ts_offset; /* records' clock minus CLOCK_MONOTONIC */
static __thread bool in_done;

static void init(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&st.cond, &a);
	pthread_condattr_destroy(&a);
	st.full_tail = &st.full;
}

static uint64_t now_ts(void)
{
	return fqsi_now_ns() + (uint64_t)atomic_load(&ts_offset);
}

/* Caller holds st.lock. A name that cannot be copied is used as it is. */
static const char *intern(const char *s)
{
	struct name *n;

	for (n = st.names; n; n = n->next)
		if (n->orig == s)
			return n->copy;
	n = malloc(sizeof(*n));
	if (!n)
		return s;
	n->orig = s;
	n->copy = strdup(s);
	if (!n->copy) {
		free(n);
		return s;
	}
	n->next = st.names;
	st.names = n;
	return n->copy;
}

/* Hands every queued buffer to done, in order. Caller holds no lock. */
static void deliver(struct abuf *list, buffer_complete_fn done)
{
	in_done = true;
	while (list) {
		struct abuf *b = list;

		list = b->next;
		done(NULL, 0, b->p, b->size, b->n ? b->first + b->n * REC : 0);
		free(b);
	}
	in_done = false;
}

/* Caller holds st.lock: the whole queue, emptied. */
static struct abuf *take_full(void)
{
	struct abuf *list = st.full;

	st.full = NULL;
	st.full_tail = &st.full;
	return list;
}

static void *worker_main(void *arg);

/* Caller holds st.lock. Without a worker (it could not start), FlushAll still delivers. */
static void start_worker(void)
{
	pthread_attr_t a;
	pthread_t t;

	if (st.worker)
		return;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	st.worker = !pthread_create(&t, &a, worker_main, NULL);
	pthread_attr_destroy(&a);
}

/* Caller holds st.lock. */
static void queue_full(struct abuf *b)
{
	b->next = NULL;
	*st.full_tail = b;
	st.full_tail = &b->next;
	start_worker();
	pthread_cond_broadcast(&st.cond);
}

/* Caller holds st.lock: the buffer being filled goes to the queue if it holds a record. */
static void flush_cur(void)
{
	if (st.cur && st.cur->n) {
		queue_full(st.cur);
		st.cur = NULL;
	}
}

static void *worker_main(void *arg)
{
	prctl(PR_SET_NAME, "fqsi-cupti");
	pthread_mutex_lock(&st.lock);
	for (;;) {
		buffer_complete_fn done = st.done;
		struct abuf *list;

		/* as CUPTI's: a periodic flush hands over full buffers only, never the one
		 * being filled (a collector that wants those calls cuptiActivityFlushAll) */
		if (st.period_ms && fqsi_now_ns() >= st.next_flush) {
			st.next_flush = fqsi_now_ns() + st.period_ms * 1000000ull;
		}
		if (!st.full || !done) {
			if (st.period_ms) {
				struct timespec ts = {
					.tv_sec = (time_t)(st.next_flush / 1000000000ull),
					.tv_nsec = (long)(st.next_flush % 1000000000ull)
				};

				pthread_cond_timedwait(&st.cond, &st.lock, &ts);
			} else {
				pthread_cond_wait(&st.cond, &st.lock);
			}
			continue;
		}
		list = take_full();
		st.worker_busy = true;
		st.worker_batch++;
		pthread_mutex_unlock(&st.lock);
		deliver(list, done);
		pthread_mutex_lock(&st.lock);
		st.worker_busy = false;
		pthread_cond_broadcast(&st.cond);
	}
	return NULL;
}

/*
 * A buffer from the collector's request callback, called without our lock; NULL if it gave
 * none. One too small for a record goes back to it at once, empty, and counts as none.
 */
static struct abuf *request_buffer(buffer_request_fn req)
{
	struct abuf *b = calloc(1, sizeof(*b));
	size_t max = 0;

	if (!b)
		return NULL;
	req(&b->p, &b->size, &max);
	if (!b->p) {
		free(b);
		return NULL;
	}
	b->first = (size_t)(-(uintptr_t)b->p & 7);
	b->cap = b->size > b->first ? (b->size - b->first) / REC : 0;
	if (max && max < b->cap)
		b->cap = max;
	return b;
}

/* The activity sink, on a device thread: append one record, never wait on the collector. */
static void on_activity(const struct fqsi_activity *a)
{
	int64_t off = atomic_load(&ts_offset);
	struct kernel_record r = {
		.start = a->start_ns + (uint64_t)off,
		.end = a->end_ns + (uint64_t)off,
		.completed = a->end_ns + (uint64_t)off,
		.deviceId = a->device,
		.contextId = a->device + 1, /* the device's primary context; ids start at 1 */
		.streamId = a->stream,
		.gridX = 1, .gridY = 1, .gridZ = 1,
		.blockX = 1, .blockY = 1, .blockZ = 1,
		.correlationId = a->correlation,
		.gridId = a->correlation,
	};
	bool asked = false;

	pthread_mutex_lock(&st.lock);
	if (!st.kinds)
		goto out;
	r.kind = st.kinds & (1u << CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ?
			 CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL :
			 CUPTI_ACTIVITY_KIND_KERNEL;
	r.name = intern(a->name);
	for (;;) {
		buffer_request_fn req = st.req;
		struct abuf *b;

		if (!st.cur && st.spare) {
			st.cur = st.spare;
			st.spare = st.cur->next;
			st.cur->next = NULL;
		}
		if ((b = st.cur) && b->n < b->cap) {
			memcpy(b->p + b->first + b->n * REC, &r, REC);
			if (++b->n == b->cap) {
				st.cur = NULL;
				queue_full(b);
			}
			break;
		}
		if (b) { /* a buffer with no room for one record: back to the collector */
			st.cur = NULL;
			queue_full(b);
			continue;
		}
		if (asked || !req) {
			st.dropped++;
			break;
		}
		asked = true;
		pthread_mutex_unlock(&st.lock);
		b = request_buffer(req);
		pthread_mutex_lock(&st.lock);
		if (b) {
			b->next = st.spare;
			st.spare = b;
		}
	}
out:
	pthread_mutex_unlock(&st.lock);
}

FQSI_EXPORT CUptiResult cuptiActivityRegisterCallbacks(buffer_request_fn req,
						       buffer_complete_fn done)
{
	if (!req || !done)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_once(&init_once, init);
	pthread_mutex_lock(&st.lock);
	st.req = req;
	st.done = done;
	pthread_mutex_unlock(&st.lock);
	return CUPTI_SUCCESS;
}

static bool kernel_kind(uint32_t kind)
{
	return kind == CUPTI_ACTIVITY_KIND_KERNEL || kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
}

FQSI_EXPORT CUptiResult cuptiActivityEnable(uint32_t kind)
{
	if (!kernel_kind(kind))
		return CUPTI_SUCCESS;
	pthread_once(&init_once, init);
	pthread_mutex_lock(&st.lock);
	if (!st.kinds)
		fqsi_activity_sink(on_activity);
	st.kinds |= 1u << kind;
	pthread_mutex_unlock(&st.lock);
	return CUPTI_SUCCESS;
}

FQSI_EXPORT CUptiResult cuptiActivityDisable(uint32_t kind)
{
	if (!kernel_kind(kind))
		return CUPTI_SUCCESS;
	pthread_once(&init_once, init);
	pthread_mutex_lock(&st.lock);
	st.kinds &= ~(1u << kind);
	if (!st.kinds)
		fqsi_activity_sink(NULL);
	pthread_mutex_unlock(&st.lock);
	return CUPTI_SUCCESS;
}

FQSI_EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
						   void **record)
{
	size_t first, off;

	if (!buffer || !record)
		return CUPTI_ERROR_INVALID_PARAMETER;
	first = (size_t)(-(uintptr_t)buffer & 7);
	if (!*record) {
		off = first;
	} else {
		uint8_t *p = *record;

		if (p < buffer + first || (size_t)(p - buffer - (ptrdiff_t)first) % REC)
			return CUPTI_ERROR_INVALID_PARAMETER;
		off = (size_t)(p - buffer) + REC;
	}
	if (off > validBufferSizeBytes || validBufferSizeBytes - off < REC)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	*record = buffer + off;
	return CUPTI_SUCCESS;
}

FQSI_EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	buffer_complete_fn done;
	struct abuf *list;
	uint64_t batch;

	pthread_once(&init_once, init);
	pthread_mutex_lock(&st.lock);
	if (!(done = st.done)) {
		pthread_mutex_unlock(&st.lock);
		return CUPTI_ERROR_NOT_INITIALIZED;
	}
	flush_cur();
	list = take_full();
	batch = st.worker_batch;
	pthread_mutex_unlock(&st.lock);
	deliver(list, done);
	pthread_mutex_lock(&st.lock);
	/* a batch the worker took before this call holds older records: wait for it */
	while (!in_done && st.worker_busy && st.worker_batch == batch)
		pthread_cond_wait(&st.cond, &st.lock);
	pthread_mutex_unlock(&st.lock);
	return CUPTI_SUCCESS;
}

/* 0 stops periodic flushing; full buffers still go back from the worker */
FQSI_EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t ms)
{
	pthread_once(&init_once, init);
	pthread_mutex_lock(&st.lock);
	st.period_ms = ms;
	st.next_flush = fqsi_now_ns() + ms * 1000000ull;
	if (ms)
		start_worker();
	pthread_cond_broadcast(&st.cond);
	pthread_mutex_unlock(&st.lock);
	return CUPTI_SUCCESS;
}

/*
 * fn's clock minus CLOCK_MONOTONIC, from the tightest of 5 brackets of one fn() call between
 * two clock reads: a thread preempted inside a bracket would put the offset off by the
 * preemption (milliseconds on a loaded box).
 */
FQSI_EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(uint64_t (*fn)(void))
{
	uint64_t best = UINT64_MAX;
	int64_t off = 0;

	for (int i = 0; fn && i < 5; i++) {
		uint64_t t0 = fqsi_now_ns(), f = fn(), t1 = fqsi_now_ns();

		if (t1 - t0 < best) {
			best = t1 - t0;
			off = (int64_t)(f - (t0 + (t1 - t0) / 2));
		}
	}
	atomic_store(&ts_offset, off);
	return CUPTI_SUCCESS;
}

FQSI_EXPORT CUptiResult cuptiGetTimestamp(uint64_t *timestamp)
{
	if (!timestamp)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*timestamp = now_ts();
	return CUPTI_SUCCESS;
}

FQSI_EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(void *context, uint32_t streamId,
							  size_t *dropped)
{
	if (!dropped)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&st.lock);
	*dropped = st.dropped;
	st.dropped = 0;
	pthread_mutex_unlock(&st.lock);
	return CUPTI_SUCCESS;
}
