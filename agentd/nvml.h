/* SPDX-License-Identifier: MIT */
/*
 * GPU health from NVML, as gpu_samples rows, and which GPUs each traced
 * process uses, as process_gpus rows (issue 17: a throttled or degraded GPU is
 * the most common slow rank). libnvidia-ml is loaded at run time with dlopen:
 * no build dependency, and a node without the driver samples nothing and says
 * why. Read-only NVML calls only: nothing here sets a clock, limit or mode.
 */
#ifndef FLEETQ_AGENTD_NVML_H
#define FLEETQ_AGENTD_NVML_H

#include <stdbool.h>
#include <stdint.h>
#include "records.h"

#define GPU_DEFAULT_LIB "libnvidia-ml.so.1"

struct gpu_sampler;

struct gpu_sampler_stats {
	int64_t samples;       /* gpu_sampler_sample calls */
	int64_t last_ns;       /* cost of the last one (all GPUs), CLOCK_MONOTONIC ns */
	int64_t min_ns, max_ns, total_ns;
	int64_t failed_calls;  /* NVML calls that failed (their column stored NULL) */
	int64_t nvlink_ns;     /* the last NVLink counter read of one GPU (within a sample) */
	int64_t mappings;      /* process_gpus rows emitted */
};

/*
 * Loads lib (NULL: GPU_DEFAULT_LIB, found the way dlopen finds it), calls
 * nvmlInit_v2 and reads each GPU's identity. NULL with errno and *cause (the
 * caller frees) when the library is absent, NVML does not start, or it sees no
 * GPU; *cause is the one line `fleetq ping` shows.
 */
struct gpu_sampler *gpu_sampler_new(const char *lib, char **cause);

/* GPUs found at start. */
int gpu_sampler_count(const struct gpu_sampler *g);

/* One line for meta 'gpu_status': GPU count, driver and NVML versions. Owned by g. */
const char *gpu_sampler_describe(const struct gpu_sampler *g);

/*
 * Samples every GPU once: one rec_gpu per GPU with ts_ns, passed to emit (the
 * strings live until emit returns). A value whose NVML call fails or is not
 * supported is REC_NULL / REC_NULL32 and the rest of the row is kept. Returns
 * the number of rows emitted.
 */
int gpu_sampler_sample(struct gpu_sampler *g, int64_t ts_ns,
		       int (*emit)(void *arg, const struct rec_gpu *r), void *arg);

/*
 * What the i-th GPU's SMs did over the interval its latest sample ended (NVML's GPU
 * performance monitoring, GPM: Hopper and later): false where there is none (no GPM, the
 * GPU's first sample, a failed call). uuid points into the sampler.
 */
bool gpu_sampler_activity(const struct gpu_sampler *g, int i, struct rec_gpu_act *a);

/* A traced process, as the tracer knows it. */
struct gpu_proc {
	int pid;
	int64_t start_ns; /* processes.start_ns */
	/*
	 * Changes when the process execs (same pid and start time, a new environment): a
	 * launcher's child seen between its fork and its exec still has the launcher's
	 * environment, so the new one is read again.
	 */
	uint32_t gen;
};

/*
 * Maps processes to GPUs and emits one rec_process_gpu per (process, GPU,
 * source) not emitted before:
 * - "nvml": the driver lists the pid among the GPU's compute processes
 *   (nvmlDeviceGetComputeRunningProcesses): what the process really uses;
 * - "local_rank": LOCAL_RANK=n in /proc/PID/environ picks the n-th entry of
 *   CUDA_VISIBLE_DEVICES, or GPU n when that is unset (torchrun's cuda:LOCAL_RANK);
 * - "cuda_visible_devices": CUDA_VISIBLE_DEVICES names one GPU (index or UUID
 *   prefix), or several and no LOCAL_RANK is set: each one named.
 * procs: the traced processes (pids the driver lists that are not traced are
 * left out). Returns the number of rows emitted.
 */
int gpu_sampler_map(struct gpu_sampler *g, int64_t ts_ns, const struct gpu_proc *procs, int n,
		    int (*emit)(void *arg, const struct rec_process_gpu *r), void *arg);

/*
 * The environment rule alone (what gpu_sampler_map applies to a process's
 * environment): fills idx[] with up to max NVML indexes and src with the
 * source name; returns how many. cvd or local_rank may be NULL (unset).
 */
int gpu_sampler_env_map(const struct gpu_sampler *g, const char *cvd, const char *local_rank,
			int *idx, int max, const char **src);

void gpu_sampler_get_stats(const struct gpu_sampler *g, struct gpu_sampler_stats *st);

/* nvmlShutdown; the library stays mapped (NVML may leave threads behind). NULL is fine. */
void gpu_sampler_free(struct gpu_sampler *g);

/* ---- the sampling thread, writing through the store ---- */

struct store;
struct gpu_thread;

struct gpu_thread_opts {
	const char *lib; /* NULL: GPU_DEFAULT_LIB */
	int interval_ms; /* > 0 */
	/* the traced processes: fills up to max, returns how many; NULL: map none */
	int (*list_procs)(void *arg, struct gpu_proc *out, int max);
	void *arg;
};

/*
 * Starts sampling on a thread of its own, writing gpu_samples and process_gpus
 * through st, and sets meta 'gpu_status' (what it samples, or why it does not)
 * and, as it goes, 'gpu_sample_ns' / 'gpu_sample_max_ns' (the cost of one
 * sample of every GPU). Returns NULL when there is nothing to sample (no
 * library, no GPU): meta says why and *cause (caller frees) has the same line.
 */
struct gpu_thread *gpu_thread_start(const struct gpu_thread_opts *o, struct store *st,
				    char **cause);
/* Stops the thread, writes the final cost to meta. NULL is fine. */
void gpu_thread_stop(struct gpu_thread *t);

#endif
