/* SPDX-License-Identifier: MIT */
/*
 * fq-workload: an N-rank "training job" over the stand-in CUDA and NCCL libraries, for CI.
 *
 * The parent makes the NCCL unique id, then fork+execs one process per rank with the rank's
 * identity in its environment (as torchrun does), optionally inside per-"node" cgroups. In the
 * default shape ("loop") each rank spins on the CPU for its step's work, enqueues collectives
 * and waits in cudaStreamSynchronize, so the planted straggler shows exactly as DESIGN.md §2
 * describes. --shape ddp, fsdp and pipeline issue their collectives the way those training
 * jobs do (see README.md). --report writes what every rank really called and what its device
 * really ran, to compare a trace against.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <getopt.h>
#include <limits.h>
#include <mntent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
static size_t count_floats = 1u << 20;
#define COUNT count_floats

enum shape { SHAPE_LOOP, SHAPE_DDP, SHAPE_FSDP, SHAPE_PIPELINE };
enum slow_kind { SLOW_BUSY, SLOW_STALL, SLOW_GPU };

struct opts {
	int ranks, steps;
	long step_us, kernel_us, watchdog_us;
	int slow_rank, slow_pct, slow_from;
	enum slow_kind slow_kind;
	enum shape shape;
	int buckets, layers, stages, micro, sync_every;
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
static const struct fqsi_kernel fwd_kernel = { FQSI_KERNEL_MAGIC, 1, "fq_forward", NULL };
static const struct fqsi_kernel bwd_kernel = { FQSI_KERNEL_MAGIC, 1, "fq_backward", NULL };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fq-workload --ranks N --steps S [--step-us U] [--kernel-us K]\n"
		"         [--slow-rank R --slow-pct P [--slow-from STEP]] [--hang-rank R --hang-at SEQ]\n"
		"         [--cgroup-parent DIR --cgroups K] [--job-id ID]\n"
		"         [--ops allreduce|mixed|grouped] [--watchdog-us US] [--report FILE]\n"
		"         [--shape loop|ddp|fsdp|pipeline] [--buckets B] [--layers L]\n"
		"         [--stages P] [--micro M] [--sync-every K] [--blocking]\n"
		"         [--slow-kind busy|stall|gpu] [--launch-queue N] [--xfer-us US]\n"
		"         [--device thread|inline] [--data-us US] [--count FLOATS]\n"
		"         [--netns PREFIX]\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "ranks", 1, NULL, 'n' },	  { "steps", 1, NULL, 's' },
		{ "step-us", 1, NULL, 'u' },	  { "kernel-us", 1, NULL, 'k' },
		{ "slow-rank", 1, NULL, 'r' },	  { "slow-pct", 1, NULL, 'p' },
		{ "slow-from", 1, NULL, 'f' },	  { "hang-rank", 1, NULL, 'H' },
		{ "hang-at", 1, NULL, 'a' },	  { "cgroup-parent", 1, NULL, 'c' },
		{ "cgroups", 1, NULL, 'C' },	  { "job-id", 1, NULL, 'j' },
		{ "ops", 1, NULL, 'o' },	  { "report", 1, NULL, 'R' },
		{ "watchdog-us", 1, NULL, 'w' },  { "rank-worker", 0, NULL, 'W' },
		{ "help", 0, NULL, 'h' },	  { "shape", 1, NULL, 'S' },
		{ "buckets", 1, NULL, 'b' },	  { "layers", 1, NULL, 'l' },
		{ "stages", 1, NULL, 'P' },	  { "micro", 1, NULL, 'm' },
		{ "sync-every", 1, NULL, 'e' },	  { "blocking", 0, NULL, 'B' },
		{ "slow-kind", 1, NULL, 'K' },	  { "launch-queue", 1, NULL, 'q' },
		{ "xfer-us", 1, NULL, 'x' },	  { "device", 1, NULL, 'D' },
		{ "data-us", 1, NULL, 'L' },	  { "count", 1, NULL, 'N' },
		{ "netns", 1, NULL, 'E' },	  { 0 },
	};
	int c;
	long v;

	*o = (struct opts){ .ranks = 0, .steps = -1, .step_us = 2000, .kernel_us = 100,
			    .slow_rank = -1, .hang_rank = -1, .hang_at = -1, .buckets = 8,
			    .layers = 8, .stages = 2, .micro = 4, .sync_every = 1,
			    .launch_queue = -1, .xfer_us = -1 };
	optind = 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		const char *name = lo[0].name;
		int err = 0;

		for (int i = 0; lo[i].name; i++)
			if (lo[i].val == c)
				name = lo[i].name;
		switch (c) {
		case 'n':
			err = parse_long(optarg, 1, FQSI_MAX_RANKS, &v);
			o->ranks = (int)v;
			break;
		case 's':
			err = parse_long(optarg, 0, INT_MAX, &v);
			o->steps = (int)v;
			break;
		case 'u':
			err = parse_long(optarg, 0, 60000000, &o->step_us);
			break;
		case 'k':
			err = parse_long(optarg, 0, 60000000, &o->kernel_us);
			break;
		case 'r':
			err = parse_long(optarg, 0, FQSI_MAX_RANKS, &v);
			o->slow_rank = (int)v;
			break;
		case 'p':
			err = parse_long(optarg, 0, 100000, &v);
			o->slow_pct = (int)v;
			break;
		case 'f':
			err = parse_long(optarg, 0, INT_MAX, &v);
			o->slow_from = (int)v;
			break;
		case 'H':
			err = parse_long(optarg, 0, FQSI_MAX_RANKS, &v);
			o->hang_rank = (int)v;
			break;
		case 'a':
			err = parse_long(optarg, 0, LONG_MAX, &o->hang_at);
			break;
		case 'c':
			o->cgroup_parent = optarg;
			break;
		case 'C':
			err = parse_long(optarg, 1, FQSI_MAX_RANKS, &v);
			o->cgroups = (int)v;
			break;
		case 'j':
			o->job_id = optarg;
			break;
		case 'o':
			if (!strcmp(optarg, "mixed"))
				o->mixed = true;
			else if (!strcmp(optarg, "grouped"))
				o->grouped = true;
			else if (strcmp(optarg, "allreduce"))
				err = -EINVAL;
			break;
		case 'R':
			o->report = optarg;
			break;
		case 'w':
			err = parse_long(optarg, 0, 60000000, &o->watchdog_us);
			break;
		case 'W':
			o->worker = true;
			break;
		case 'S':
			if (!strcmp(optarg, "loop"))
				o->shape = SHAPE_LOOP;
			else if (!strcmp(optarg, "ddp"))
				o->shape = SHAPE_DDP;
			else if (!strcmp(optarg, "fsdp"))
				o->shape = SHAPE_FSDP;
			else if (!strcmp(optarg, "pipeline"))
				o->shape = SHAPE_PIPELINE;
			else
				err = -EINVAL;
			break;
		case 'b':
			err = parse_long(optarg, 1, 1024, &v);
			o->buckets = (int)v;
			break;
		case 'l':
			err = parse_long(optarg, 1, 1024, &v);
			o->layers = (int)v;
			break;
		case 'P':
			err = parse_long(optarg, 2, FQSI_MAX_RANKS, &v);
			o->stages = (int)v;
			break;
		case 'm':
			err = parse_long(optarg, 1, 1024, &v);
			o->micro = (int)v;
			break;
		case 'e':
			err = parse_long(optarg, 0, INT_MAX, &v);
			o->sync_every = (int)v;
			break;
		case 'B':
			o->blocking = true;
			break;
		case 'K':
			if (!strcmp(optarg, "busy"))
				o->slow_kind = SLOW_BUSY;
			else if (!strcmp(optarg, "stall"))
				o->slow_kind = SLOW_STALL;
			else if (!strcmp(optarg, "gpu"))
				o->slow_kind = SLOW_GPU;
			else
				err = -EINVAL;
			break;
		case 'q':
			err = parse_long(optarg, 1, 1000000, &o->launch_queue);
			break;
		case 'x':
			err = parse_long(optarg, 0, 60000000, &o->xfer_us);
			break;
		case 'L':
			err = parse_long(optarg, 0, 60000000, &o->data_us);
			break;
		case 'N':
			err = parse_long(optarg, 1, 1L << 28, &v);
			count_floats = (size_t)v;
			break;
		case 'E':
			o->netns = optarg;
			break;
		case 'D':
			if (strcmp(optarg, "thread") && strcmp(optarg, "inline"))
				err = -EINVAL;
			o->device = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (err) {
			fprintf(stderr, "fq-workload: invalid value '%s' for --%s\n", optarg, name);
			return err;
		}
	}
	if (optind < argc || o->ranks < 1 || o->steps < 0) {
		fprintf(stderr, "fq-workload: --ranks and --steps are required (see --help)\n");
		return -EINVAL;
	}
	if (o->slow_rank >= o->ranks || o->hang_rank >= o->ranks) {
		fprintf(stderr, "fq-workload: --slow-rank/--hang-rank must be below --ranks %d\n",
			o->ranks);
		return -EINVAL;
	}
	if ((o->hang_rank >= 0) != (o->hang_at >= 0)) {
		fprintf(stderr, "fq-workload: --hang-rank and --hang-at go together\n");
		return -EINVAL;
	}
	if (o->shape == SHAPE_PIPELINE && o->ranks % o->stages) {
		fprintf(stderr, "fq-workload: --ranks %d is not a multiple of --stages %d\n",
			o->ranks, o->stages);
		return -EINVAL;
	}
	if (o->shape != SHAPE_LOOP && o->device && !strcmp(o->device, "inline")) {
		fprintf(stderr, "fq-workload: --device inline applies to --shape loop only\n");
		return -EINVAL;
	}
	if (o->shape == SHAPE_LOOP && o->data_us) {
		fprintf(stderr, "fq-workload: --data-us applies to the shapes other than loop\n");
		return -EINVAL;
	}
	if (o->shape != SHAPE_LOOP && (o->mixed || o->grouped)) {
		fprintf(stderr, "fq-workload: --ops applies to --shape loop only\n");
		return -EINVAL;
	}
	if (!!o->cgroup_parent != !!o->cgroups) {
		fprintf(stderr, "fq-workload: --cgroup-parent and --cgroups go together\n");
		return -EINVAL;
	}
	return 0;
}

/* ---------------------------------------------------------------- rank worker */

