/* SPDX-License-Identifier: MIT */
/*
 * fleetq's CUDA injection library (agentd/cupti/fqcupti.c) against a scripted CUPTI
 * (scripted_cupti.c), in one process and without agentd: the test defines the hand-over
 * function fq_gpu_busy_done itself (exported from the executable, it takes the library's
 * call: the library's own is a no-op for agentd's uprobe), loads the library as the CUDA
 * driver does (dlopen, InitializeInjection) and hands it buffers of kernel records shaped
 * as real CUPTI's are: names mangled, records out of order across buffers, NCCL kernels
 * that run beside compute ones and cross slice edges, a record whose end is wild. Every slice
 * the library hands over is checked at exit (the library's own exit handler hands over the
 * last ones first).
 *   test_cupti LIBFLEETQ_CUPTI.so LIBSCRIPTED_CUPTI.so
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fqtrace.h"

struct script_kern {
	uint64_t start, end;
	uint32_t dev;
	const char *name;
};
int script_buffer(const struct script_kern *k, size_t n, size_t drop);
int script_flushes(void);
int script_enabled(void);

#define MS 1000000ull
#define MAXREC 256

static struct fq_busy_rec recs[MAXREC];
static int nrecs;
static uint64_t wild_n, wild_busy; /* device 2's slices: a record whose end is wild */

/* The library's hand-over, taken by the executable's definition. */
__attribute__((visibility("default"))) void fq_gpu_busy_done(const struct fq_busy_rec *r)
{
	if (r->device == 2) {
		wild_n++;
		wild_busy += r->busy_ns;
		return;
	}
	if (nrecs < MAXREC)
		recs[nrecs] = *r;
	nrecs++;
}

static const char *NCCL = "_Z29ncclDevKernel_AllReduce_RING_LL24ncclDevKernelArgsStorageILm4096EE";
static const char *NCCL_PLAIN = "ncclKernel_AllGather_RING_LL_Sum_float";
static const char *GEMM = "nvjet_sm90_tst_64x24_64x16_2x4_h_bz_NNT";
static const char *ELEM = "_ZN2at6native29vectorized_elementwise_kernelILi4EEEvT_";

/* The slice of device dev that starts at t (ns); NULL if none was handed over. */
static const struct fq_busy_rec *slice(int dev, uint64_t t)
{
	const struct fq_busy_rec *hit = NULL;
	int n = 0;

	for (int i = 0; i < nrecs && i < MAXREC; i++)
		if (recs[i].device == dev && recs[i].t0_ns == t) {
			hit = &recs[i];
			n++;
		}
	CHECK_MSG(n <= 1, "device %d: slice at %llu handed over %d times", dev,
		  (unsigned long long)t, n);
	return hit;
}

static uint64_t T0; /* device 0's first kernel: its slices start here, 200 ms apart */

static void expect(int dev, uint64_t t, uint64_t busy, uint64_t nccl, uint32_t kernels,
		   uint32_t nccl_kernels, uint64_t late, const char *what)
{
	const struct fq_busy_rec *r = slice(dev, t);

	CHECK_MSG(r != NULL, "%s: no slice", what);
	if (!r)
		return;
	CHECK_MSG(r->magic == FQ_BUSY_MAGIC && r->size == sizeof(*r) && r->dur_ns == 200 * MS,
		  "%s: magic %x size %u dur %llu", what, r->magic, r->size,
		  (unsigned long long)r->dur_ns);
	CHECK_MSG(r->busy_ns == busy && r->nccl_ns == nccl && r->kernels == kernels &&
			  r->nccl_kernels == nccl_kernels && r->late_ns == late,
		  "%s: busy %llu nccl %llu kernels %u/%u late %llu, want %llu %llu %u/%u %llu", what,
		  (unsigned long long)r->busy_ns, (unsigned long long)r->nccl_ns, r->kernels,
		  r->nccl_kernels, (unsigned long long)r->late_ns, (unsigned long long)busy,
		  (unsigned long long)nccl, kernels, nccl_kernels, (unsigned long long)late);
}

