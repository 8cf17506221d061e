/* SPDX-License-Identifier: MIT */
/*
 * A driver for the trace-plane benches: dlopens the stand-in libnccl.so.2 (and,
 * through it, libcudart/libcuda), makes one single-rank communicator per thread
 * and calls ncclAllReduce in a loop. It knows nothing about agentd: whether the
 * calls are traced depends on whether an agentd has uprobes on that file, so
 * bench/trace.sh runs it once without agentd and once with, and prints the
 * difference; bench/drops.sh runs it at paced rates and compares what it
 * issued with what the trace holds.
 *
 * Other engineers' (or a node's) agentd may trace any libnccl.so* / libcudart.so* /
 * libcuda.so* it finds in /proc/PID/maps, so the benches pass copies under other
 * names: CUDA and CUDART are loaded first (RTLD_GLOBAL), and LIBNCCL's DT_NEEDED
 * entries then resolve to them by SONAME.
 *
 *   probe_cost CUDA CUDART LIBNCCL cost [CALLS]
 *       ns per ncclAllReduce: the best of 7 rounds of CALLS calls (default
 *       200000), timed in batches of 1000 with the stream synchronized between
 *       batches, outside the timing (the stand-in queues one kernel per call).
 *   probe_cost CUDA CUDART LIBNCCL rate THREADS RATE SECONDS
 *       THREADS threads issue RATE calls/s in all (0: as fast as they can) for
 *       SECONDS; prints what was issued and the rate reached.
 *
 * Output is one line of key=value pairs; pid= lets the caller find its rows.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
	char internal[128];
} ncclUniqueId;
typedef void *ncclComm_t;
typedef void *cudaStream_t;

static int (*p_get_id)(ncclUniqueId *);
static int (*p_init)(ncclComm_t *, int, ncclUniqueId, int);
static int (*p_allreduce)(const void *, void *, size_t, int, int, ncclComm_t, cudaStream_t);
static int (*p_destroy)(ncclComm_t);
static int (*p_stream_create)(cudaStream_t *);
static int (*p_stream_sync)(cudaStream_t);

#define BATCH 1000

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (!p) {
		fprintf(stderr, "probe_cost: no '%s' in the stand-in libraries: %s\n", name,
			dlerror());
		exit(1);
	}
	return p;
}

struct rank {
	ncclComm_t comm;
	cudaStream_t stream;
};

static int rank_open(struct rank *r)
{
	ncclUniqueId id;

	if (p_stream_create(&r->stream) || p_get_id(&id) || p_init(&r->comm, 1, id, 0)) {
		fprintf(stderr, "probe_cost: cannot make a single-rank communicator\n");
		return -1;
	}
	return 0;
}

/* n calls; 0 or the first NCCL error */
static int calls(struct rank *r, int n)
{
	int i, err = 0;

	for (i = 0; i < n && !err; i++)
		err = p_allreduce(NULL, NULL, 8, 7, 0, r->comm, r->stream);
	return err;
}

static int do_cost(long n)
{
	struct rank r;
	int64_t best = INT64_MAX;
	int round;

	if (rank_open(&r))
		return 1;
	for (round = 0; round < 7; round++) {
		int64_t d = 0;
		long done;

		for (done = 0; done < n; done += BATCH) {
			int64_t t0 = now_ns();

			if (calls(&r, BATCH)) {
				fprintf(stderr, "probe_cost: ncclAllReduce failed\n");
				return 1;
			}
			d += now_ns() - t0;
			p_stream_sync(r.stream);
		}
		if (d < best)
			best = d;
	}
	p_destroy(r.comm);
	printf("pid=%d calls=%ld rounds=7 ns_per_call=%.1f\n", (int)getpid(), 7 * n,
	       (double)best / (double)n);
	return 0;
}

static double per_thread_rate;
static int64_t deadline, start;
static atomic_llong issued;
static atomic_int failed;

static void *rate_main(void *arg)
{
	struct rank r;
	long long mine = 0;

	(void)arg;
	if (rank_open(&r)) {
		atomic_store(&failed, 1);
		return NULL;
	}
	for (;;) {
		int64_t t = now_ns();
		long long due;
		int n = BATCH / 10;

		if (t >= deadline)
			break;
		if (per_thread_rate > 0) {
			due = (long long)((double)(t - start) * per_thread_rate / 1e9);
			if (due <= mine) {
				struct timespec ts = { 0, 20000 };

				nanosleep(&ts, NULL);
				continue;
			}
			if (due - mine < n)
				n = (int)(due - mine);
		}
		if (calls(&r, n)) {
			atomic_store(&failed, 1);
			break;
		}
		mine += n;
		if (mine % BATCH < n)
			p_stream_sync(r.stream);
	}
	p_stream_sync(r.stream);
	p_destroy(r.comm);
	atomic_fetch_add(&issued, mine);
	return NULL;
}

static int do_rate(int threads, double rate, double seconds)
{
	pthread_t th[256];
	int i;

	if (threads < 1 || threads > 256) {
		fprintf(stderr, "probe_cost: give 1 to 256 threads\n");
		return 2;
	}
	per_thread_rate = rate / threads;
	start = now_ns();
	deadline = start + (int64_t)(seconds * 1e9);
	for (i = 0; i < threads; i++)
		if (pthread_create(&th[i], NULL, rate_main, NULL)) {
			fprintf(stderr, "probe_cost: cannot start a thread\n");
			return 1;
		}
	for (i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	if (atomic_load(&failed)) {
		fprintf(stderr, "probe_cost: a thread failed\n");
		return 1;
	}
	printf("pid=%d threads=%d target_per_s=%.0f seconds=%.3f issued=%lld rate_per_s=%.0f\n",
	       (int)getpid(), threads, rate, (double)(now_ns() - start) / 1e9,
	       (long long)atomic_load(&issued),
	       (double)atomic_load(&issued) * 1e9 / (double)(now_ns() - start));
	return 0;
}

int main(int argc, char **argv)
{
	void *h, *cudart;

	if (argc < 5 || (strcmp(argv[4], "cost") && strcmp(argv[4], "rate")) ||
	    (!strcmp(argv[4], "rate") && argc != 8)) {
		fprintf(stderr, "usage: probe_cost CUDA CUDART LIBNCCL cost [CALLS]\n"
				"       probe_cost CUDA CUDART LIBNCCL rate THREADS RATE SECONDS\n");
		return 2;
	}
	if (!dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) ||
	    !(cudart = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL)) ||
	    !(h = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "probe_cost: cannot load the stand-in libraries: %s\n", dlerror());
		return 1;
	}
	p_get_id = sym(h, "ncclGetUniqueId");
	p_init = sym(h, "ncclCommInitRank");
	p_allreduce = sym(h, "ncclAllReduce");
	p_destroy = sym(h, "ncclCommDestroy");
	p_stream_create = sym(cudart, "cudaStreamCreate");
	p_stream_sync = sym(cudart, "cudaStreamSynchronize");
	if (!strcmp(argv[4], "cost"))
		return do_cost(argc > 5 ? atol(argv[5]) / BATCH * BATCH : 200000);
	return do_rate(atoi(argv[5]), atof(argv[6]), atof(argv[7]));
}
