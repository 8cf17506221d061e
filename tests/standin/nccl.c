/* SPDX-License-Identifier: MIT */
/*
 * Stand-in libnccl.so.2 with NCCL 2.28's C ABI, for CI machines without a GPU.
 *
 * What it keeps from real NCCL, because fleetq's straggler analysis depends on it: a collective
 * call only enqueues a kernel and returns. When the stream's device reaches the kernel, it
 * records its GPU start, publishes the rank's arrival in a shared-memory segment of the
 * communicator and waits (futex, off-CPU) until every rank (or the peer, for send/recv) has
 * arrived at the same sequence number, then takes a short transfer time. The host sees that
 * wait in a later cudaStreamSynchronize, so a late rank waits least and its peers most. No data
 * moves. A profiler plugin named by NCCL_PROFILER_PLUGIN is called as NCCL 2.28 calls it.
 * With FQ_STANDIN_DEVICE=inline (standin.h) the arrival is published at enqueue instead.
 * With FQ_STANDIN_TRANSPORT=tcp (nccl_tcp.h) the world communicator's all-reduces move their
 * buffers' bytes between the rank processes over TCP, and wait for the network too.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "standin.h"
#include "nccl_tcp.h"
/* the plugin ABI and NCCL's communicator hash, shared with fleetq's own plugin */
#include "../../agentd/ncclprof/nccl_profiler.h"

#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1

typedef struct {
	char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;

typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
	ncclNumResults = 8
} nccl_result_t;
/* nccl_profiler.h calls it an int, as a plugin sees it; the same ABI, the names kept here */
#define ncclResult_t nccl_result_t

typedef enum {
	ncclInt8 = 0,
	ncclChar = 0,
	ncclUint8 = 1,
	ncclInt32 = 2,
	ncclInt = 2,
	ncclUint32 = 3,
	ncclInt64 = 4,
	ncclUint64 = 5,
	ncclFloat16 = 6,
	ncclHalf = 6,
	ncclFloat32 = 7,
	ncclFloat = 7,
	ncclFloat64 = 8,
	ncclDouble = 8,
	ncclBfloat16 = 9,
	ncclFloat8e4m3 = 10,
	ncclFloat8e5m2 = 11,
	ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
	ncclSum = 0,
	ncclProd = 1,
	ncclMax = 2,
	ncclMin = 3,
	ncclAvg = 4,
	ncclNumOps = 5,
	ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

/* Only the versioned head of NCCL's struct; the stand-in never reads a config. */
typedef struct ncclConfig_v22800 {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int reserved[29];
} ncclConfig_t;

typedef struct dim3 {
	unsigned int x, y, z;
} dim3;

int cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
		     cudaStream_t stream);
int cudaGetDevice(int *device);

enum op {
	OP_ALLREDUCE,
	OP_ALLGATHER,
	OP_REDUCESCATTER,
	OP_BROADCAST,
	OP_REDUCE,
	OP_SEND,
	OP_RECV,
	OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
	"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "Send", "Recv",
};

/* One segment per communicator, shared by every rank's process, zero-filled when created. */
struct shm {
	_Atomic uint32_t gen; /* futex word: bumped on every join, arrival and barrier */
	_Atomic uint32_t nranks;
	_Atomic uint32_t joined;
	_Atomic uint32_t left;
	_Atomic uint32_t present[FQSI_MAX_RANKS];
	_Atomic uint64_t arrived[FQSI_MAX_RANKS]; /* operations each rank has enqueued */
	_Atomic uint64_t barrier[FQSI_MAX_RANKS];
	int32_t color[2][FQSI_MAX_RANKS]; /* ncclCommSplit exchange, double-buffered */
	int32_t key[2][FQSI_MAX_RANKS];
};

struct ncclComm {
	struct shm *shm;
	char name[64];
	unsigned char uid[NCCL_UNIQUE_ID_BYTES];
	int nranks, rank, cudev;
	uint64_t seq; /* per-communicator operation counter, identical across ranks */
	uint64_t fseq[OP_COUNT]; /* per function, as NCCL's comm->seqNumber[func] */
	uint64_t nbarrier;
	uint64_t nsplit;
	uint64_t phash; /* NCCL's hash of it, as the profiler plugin's init gets it; 0: of uid */
	_Atomic uint64_t pending; /* stream items that still point at this comm */
	void *prof_ctx;		  /* the profiler plugin's context, when its init succeeded */
	int prof_mask;
	struct fqsi_tcp *tcp; /* FQ_STANDIN_TRANSPORT=tcp: the ring's sockets, else NULL */
};

