/* SPDX-License-Identifier: MIT */
/*
 * The NVML sampler's insides, shared by its files (agentd/nvml.h is the interface):
 *   nvml.c         loading NVML, the GPUs' identity, one sample of every GPU
 *   nvml_map.c     processes to GPUs: NVML's compute lists and CUDA_VISIBLE_DEVICES
 *   nvml_thread.c  the sampling thread and what it writes to the store
 */
#ifndef FLEETQ_AGENTD_NVML_INT_H
#define FLEETQ_AGENTD_NVML_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "nvml.h"
#include "records.h"

/* ---- NVML ABI, from nvml.h ---- */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_FUNCTION_NOT_FOUND 13

#define NVML_CLOCK_SM 1  /* nvmlClockType_t */
#define NVML_CLOCK_MEM 2
#define NVML_TEMPERATURE_GPU 0 /* nvmlTemperatureSensors_t */
#define NVML_MEMORY_ERROR_TYPE_CORRECTED 0
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0 /* nvmlEccCounterType_t */
#define NVML_FEATURE_ENABLED 1 /* nvmlEnableState_t */
#define NVML_NVLINK_MAX_LINKS 18
#define NVML_NVLINK_ERROR_DL_REPLAY 0 /* nvmlNvLinkErrorCounter_t */
#define NVML_NVLINK_ERROR_DL_RECOVERY 1
#define NVML_NVLINK_ERROR_DL_CRC_FLIT 2
#define NVML_NVLINK_ERROR_DL_CRC_DATA 3
#define NVML_EVENT_TYPE_XID 0x0000000000000008ULL /* nvmlEventTypeXidCriticalError */
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80

typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;

typedef struct {
	unsigned int gpu, memory;
} nvmlUtilization_t;

/* nvmlProcessInfo_v2_t, which the _v2 and _v3 process lists fill */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
	nvmlDevice_t device;
	unsigned long long eventType, eventData;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

/*
 * GPU performance monitoring (GPM, Hopper and later): the driver counts what the SMs did
 * between two samples. nvmlGpmMetricsGet_t's metrics[] is declared with
 * NVML_GPM_METRIC_MAX entries (98, then 210, then 333 as headers grew); the library reads
 * and fills numMetrics of them, and fleetq's copy is allocated with the largest size seen.
 */
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;
typedef struct {
	unsigned int version; /* NVML_GPM_SUPPORT_VERSION */
	unsigned int isSupportedDevice;
} nvmlGpmSupport_t;
typedef struct {
	unsigned int metricId;
	nvmlReturn_t nvmlReturn;
	double value;
	struct {
		char *shortName, *longName, *unit;
	} metricInfo;
} nvmlGpmMetric_t;
#define NVML_GPM_SUPPORT_VERSION 1
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_METRIC_SM_UTIL 2	  /* share of SMs busy, % */
#define NVML_GPM_METRIC_SM_OCCUPANCY 3	  /* warps resident against the most possible, % */
#define NVML_GPM_METRIC_ANY_TENSOR_UTIL 5 /* tensor pipes busy, % */
#define NVML_GPM_METRIC_DRAM_BW_UTIL 10	  /* DRAM bandwidth used against the peak, % */
#define GPM_METRIC_SLOTS 512
#define GPM_MIN_NS (100 * 1000000LL) /* two GPM samples no closer (NVIDIA's guidance) */
typedef struct {
	unsigned int version, numMetrics;
	nvmlGpmSample_t sample1, sample2;
	nvmlGpmMetric_t metrics[GPM_METRIC_SLOTS];
} nvmlGpmMetricsGet_t;

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t layout");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_v2_t layout");

