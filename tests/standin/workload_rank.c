/* SPDX-License-Identifier: MIT */
/*
 * fq-workload: one rank of the job, in the process the parent exec'd with --rank-worker. Its
 * report rows, the planted hang, and the default shape ("loop"); the other shapes are in
 * workload_shapes.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "workload.h"

const struct fqsi_kernel fwd_kernel = { FQSI_KERNEL_MAGIC, 1, "fq_forward", NULL };
const struct fqsi_kernel bwd_kernel = { FQSI_KERNEL_MAGIC, 1, "fq_backward", NULL };

void row(struct worker *w, const char *op, long seq, long count, uint64_t dur_ns,
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
void before_op(struct worker *w, const char *op)
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

int after_op(struct worker *w, struct wcomm *wc, const char *op, long count, ncclResult_t r,
	     uint64_t dur)
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
void spin_us(long us)
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

int run_rank(const struct opts *o)
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

