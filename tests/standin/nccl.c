/* SPDX-License-Identifier: MIT */
/*
 * Stand-in libnccl.so.2 with NCCL 2.28's C ABI, for CI machines without a GPU.
 *
 * What it keeps from real NCCL, because fleetq's straggler analysis depends on it: a collective
 * call only enqueues and returns; the rank's arrival is published at once in a shared-memory
 * segment of the communicator, and the stream gets a work item that waits until every rank (or
 * the peer, for send/recv) has arrived at the same sequence number. That wait happens in the
 * later cudaStreamSynchronize/cuStreamSynchronize, blocked on a futex (off-CPU), so a late rank
 * waits least and its peers most. No data moves.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "standin.h"

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
} ncclResult_t;

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
	uint64_t nbarrier;
	uint64_t nsplit;
	_Atomic uint64_t pending; /* stream items that still point at this comm */
};

struct pending_op {
	enum op op;
	ncclComm_t comm;
	int peer;
	cudaStream_t stream;
};

static __thread int group_depth;
static __thread struct pending_op *group_ops;
static __thread size_t group_n, group_cap;
static __thread char last_error[256];

static int nccl_kernel_run(const uint64_t *argv, int block);

/* One "device kernel" per operation, so a trace of cuLaunchKernel can tell them apart. */
#define KERNEL(n) { FQSI_KERNEL_MAGIC, 4, "ncclDevKernel_" n, nccl_kernel_run }
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

static int nccl_kernel_run(const uint64_t *argv, int block)
{
	struct ncclComm *c = (struct ncclComm *)(uintptr_t)argv[0];
	uint64_t seq = argv[1];
	enum op op = (enum op)argv[2];
	int peer = (int)(int64_t)argv[3];
	enum cond cond = peer >= 0 ? COND_PEER : COND_ALL;
	int err;

	err = comm_wait(c, cond, seq, peer, block);
	if (err == -EAGAIN)
		return err;
	if (err == -ETIMEDOUT) {
		char who[160];

		missing_ranks(c, cond, seq, peer, who, sizeof(who));
		fail("rank %d of %d: %s seq %llu timed out after %.0f s waiting for rank(s) %s "
		     "(FQ_STANDIN_TIMEOUT_S)",
		     c->rank, c->nranks, op_names[op], (unsigned long long)seq,
		     (double)fqsi_timeout_ns() / 1e9, who);
	}
	atomic_fetch_sub(&c->pending, 1);
	return err;
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
	if (res) {
		comm_leave(*comm);
		*comm = NULL;
	}
	return res;
}

static ncclResult_t launch_op(enum op op, ncclComm_t comm, int peer, cudaStream_t stream)
{
	uint64_t a0 = (uintptr_t)comm, a1 = comm->seq++, a2 = op, a3 = (uint64_t)(int64_t)peer;
	void *params[4] = { &a0, &a1, &a2, &a3 };
	dim3 grid = { 1, 1, 1 }, block = { 1, 1, 1 };
	int err;

	/* arrival is published at enqueue, like a kernel that has been handed to the GPU */
	atomic_store(&comm->shm->arrived[comm->rank], a1 + 1);
	bump(comm->shm);
	atomic_fetch_add(&comm->pending, 1);
	err = cudaLaunchKernel(&nccl_kernels[op], grid, block, params, 0, stream);
	if (err) {
		atomic_fetch_sub(&comm->pending, 1);
		fail("rank %d: launching %s failed: cuda error %d", comm->rank, op_names[op], err);
		return ncclUnhandledCudaError;
	}
	return ncclSuccess;
}

static ncclResult_t enqueue_op(enum op op, ncclComm_t comm, int peer, int root,
			       ncclDataType_t dtype, cudaStream_t stream)
{
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
		return launch_op(op, comm, peer, stream);
	/* inside ncclGroupStart/End nothing is launched until the group ends, as in NCCL */
	if (group_n == group_cap) {
		size_t cap = group_cap ? group_cap * 2 : 16;
		struct pending_op *p = realloc(group_ops, cap * sizeof(*p));

		if (!p)
			return ncclSystemError;
		group_ops = p;
		group_cap = cap;
	}
	group_ops[group_n++] = (struct pending_op){ op, comm, peer, stream };
	return ncclSuccess;
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
	}
	return res;
}

FQSI_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclInvalidArgument;
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
	return enqueue_op(OP_ALLREDUCE, comm, -1, -1, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
				       ncclDataType_t datatype, ncclComm_t comm,
				       cudaStream_t stream)
{
	return enqueue_op(OP_ALLGATHER, comm, -1, -1, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
					   ncclDataType_t datatype, ncclRedOp_t op,
					   ncclComm_t comm, cudaStream_t stream)
{
	return enqueue_op(OP_REDUCESCATTER, comm, -1, -1, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
				       ncclDataType_t datatype, int root, ncclComm_t comm,
				       cudaStream_t stream)
{
	return enqueue_op(OP_BROADCAST, comm, -1, root, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
				   ncclComm_t comm, cudaStream_t stream)
{
	return enqueue_op(OP_BROADCAST, comm, -1, root, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
				    ncclDataType_t datatype, ncclRedOp_t op, int root,
				    ncclComm_t comm, cudaStream_t stream)
{
	return enqueue_op(OP_REDUCE, comm, -1, root, datatype, stream);
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
	return enqueue_op(OP_SEND, comm, peer, -1, datatype, stream);
}

FQSI_EXPORT ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
				  ncclComm_t comm, cudaStream_t stream)
{
	if (peer < 0)
		return ncclInvalidArgument;
	return enqueue_op(OP_RECV, comm, peer, -1, datatype, stream);
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
		ncclResult_t r = launch_op(p->op, p->comm, p->peer, p->stream);

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