struct worker {
	const struct opts *o;
	int rank, nranks;
	pid_t pid;
	long seq; /* operations issued on the communicator, as the library numbers them */
	FILE *report;
	struct rank_stat *stat;
	cudaEvent_t ev;
	_Atomic bool done;
};

static void row(struct worker *w, const char *op, long seq, long count, uint64_t dur_ns,
		const char *note)
{
	if (!w->report)
		return;
	/* the calling thread: DDP's collectives come from its backward thread */
	fprintf(w->report, "%d\t%d\t%d\t%s\t%ld\t%ld\t%llu\t%s\n", w->rank, w->pid,
		(int)syscall(SYS_gettid), op, seq, count, (unsigned long long)dur_ns,
		note ? note : "");
}

/* Called before every NCCL operation: the planted hang stops issuing at --hang-at. */
static void before_op(struct worker *w, const char *op)
{
	if (w->rank != w->o->hang_rank || w->seq != w->o->hang_at)
		return;
	if (w->report)
		fflush(w->report);
	atomic_store(&w->stat->hung, 1);
	fprintf(stderr, "fq-workload: rank %d: hanging before %s seq %ld (--hang-at), until killed\n",
		w->rank, op, w->seq);
	for (;;)
		pause();
}

/* A communicator other than the world one, with its own operation numbers in the report. */
struct wcomm {
	ncclComm_t c;
	long seq;
	char tag[32]; /* the report's note for its rows */
};

static int after_op(struct worker *w, struct wcomm *wc, const char *op, long count,
		    ncclResult_t r, uint64_t dur)
{
	long *seq = wc ? &wc->seq : &w->seq;

	if (r) {
		fprintf(stderr, "fq-workload: rank %d: %s seq %ld failed: %s\n", w->rank, op, *seq,
			ncclGetErrorString(r));
		return -EIO;
	}
	row(w, op, (*seq)++, count, dur, wc ? wc->tag : NULL);
	atomic_fetch_add(&w->stat->issued, 1);
	return 0;
}

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

/*
 * One group the way PyTorch issues coalesced and batched p2p work: an all-reduce, a nested
 * group holding another, then a send/recv pair, all launched by the outer ncclGroupEnd.
 * Reported as an "ncclGroupEnd" row: seq = the step, count = calls issued inside.
 */