struct pending_op {
	enum op op;
	ncclComm_t comm;
	int peer, root;
	size_t count;
	ncclDataType_t dtype;
	cudaStream_t stream;
	const void *sendbuff; /* all-reduce: the buffers, for the TCP transport */
	void *recvbuff;
};

/* Kernel channels each collective reports to a profiler plugin. */
#define NCHANNELS 2

/* The profiler plugin, loaded once per process as NCCL does; NULL: none. */
static pthread_once_t prof_once = PTHREAD_ONCE_INIT;
static const fq_nccl_profiler_v5_t *prof_v5;
static const fq_nccl_profiler_v4_t *prof_v4;

static __thread int group_depth;
static __thread struct pending_op *group_ops;
static __thread size_t group_n, group_cap;
static __thread char last_error[256];

static int nccl_kernel_run(const uint64_t *argv, struct fqsi_exec *x);

/* One "device kernel" per operation, so a trace of cuLaunchKernel can tell them apart. */
#define KERNEL(n) { FQSI_KERNEL_MAGIC, 10, "ncclDevKernel_" n, nccl_kernel_run }
static const struct fqsi_kernel nccl_kernels[OP_COUNT] = {
	KERNEL("AllReduce"), KERNEL("AllGather"), KERNEL("ReduceScatter"), KERNEL("Broadcast"),
	KERNEL("Reduce"),    KERNEL("SendRecv"),  KERNEL("SendRecv"),
};

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	fprintf(stderr, "fq-standin nccl: %s\n", last_error);
}

static void bump(struct shm *sh)
{
	atomic_fetch_add(&sh->gen, 1);
	/* not FUTEX_PRIVATE: the waiters are other processes mapping the same segment */
	syscall(SYS_futex, &sh->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

enum cond { COND_JOINED, COND_ALL, COND_PEER, COND_BARRIER };

static bool ready(const struct ncclComm *c, enum cond cond, uint64_t v, int peer)
{
	struct shm *sh = c->shm;

	switch (cond) {
	case COND_JOINED:
		return atomic_load(&sh->joined) >= (uint32_t)c->nranks;
	case COND_PEER:
		return atomic_load(&sh->arrived[peer]) > v;
	case COND_ALL:
		for (int r = 0; r < c->nranks; r++)
			if (atomic_load(&sh->arrived[r]) <= v)
				return false;
		return true;
	case COND_BARRIER:
		for (int r = 0; r < c->nranks; r++)
			if (atomic_load(&sh->barrier[r]) <= v)
				return false;
		return true;
	}
	return false;
}

/* 0 when cond holds, -EAGAIN if it does not and !block, -ETIMEDOUT after FQ_STANDIN_TIMEOUT_S. */
static int comm_wait(const struct ncclComm *c, enum cond cond, uint64_t v, int peer, int block)
{
	uint64_t deadline = fqsi_now_ns() + fqsi_timeout_ns();

	for (;;) {
		uint32_t g = atomic_load(&c->shm->gen);
		uint64_t now, rel;
		struct timespec ts;

		if (ready(c, cond, v, peer))
			return 0;
		if (!block)
			return -EAGAIN;
		now = fqsi_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		rel = deadline - now;
		ts.tv_sec = (time_t)(rel / 1000000000ull);
		ts.tv_nsec = (long)(rel % 1000000000ull);
		syscall(SYS_futex, &c->shm->gen, FUTEX_WAIT, g, &ts, NULL, 0);
	}
}

/* Names the ranks that have not reached v, for a timeout message a person can act on. */
static void missing_ranks(const struct ncclComm *c, enum cond cond, uint64_t v, int peer,
			  char *buf, size_t len)
{
	size_t n = 0;
	int shown = 0;

	buf[0] = '\0';
	for (int r = 0; r < c->nranks && n + 16 < len; r++) {
		uint64_t a = cond == COND_BARRIER ? atomic_load(&c->shm->barrier[r])
						  : atomic_load(&c->shm->arrived[r]);

		if ((cond == COND_PEER && r != peer) || a > v)
			continue;
		if (shown++ == 16) {
			n += (size_t)snprintf(buf + n, len - n, ",...");
			break;
		}
		n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? "," : "", r);
	}
	if (cond == COND_JOINED)
		snprintf(buf, len, "%u of %d joined", atomic_load(&c->shm->joined), c->nranks);
}

/*
 * Device time a collective takes once every rank is there: FQ_STANDIN_XFER_US, default 20
 * (0 inline, as before: a sleep there would cost the synchronizing thread one more wakeup).
 */
static uint64_t xfer_ns(void)
{
	const char *s = getenv("FQ_STANDIN_XFER_US");
	long v = s ? strtol(s, NULL, 10) : -1;

	if (v < 0 || v > 60000000)
		v = fqsi_inline() ? 0 : 20;
	return (uint64_t)v * 1000;
}

/* FQ_STANDIN_BLOCKING=1: a collective call returns only once every rank's kernel arrived. */
static bool blocking(void)
{
	const char *s = getenv("FQ_STANDIN_BLOCKING");

	return s && !strcmp(s, "1");
}

static size_t dtype_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
	case ncclFloat8e4m3:
	case ncclFloat8e5m2:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64:
		return 8;
	default:
		return 4;
	}
}

