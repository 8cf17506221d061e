/* SPDX-License-Identifier: MIT */
/*
 * fq-workload: an N-rank "training job" over the stand-in CUDA and NCCL libraries, for CI.
 *
 * The parent makes the NCCL unique id, then fork+execs one process per rank with the rank's
 * identity in its environment (as torchrun does), optionally inside per-"node" cgroups. Each
 * rank spins on the CPU for its step's work, enqueues collectives and waits in
 * cudaStreamSynchronize, so the planted straggler shows exactly as DESIGN.md §2 describes.
 * --report writes what every rank really called, to compare a trace against.
 */
#include <errno.h>
#include <fcntl.h>
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
const char *ncclGetErrorString(ncclResult_t r);
int cudaSetDevice(int dev);
int cudaGetDeviceCount(int *n);
int cudaStreamCreate(cudaStream_t *s);
int cudaStreamDestroy(cudaStream_t s);
int cudaStreamSynchronize(cudaStream_t s);
int cudaEventCreate(cudaEvent_t *e);
int cudaEventRecord(cudaEvent_t e, cudaStream_t s);
int cudaEventQuery(cudaEvent_t e);
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shmem, cudaStream_t s);
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
const char *cudaGetErrorString(int e);

#define COUNT (1u << 20) /* floats per collective */

struct opts {
	int ranks, steps;
	long step_us, kernel_us, watchdog_us;
	int slow_rank, slow_pct, slow_from;
	int hang_rank;
	long hang_at;
	const char *cgroup_parent;
	int cgroups;
	const char *job_id;
	bool mixed;
	bool grouped;
	const char *report;
	bool worker;
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

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fq-workload --ranks N --steps S [--step-us U] [--kernel-us K]\n"
		"         [--slow-rank R --slow-pct P [--slow-from STEP]] [--hang-rank R --hang-at SEQ]\n"
		"         [--cgroup-parent DIR --cgroups K] [--job-id ID]\n"
		"         [--ops allreduce|mixed|grouped] [--watchdog-us US] [--report FILE]\n");
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
		{ "help", 0, NULL, 'h' },	  { 0 },
	};
	int c;
	long v;

	*o = (struct opts){ .ranks = 0, .steps = -1, .step_us = 2000, .kernel_us = 100,
			    .slow_rank = -1, .hang_rank = -1, .hang_at = -1 };
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
	pid_t pid, tid;
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
	fprintf(w->report, "%d\t%d\t%d\t%s\t%ld\t%ld\t%llu\t%s\n", w->rank, w->pid, w->tid, op,
		seq, count, (unsigned long long)dur_ns, note ? note : "");
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

static int after_op(struct worker *w, const char *op, long count, ncclResult_t r)
{
	if (r) {
		fprintf(stderr, "fq-workload: rank %d: %s seq %ld failed: %s\n", w->rank, op,
			w->seq, ncclGetErrorString(r));
		return -EIO;
	}
	row(w, op, w->seq++, count, 0, NULL);
	atomic_fetch_add(&w->stat->issued, 1);
	return 0;
}

#define OP(w, name, count, call)                                     \
	({                                                           \
		before_op(w, name);                                  \
		after_op(w, name, (long)(count), call);              \
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

static int run_rank(const struct opts *o)
{
	struct worker w = { .o = o, .pid = getpid(), .tid = (pid_t)syscall(SYS_gettid) };
	ncclComm_t comm = NULL;
	cudaStream_t stream = NULL;
	ncclUniqueId id;
	void *sendbuf = NULL, *recvbuf = NULL;
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
	if (path && !(w.report = fopen(path, "w"))) {
		fprintf(stderr, "fq-workload: rank %d: cannot write '%s': %s\n", w.rank, path,
			strerror(errno));
		goto cleanup;
	}
	/* a row per call, on disk at once: a rank killed mid-wait still has exact ground truth */
	if (w.report)
		setvbuf(w.report, NULL, _IOLBF, 0);
	own_cgroup(cg, sizeof(cg));
	row(&w, "cgroup", -1, 0, 0, cg);

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

	for (int step = 0; step < o->steps; step++) {
		long work = o->step_us;
		int next = (w.rank + 1) % w.nranks, prev = (w.rank + w.nranks - 1) % w.nranks;
		uint64_t t0, dt;

		if (w.rank == o->slow_rank && step >= o->slow_from)
			work += work * o->slow_pct / 100;
		spin_us(work);
		if (o->kernel_us > 0) {
			uint64_t ns = (uint64_t)o->kernel_us * 1000;
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