static int grouped_step(struct worker *w, ncclComm_t comm, cudaStream_t stream, void *sendbuf,
			void *recvbuf, int next, int prev, int step)
{
	uint64_t t0 = fqsi_now_ns();
	long first = w->seq;
	ncclResult_t r;

	if ((r = ncclGroupStart()) ||
	    OP(w, "ncclAllReduce", COUNT,
	       ncclAllReduce(sendbuf, recvbuf, COUNT, ncclFloat32, ncclSum, comm, stream)) ||
	    (r = ncclGroupStart()) ||
	    OP(w, "ncclAllReduce", COUNT,
	       ncclAllReduce(sendbuf, recvbuf, COUNT, ncclFloat32, ncclSum, comm, stream)) ||
	    (r = ncclGroupEnd()) ||
	    OP(w, "ncclSend", COUNT, ncclSend(sendbuf, COUNT, ncclFloat32, next, comm, stream)) ||
	    OP(w, "ncclRecv", COUNT, ncclRecv(recvbuf, COUNT, ncclFloat32, prev, comm, stream)) ||
	    (r = ncclGroupEnd())) {
		fprintf(stderr, "fq-workload: rank %d: grouped calls failed: %s\n", w->rank,
			r ? ncclGetErrorString(r) : "see above");
		return -EIO;
	}
	row(w, "ncclGroupEnd", step, w->seq - first, fqsi_now_ns() - t0, NULL);
	return 0;
}

/* Burns CPU time, not wall time, so the step costs the same however busy the box is. */
static void spin_us(long us)
{
	struct timespec ts;
	uint64_t start, now;
	volatile uint64_t x = 1;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	start = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	do {
		for (int i = 0; i < 4096; i++)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
		now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	} while (now - start < (uint64_t)us * 1000);
}