static void publish_arrival(struct ncclComm *c, uint64_t seq)
{
	uint64_t cur = atomic_load(&c->shm->arrived[c->rank]);

	/* monotonic even if two streams run one communicator's kernels out of order */
	while (cur < seq + 1 &&
	       !atomic_compare_exchange_weak(&c->shm->arrived[c->rank], &cur, seq + 1))
		;
	bump(c->shm);
}

static ncclResult_t prof_start(struct ncclComm *c, void **h, fq_nccl_descr_t *d)
{
	*h = NULL;
	if (prof_v5)
		return prof_v5->startEvent(c->prof_ctx, h, d);
	return prof_v4->startEvent(c->prof_ctx, h, d);
}

static void prof_stop(void *h)
{
	if (prof_v5)
		prof_v5->stopEvent(h);
	else
		prof_v4->stopEvent(h);
}

static void prof_record(void *h, int state, fq_nccl_state_args_t *a)
{
	if (prof_v5)
		prof_v5->recordEventState(h, state, a);
	else
		prof_v4->recordEventState(h, state, a);
}

/*
 * The collective's kernel, on the stream's device thread: GPU start, arrival, the wait for the
 * other ranks, the transfer, GPU stop. argv: comm, seq, op, peer, Coll event handle, count, the
 * per-function sequence number, send and receive buffers, data type.
 */
static int nccl_kernel_run(const uint64_t *argv, struct fqsi_exec *x)
{
	struct ncclComm *c = (struct ncclComm *)(uintptr_t)argv[0];
	uint64_t seq = argv[1];
	enum op op = (enum op)argv[2];
	int peer = (int)(int64_t)argv[3];
	void *coll = (void *)(uintptr_t)argv[4];
	enum cond cond = peer >= 0 ? COND_PEER : COND_ALL;
	bool kch = c->prof_ctx && (c->prof_mask & ncclProfileKernelCh) && (op < OP_SEND || coll);
	void *ch[NCHANNELS] = { 0 };
	uint64_t off = fqsi_gpu_offset_ns(), all, end;
	char note[160];
	int err = 0;

	if (x->failed) {
		atomic_fetch_sub(&c->pending, 1);
		return -ECANCELED;
	}
	/* the kernel starts when it is reached: a late device thread's wakeup is part of it */
	if (fqsi_now_ns() > x->start_ns)
		x->start_ns = fqsi_now_ns();
	publish_arrival(c, seq);
	for (int i = 0; kch && i < NCHANNELS; i++) {
		fq_nccl_descr_t d = { 0 };

		/* as NCCL: the parent is the Coll or P2p event's handle; rank is not filled in */
		d.type = ncclProfileKernelCh;
		d.parentObj = coll;
		d.kernelCh.channelId = (uint8_t)i;
		d.kernelCh.pTimer = x->start_ns + off;
		prof_start(c, &ch[i], &d);
	}
	/* the TCP ring waits for every rank as the data goes round: for the network too */
	if (c->tcp && op == OP_ALLREDUCE) {
		ncclDataType_t dt = (ncclDataType_t)argv[9];
		char *cause = NULL;

		err = fqsi_tcp_allreduce(c->tcp, (const void *)(uintptr_t)argv[7],
					 (void *)(uintptr_t)argv[8], (size_t)argv[5],
					 dtype_size(dt), dt == ncclFloat32, seq,
					 fqsi_now_ns() + fqsi_timeout_ns(), &cause);
		if (err)
			fail("rank %d of %d: AllReduce seq %llu over TCP: %s", c->rank, c->nranks,
			     (unsigned long long)seq, cause ? cause : strerror(-err));
		free(cause);
	}
	if (!err)
		err = comm_wait(c, cond, seq, peer, 1);
	if (err == -ETIMEDOUT) {
		char who[160];

		missing_ranks(c, cond, seq, peer, who, sizeof(who));
		fail("rank %d of %d: %s seq %llu timed out after %.0f s waiting for rank(s) %s "
		     "(FQ_STANDIN_TIMEOUT_S)",
		     c->rank, c->nranks, op_names[op], (unsigned long long)seq,
		     (double)fqsi_timeout_ns() / 1e9, who);
	}
	all = fqsi_now_ns();
	if (all < x->start_ns)
		all = x->start_ns;
	end = all + (err ? 0 : xfer_ns());
	fqsi_sleep_until(end);
	x->end_ns = end;
	for (int i = 0; i < NCHANNELS; i++) {
		fq_nccl_state_args_t a = { 0 };

		if (!ch[i])
			continue;
		a.kernelCh.pTimer = end + off;
		prof_record(ch[i], ncclProfilerKernelChStop, &a);
		prof_stop(ch[i]);
	}
	snprintf(note, sizeof(note), "gstart=%llu gstop=%llu wait=%llu fseq=%llu",
		 (unsigned long long)(x->start_ns + off), (unsigned long long)(end + off),
		 (unsigned long long)(all - x->start_ns), (unsigned long long)argv[6]);
	fqsi_device_row(nccl_kernels[op].name, (long long)seq, (long long)argv[5],
			end - x->start_ns, note);
	atomic_fetch_sub(&c->pending, 1);
	return err;
}

