/* SPDX-License-Identifier: MIT */
/*
 * The NVML sampler alone, on a real GPU node: prints every field of one
 * sample of each GPU, the processes given as pids mapped to GPUs, and the
 * cost of one sample of every GPU over N samples. No agentd, no store: the
 * sampler's thread is not used (its store calls are replaced below by ones that count).
 * build: cc -D_GNU_SOURCE -std=gnu11 -O2 -Iagentd bench/gpu/nvml_cost.c agentd/nvml.c -ldl
 *        -lpthread -o nvml_cost
 * usage: nvml_cost [SAMPLES] [PID...]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nvml.h"
#include "store.h"

int store_put(struct store *s, const struct rec *r)
{
	(void)s, (void)r;
	return 0;
}

int store_set_meta_int(struct store *s, const char *key, int64_t v)
{
	(void)s, (void)key, (void)v;
	return 0;
}

int store_set_meta_text(struct store *s, const char *key, const char *v)
{
	(void)s, (void)key, (void)v;
	return 0;
}

static int quiet(void *arg, const struct rec_gpu *r)
{
	(void)arg, (void)r;
	return 0;
}

#define I32(x) ((x) == REC_NULL32 ? -1LL : (long long)(x))
#define I64(x) ((x) == REC_NULL ? -1LL : (long long)(x))

static int show(void *arg, const struct rec_gpu *r)
{
	(void)arg;
	printf("gpu %d %s %s: sm %lld/%lld MHz mem %lld/%lld MHz reasons 0x%llx temp %lld C "
	       "power %lld/%lld mW util %lld/%lld%% ecc unc %lld cor %lld remap %lld/%lld "
	       "pending %lld failed %lld xid %lld last %lld pcie gen %lld/%lld x%lld/%lld "
	       "replays %lld nvlink replay %lld recovery %lld crc %lld (-1: NULL)\n",
	       r->gpu_index, r->uuid ? r->uuid : "-", r->pci_bus_id ? r->pci_bus_id : "-",
	       I32(r->sm_clock_mhz), I32(r->sm_clock_max_mhz), I32(r->mem_clock_mhz),
	       I32(r->mem_clock_max_mhz), I64(r->clock_reasons), I32(r->temp_c),
	       I32(r->power_mw), I32(r->power_limit_mw), I32(r->util_gpu_pct),
	       I32(r->util_mem_pct), I64(r->ecc_uncorrected), I64(r->ecc_corrected),
	       I32(r->remap_corrected), I32(r->remap_uncorrected), I32(r->remap_pending),
	       I32(r->remap_failed), I64(r->xid_count), I32(r->xid_last), I32(r->pcie_gen),
	       I32(r->pcie_gen_max), I32(r->pcie_width), I32(r->pcie_width_max),
	       I32(r->pcie_replays), I64(r->nvlink_replay), I64(r->nvlink_recovery),
	       I64(r->nvlink_crc));
	return 0;
}

static int show_map(void *arg, const struct rec_process_gpu *r)
{
	(void)arg;
	printf("pid %lld -> gpu %lld %s (%s)\n", (long long)r->pid, (long long)r->gpu_index,
	       r->gpu_uuid, r->source);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000, np = argc > 2 ? argc - 2 : 0;
	struct gpu_proc *procs = calloc((size_t)np + 1, sizeof(*procs));
	struct gpu_sampler_stats st;
	struct gpu_sampler *g;
	char *cause = NULL;
	struct timespec t0, t1;

	g = gpu_sampler_new(getenv("NVML_LIB"), &cause);
	if (!g) {
		printf("GPU sampling off: %s\n", cause ? cause : "?");
		return 1;
	}
	printf("%s\n", gpu_sampler_describe(g));
	gpu_sampler_sample(g, 0, show, NULL);
	for (int i = 0; i < np; i++)
		procs[i] = (struct gpu_proc){ .pid = atoi(argv[i + 2]), .start_ns = 0 };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	printf("mapped %d\n", gpu_sampler_map(g, 0, procs, np, show_map, NULL));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("one map pass: %lld ns\n", (long long)((t1.tv_sec - t0.tv_sec) * 1000000000LL +
						   t1.tv_nsec - t0.tv_nsec));
	for (int i = 0; i < n; i++)
		gpu_sampler_sample(g, i, quiet, NULL);
	gpu_sampler_get_stats(g, &st);
	printf("one sample of %d GPUs: mean %lld ns, min %lld ns, max %lld ns over %lld samples, "
	       "%lld failed calls; one GPU's NVLink counters %lld ns\n", gpu_sampler_count(g),
	       (long long)(st.total_ns / st.samples), (long long)st.min_ns, (long long)st.max_ns,
	       (long long)st.samples, (long long)st.failed_calls, (long long)st.nvlink_ns);
	gpu_sampler_free(g);
	free(procs);
	return 0;
}
