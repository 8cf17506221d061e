/* SPDX-License-Identifier: MIT */
/*
 * The stand-in libnccl.so.2's parts, shared between its sources: NCCL's types (the ABI), the
 * communicator and its shared-memory segment (nccl_comm.c), the collective's kernel and its
 * launch (nccl_kernel.c), the profiler plugin's calls (nccl_prof.c) and the entry points
 * (nccl.c). Nothing here is exported: the library keeps NCCL's C ABI only.
 */
#ifndef FQSI_NCCL_INT_H
#define FQSI_NCCL_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "standin.h"
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

extern const char *const op_names[OP_COUNT];

/*
 * Arrival times kept per rank: a rank can be at most a collective or two past one that a peer
 * has not finished (it needs that peer's next arrival to finish its own), so a short ring holds
 * every time a peer still reads.
 */
#define ARRIVAL_RING 16

/* One segment per communicator, shared by every rank's process, zero-filled when created. */
struct shm {
	_Atomic uint32_t gen; /* futex word: bumped on every join, arrival and barrier */
	_Atomic uint32_t nranks;
	_Atomic uint32_t joined;
	_Atomic uint32_t left;
	_Atomic uint32_t present[FQSI_MAX_RANKS];
	_Atomic uint64_t arrived[FQSI_MAX_RANKS]; /* operations each rank has enqueued */
	_Atomic uint64_t barrier[FQSI_MAX_RANKS];
	/* FQ_STANDIN_DEVICE_CLOCK=device: each rank's device-clock arrival at seq, by seq % ring */
	_Atomic uint64_t arrived_ns[FQSI_MAX_RANKS][ARRIVAL_RING];
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
	struct proxy *proxy;  /* FQ_STANDIN_PROXY_SPIN_PCT: NCCL's own threads, else NULL */
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

enum cond { COND_JOINED, COND_ALL, COND_PEER, COND_BARRIER };

/* nccl.c */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
ncclResult_t launch_op(const struct pending_op *p);

/* nccl_comm.c */
void bump(struct shm *sh);
int comm_wait(const struct ncclComm *c, enum cond cond, uint64_t v, int peer, int block);
void missing_ranks(const struct ncclComm *c, enum cond cond, uint64_t v, int peer, char *buf,
		   size_t len);
void publish_arrival(struct ncclComm *c, uint64_t seq);
ncclResult_t comm_join(ncclComm_t *out, int nranks, const unsigned char *uid, int rank, int cudev);
void comm_leave(struct ncclComm *c);
ncclResult_t comm_wait_joined(struct ncclComm *c);

/* nccl_prof.c */
ncclResult_t prof_start(struct ncclComm *c, void **h, fq_nccl_descr_t *d);
void prof_stop(void *h);
void prof_record(void *h, int state, fq_nccl_state_args_t *a);
uint64_t plugin_hash(const struct ncclComm *c);
void prof_init(struct ncclComm *c);
void prof_finalize(struct ncclComm *c);
void proxy_start(struct ncclComm *c);
void proxy_stop(struct ncclComm *c);

#endif /* FQSI_NCCL_INT_H */