/* Like PyTorch's NCCL watchdog: polls the last step's event from another thread. */
static void *watchdog(void *arg)
{
	struct worker *w = arg;
	struct timespec ts = { .tv_sec = w->o->watchdog_us / 1000000,
			       .tv_nsec = (w->o->watchdog_us % 1000000) * 1000 };

	while (!atomic_load(&w->done)) {
		cudaEventQuery(w->ev);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* ---------------------------------------------------------------- job shapes */

static void sleep_us(long us)
{
	fqsi_sleep_until(fqsi_now_ns() + (uint64_t)us * 1000);
}

/* A step's nominal length: its host side (CPU work, data wait) or its device work. */
static long nominal_us(const struct opts *o)
{
	long host = o->step_us + o->data_us;

	return host > o->kernel_us ? host : o->kernel_us;
}

static bool slowed(const struct worker *w, int step)
{
	return w->rank == w->o->slow_rank && step >= w->o->slow_from && w->o->slow_pct > 0;
}

/*
 * The start of the main thread's step: the wait for its batch (--data-us), then the planted
 * fault: stall sleeps P% of a step (off-CPU), busy spins P% of a step more; gpu leaves the CPU
 * alone and returns the percentage the step's compute kernels take of their normal device time.
 */
static int plant(struct worker *w, int step)
{
	long extra = nominal_us(w->o) * w->o->slow_pct / 100;

	/* --data-us: waiting for the next batch (data loader, I/O), off-CPU */
	if (w->o->data_us > 0)
		sleep_us(w->o->data_us);
	if (!slowed(w, step))
		return 100;
	switch (w->o->slow_kind) {
	case SLOW_STALL:
		sleep_us(extra);
		break;
	case SLOW_BUSY:
		spin_us(extra);
		break;
	case SLOW_GPU:
		return 100 + w->o->slow_pct;
	}
	return 100;
}

/* A timed compute kernel: the device is busy for ns, the host not at all. */
static int launch(struct worker *w, const struct fqsi_kernel *k, uint64_t ns, cudaStream_t st)
{
	void *args[1] = { &ns };
	dim3 one = { 1, 1, 1 };
	int r = cudaLaunchKernel(k, one, one, args, 0, st);

	if (r)
		fprintf(stderr, "fq-workload: rank %d: cudaLaunchKernel failed: %s\n", w->rank,
			cudaGetErrorString(r));
	return r ? -EIO : 0;
}

static int wait_event(struct worker *w, cudaStream_t st, cudaEvent_t ev, cudaStream_t from)
{
	int r = cudaEventRecord(ev, from);

	if (!r)
		r = cudaStreamWaitEvent(st, ev, 0);
	if (r)
		fprintf(stderr, "fq-workload: rank %d: event record/wait failed: %s\n", w->rank,
			cudaGetErrorString(r));
	return r ? -EIO : 0;
}

static int sync_step(struct worker *w, cudaStream_t st, int step)
{
	uint64_t t0 = fqsi_now_ns(), dt;
	int r = cudaStreamSynchronize(st);

	dt = fqsi_now_ns() - t0;
	if (r) {
		fprintf(stderr,
			"fq-workload: rank %d: cudaStreamSynchronize failed at step %d "
			"(after collective seq %ld): %s\n",
			w->rank, step, w->seq - 1, cudaGetErrorString(r));
		return -EIO;
	}
	row(w, "cudaStreamSynchronize", step, 0, dt, NULL);
	atomic_fetch_add(&w->stat->syncs, 1);
	atomic_fetch_add(&w->stat->sync_wait_ns, dt);
	return 0;
}

/* --sync-every K: like loss.item() every K steps; the last step always ends with one */
static int maybe_sync(struct worker *w, cudaStream_t st, int step)
{
	const struct opts *o = w->o;

	if ((o->sync_every > 0 && (step + 1) % o->sync_every == 0) || step == o->steps - 1)
		return sync_step(w, st, step);
	return 0;
}

static void step_row(struct worker *w, int step, long ncoll, uint64_t t0)
{
	row(w, "step", step, ncoll, fqsi_now_ns() - t0, slowed(w, step) ? "slow" : NULL);
}

/* DDP: the backward pass on a thread of its own, as PyTorch's autograd engine runs it. */
struct ddp {
	struct worker *w;
	ncclComm_t comm;
	cudaStream_t st;
	void *sb, *rb;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int go_step, done_step, gpu_pct, err;
	bool quit;
};

static void *ddp_backward(void *arg)
{
	struct ddp *d = arg;
	struct worker *w = d->w;
	const struct opts *o = w->o;
	int next = 0;

	for (;;) {
		uint64_t ns;
		int step, err = 0;

		pthread_mutex_lock(&d->lock);
		while (d->go_step < next && !d->quit)
			pthread_cond_wait(&d->cond, &d->lock);
		step = d->go_step;
		ns = (uint64_t)o->kernel_us * 1000 * 2 / 3 / (uint64_t)o->buckets *
		     (uint64_t)d->gpu_pct / 100;
		pthread_mutex_unlock(&d->lock);
		if (step < next)
			break;
		/* buckets become ready from the last layer back; each is reduced at once */
		for (int b = o->buckets - 1; b >= 0 && !err; b--) {
			spin_us(o->step_us / 2 / o->buckets);
			err = launch(w, &bwd_kernel, ns, d->st);
			if (!err && OP(w, "ncclAllReduce", COUNT,
				       ncclAllReduce(d->sb, d->rb, COUNT, ncclFloat32, ncclSum,
						     d->comm, d->st)))
				err = -EIO;
		}
		pthread_mutex_lock(&d->lock);
		d->done_step = step;
		d->err = err;
		pthread_cond_broadcast(&d->cond);
		pthread_mutex_unlock(&d->lock);
		next = step + 1;
	}
	return NULL;
}

static int run_ddp(struct worker *w, ncclComm_t comm, cudaStream_t st, void *sb, void *rb)
{
	const struct opts *o = w->o;
	struct ddp d = { .w = w, .comm = comm, .st = st, .sb = sb, .rb = rb, .go_step = -1,
			 .done_step = -1 };
	pthread_t bt;
	int err = 0;

	pthread_mutex_init(&d.lock, NULL);
	pthread_cond_init(&d.cond, NULL);
	if (pthread_create(&bt, NULL, ddp_backward, &d)) {
		fprintf(stderr, "fq-workload: rank %d: cannot start the backward thread\n",
			w->rank);
		return -EAGAIN;
	}
	for (int step = 0; step < o->steps && !err; step++) {
		uint64_t t0 = fqsi_now_ns(), ns;
		int pct = plant(w, step);

		ns = (uint64_t)o->kernel_us * 1000 / 3 / (uint64_t)o->buckets * (uint64_t)pct / 100;
		for (int b = 0; b < o->buckets && !err; b++) {
			spin_us(o->step_us / 2 / o->buckets);
			err = launch(w, &fwd_kernel, ns, st);
		}
		if (err)
			break;
		/* loss.backward(): the main thread waits, off-CPU, while autograd launches */
		pthread_mutex_lock(&d.lock);
		d.go_step = step;
		d.gpu_pct = pct;
		pthread_cond_broadcast(&d.cond);
		while (d.done_step < step)
			pthread_cond_wait(&d.cond, &d.lock);
		err = d.err;
		pthread_mutex_unlock(&d.lock);
		if (!err)
			err = maybe_sync(w, st, step);
		step_row(w, step, o->buckets, t0);
	}
	pthread_mutex_lock(&d.lock);
	d.quit = true;
	pthread_cond_broadcast(&d.cond);
	pthread_mutex_unlock(&d.lock);
	pthread_join(bt, NULL);
	return err;
}

/*
 * FSDP: per layer an all-gather of its parameters, prefetched one layer ahead on a second
 * stream that the compute stream waits on through an event; in backward an all-gather again
 * and a reduce-scatter of the layer's gradients once its kernel is done. All of one
 * communicator's work is on the second stream, as ProcessGroupNCCL keeps it.
 */
static int run_fsdp(struct worker *w, ncclComm_t comm, cudaStream_t st, void *sb, void *rb)
{
	const struct opts *o = w->o;
	int L = o->layers, err = 0, r;
	long n = COUNT / w->nranks;
	cudaStream_t cs = NULL;
	cudaEvent_t *ev = calloc((size_t)L + 1, sizeof(*ev));

	if (!ev)
		return -ENOMEM;
	r = cudaStreamCreate(&cs);
	for (int l = 0; !r && l <= L; l++)
		r = cudaEventCreate(&ev[l]);
	if (r) {
		fprintf(stderr, "fq-workload: rank %d: cuda setup failed: %s\n", w->rank,
			cudaGetErrorString(r));
		err = -EIO;
	}
#define AG(l)                                                                              \
	(OP(w, "ncclAllGather", n, ncclAllGather(sb, rb, (size_t)n, ncclFloat32, comm, cs)) || \
	 cudaEventRecord(ev[l], cs))
	for (int step = 0; step < o->steps && !err; step++) {
		uint64_t t0 = fqsi_now_ns(), fns, bns;
		int pct = plant(w, step);

		fns = (uint64_t)o->kernel_us * 1000 / 3 / (uint64_t)L * (uint64_t)pct / 100;
		bns = 2 * fns;
		err = AG(0) ? -EIO : 0;
		for (int l = 0; l < L && !err; l++) {
			if (l + 1 < L && AG(l + 1))
				err = -EIO;
			else if (cudaStreamWaitEvent(st, ev[l], 0))
				err = -EIO;
			spin_us(o->step_us / 2 / L);
			if (!err)
				err = launch(w, &fwd_kernel, fns, st);
		}
		if (!err && AG(L - 1))
			err = -EIO;
		for (int l = L - 1; l >= 0 && !err; l--) {
			if (l > 0 && AG(l - 1))
				err = -EIO;
			else if (cudaStreamWaitEvent(st, ev[l], 0))
				err = -EIO;
			spin_us(o->step_us / 2 / L);
			if (!err)
				err = launch(w, &bwd_kernel, bns, st);
			if (!err)
				err = wait_event(w, cs, ev[L], st);
			if (!err && OP(w, "ncclReduceScatter", n,
				       ncclReduceScatter(sb, rb, (size_t)n, ncclFloat32, ncclSum,
							 comm, cs)))
				err = -EIO;
		}
		/* the optimizer step runs after the last gradient shard arrived */
		if (!err)
			err = wait_event(w, st, ev[L], cs);
		if (!err)
			err = maybe_sync(w, st, step);
		step_row(w, step, 3L * L, t0);
	}
#undef AG
	if (cs)
		cudaStreamDestroy(cs);
	free(ev);
	return err;
}

/*
 * Pipeline: --stages stages of ranks/stages data-parallel ranks each (rank = stage * dp + d).
 * Per micro-batch, activations go forward and gradients back between neighbouring stages by
 * ncclSend/ncclRecv in a group, on a 2-rank communicator per neighbouring pair (PyTorch makes
 * one for p2p); per step an all-reduce among the ranks of a stage.
 */
static int p2p(struct worker *w, struct wcomm *wc, int peer, bool send, void *buf,
	       cudaStream_t st)
{
	ncclResult_t r = ncclGroupStart();

	if (r)
		return -EIO;
	if (send)
		r = OPC(w, wc, "ncclSend", COUNT,
			ncclSend(buf, COUNT, ncclFloat32, peer, wc->c, st));
	else
		r = OPC(w, wc, "ncclRecv", COUNT,
			ncclRecv(buf, COUNT, ncclFloat32, peer, wc->c, st));
	if (r)
		return -EIO;
	return ncclGroupEnd() ? -EIO : 0;
}

static int run_pipeline(struct worker *w, ncclComm_t world, cudaStream_t st, void *sb, void *rb)
{
	const struct opts *o = w->o;
	int P = o->stages, dp = w->nranks / P, stage = w->rank / dp, d = w->rank % dp, err = 0;
	/* boundary b joins stages b and b + 1; even boundaries come from one split, odd another */
	struct wcomm pair[2] = { { 0 } }, dpc = { 0 };
	struct wcomm *prev = NULL, *next = NULL;

	for (int parity = 0; parity < 2 && !err; parity++) {
		int b = (stage % 2 == parity) ? stage : stage - 1;
		int color = (b >= 0 && b + 1 < P) ? b * dp + d : -1;

		if (ncclCommSplit(world, color, stage, &pair[parity].c, NULL)) {
			err = -EIO;
			break;
		}
		snprintf(pair[parity].tag, sizeof(pair[parity].tag), "pp%d", b);
		if (color >= 0 && b == stage)
			next = &pair[parity];
		else if (color >= 0)
			prev = &pair[parity];
	}
	if (!err && ncclCommSplit(world, stage, d, &dpc.c, NULL))
		err = -EIO;
	snprintf(dpc.tag, sizeof(dpc.tag), "dp%d", stage);
	if (err)
		fprintf(stderr, "fq-workload: rank %d: ncclCommSplit failed\n", w->rank);
	for (int step = 0; step < o->steps && !err; step++) {
		uint64_t t0 = fqsi_now_ns(), fns;
		int pct = plant(w, step), M = o->micro;
		long ncoll = 0;

		fns = (uint64_t)o->kernel_us * 1000 / 3 / (uint64_t)M * (uint64_t)pct / 100;
		/* all forwards, then all backwards (GPipe): no cycle between neighbours */
		for (int m = 0; m < M && !err; m++) {
			if (prev && (err = p2p(w, prev, 0, false, rb, st)))
				break;
			spin_us(o->step_us / 2 / M);
			if ((err = launch(w, &fwd_kernel, fns, st)))
				break;
			if (next)
				err = p2p(w, next, 1, true, sb, st);
			ncoll += !!prev + !!next;
		}
		for (int m = 0; m < M && !err; m++) {
			if (next && (err = p2p(w, next, 1, false, rb, st)))
				break;
			spin_us(o->step_us / 2 / M);
			if ((err = launch(w, &bwd_kernel, 2 * fns, st)))
				break;
			if (prev)
				err = p2p(w, prev, 0, true, sb, st);
			ncoll += !!prev + !!next;
		}
		if (!err && dp > 1 &&
		    OPC(w, &dpc, "ncclAllReduce", COUNT,
			ncclAllReduce(sb, rb, COUNT, ncclFloat32, ncclSum, dpc.c, st)))
			err = -EIO;
		ncoll += dp > 1;
		if (!err)
			err = maybe_sync(w, st, step);
		step_row(w, step, ncoll, t0);
	}
	/* the last step synchronized: nothing queued still points at these communicators */
	for (int i = 0; i < 2; i++)
		if (pair[i].c)
			ncclCommDestroy(pair[i].c);
	if (dpc.c)
		ncclCommDestroy(dpc.c);
	return err;
}

static int run_shape(struct worker *w, ncclComm_t comm, cudaStream_t st, void *sb, void *rb)
{
	switch (w->o->shape) {
	case SHAPE_DDP:
		return run_ddp(w, comm, st, sb, rb);
	case SHAPE_FSDP:
		return run_fsdp(w, comm, st, sb, rb);
	case SHAPE_PIPELINE:
		return run_pipeline(w, comm, st, sb, rb);
	case SHAPE_LOOP:
		break;
	}
	return -EINVAL;
}

static int env_int(const char *name, int *out)
{
	const char *s = getenv(name);
	long v;

	if (!s || parse_long(s, 0, INT_MAX, &v)) {
		fprintf(stderr, "fq-workload: worker needs %s in its environment\n", name);
		return -EINVAL;
	}
	*out = (int)v;
	return 0;
}

static int hex_to_id(const char *hex, ncclUniqueId *id)
{
	if (!hex || strlen(hex) != 2 * sizeof(id->internal))
		return -EINVAL;
	for (size_t i = 0; i < sizeof(id->internal); i++) {
		unsigned int b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			return -EINVAL;
		id->internal[i] = (char)b;
	}
	return 0;
}

static void own_cgroup(char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	char line[512];

	snprintf(buf, len, "?");
	while (f && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3))
			continue;
		line[strcspn(line, "\n")] = '\0';
		if (snprintf(buf, len, "%s", line + 3) >= (int)len)
			buf[len - 2] = '~'; /* truncated: still tells the node apart in tests */
	}
	if (f)
		fclose(f);
}

