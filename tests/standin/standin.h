/* SPDX-License-Identifier: MIT */
/*
 * Private contract between the stand-in libcuda.so.1, libcudart.so.13, libnccl.so.2 and
 * fq-workload. None of this is CUDA or NCCL API: the exported functions keep the real ABI,
 * this header only says what the opaque handles point at inside the test double.
 */
#ifndef FQ_STANDIN_H
#define FQ_STANDIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define FQSI_EXPORT __attribute__((visibility("default")))

/*
 * A stand-in "device function". A CUfunction, and the host stub given to cudaLaunchKernel,
 * point at one of these. At launch the driver copies nparams 8-byte values out of the
 * kernelParams array, as the real driver copies arguments by the sizes the module declares.
 *
 * run == NULL: a timed kernel; argv[0] is its duration on the "GPU" in nanoseconds. The stream
 * keeps a GPU clock, so back-to-back kernels queue and a synchronize sleeps (off-CPU) until the
 * last one would have finished.
 * run != NULL: called when the stream reaches the item; returns 0 when done, -EAGAIN when not
 * yet and block == 0, any other -errno on failure (-ETIMEDOUT becomes a launch timeout).
 */
#define FQSI_KERNEL_MAGIC 0x6671736bu /* "fqsk" */
#define FQSI_MAX_PARAMS 8

struct fqsi_kernel {
	uint32_t magic;
	uint32_t nparams;
	const char *name;
	int (*run)(const uint64_t *argv, int block);
};

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

#endif /* FQ_STANDIN_H */