/* Runs after the library's exit handler (registered before it: atexit runs in reverse). */
static void check_at_exit(void)
{
	uint64_t s0 = T0, s1 = T0 + 200 * MS;

	CHECK_MSG(nrecs <= MAXREC, "%d slices handed over", nrecs);
	/* slice 0: an NCCL kernel all through it; compute beside it from 10 to 40 ms, and from
	 * 180 ms across the edge to 220 ms: 30 + 20 of compute here, 20 in slice 1 */
	expect(0, s0, 50 * MS, 200 * MS, 2, 1, 0, "slice 0, NCCL beside compute across the edge");
	/* slice 1: the NCCL kernel's last 50 ms, the 20 ms of compute; a kernel whose record came
	 * in the next buffer (within the hold) at 300-340 ms, and two overlapping ones at
	 * 350-380 and 360-390 (their union, 40 ms) */
	expect(0, s1, 20 * MS + 40 * MS + 40 * MS, 50 * MS, 3, 0, 0,
	       "slice 1, a record from a later buffer, overlapping kernels");
	/* 1.0-1.2 s: nothing but slice 5's compute at 1.05-1.10 and an unmangled NCCL name */
	expect(0, T0 + 1000 * MS, 50 * MS, 30 * MS, 1, 1, 0, "slice 5, unmangled NCCL name");
	/* the kernel at 0.6-0.7 s came after one 3.5 s later: the hold had passed it and its
	 * slice (3); its compute goes to the oldest slice still open (13: the hold's cut at
	 * 2.6 s), as late_ns; the last NCCL kernel's slice (20) is handed over at exit */
	CHECK_MSG(slice(0, T0 + 600 * MS) == NULL, "slice 3 was never open, yet handed over");
	expect(0, T0 + 2600 * MS, 0, 0, 0, 0, 100 * MS, "the slice that took the late kernel");
	expect(0, T0 + 4000 * MS, 0, 50 * MS, 0, 1, 0, "the last slice, at exit");
	CHECK_MSG(nrecs == 6, "%d slices handed over, want 6", nrecs);
	/* device 1, its own origin: one kernel, dropped records counted */
	{
		const struct fq_busy_rec *r = slice(1, T0 + 77 * MS);

		CHECK_MSG(r && r->busy_ns == 10 * MS && r->dropped >= 3,
			  "device 1: busy %llu dropped %llu", r ? (unsigned long long)r->busy_ns : 0,
			  r ? (unsigned long long)r->dropped : 0);
	}
	/* device 2: a record claiming 11 days, taken for an hour (18,000 slices), no more */
	CHECK_MSG(wild_n == 18000 && wild_busy == 3600000 * MS,
		  "device 2: %llu slices, %llu ns of compute, want 18000 and an hour",
		  (unsigned long long)wild_n, (unsigned long long)wild_busy);
	fflush(stdout);
	_exit(check_done("cupti"));
}

int main(int argc, char **argv)
{
	struct timespec now;
	int (*init)(void);
	void *lib;

	if (argc != 3) {
		fprintf(stderr, "usage: test_cupti LIBFLEETQ_CUPTI.so LIBSCRIPTED_CUPTI.so\n");
		return 2;
	}
	setenv("FLEETQ_CUPTI_LIB", argv[2], 1);
	atexit(check_at_exit);
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	CHECK_MSG(lib != NULL, "dlopen %s: %s", argv[1], dlerror());
	if (!lib)
		return 1;
	init = (int (*)(void))dlsym(lib, "InitializeInjection");
	CHECK_MSG(init && init() == 1, "InitializeInjection");
	CHECK_MSG(script_enabled(), "the library did not register its buffers, clock and kind");

	clock_gettime(CLOCK_MONOTONIC, &now);
	T0 = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	{
		/* one buffer, in completion order (not start order) */
		struct script_kern a[] = {
			{ T0 + 10 * MS, T0 + 40 * MS, 0, GEMM },
			{ T0, T0 + 250 * MS, 0, NCCL },
			{ T0 + 180 * MS, T0 + 220 * MS, 0, ELEM },
			{ T0 + 350 * MS, T0 + 380 * MS, 0, GEMM },
			{ T0 + 360 * MS, T0 + 390 * MS, 0, GEMM },
		};
		CHECK(script_buffer(a, 5, 0) == 0);
	}
	{
		/* the next buffer: a kernel that ran before the last one of the previous buffer */
		struct script_kern b[] = {
			{ T0 + 300 * MS, T0 + 340 * MS, 0, ELEM },
			{ T0 + 1000 * MS, T0 + 1030 * MS, 0, NCCL_PLAIN },
			{ T0 + 1050 * MS, T0 + 1100 * MS, 0, GEMM },
			{ T0 + 77 * MS, T0 + 87 * MS, 1, GEMM },
			{ T0 + 500 * MS, T0 + 500 * MS + 950400000 * MS, 2, GEMM },
		};
		CHECK(script_buffer(b, 5, 3) == 0);
	}
	{
		/* 3.5 s later: the hold (1.5 s) passes slices 0-9; then a record of 0.6-0.7 s */
		struct script_kern c[] = { { T0 + 4100 * MS, T0 + 4150 * MS, 0, NCCL } };
		struct script_kern d[] = { { T0 + 600 * MS, T0 + 700 * MS, 0, GEMM } };

		CHECK(script_buffer(c, 1, 0) == 0);
		CHECK(script_buffer(d, 1, 0) == 0);
	}
	/* the library's own thread asks CUPTI for its buffers every 250 ms */
	{
		struct timespec ts = { 0, 600 * 1000000L };
		int f0 = script_flushes();

		nanosleep(&ts, NULL);
		CHECK_MSG(script_flushes() - f0 >= 2, "%d flushes in 600 ms",
			  script_flushes() - f0);
	}
	return 0; /* exit: the library hands over its open slices, then check_at_exit */
}