/* The stand-in libraries read their knobs from the environment, as CUDA and NCCL do. */
static void set_lib_env(const struct opts *o)
{
	char buf[32];

	if (o->launch_queue > 0) {
		snprintf(buf, sizeof(buf), "%ld", o->launch_queue);
		setenv("FQ_STANDIN_LAUNCH_QUEUE", buf, 1);
	}
	if (o->xfer_us >= 0) {
		snprintf(buf, sizeof(buf), "%ld", o->xfer_us);
		setenv("FQ_STANDIN_XFER_US", buf, 1);
	}
	if (o->blocking)
		setenv("FQ_STANDIN_BLOCKING", "1", 1);
	/* the loop keeps the timing its tests were tuned on; the other shapes need devices */
	if (o->device)
		setenv("FQ_STANDIN_DEVICE", o->device, 1);
	else
		setenv("FQ_STANDIN_DEVICE", o->shape == SHAPE_LOOP ? "inline" : "thread", 0);
}

static int run_rank(const struct opts *o)
{
	struct worker w = { .o = o, .pid = getpid() };
	ncclComm_t comm = NULL;
	cudaStream_t stream = NULL;
	ncclUniqueId id;
	void *sendbuf = NULL, *recvbuf = NULL;
	bool tcp = false;
	pthread_t wd;
	bool wd_started = false;
	int local_rank, fd, ndev = 1, ret = 1, r;
	const char *path;
	char cg[256];

	if (env_int("RANK", &w.rank) || env_int("WORLD_SIZE", &w.nranks) ||
	    env_int("LOCAL_RANK", &local_rank) || env_int("FQ_WORKLOAD_STATS_FD", &fd))
		return 1;
	if (hex_to_id(getenv("FQ_NCCL_UNIQUE_ID"), &id)) {
		fprintf(stderr, "fq-workload: rank %d: FQ_NCCL_UNIQUE_ID is not 256 hex digits\n",
			w.rank);
		return 1;
	}
	w.stat = mmap(NULL, sizeof(struct rank_stat) * (size_t)w.nranks, PROT_READ | PROT_WRITE,
		      MAP_SHARED, fd, 0);
	if (w.stat == MAP_FAILED) {
		fprintf(stderr, "fq-workload: rank %d: cannot map stats: %s\n", w.rank,
			strerror(errno));
		return 1;
	}
	close(fd);
	w.stat += w.rank;
	atomic_store(&w.stat->pid, w.pid);
	path = getenv("FQ_WORKLOAD_REPORT");
	/* O_APPEND: the stand-in devices append their kernels' rows to the same file */
	fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644) : -1;
	if (path && (fd < 0 || !(w.report = fdopen(fd, "a")))) {
		fprintf(stderr, "fq-workload: rank %d: cannot write '%s': %s\n", w.rank, path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		goto cleanup;
	}
	if (path)
		setenv("FQ_STANDIN_DEVICE_LOG", path, 1);
	else
		unsetenv("FQ_STANDIN_DEVICE_LOG");
	set_lib_env(o);
	/* a row per call, on disk at once: a rank killed mid-wait still has exact ground truth */
	if (w.report)
		setvbuf(w.report, NULL, _IOLBF, 0);
	own_cgroup(cg, sizeof(cg));
	row(&w, "cgroup", -1, 0, 0, cg);
	row(&w, "globaltimer", -1, 0, fqsi_gpu_offset_ns(), NULL);

	cudaGetDeviceCount(&ndev);
	if ((r = cudaSetDevice(local_rank % ndev)) || (r = cudaStreamCreate(&stream)) ||
	    (r = cudaEventCreate(&w.ev)) || (r = cudaMalloc(&sendbuf, COUNT * 4)) ||
	    (r = cudaMalloc(&recvbuf, COUNT * 4))) {
		fprintf(stderr, "fq-workload: rank %d: cuda setup failed: %s\n", w.rank,
			cudaGetErrorString(r));
		goto cleanup;
	}
	if ((r = ncclCommInitRank(&comm, w.nranks, id, w.rank))) {
		fprintf(stderr, "fq-workload: rank %d: ncclCommInitRank failed: %s\n", w.rank,
			ncclGetErrorString(r));
		goto cleanup;
	}
	row(&w, "ncclCommInitRank", -1, w.nranks, 0, getenv("FQ_NCCL_UNIQUE_ID"));
	if (o->watchdog_us > 0 && !pthread_create(&wd, NULL, watchdog, &w))
		wd_started = true;
	if (o->shape != SHAPE_LOOP) {
		ret = run_shape(&w, comm, stream, sendbuf, recvbuf) ? 1 : 0;
		goto cleanup;
	}
	/* over TCP the all-reduce really sums: rank r sends r + 1, all get 1 + 2 + ... + n */
	tcp = getenv("FQ_STANDIN_TRANSPORT") && !strcmp(getenv("FQ_STANDIN_TRANSPORT"), "tcp");
	for (size_t i = 0; tcp && i < COUNT; i++)
		((float *)sendbuf)[i] = (float)(w.rank + 1);

	for (int step = 0; step < o->steps; step++) {
		long work = o->step_us;
		int next = (w.rank + 1) % w.nranks, prev = (w.rank + w.nranks - 1) % w.nranks;
		uint64_t t0, dt;
		int pct = plant(&w, step);

		spin_us(work);
		if (o->kernel_us > 0) {
			uint64_t ns = (uint64_t)o->kernel_us * 1000 * (uint64_t)pct / 100;
			void *args[1] = { &ns };
			dim3 one = { 1, 1, 1 };

			if ((r = cudaLaunchKernel(&fwd_kernel, one, one, args, 0, stream))) {
				fprintf(stderr, "fq-workload: rank %d: cudaLaunchKernel failed: %s\n",
					w.rank, cudaGetErrorString(r));
				goto cleanup;
			}
		}
		if (OP(&w, "ncclAllReduce", COUNT,
		       ncclAllReduce(sendbuf, recvbuf, COUNT, ncclFloat32, ncclSum, comm, stream)))
			goto cleanup;
		if (o->mixed &&
		    (OP(&w, "ncclAllGather", COUNT / w.nranks,
			ncclAllGather(sendbuf, recvbuf, COUNT / w.nranks, ncclFloat32, comm,
				      stream)) ||
		     OP(&w, "ncclBroadcast", COUNT,
			ncclBroadcast(sendbuf, recvbuf, COUNT, ncclFloat32, step % w.nranks, comm,
				      stream)) ||
		     OP(&w, "ncclReduceScatter", COUNT / w.nranks,
			ncclReduceScatter(sendbuf, recvbuf, COUNT / w.nranks, ncclFloat32, ncclSum,
					  comm, stream)) ||
		     ncclGroupStart() ||
		     OP(&w, "ncclSend", COUNT, ncclSend(sendbuf, COUNT, ncclFloat32, next, comm,
							 stream)) ||
		     OP(&w, "ncclRecv", COUNT, ncclRecv(recvbuf, COUNT, ncclFloat32, prev, comm,
							 stream)) ||
		     ncclGroupEnd()))
			goto cleanup;
		if (o->grouped && grouped_step(&w, comm, stream, sendbuf, recvbuf, next, prev, step))
			goto cleanup;
		cudaEventRecord(w.ev, stream);
		t0 = fqsi_now_ns();
		r = cudaStreamSynchronize(stream);
		dt = fqsi_now_ns() - t0;
		if (r) {
			fprintf(stderr,
				"fq-workload: rank %d: cudaStreamSynchronize failed at step %d "
				"(after collective seq %ld): %s\n",
				w.rank, step, w.seq - 1, cudaGetErrorString(r));
			goto cleanup;
		}
		row(&w, "cudaStreamSynchronize", step, 0, dt, NULL);
		atomic_fetch_add(&w.stat->syncs, 1);
		atomic_fetch_add(&w.stat->sync_wait_ns, dt);
	}
	for (size_t i = 0; tcp && o->steps > 0 && i < COUNT; i++) {
		float want = (float)w.nranks * (float)(w.nranks + 1) / 2;

		if (((float *)recvbuf)[i] != want) {
			fprintf(stderr,
				"fq-workload: rank %d: all-reduce over TCP gave %g at %zu, want %g\n",
				w.rank, (double)((float *)recvbuf)[i], i, (double)want);
			goto cleanup;
		}
	}
	ret = 0;
cleanup:
	atomic_store(&w.done, true);
	if (wd_started)
		pthread_join(wd, NULL);
	if (comm && ret)
		ncclCommAbort(comm);
	else if (comm)
		ncclCommDestroy(comm);
	if (stream)
		cudaStreamDestroy(stream);
	cudaFree(sendbuf);
	cudaFree(recvbuf);
	if (w.report)
		fclose(w.report);
	return ret;
}

