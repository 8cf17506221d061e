/* SPDX-License-Identifier: MIT */
/*
 * Private contract between the stand-in libcuda.so.1, libcudart.so.13, libnccl.so.2 and
 * fq-workload. None of this is CUDA or NCCL API: the exported functions keep the real ABI,
 * this header only says what the opaque handles point at inside the test double.
 */
#ifndef FQ_STANDIN_H
#define FQ_STANDIN_H

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FQSI_EXPORT __attribute__((visibility("default")))

/*
 * A stand-in "device function". A CUfunction, and the host stub given to cudaLaunchKernel,
 * point at one of these. At launch the driver copies nparams 8-byte values out of the
 * kernelParams array, as the real driver copies arguments by the sizes the module declares.
 *
 * Every stream has a "device": a thread of its own that runs the stream's items in order, in
 * real time, off-CPU (a GPU costs the host no CPU time).
 * run == NULL: a timed kernel; argv[0] is its duration on the device in nanoseconds; the device
 * sleeps until it would have finished.
 * run != NULL: called on the device thread when the stream reaches the item, with x->start_ns
 * the device clock at its start (CLOCK_MONOTONIC); sets x->end_ns and returns 0, or a -errno
 * (-ETIMEDOUT becomes a launch timeout). With x->failed the stream has already failed: release
 * what the item holds and return at once, as a faulted context drops queued work.
 */
#define FQSI_KERNEL_MAGIC 0x6671736bu /* "fqsk" */
#define FQSI_MAX_PARAMS 10

struct fqsi_exec {
	uint64_t start_ns;
	uint64_t end_ns;
	int failed;
};

struct fqsi_kernel {
	uint32_t magic;
	uint32_t nparams;
	const char *name;
	int (*run)(const uint64_t *argv, struct fqsi_exec *x);
};

/*
 * One kernel the device ran, for a CUPTI-like consumer (the stand-in libcupti.so.13, cupti.c):
 * after a stream's device finishes a timed kernel or a collective's kernel without error,
 * libcuda calls the function registered with fqsi_activity_sink(), on the device thread (in
 * inline mode: on the synchronizing thread, under the stream's lock), so it must return
 * quickly and never call back into libcuda. start_ns/end_ns are the device clock of standin.h
 * (CLOCK_MONOTONIC, without the per-rank "globaltimer" offset: CUPTI hands out timestamps
 * already normalized to its host clock); device is the ordinal current (cudaSetDevice) on the
 * thread that created the stream (the default stream: on the launching thread); stream is the
 * stream's creation number (0: the default stream); name is the kernel's, static for the
 * life of the library that defines it ("ncclDevKernel_<Op>" for the stand-in NCCL's);
 * correlation numbers the process's launches from 1, in launch order. NULL unregisters.
 */
struct fqsi_activity {
	uint64_t start_ns, end_ns;
	uint32_t device, stream;
	const char *name;
	uint32_t correlation;
};

typedef void (*fqsi_activity_fn)(const struct fqsi_activity *a);

void fqsi_activity_sink(fqsi_activity_fn fn);
/* cudaSetDevice tells the driver the calling thread's device (real: its primary context) */
void fqsi_set_device(int device);

/* Ranks one stand-in communicator can hold; the shared segment is sized for this many. */
#define FQSI_MAX_RANKS 1024

/* Shared-memory name of the communicator made from a 128-byte unique id. */
static inline void fqsi_shm_name(const unsigned char uid[128], char *out, size_t len)
{
	size_t n = 0;

	n += (size_t)snprintf(out, len, "/fq-standin-");
	for (int i = 0; i < 16 && n + 3 <= len; i++)
		n += (size_t)snprintf(out + n, len - n, "%02x", uid[i]);
}

static inline uint64_t fqsi_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* How long a wait on peers may take before the call fails: FQ_STANDIN_TIMEOUT_S, default 120 s. */
static inline uint64_t fqsi_timeout_ns(void)
{
	const char *s = getenv("FQ_STANDIN_TIMEOUT_S");
	double v = s ? strtod(s, NULL) : 0;

	if (!(v > 0))
		v = 120;
	return (uint64_t)(v * 1e9);
}

/*
 * FQ_STANDIN_DEVICE=inline keeps the earlier model, which fq-workload's loop shape and the
 * tests built on its timing rely on: no device thread, the thread that synchronizes runs the
 * stream's items itself, and a collective's arrival is published when the host enqueues it.
 * Anything else: a device thread per stream.
 */
static inline int fqsi_inline(void)
{
	const char *s = getenv("FQ_STANDIN_DEVICE");

	return s && !strcmp(s, "inline");
}

/*
 * FQ_STANDIN_DEVICE_CLOCK=device: each device keeps a clock of its own, as a GPU does; what
 * runs on it (a collective's kernel, a wait for another stream's event) starts and ends on
 * that clock, so a device thread woken late catches up instead of delaying its rank. Unset or
 * "host": a collective starts, and a wait ends, when the device thread gets there (the tests'
 * verdicts were set on that timing).
 */
static inline int fqsi_device_clock(void)
{
	/* read once per library: it is asked at every kernel */
	static _Atomic int on = -1;
	int v = atomic_load(&on);

	if (v < 0) {
		const char *s = getenv("FQ_STANDIN_DEVICE_CLOCK");

		v = s && !strcmp(s, "device") && !fqsi_inline();
		atomic_store(&on, v);
	}
	return v;
}

static inline void fqsi_sleep_until(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ull),
			       .tv_nsec = (long)(ns % 1000000000ull) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* The process's rank as the launcher gave it (RANK), 0 without one. */
static inline int fqsi_rank(void)
{
	const char *s = getenv("RANK");

	return s ? atoi(s) : 0;
}

/*
 * Each device's "globaltimer" is CLOCK_MONOTONIC plus a constant of a few hundred microseconds
 * derived from the rank, so that GPU timestamps of two ranks never compare without calibration,
 * as on real GPUs. Ground truth: the report's "globaltimer" row.
 */
static inline uint64_t fqsi_gpu_offset_ns(void)
{
	uint32_t h = (uint32_t)fqsi_rank() * 2654435761u;

	return 150000ull + (uint64_t)((h >> 16) % 351) * 1000ull;
}

/*
 * One ground-truth row, in fq-workload's report format, appended to FQ_STANDIN_DEVICE_LOG when
 * it is set (fq-workload points it at the rank's part of the report). One write(2) per row on
 * an O_APPEND descriptor: rows from the device threads and from the rank never interleave.
 */
static inline void fqsi_device_row(const char *op, long long seq, long long count, uint64_t dur,
				   const char *note)
{
	static _Atomic int log_fd = -2;
	int fd = atomic_load(&log_fd);
	char buf[512];
	int n;

	if (fd == -2) {
		const char *path = getenv("FQ_STANDIN_DEVICE_LOG");
		int want = -2;

		fd = -1;
		if (path && *path)
			fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (!atomic_compare_exchange_strong(&log_fd, &want, fd)) {
			if (fd >= 0)
				close(fd);
			fd = want;
		}
	}
	if (fd < 0)
		return;
	n = snprintf(buf, sizeof(buf), "%d\t%d\t%d\tkernel:%s\t%lld\t%lld\t%llu\t%s\n", fqsi_rank(),
		     (int)getpid(), (int)syscall(SYS_gettid), op, seq, count,
		     (unsigned long long)dur, note ? note : "");
	if (n > 0 && write(fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1) < 0)
		return; /* ground truth is best effort; the job must not fail over it */
}

#endif /* FQ_STANDIN_H */