static void prof_log(int level, unsigned long flags, const char *file, int line,
		     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void prof_log(int level, unsigned long flags, const char *file, int line,
		     const char *fmt, ...)
{
	const char *dbg = getenv("NCCL_DEBUG");
	va_list ap;

	if (!dbg || (strcasecmp(dbg, "INFO") && strcasecmp(dbg, "TRACE")))
		return;
	va_start(ap, fmt);
	fprintf(stderr, "fq-standin nccl: profiler: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* NCCL_PROFILER_PLUGIN: a path or name dlopen finds, else libnccl-profiler-<name>.so. */
static void prof_load(void)
{
	const char *name = getenv("NCCL_PROFILER_PLUGIN");
	char alt[256];
	void *lib;

	if (!name || !*name || !strcasecmp(name, "none"))
		return;
	lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!lib && !strchr(name, '/')) {
		snprintf(alt, sizeof(alt), "libnccl-profiler-%s.so", name);
		lib = dlopen(alt, RTLD_NOW | RTLD_LOCAL);
	}
	if (!lib) {
		fprintf(stderr, "fq-standin nccl: cannot load profiler plugin '%s': %s\n", name,
			dlerror());
		return;
	}
	prof_v5 = dlsym(lib, "ncclProfiler_v5");
	if (!prof_v5)
		prof_v4 = dlsym(lib, "ncclProfiler_v4");
	if (!prof_v5 && !prof_v4) {
		fprintf(stderr, "fq-standin nccl: profiler plugin '%s' has neither ncclProfiler_v5 "
				"nor ncclProfiler_v4; ignored\n", name);
		dlclose(lib);
	}
}

/* Once per communicator, after it is complete: the plugin's init, as NCCL's. */
/* NCCL's communicator hash: of the unique id, or for a split of (parent's, split count, color) */
static uint64_t plugin_hash(const struct ncclComm *c)
{
	return c->phash ? c->phash : fq_nccl_hash(c->uid, NCCL_UNIQUE_ID_BYTES);
}

static void prof_init(struct ncclComm *c)
{
	const char *lws = getenv("LOCAL_WORLD_SIZE");
	int per = lws ? atoi(lws) : 0, nnodes = 1, mask = 0;
	uint64_t hash = plugin_hash(c);
	ncclResult_t r;

	pthread_once(&prof_once, prof_load);
	if (!prof_v5 && !prof_v4)
		return;
	if (per > 0 && per < c->nranks)
		nnodes = (c->nranks + per - 1) / per;
	if (prof_v5)
		r = prof_v5->init(&c->prof_ctx, hash, &mask, NULL, nnodes, c->nranks, c->rank,
				  prof_log);
	else
		r = prof_v4->init(&c->prof_ctx, &mask, NULL, hash, nnodes, c->nranks, c->rank,
				  prof_log);
	if (r) {
		fprintf(stderr, "fq-standin nccl: profiler init failed (%d); continuing without\n",
			(int)r);
		c->prof_ctx = NULL;
		return;
	}
	c->prof_mask = mask;
}

static void prof_finalize(struct ncclComm *c)
{
	if (!c->prof_ctx)
		return;
	if (prof_v5)
		prof_v5->finalize(c->prof_ctx);
	else
		prof_v4->finalize(c->prof_ctx);
	c->prof_ctx = NULL;
}

static void uid_name(struct ncclComm *c, const unsigned char uid[NCCL_UNIQUE_ID_BYTES])
{
	memcpy(c->uid, uid, NCCL_UNIQUE_ID_BYTES);
	fqsi_shm_name(uid, c->name, sizeof(c->name));
}

/* Registers this rank with the communicator's segment; does not wait for the others. */
static ncclResult_t comm_join(ncclComm_t *out, int nranks, const unsigned char *uid, int rank,
			      int cudev)
{
	struct ncclComm *c = NULL;
	ncclResult_t res = ncclSystemError;
	uint32_t expect = 0;
	int fd = -1;

	if (!out || nranks < 1 || nranks > FQSI_MAX_RANKS || rank < 0 || rank >= nranks) {
		fail("invalid rank %d of %d (the stand-in holds at most %d ranks)", rank, nranks,
		     FQSI_MAX_RANKS);
		return ncclInvalidArgument;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		goto cleanup;
	uid_name(c, uid);
	c->nranks = nranks;
	c->rank = rank;
	c->cudev = cudev;
	fd = shm_open(c->name, O_RDWR | O_CREAT, 0600);
	if (fd < 0) {
		fail("cannot open shared memory '%s': %s", c->name, strerror(errno));
		goto cleanup;
	}
	/* every rank sizes it; the same size twice is harmless and new pages read as zero */
	if (ftruncate(fd, sizeof(struct shm))) {
		fail("cannot size shared memory '%s': %s", c->name, strerror(errno));
		goto cleanup;
	}
	c->shm = mmap(NULL, sizeof(struct shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c->shm == MAP_FAILED) {
		c->shm = NULL;
		fail("cannot map shared memory '%s': %s", c->name, strerror(errno));
		goto cleanup;
	}
	if (!atomic_compare_exchange_strong(&c->shm->nranks, &expect, (uint32_t)nranks) &&
	    expect != (uint32_t)nranks) {
		fail("rank %d says the communicator has %d ranks, another rank said %u", rank,
		     nranks, expect);
		res = ncclInvalidUsage;
		goto cleanup;
	}
	if (atomic_exchange(&c->shm->present[rank], 1)) {
		fail("rank %d joined the communicator twice", rank);
		res = ncclInvalidUsage;
		goto cleanup;
	}
	atomic_fetch_add(&c->shm->joined, 1);
	bump(c->shm);
	*out = c;
	c = NULL;
	res = ncclSuccess;
cleanup:
	if (fd >= 0)
		close(fd);
	if (c) {
		if (c->shm)
			munmap(c->shm, sizeof(struct shm));
		free(c);
	}
	return res;
}

static void comm_leave(struct ncclComm *c)
{
	if (atomic_fetch_add(&c->shm->left, 1) + 1 == (uint32_t)c->nranks)
		shm_unlink(c->name);
	/* a queued item still points at c: keep it mapped rather than fault in a later sync */
	if (atomic_load(&c->pending))
		return;
	fqsi_tcp_close(c->tcp);
	munmap(c->shm, sizeof(struct shm));
	free(c);
}

static ncclResult_t comm_wait_joined(struct ncclComm *c)
{
	char who[160];

	if (!comm_wait(c, COND_JOINED, 0, -1, 1))
		return ncclSuccess;
	missing_ranks(c, COND_JOINED, 0, -1, who, sizeof(who));
	fail("rank %d: ncclCommInitRank timed out after %.0f s, %s (FQ_STANDIN_TIMEOUT_S)",
	     c->rank, (double)fqsi_timeout_ns() / 1e9, who);
	return ncclRemoteError;
}

static ncclResult_t init_rank(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank)
{
	ncclResult_t res;
	int dev = 0;

	cudaGetDevice(&dev);
	res = comm_join(comm, nranks, (const unsigned char *)id->internal, rank, dev);
	if (res)
		return res;
	res = comm_wait_joined(*comm);
	if (!res) {
		char *cause = NULL;

		if (fqsi_tcp_open(rank, nranks, fqsi_now_ns() + fqsi_timeout_ns(), &(*comm)->tcp,
				  &cause)) {
			fail("rank %d: ncclCommInitRank: %s", rank, cause ? cause : "TCP failed");
			res = ncclSystemError;
		}
		free(cause);
	}
	if (res) {
		comm_leave(*comm);
		*comm = NULL;
		return res;
	}
	prof_init(*comm);
	return res;
}

static const char *dtype_name(ncclDataType_t t)
{
	static const char *const names[ncclNumTypes] = {
		"ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",
		"ncclInt64",   "ncclUint64",  "ncclFloat16",  "ncclFloat32",
		"ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2",
	};

	return (unsigned int)t < ncclNumTypes ? names[t] : "unknown";
}

static ncclResult_t launch_op(const struct pending_op *p)
{
	ncclComm_t comm = p->comm;
	bool is_coll = p->op < OP_SEND;
	uint64_t a0 = (uintptr_t)comm, a1 = comm->seq++, a2 = p->op,
		 a3 = (uint64_t)(int64_t)p->peer, a4 = 0, a5 = p->count,
		 a6 = is_coll ? comm->fseq[p->op]++ : 0, a7 = (uintptr_t)p->sendbuff,
		 a8 = (uintptr_t)p->recvbuff, a9 = (uint64_t)p->dtype;
	void *params[10] = { &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8, &a9 };
	dim3 grid = { 1, 1, 1 }, block = { 1, 1, 1 };
	void *coll = NULL;
	int err;

	/* host side of the collective: its Coll event spans the enqueue, as in NCCL */
	if (is_coll && comm->prof_ctx && (comm->prof_mask & ncclProfileColl)) {
		fq_nccl_descr_t d = { 0 };

		d.type = ncclProfileColl;
		d.parentObj = NULL;
		d.rank = comm->rank;
		d.coll.seqNumber = a6;
		d.coll.func = op_names[p->op];
		d.coll.count = p->count;
		d.coll.root = p->root < 0 ? 0 : p->root;
		d.coll.datatype = dtype_name(p->dtype);
		d.coll.nChannels = NCHANNELS;
		d.coll.nWarps = 16;
		d.coll.algo = "RING";
		d.coll.proto = "SIMPLE";
		prof_start(comm, &coll, &d);
		a4 = (uintptr_t)coll;
	}
	/* a Send/Recv: NCCL starts its P2p event for KernelCh too, and names the peer */
	if (!is_coll && comm->prof_ctx &&
	    (comm->prof_mask & (ncclProfileP2p | ncclProfileKernelCh))) {
		fq_nccl_descr_t d = { 0 };

		d.type = ncclProfileP2p;
		d.parentObj = NULL;
		d.rank = comm->rank;
		d.p2p.func = op_names[p->op];
		d.p2p.buff = p->op == OP_SEND ? (void *)p->sendbuff : p->recvbuff;
		d.p2p.datatype = dtype_name(p->dtype);
		d.p2p.count = p->count;
		d.p2p.peer = p->peer;
		d.p2p.nChannels = NCHANNELS;
		prof_start(comm, &coll, &d);
		a4 = (uintptr_t)coll;
	}
	/* the synchronizing thread runs the kernel later: the host's enqueue is the arrival */
	if (fqsi_inline())
		publish_arrival(comm, a1);
	atomic_fetch_add(&comm->pending, 1);
	err = cudaLaunchKernel(&nccl_kernels[p->op], grid, block, params, 0, p->stream);
	if (coll)
		prof_stop(coll);
	if (err) {
		atomic_fetch_sub(&comm->pending, 1);
		fail("rank %d: launching %s failed: cuda error %d", comm->rank, op_names[p->op],
		     err);
		return ncclUnhandledCudaError;
	}
	if (blocking()) {
		enum cond cond = p->peer >= 0 ? COND_PEER : COND_ALL;

		/* a blocking implementation: the call itself waits for every rank's kernel */
		if (comm_wait(comm, cond, a1, p->peer, 1)) {
			fail("rank %d: %s seq %llu timed out waiting for the other ranks",
			     comm->rank, op_names[p->op], (unsigned long long)a1);
			return ncclRemoteError;
		}
	}
	return ncclSuccess;
}

static ncclResult_t enqueue_buf(enum op op, ncclComm_t comm, int peer, int root, size_t count,
			       ncclDataType_t dtype, cudaStream_t stream, const void *sb, void *rb)
{
	struct pending_op p = { op, comm, peer, root, count, dtype, stream, sb, rb };

	if (!comm) {
		fail("%s: communicator is NULL", op_names[op]);
		return ncclInvalidArgument;
	}
	if ((unsigned int)dtype >= ncclNumTypes) {
		fail("%s: invalid data type %d", op_names[op], (int)dtype);
		return ncclInvalidArgument;
	}
	if ((peer != -1 && (peer < 0 || peer >= comm->nranks)) ||
	    (root != -1 && (root < 0 || root >= comm->nranks))) {
		fail("%s: peer or root out of range for %d ranks", op_names[op], comm->nranks);
		return ncclInvalidArgument;
	}
	if (!group_depth)
		return launch_op(&p);
	/* inside ncclGroupStart/End nothing is launched until the group ends, as in NCCL */
	if (group_n == group_cap) {
		size_t cap = group_cap ? group_cap * 2 : 16;
		struct pending_op *q = realloc(group_ops, cap * sizeof(*q));

		if (!q)
			return ncclSystemError;
		group_ops = q;
		group_cap = cap;
	}
	group_ops[group_n++] = p;
	return ncclSuccess;
}

static ncclResult_t enqueue_op(enum op op, ncclComm_t comm, int peer, int root, size_t count,
			       ncclDataType_t dtype, cudaStream_t stream)
{
	return enqueue_buf(op, comm, peer, root, count, dtype, stream, NULL, NULL);
}

FQSI_EXPORT ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return ncclInvalidArgument;
	*version = 22809;
	return ncclSuccess;
}

static ncclResult_t make_unique_id(ncclUniqueId *uniqueId)
{
	size_t got = 0;

	if (!uniqueId)
		return ncclInvalidArgument;
	while (got < sizeof(uniqueId->internal)) {
		ssize_t n = getrandom(uniqueId->internal + got, sizeof(uniqueId->internal) - got, 0);

		if (n < 0 && errno != EINTR) {
			fail("getrandom failed: %s", strerror(errno));
			return ncclSystemError;
		}
		if (n > 0)
			got += (size_t)n;
	}
	return ncclSuccess;
}

FQSI_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	return make_unique_id(uniqueId);
}

FQSI_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
					  int rank)
{
	return init_rank(comm, nranks, &commId, rank);
}

FQSI_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
						int rank, ncclConfig_t *config)
{
	return init_rank(comm, nranks, &commId, rank);
}

