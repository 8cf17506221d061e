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
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "nccl_int.h"
#include "nccl_tcp.h"

const char *const op_names[OP_COUNT] = {
	"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "Send", "Recv",
};

static __thread int group_depth;
static __thread struct pending_op *group_ops;
static __thread size_t group_n, group_cap;
static __thread char last_error[256];

void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	fprintf(stderr, "fq-standin nccl: %s\n", last_error);
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
	proxy_start(*comm); /* from inside the call, as NCCL starts its proxy threads */
	return res;
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