/* ---------------------------------------------------------------- job parent */

struct job {
	const struct opts *o;
	char v2[PATH_MAX];  /* cgroup v2 mount point */
	char dir[PATH_MAX]; /* --cgroup-parent, resolved */
	char *made[64];	    /* directories this run created, to remove afterwards */
	int nmade;
	pid_t *pids;
	int *status;
	struct rank_stat *stat;
	char idhex[257];
	char shm[64];
};

/* The cgroup2 mount, wherever the host put it (/sys/fs/cgroup, or .../unified on hybrid). */
static int find_cgroup2(char *out, size_t len)
{
	FILE *f = setmntent("/proc/self/mounts", "r");
	struct mntent *m;
	int err = -ENOENT;

	if (!f)
		return -errno;
	while ((m = getmntent(f))) {
		if (!strcmp(m->mnt_type, "cgroup2")) {
			snprintf(out, len, "%s", m->mnt_dir);
			err = 0;
			break;
		}
	}
	endmntent(f);
	return err;
}

static int mkdir_tracked(struct job *j, const char *path)
{
	if (mkdir(path, 0755)) {
		if (errno == EEXIST)
			return 0;
		fprintf(stderr, "fq-workload: cannot create cgroup '%s': %s\n", path,
			strerror(errno));
		return -errno;
	}
	if (j->nmade < (int)(sizeof(j->made) / sizeof(j->made[0])))
		j->made[j->nmade++] = strdup(path);
	return 0;
}