FQSI_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	ncclUniqueId id;
	ncclResult_t res;
	int joined = 0;

	if (!comms || ndev < 1)
		return ncclInvalidArgument;
	res = make_unique_id(&id);
	if (res)
		return res;
	/* one thread owns every rank: join them all before anyone waits */
	for (; joined < ndev; joined++) {
		res = comm_join(&comms[joined], ndev, (const unsigned char *)id.internal, joined,
				devlist ? devlist[joined] : joined);
		if (res)
			goto cleanup;
	}
	for (int i = 0; i < ndev && !res; i++)
		res = comm_wait_joined(comms[i]);
	for (int i = 0; i < ndev && !res; i++)
		prof_init(comms[i]);
cleanup:
	for (int i = 0; res && i < joined; i++) {
		comm_leave(comms[i]);
		comms[i] = NULL;
	}
	return res;
}

FQSI_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
				       ncclConfig_t *config)
{
	unsigned char uid[NCCL_UNIQUE_ID_BYTES];
	struct shm *sh;
	uint64_t k, h;
	int b, n = 0, newrank = 0;
	ncclResult_t res;

	if (!comm || !newcomm)
		return ncclInvalidArgument;
	sh = comm->shm;
	k = comm->nsplit++;
	b = (int)(k & 1);
	/*
	 * Double-buffered: a rank can only write buffer b again at split k + 2, after barrier
	 * k + 1, which every rank reaches only after reading buffer b at split k.
	 */
	sh->color[b][comm->rank] = color;
	sh->key[b][comm->rank] = key;
	atomic_store(&sh->barrier[comm->rank], comm->nbarrier + 1);
	bump(sh);
	if (comm_wait(comm, COND_BARRIER, comm->nbarrier++, -1, 1)) {
		fail("rank %d: ncclCommSplit timed out waiting for the other ranks", comm->rank);
		return ncclRemoteError;
	}
	*newcomm = NULL;
	if (color == NCCL_SPLIT_NOCOLOR)
		return ncclSuccess;
	for (int r = 0; r < comm->nranks; r++) {
		if (sh->color[b][r] != color)
			continue;
		n++;
		if (sh->key[b][r] < key || (sh->key[b][r] == key && r < comm->rank))
			newrank++;
	}
	/* every member derives the same new unique id from the parent's, the split and color */
	h = 1469598103934665603ull;
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
		h = (h ^ comm->uid[i]) * 1099511628211ull;
	h ^= k * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uint32_t)color << 32;
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i += 8) {
		uint64_t z = (h += 0x9e3779b97f4a7c15ull);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(uid + i, &z, 8);
	}
	res = comm_join(newcomm, n, uid, newrank, comm->cudev);
	if (res)
		return res;
	res = comm_wait_joined(*newcomm);
	if (res) {
		comm_leave(*newcomm);
		*newcomm = NULL;
		return res;
	}
	/* as NCCL: the child's hash is of the parent's, its split count (every split, a
	 * color-less one too, from 1) and the color, so agentd joins the plugin's rows to it */
	(*newcomm)->phash = fq_nccl_hash_split(plugin_hash(comm), (int32_t)(k + 1), color);
	prof_init(*newcomm);
	return res;
}