struct nvml_fns {
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	const char *(*error_string)(nvmlReturn_t);
	nvmlReturn_t (*driver_version)(char *, unsigned int);
	nvmlReturn_t (*nvml_version)(char *, unsigned int);
	nvmlReturn_t (*count)(unsigned int *);
	nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
	nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int *);
	nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned int *);
	nvmlReturn_t (*reasons)(nvmlDevice_t, unsigned long long *);
	nvmlReturn_t (*temp)(nvmlDevice_t, int, unsigned int *);
	nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *);
	nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long *);
	nvmlReturn_t (*remapped)(nvmlDevice_t, unsigned int *, unsigned int *, unsigned int *,
				 unsigned int *);
	nvmlReturn_t (*pcie_gen)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*pcie_width)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*pcie_gen_max)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*pcie_width_max)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*pcie_replay)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*nvlink_state)(nvmlDevice_t, unsigned int, int *);
	nvmlReturn_t (*nvlink_err)(nvmlDevice_t, unsigned int, int, unsigned long long *);
	nvmlReturn_t (*procs)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
	nvmlReturn_t (*evset_create)(nvmlEventSet_t *);
	nvmlReturn_t (*evset_free)(nvmlEventSet_t);
	nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
	nvmlReturn_t (*evset_wait)(nvmlEventSet_t, nvmlEventData_t *, unsigned int);
	nvmlReturn_t (*gpm_support)(nvmlDevice_t, nvmlGpmSupport_t *);
	nvmlReturn_t (*gpm_alloc)(nvmlGpmSample_t *);
	nvmlReturn_t (*gpm_free)(nvmlGpmSample_t);
	nvmlReturn_t (*gpm_get)(nvmlDevice_t, nvmlGpmSample_t);
	nvmlReturn_t (*gpm_metrics)(nvmlGpmMetricsGet_t *);
};

/* Per-GPU fields whose call answered NOT_SUPPORTED: not asked again. */
enum {
	F_CLOCK_SM,
	F_CLOCK_MEM,
	F_REASONS,
	F_TEMP,
	F_POWER,
	F_POWER_LIMIT,
	F_UTIL,
	F_ECC_UNC,
	F_ECC_COR,
	F_REMAP,
	F_PCIE_GEN,
	F_PCIE_WIDTH,
	F_PCIE_REPLAY,
	F_NVL_REPLAY,
	F_NVL_RECOVERY,
	F_NVL_CRC,
	F_PROCS,
	F_GPM,
	F_MAX
};

#define MAX_GPUS 64
#define NVLINK_PERIOD_NS (60 * 1000000000LL)

struct gpu {
	nvmlDevice_t dev;
	int index;
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	char bus_id[32];
	int32_t sm_max, mem_max, pcie_gen_max, pcie_width_max;
	uint32_t nvlinks; /* bit per link that was up at start */
	int64_t nvl_next_ns; /* CLOCK_MONOTONIC of the next NVLink counter read */
	int64_t nvl_replay, nvl_recovery, nvl_crc; /* from the last read */
	uint32_t unsupported; /* bit per F_* */
	int64_t xid_count;
	int32_t xid_last;
	nvmlGpmSample_t gpm[2]; /* GPM: the previous sample and the one taken now */
	int gpm_cur;		/* which of them the next sample goes to */
	int64_t gpm_prev_ns;	/* when the previous one was taken (0: none yet) */
	struct rec_gpu_act act; /* over the interval the latest sample ended (dur_ns 0: none) */
};

/* A traced process the mapper has looked at. */
struct seen {
	int pid;
	int64_t start_ns;
	uint64_t nvml_gpus; /* GPUs already emitted with source nvml */
	uint32_t gen;       /* gpu_proc.gen of the environment read */
	bool env_done;
	bool live; /* in the latest procs list */
};

struct gpu_sampler {
	void *dl;
	struct nvml_fns f;
	bool inited;
	int n;
	struct gpu gpu[MAX_GPUS];
	nvmlEventSet_t evset;
	int nvl_next; /* the GPU whose NVLink counters are looked at first */
	char describe[256];
	nvmlProcessInfo_t *pinfo;
	unsigned int pcap;
	struct seen *seen;
	int nseen, capseen;
	struct gpu_sampler_stats st;
	nvmlGpmMetricsGet_t *gpm_q; /* one query, reused (20 KB) */
};

/*
 * Bookkeeping of one call for field f of gpu u: true when it succeeded. A
 * field found unsupported is skipped from then on (the caller checks skip()).
 */
static inline bool ok(struct gpu_sampler *g, struct gpu *u, int f, nvmlReturn_t rc)
{
	if (rc == NVML_SUCCESS)
		return true;
	if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND)
		u->unsupported |= 1u << f;
	else
		g->st.failed_calls++;
	return false;
}

static inline bool skip(const struct gpu *u, int f)
{
	return u->unsupported & (1u << f);
}

#endif
