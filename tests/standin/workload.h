/* SPDX-License-Identifier: MIT */
/*
 * fq-workload's parts, shared between its sources: the options (workload_opts.c), the rank
 * worker (workload_rank.c), the job shapes it can run (workload_shapes.c) and the job parent
 * (workload.c). Nothing here is an interface of the stand-in libraries; see standin.h.
 */
#ifndef FQ_WORKLOAD_H
#define FQ_WORKLOAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "standin.h"

/* The slice of nccl.h and cuda_runtime_api.h this program uses, with their ABI. */
typedef struct {
	char internal[128];
} ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef int ncclResult_t;
typedef struct {
	unsigned int x, y, z;
} dim3;
enum { ncclFloat32 = 7, ncclSum = 0 };

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c,
			   cudaStream_t st);
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int dt, ncclComm_t c,
			   cudaStream_t st);
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c,
			       cudaStream_t st);
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c,
			   cudaStream_t st);
ncclResult_t ncclSend(const void *s, size_t n, int dt, int peer, ncclComm_t c, cudaStream_t st);
ncclResult_t ncclRecv(void *r, size_t n, int dt, int peer, ncclComm_t c, cudaStream_t st);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, void *cfg);
const char *ncclGetErrorString(ncclResult_t r);
int cudaSetDevice(int dev);
int cudaGetDeviceCount(int *n);
int cudaStreamCreate(cudaStream_t *s);
int cudaStreamDestroy(cudaStream_t s);
int cudaStreamSynchronize(cudaStream_t s);
int cudaEventCreate(cudaEvent_t *e);
int cudaEventRecord(cudaEvent_t e, cudaStream_t s);
int cudaEventQuery(cudaEvent_t e);
int cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s);
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
const char *cudaGetErrorString(int e);

/* floats per collective: --count, default 1 Mi */
extern size_t count_floats;
#define COUNT count_floats

enum shape { SHAPE_LOOP, SHAPE_DDP, SHAPE_FSDP, SHAPE_PIPELINE };
enum slow_kind { SLOW_BUSY, SLOW_STALL, SLOW_GPU };

struct opts {
	int ranks, steps;
	long step_us, kernel_us, watchdog_us;
	int slow_rank, slow_pct, slow_from;
	enum slow_kind slow_kind;
	bool slow_measured; /* --slow-of measured: P% of the rank's own measured step */
	enum shape shape;
	int buckets, layers, stages, micro, sync_every;
	int split_every; /* ddp: a communicator split off and destroyed every K steps */
	long launch_queue, xfer_us, data_us;
	bool blocking;
	const char *device;
	int hang_rank;
	long hang_at;
	const char *cgroup_parent;
	int cgroups;
	const char *job_id;
	bool mixed;
	bool grouped;
	const char *report;
	bool worker;
	const char *netns; /* rank r runs in the network namespace <netns><r> */
};

/* Per-rank counters in a memfd both sides map: they survive a rank that is killed. */
struct rank_stat {
	_Atomic int32_t pid;
	_Atomic int32_t hung;
	_Atomic uint64_t issued;
	_Atomic uint64_t syncs;
	_Atomic uint64_t sync_wait_ns;
};

/* the stand-in driver copies one 8-byte parameter: the kernel's duration in ns */
extern const struct fqsi_kernel fwd_kernel;
extern const struct fqsi_kernel bwd_kernel;

struct worker {
	const struct opts *o;
	int rank, nranks;
	pid_t pid;
	long seq; /* operations issued on the communicator, as the library numbers them */
	FILE *report;
	struct rank_stat *stat;
	cudaEvent_t ev;
	_Atomic bool done;
	uint64_t basis_t0; /* --slow-of measured: when step slow_from / 2 began */
	long basis_us;	   /* and the step it measured at slow_from, 0 before */
};

/* A communicator other than the world one, with its own operation numbers in the report. */
struct wcomm {
	ncclComm_t c;
	long seq;
	char tag[32]; /* the report's note for its rows */
};

/* dur_ns of a collective's row: the call itself (with --blocking, the wait is in it) */
#define OP(w, name, count, call)                                                      \
	({                                                                            \
		uint64_t t0_;                                                         \
		ncclResult_t r_;                                                      \
		before_op(w, name);                                                   \
		t0_ = fqsi_now_ns();                                                  \
		r_ = (call);                                                          \
		after_op(w, NULL, name, (long)(count), r_, fqsi_now_ns() - t0_);      \
	})
#define OPC(w, wc, name, count, call)                                                 \
	({                                                                            \
		uint64_t t0_ = fqsi_now_ns();                                         \
		ncclResult_t r_ = (call);                                             \
		after_op(w, wc, name, (long)(count), r_, fqsi_now_ns() - t0_);        \
	})

/* workload_opts.c */
int parse_long(const char *s, long lo, long hi, long *out);
int parse_opts(int argc, char **argv, struct opts *o);

/* workload_rank.c */
void row(struct worker *w, const char *op, long seq, long count, uint64_t dur_ns,
	 const char *note);
void before_op(struct worker *w, const char *op);
int after_op(struct worker *w, struct wcomm *wc, const char *op, long count, ncclResult_t r,
	     uint64_t dur);
void spin_us(long us);
int run_rank(const struct opts *o);

/* workload_shapes.c */
int plant(struct worker *w, int step);
int run_shape(struct worker *w, ncclComm_t comm, cudaStream_t st, void *sb, void *rb);

#endif /* FQ_WORKLOAD_H */