FQSI_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	uint64_t deadline;

	if (!comm)
		return ncclInvalidArgument;
	/* as NCCL, the communicator's queued kernels finish first (bounded: a failed peer) */
	deadline = fqsi_now_ns() + fqsi_timeout_ns();
	while (atomic_load(&comm->pending) && fqsi_now_ns() < deadline)
		fqsi_sleep_until(fqsi_now_ns() + 200000);
	if (!atomic_load(&comm->pending))
		prof_finalize(comm);
	comm_leave(comm);
	return ncclSuccess;
}

FQSI_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	if (!comm)
		return ncclInvalidArgument;
	comm_leave(comm);
	return ncclSuccess;
}

FQSI_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	if (!comm || !count)
		return ncclInvalidArgument;
	*count = comm->nranks;
	return ncclSuccess;
}

FQSI_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	if (!comm || !rank)
		return ncclInvalidArgument;
	*rank = comm->rank;
	return ncclSuccess;
}

FQSI_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	if (!comm || !device)
		return ncclInvalidArgument;
	*device = comm->cudev;
	return ncclSuccess;
}

FQSI_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
				       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				       cudaStream_t stream)
{
	return enqueue_buf(OP_ALLREDUCE, comm, -1, -1, count, datatype, stream, sendbuff, recvbuff);
}