static int setup_cgroups(struct job *j)
{
	const struct opts *o = j->o;
	char path[PATH_MAX + 32];
	size_t n;
	int err;

	err = find_cgroup2(j->v2, sizeof(j->v2));
	if (err) {
		fprintf(stderr, "fq-workload: no cgroup2 mount in /proc/self/mounts; "
				"mount one or drop --cgroups\n");
		return err;
	}
	n = strlen(j->v2);
	if (!strncmp(o->cgroup_parent, j->v2, n) &&
	    (o->cgroup_parent[n] == '/' || !o->cgroup_parent[n]))
		err = snprintf(j->dir, sizeof(j->dir), "%s", o->cgroup_parent);
	else
		err = snprintf(j->dir, sizeof(j->dir), "%s/%s", j->v2,
			       o->cgroup_parent + strspn(o->cgroup_parent, "/"));
	if (err >= (int)sizeof(j->dir) - 16) {
		fprintf(stderr, "fq-workload: --cgroup-parent '%s' is too long\n", o->cgroup_parent);
		return -ENAMETOOLONG;
	}
	/* mkdir -p below the mount point */
	for (char *p = j->dir + n + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		err = mkdir_tracked(j, j->dir);
		*p = '/';
		if (err)
			return err;
	}
	err = mkdir_tracked(j, j->dir);
	for (int k = 0; !err && k < o->cgroups; k++) {
		snprintf(path, sizeof(path), "%s/node%d", j->dir, k);
		err = mkdir_tracked(j, path);
	}
	return err;
}

static void cleanup_cgroups(struct job *j)
{
	/* children first: they were made after their parents */
	for (int i = j->nmade - 1; i >= 0; i--) {
		if (rmdir(j->made[i]) && errno != ENOENT)
			fprintf(stderr, "fq-workload: cannot remove cgroup '%s': %s\n", j->made[i],
				strerror(errno));
		free(j->made[i]);
	}
	j->nmade = 0;
}

/* In the forked child, before exec: join the node's cgroup, set the torchrun-like env. */
static void exec_rank(struct job *j, int rank, char **argv, int argc, const char *report_path,
		      int statfd)
{
	const struct opts *o = j->o;
	int nodes = o->cgroups ? o->cgroups : 1;
	int per = (o->ranks + nodes - 1) / nodes;
	int node = rank / per;
	int local_size = o->ranks - node * per < per ? o->ranks - node * per : per;
	char buf[PATH_MAX + 64], **args;

	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (o->cgroups) {
		FILE *f;

		snprintf(buf, sizeof(buf), "%s/node%d/cgroup.procs", j->dir, node);
		f = fopen(buf, "w");
		if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f)) {
			fprintf(stderr, "fq-workload: rank %d: cannot join cgroup '%s': %s\n", rank,
				buf, strerror(errno));
			_exit(126);
		}
	}
	if (o->netns) {
		int fd;

		/* a rank per network namespace, as a rank per host: its traffic crosses a link */
		snprintf(buf, sizeof(buf), "/run/netns/%s%d", o->netns, rank);
		fd = open(buf, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET)) {
			fprintf(stderr, "fq-workload: rank %d: cannot join network namespace '%s': "
				"%s\n", rank, buf, strerror(errno));
			_exit(126);
		}
		close(fd);
	}
#define SETENV_INT(name, v) (snprintf(buf, sizeof(buf), "%d", (int)(v)), setenv(name, buf, 1))
	SETENV_INT("RANK", rank);
	SETENV_INT("WORLD_SIZE", o->ranks);
	SETENV_INT("LOCAL_RANK", rank - node * per);
	SETENV_INT("LOCAL_WORLD_SIZE", local_size);
	SETENV_INT("GROUP_RANK", node);
	SETENV_INT("FQ_WORKLOAD_STATS_FD", statfd);
	setenv("SLURM_JOB_ID", o->job_id, 1);
	setenv("FQ_JOB_ID", o->job_id, 1);
	setenv("FQ_NCCL_UNIQUE_ID", j->idhex, 1);
	if (report_path)
		setenv("FQ_WORKLOAD_REPORT", report_path, 1);
	else
		unsetenv("FQ_WORKLOAD_REPORT");
	args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args)
		_exit(126);
	args[0] = argv[0];
	args[1] = "--rank-worker";
	for (int i = 1; i < argc; i++)
		args[i + 1] = argv[i];
	execv("/proc/self/exe", args);
	fprintf(stderr, "fq-workload: rank %d: cannot exec /proc/self/exe: %s\n", rank,
		strerror(errno));
	_exit(127);
}

static int merge_report(const struct job *j)
{
	const struct opts *o = j->o;
	char part[PATH_MAX + 32], buf[65536];
	FILE *out = fopen(o->report, "w");
	int err = 0;

	if (!out) {
		fprintf(stderr, "fq-workload: cannot write report '%s': %s\n", o->report,
			strerror(errno));
		return -errno;
	}
	fprintf(out, "rank\tpid\ttid\top\tseq\tcount\tdur_ns\tnote\n");
	for (int r = 0; r < o->ranks; r++) {
		FILE *in;
		size_t n;

		snprintf(part, sizeof(part), "%s.rank%d", o->report, r);
		in = fopen(part, "r");
		if (!in)
			continue;
		while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
			fwrite(buf, 1, n, out);
		fclose(in);
		unlink(part);
	}
	if (fclose(out))
		err = -errno;
	return err;
}