FQSI_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
				       ncclDataType_t datatype, ncclComm_t comm,
				       cudaStream_t stream)
{
	return enqueue_op(OP_ALLGATHER, comm, -1, -1, sendcount, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
					   ncclDataType_t datatype, ncclRedOp_t op,
					   ncclComm_t comm, cudaStream_t stream)
{
	return enqueue_op(OP_REDUCESCATTER, comm, -1, -1, recvcount, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
				       ncclDataType_t datatype, int root, ncclComm_t comm,
				       cudaStream_t stream)
{
	return enqueue_op(OP_BROADCAST, comm, -1, root, count, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
				   ncclComm_t comm, cudaStream_t stream)
{
	return enqueue_op(OP_BROADCAST, comm, -1, root, count, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
				    ncclDataType_t datatype, ncclRedOp_t op, int root,
				    ncclComm_t comm, cudaStream_t stream)
{
	return enqueue_op(OP_REDUCE, comm, -1, root, count, datatype, stream);
}

/*
 * Point-to-point: the item waits for the peer to reach the same sequence number. With the
 * symmetric call sequences real programs use (each rank sends then receives) that is when the
 * matching operation has been posted.
 */
FQSI_EXPORT ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
				  int peer, ncclComm_t comm, cudaStream_t stream)
{
	if (peer < 0)
		return ncclInvalidArgument;
	return enqueue_op(OP_SEND, comm, peer, -1, count, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
				  ncclComm_t comm, cudaStream_t stream)
{
	if (peer < 0)
		return ncclInvalidArgument;
	return enqueue_op(OP_RECV, comm, peer, -1, count, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}

FQSI_EXPORT ncclResult_t ncclGroupEnd(void)
{
	ncclResult_t res = ncclSuccess;

	if (group_depth <= 0) {
		fail("ncclGroupEnd without ncclGroupStart");
		return ncclInvalidUsage;
	}
	if (--group_depth)
		return ncclSuccess;
	for (size_t i = 0; i < group_n; i++) {
		struct pending_op *p = &group_ops[i];
		ncclResult_t r = launch_op(p);

		if (r && !res)
			res = r;
	}
	group_n = 0;
	return res;
}

FQSI_EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError:
		return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError:
		return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument:
		return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage:
		return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	case ncclInProgress:
		return "NCCL operation in progress";
	default:
		return "unknown result code";
	}
}

FQSI_EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
	return last_error;
}

/* Real NCCL exports every entry point twice, ncclX and pncclX, at one address (for PMPI-style
 * profilers); fleetq must attach once per address, so the double keeps that. */
#define PNCCL(fn) extern __typeof__(fn) p##fn FQSI_EXPORT __attribute__((alias(#fn)))
PNCCL(ncclGetVersion);
PNCCL(ncclGetUniqueId);
PNCCL(ncclCommInitRank);
PNCCL(ncclCommInitRankConfig);
PNCCL(ncclCommInitAll);
PNCCL(ncclCommSplit);
PNCCL(ncclCommDestroy);
PNCCL(ncclCommAbort);
PNCCL(ncclCommCount);
PNCCL(ncclCommUserRank);
PNCCL(ncclCommCuDevice);
PNCCL(ncclAllReduce);
PNCCL(ncclAllGather);
PNCCL(ncclReduceScatter);
PNCCL(ncclBroadcast);
PNCCL(ncclBcast);
PNCCL(ncclReduce);
PNCCL(ncclSend);
PNCCL(ncclRecv);
PNCCL(ncclGroupStart);
PNCCL(ncclGroupEnd);
PNCCL(ncclGetErrorString);
PNCCL(ncclGetLastError);