static void summarize(const struct job *j, int rank)
{
	const struct rank_stat *s = &j->stat[rank];
	int st = j->status[rank];
	char how[64];

	if (st == -1)
		snprintf(how, sizeof(how), "not reaped");
	else if (WIFEXITED(st))
		snprintf(how, sizeof(how), "exit %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(how, sizeof(how), "killed by signal %d%s", WTERMSIG(st),
			 atomic_load(&s->hung) ? " while hung" : "");
	else
		snprintf(how, sizeof(how), "not started");
	fprintf(stderr,
		"fq-workload: rank %d pid %d: %llu collectives issued, %llu syncs, "
		"sync wait %.3f ms, %s\n",
		rank, (int)j->pids[rank], (unsigned long long)atomic_load(&s->issued),
		(unsigned long long)atomic_load(&s->syncs),
		(double)atomic_load(&s->sync_wait_ns) / 1e6, how);
}

static volatile sig_atomic_t stop_signal, grace_over;

static void on_stop(int sig)
{
	if (sig == SIGALRM)
		grace_over = 1;
	else
		stop_signal = sig;
}

/* Seconds the other ranks get, after one fails, to fail on their own and say why. */
static unsigned int grace_s(void)
{
	const char *s = getenv("FQ_WORKLOAD_GRACE_S");
	long v;

	return s && !parse_long(s, 0, 3600, &v) ? (unsigned int)v : 3;
}

static int run_job(const struct opts *o, int argc, char **argv)
{
	/* no SA_RESTART: waitpid must return so the ranks can be stopped and cleaned up */
	struct sigaction sa = { .sa_handler = on_stop };
	bool forwarded = false;
	struct job j = { .o = o };
	ncclUniqueId id;
	size_t statsz = sizeof(struct rank_stat) * (size_t)o->ranks;
	int statfd = -1, running = 0, failed = 0, first_bad = -1, ret = 1;
	char part[PATH_MAX + 32], jobid[32];
	struct opts oo = *o;

	if (!oo.job_id) {
		snprintf(jobid, sizeof(jobid), "%d", (int)getpid());
		oo.job_id = jobid;
	}
	j.o = o = &oo;
	j.pids = calloc((size_t)o->ranks, sizeof(*j.pids));
	j.status = calloc((size_t)o->ranks, sizeof(*j.status));
	if (!j.pids || !j.status)
		goto cleanup;
	if (ncclGetUniqueId(&id)) {
		fprintf(stderr, "fq-workload: ncclGetUniqueId failed\n");
		goto cleanup;
	}
	for (size_t i = 0; i < sizeof(id.internal); i++)
		snprintf(j.idhex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
	fqsi_shm_name((const unsigned char *)id.internal, j.shm, sizeof(j.shm));
	/* no MFD_CLOEXEC: the ranks inherit it through exec */
	statfd = memfd_create("fq-workload-stats", 0);
	if (statfd < 0 || ftruncate(statfd, (off_t)statsz)) {
		fprintf(stderr, "fq-workload: cannot create stats memfd: %s\n", strerror(errno));
		goto cleanup;
	}
	j.stat = mmap(NULL, statsz, PROT_READ | PROT_WRITE, MAP_SHARED, statfd, 0);
	if (j.stat == MAP_FAILED) {
		j.stat = NULL;
		fprintf(stderr, "fq-workload: cannot map stats: %s\n", strerror(errno));
		goto cleanup;
	}
	if (o->cgroups && setup_cgroups(&j))
		goto cleanup;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);

	for (int r = 0; r < o->ranks; r++) {
		pid_t pid;

		snprintf(part, sizeof(part), "%s.rank%d", o->report ? o->report : "", r);
		fflush(stderr);
		pid = fork();
		if (pid < 0) {
			fprintf(stderr, "fq-workload: cannot fork rank %d: %s\n", r, strerror(errno));
			failed++;
			for (int k = 0; k < r; k++)
				kill(j.pids[k], SIGTERM);
			break;
		}
		if (!pid)
			exec_rank(&j, r, argv, argc, o->report ? part : NULL, statfd);
		j.pids[r] = pid;
		j.status[r] = -1; /* running: never signal a pid that was already reaped */
		running++;
	}
	while (running > 0) {
		int st, r;
		pid_t pid;

		if ((stop_signal || grace_over) && !forwarded) {
			if (stop_signal)
				fprintf(stderr, "fq-workload: stopped by signal %d; stopping the "
						"ranks\n", (int)stop_signal);
			for (int k = 0; k < o->ranks; k++)
				if (j.pids[k] > 0 && j.status[k] == -1)
					kill(j.pids[k], SIGTERM);
			forwarded = true;
			failed++;
		}
		pid = waitpid(-1, &st, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (r = 0; r < o->ranks && j.pids[r] != pid; r++)
			;
		if (r == o->ranks)
			continue;
		running--;
		j.status[r] = st;
		if (WIFEXITED(st) && !WEXITSTATUS(st))
			continue;
		/* like torchrun: one failed rank ends the job, or a hung peer holds it forever */
		if (!failed++) {
			first_bad = r;
			fprintf(stderr, "fq-workload: rank %d (pid %d) failed; stopping the other "
					"ranks in %u s\n", r, (int)pid, grace_s());
			if (grace_s())
				alarm(grace_s());
			else
				grace_over = 1;
		}
	}
	alarm(0);
	for (int r = 0; r < o->ranks; r++)
		if (j.pids[r])
			summarize(&j, r);
	if (o->report && merge_report(&j))
		failed++;
	if (failed) {
		if (first_bad >= 0)
			fprintf(stderr, "fq-workload: job %s failed: rank %d failed first "
					"(see its message above)\n", o->job_id, first_bad);
		else
			fprintf(stderr, "fq-workload: job %s did not complete\n", o->job_id);
		goto cleanup;
	}
	ret = 0;
cleanup:
	/* ranks that died or were killed never left the communicator: drop its segment */
	if (j.shm[0])
		shm_unlink(j.shm);
	cleanup_cgroups(&j);
	if (j.stat)
		munmap(j.stat, statsz);
	if (statfd >= 0)
		close(statfd);
	free(j.pids);
	free(j.status);
	return ret;
}

int main(int argc, char **argv)
{
	struct opts o;

	if (parse_opts(argc, argv, &o))
		return 2;
	if (o.worker)
		return run_rank(&o);
	/* the worker re-reads argv: drop nothing, the parent's own flags mean the same there */
	return run_job(&o, argc, argv);
}
