/* SPDX-License-Identifier: MIT */
/*
 * NVML sampler. The library is opened with dlopen and every function looked up
 * with dlsym, so agentd neither builds nor links against the driver: the few
 * types and constants used are declared below from NVIDIA's public nvml.h
 * (the v2/v3 entry points the unversioned macros of a current header name).
 *
 * Why the shape:
 * - One sample reads every GPU back to back on one thread, so rows of one
 *   sample share ts_ns and a rank's GPU can be compared with its peers' at the
 *   same instant.
 * - A call that fails leaves its column NULL, never the row: a GPU that does not
 *   report power (or a driver without row remapping) still has its clocks.
 *   Calls answered NOT_SUPPORTED (or missing from an old library) are not made
 *   again for that GPU: the cost of a sample is then what the GPU can report.
 * - Identity and maxima (UUID, PCI bus id, max clocks, max PCIe link, which
 *   NVLinks are up) do not change while the driver is loaded: read once.
 * - XIDs come only as events: one event set, drained without waiting at each
 *   sample (nvmlEventSetWait_v2 with timeout 0), counted per GPU.
 * - NVLink error counters are slow to read: measured on 4x H100 (driver 580), one
 *   nvmlDeviceGetNvLinkErrorCounter call takes 1 to 1.4 ms, so 18 links x 4
 *   counters cost 75 to 107 ms per GPU, against 1.2 to 1.6 ms for every other
 *   field of all four GPUs together. They are read every NVLINK_PERIOD_NS, for
 *   at most one GPU per sample and after every GPU's other fields (the sample's
 *   other values keep their instant), and rows in between repeat the last
 *   values: error counters only grow, and seeing one a minute late costs little.
 * - Read-only by construction: only Get*, event registration and init/shutdown
 *   are looked up; no setter is declared here at all.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"
#include "cause.h"
#include "clock.h"
#include "store.h"

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

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
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
};

/* A traced process the mapper has looked at. */
struct seen {
	int pid;
	int64_t start_ns;
	uint64_t nvml_gpus; /* GPUs already emitted with source nvml */
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
};

static const char *nvml_err(const struct gpu_sampler *g, nvmlReturn_t rc)
{
	const char *s = g->f.error_string ? g->f.error_string(rc) : NULL;

	return s ? s : "unknown NVML error";
}

static int32_t clamp32(unsigned long long v)
{
	return v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

static int64_t clamp64(unsigned long long v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/*
 * Bookkeeping of one call for field f of gpu u: true when it succeeded. A
 * field found unsupported is skipped from then on (the caller checks skip()).
 */
static bool ok(struct gpu_sampler *g, struct gpu *u, int f, nvmlReturn_t rc)
{
	if (rc == NVML_SUCCESS)
		return true;
	if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND)
		u->unsupported |= 1u << f;
	else
		g->st.failed_calls++;
	return false;
}

static bool skip(const struct gpu *u, int f)
{
	return u->unsupported & (1u << f);
}

#define SYM(field, name) (*(void **)&g->f.field = dlsym(g->dl, name))

static void load_syms(struct gpu_sampler *g)
{
	SYM(init, "nvmlInit_v2");
	SYM(shutdown, "nvmlShutdown");
	SYM(error_string, "nvmlErrorString");
	SYM(driver_version, "nvmlSystemGetDriverVersion");
	SYM(nvml_version, "nvmlSystemGetNVMLVersion");
	SYM(count, "nvmlDeviceGetCount_v2");
	SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
	SYM(uuid, "nvmlDeviceGetUUID");
	SYM(pci, "nvmlDeviceGetPciInfo_v3");
	SYM(clock, "nvmlDeviceGetClockInfo");
	SYM(max_clock, "nvmlDeviceGetMaxClockInfo");
	/* renamed in driver 535; the old name stays exported for older drivers */
	if (!SYM(reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
		SYM(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
	SYM(temp, "nvmlDeviceGetTemperature");
	SYM(power, "nvmlDeviceGetPowerUsage");
	SYM(power_limit, "nvmlDeviceGetEnforcedPowerLimit");
	SYM(util, "nvmlDeviceGetUtilizationRates");
	SYM(ecc, "nvmlDeviceGetTotalEccErrors");
	SYM(remapped, "nvmlDeviceGetRemappedRows");
	SYM(pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
	SYM(pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");
	SYM(pcie_gen_max, "nvmlDeviceGetMaxPcieLinkGeneration");
	SYM(pcie_width_max, "nvmlDeviceGetMaxPcieLinkWidth");
	SYM(pcie_replay, "nvmlDeviceGetPcieReplayCounter");
	SYM(nvlink_state, "nvmlDeviceGetNvLinkState");
	SYM(nvlink_err, "nvmlDeviceGetNvLinkErrorCounter");
	/* _v3 and _v2 fill the same struct; _v3 came with driver 510 */
	if (!SYM(procs, "nvmlDeviceGetComputeRunningProcesses_v3"))
		SYM(procs, "nvmlDeviceGetComputeRunningProcesses_v2");
	SYM(evset_create, "nvmlEventSetCreate");
	SYM(evset_free, "nvmlEventSetFree");
	SYM(register_events, "nvmlDeviceRegisterEvents");
	SYM(evset_wait, "nvmlEventSetWait_v2");
}

/* What does not change while the driver is loaded. */
static void read_static(struct gpu_sampler *g, struct gpu *u)
{
	nvmlPciInfo_t pci;
	unsigned int v;
	int state;

	u->sm_max = u->mem_max = u->pcie_gen_max = u->pcie_width_max = REC_NULL32;
	u->nvl_replay = u->nvl_recovery = u->nvl_crc = REC_NULL;
	if (g->f.uuid && g->f.uuid(u->dev, u->uuid, sizeof(u->uuid)) != NVML_SUCCESS)
		u->uuid[0] = '\0';
	u->uuid[sizeof(u->uuid) - 1] = '\0';
	memset(&pci, 0, sizeof(pci));
	if (g->f.pci && g->f.pci(u->dev, &pci) == NVML_SUCCESS) {
		memcpy(u->bus_id, pci.busId, sizeof(u->bus_id));
		u->bus_id[sizeof(u->bus_id) - 1] = '\0';
	}
	if (g->f.max_clock && g->f.max_clock(u->dev, NVML_CLOCK_SM, &v) == NVML_SUCCESS)
		u->sm_max = clamp32(v);
	if (g->f.max_clock && g->f.max_clock(u->dev, NVML_CLOCK_MEM, &v) == NVML_SUCCESS)
		u->mem_max = clamp32(v);
	if (g->f.pcie_gen_max && g->f.pcie_gen_max(u->dev, &v) == NVML_SUCCESS)
		u->pcie_gen_max = clamp32(v);
	if (g->f.pcie_width_max && g->f.pcie_width_max(u->dev, &v) == NVML_SUCCESS)
		u->pcie_width_max = clamp32(v);
	for (unsigned int l = 0; g->f.nvlink_state && l < NVML_NVLINK_MAX_LINKS; l++) {
		state = 0;
		if (g->f.nvlink_state(u->dev, l, &state) != NVML_SUCCESS)
			break; /* NOT_SUPPORTED: no NVLink; INVALID_ARGUMENT: past the last link */
		if (state == NVML_FEATURE_ENABLED)
			u->nvlinks |= 1u << l;
	}
	if (!u->nvlinks)
		u->unsupported |= 1u << F_NVL_REPLAY | 1u << F_NVL_RECOVERY | 1u << F_NVL_CRC;
	/* this GPU (or library) cannot report XIDs: NULL */
	if (!g->evset ||
	    g->f.register_events(u->dev, NVML_EVENT_TYPE_XID, g->evset) != NVML_SUCCESS)
		u->xid_count = REC_NULL;
	u->xid_last = REC_NULL32;
}

struct gpu_sampler *gpu_sampler_new(const char *lib, char **cause)
{
	char drv[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "",
	     ver[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "";
	struct gpu_sampler *g = calloc(1, sizeof(*g));
	unsigned int count = 0;
	nvmlReturn_t rc;
	int err = ENODEV;

	if (!lib)
		lib = GPU_DEFAULT_LIB;
	if (!g) {
		fq_fail(cause, 0, "out of memory starting the GPU sampler");
		errno = ENOMEM;
		return NULL;
	}
#ifdef FLEETQ_STATIC_BUILD
	/*
	 * NVML is linked against the system's libc; loaded into a statically linked program it
	 * runs on a libc that was never set up (on a 4-GPU host: SIGFPE inside libc.so.6 right
	 * after the load, the agent gone). Refuse, and say what works.
	 */
	fq_fail(cause, 0, "cannot load '%s': this agentd is statically linked and cannot load "
			  "NVML; use a dynamically linked agentd for GPU samples", lib);
	err = ENOTSUP;
	goto fail;
#endif
	g->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!g->dl) {
		fq_fail(cause, 0, "cannot load '%s' (%s): no NVIDIA driver here, or point "
				  "--nvml-lib at libnvidia-ml.so.1", lib, dlerror());
		err = ENOENT;
		goto fail;
	}
	load_syms(g);
	if (!g->f.init || !g->f.shutdown || !g->f.count || !g->f.handle) {
		fq_fail(cause, 0, "'%s' is not NVML: it lacks nvmlInit_v2 or nvmlDeviceGetCount_v2",
			lib);
		err = ENOEXEC;
		goto fail;
	}
	rc = g->f.init();
	if (rc != NVML_SUCCESS) {
		fq_fail(cause, 0, "nvmlInit failed: %s (is the NVIDIA driver loaded?)",
			nvml_err(g, rc));
		goto fail;
	}
	g->inited = true;
	rc = g->f.count(&count);
	if (rc != NVML_SUCCESS || count == 0) {
		fq_fail(cause, 0, "NVML sees no GPU%s%s", rc != NVML_SUCCESS ? ": " : "",
			rc != NVML_SUCCESS ? nvml_err(g, rc) : "");
		goto fail;
	}
	if (count > MAX_GPUS)
		count = MAX_GPUS;
	if (g->f.evset_create && g->f.evset_wait && g->f.register_events &&
	    g->f.evset_create(&g->evset) != NVML_SUCCESS)
		g->evset = NULL;
	for (unsigned int i = 0; i < count; i++) {
		struct gpu *u = &g->gpu[g->n];

		if (g->f.handle(i, &u->dev) != NVML_SUCCESS)
			continue; /* a GPU NVML cannot open (lost, no permission) is left out */
		u->index = (int)i;
		read_static(g, u);
		g->n++;
	}
	if (!g->n) {
		fq_fail(cause, 0, "NVML counts %u GPUs but opens none", count);
		goto fail;
	}
	if (g->f.driver_version)
		g->f.driver_version(drv, sizeof(drv));
	if (g->f.nvml_version)
		g->f.nvml_version(ver, sizeof(ver));
	drv[sizeof(drv) - 1] = ver[sizeof(ver) - 1] = '\0';
	snprintf(g->describe, sizeof(g->describe), "%d GPU%s (driver %s, NVML %s)", g->n,
		 g->n == 1 ? "" : "s", drv[0] ? drv : "?", ver[0] ? ver : "?");
	g->st.min_ns = INT64_MAX;
	return g;
fail:
	gpu_sampler_free(g);
	errno = err;
	return NULL;
}

int gpu_sampler_count(const struct gpu_sampler *g)
{
	return g->n;
}

const char *gpu_sampler_describe(const struct gpu_sampler *g)
{
	return g->describe;
}

/* Drains pending XID events without waiting. */
static void drain_xids(struct gpu_sampler *g)
{
	nvmlEventData_t ev;

	/* bounded: a storm of events is counted over the next samples */
	for (int i = 0; g->evset && i < 256; i++) {
		memset(&ev, 0, sizeof(ev));
		if (g->f.evset_wait(g->evset, &ev, 0) != NVML_SUCCESS)
			break; /* NVML_ERROR_TIMEOUT: nothing pending */
		if (!(ev.eventType & NVML_EVENT_TYPE_XID))
			continue;
		for (int k = 0; k < g->n; k++) {
			struct gpu *u = &g->gpu[k];

			if (u->dev != ev.device || u->xid_count == REC_NULL)
				continue;
			u->xid_count++;
			u->xid_last = clamp32(ev.eventData);
		}
	}
}

/* Sum of one NVLink error counter over the links that were up; REC_NULL if none answered. */
static int64_t nvlink_sum(struct gpu_sampler *g, struct gpu *u, int f, int c1, int c2)
{
	unsigned long long v, sum = 0;
	bool any = false;
	nvmlReturn_t rc = NVML_ERROR_NOT_SUPPORTED;

	if (skip(u, f) || !g->f.nvlink_err)
		return REC_NULL;
	for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
		if (!(u->nvlinks & (1u << l)))
			continue;
		for (int c = c1; c <= c2; c++) {
			rc = g->f.nvlink_err(u->dev, l, c, &v);
			if (rc != NVML_SUCCESS)
				break;
			sum += v;
			any = true;
		}
		if (rc != NVML_SUCCESS)
			break;
	}
	if (!any) {
		ok(g, u, f, rc);
		return REC_NULL;
	}
	return clamp64(sum);
}

/* Links up, and one of the counters not known to be unsupported. */
static bool nvlink_wanted(const struct gpu *u)
{
	return u->nvlinks &&
	       !(skip(u, F_NVL_REPLAY) && skip(u, F_NVL_RECOVERY) && skip(u, F_NVL_CRC));
}

/* Reads GPU u's NVLink error counters into its cache. */
static void nvlink_read(struct gpu_sampler *g, struct gpu *u)
{
	int64_t t0 = clock_ns(CLOCK_MONOTONIC);

	u->nvl_replay = nvlink_sum(g, u, F_NVL_REPLAY, NVML_NVLINK_ERROR_DL_REPLAY,
				   NVML_NVLINK_ERROR_DL_REPLAY);
	u->nvl_recovery = nvlink_sum(g, u, F_NVL_RECOVERY, NVML_NVLINK_ERROR_DL_RECOVERY,
				     NVML_NVLINK_ERROR_DL_RECOVERY);
	u->nvl_crc = nvlink_sum(g, u, F_NVL_CRC, NVML_NVLINK_ERROR_DL_CRC_FLIT,
				NVML_NVLINK_ERROR_DL_CRC_DATA);
	u->nvl_next_ns = clock_ns(CLOCK_MONOTONIC) + NVLINK_PERIOD_NS;
	g->st.nvlink_ns = u->nvl_next_ns - NVLINK_PERIOD_NS - t0;
}

static void sample_one(struct gpu_sampler *g, struct gpu *u, struct rec_gpu *r)
{
	unsigned long long ull;
	nvmlUtilization_t ut;
	unsigned int v, a, b, c, d;

	r->gpu_index = u->index;
	r->uuid = u->uuid[0] ? u->uuid : NULL;
	r->pci_bus_id = u->bus_id[0] ? u->bus_id : NULL;
	r->sm_clock_max_mhz = u->sm_max;
	r->mem_clock_max_mhz = u->mem_max;
	r->pcie_gen_max = u->pcie_gen_max;
	r->pcie_width_max = u->pcie_width_max;
	r->xid_count = u->xid_count;
	r->xid_last = u->xid_last;

#define GET32(field, f, call)                                                             \
	do {                                                                              \
		r->field = REC_NULL32;                                                    \
		if (!skip(u, f) && ok(g, u, f, (call)))                                   \
			r->field = clamp32(v);                                            \
	} while (0)
#define GET64(field, f, call)                                                             \
	do {                                                                              \
		r->field = REC_NULL;                                                      \
		if (!skip(u, f) && ok(g, u, f, (call)))                                   \
			r->field = clamp64(ull);                                          \
	} while (0)
#define CALL(fn, ...) (g->f.fn ? g->f.fn(__VA_ARGS__) : NVML_ERROR_FUNCTION_NOT_FOUND)

	GET32(sm_clock_mhz, F_CLOCK_SM, CALL(clock, u->dev, NVML_CLOCK_SM, &v));
	GET32(mem_clock_mhz, F_CLOCK_MEM, CALL(clock, u->dev, NVML_CLOCK_MEM, &v));
	GET64(clock_reasons, F_REASONS, CALL(reasons, u->dev, &ull));
	GET32(temp_c, F_TEMP, CALL(temp, u->dev, NVML_TEMPERATURE_GPU, &v));
	GET32(power_mw, F_POWER, CALL(power, u->dev, &v));
	GET32(power_limit_mw, F_POWER_LIMIT, CALL(power_limit, u->dev, &v));
	r->util_gpu_pct = r->util_mem_pct = REC_NULL32;
	if (!skip(u, F_UTIL) && ok(g, u, F_UTIL, CALL(util, u->dev, &ut))) {
		r->util_gpu_pct = clamp32(ut.gpu);
		r->util_mem_pct = clamp32(ut.memory);
	}
	GET64(ecc_uncorrected, F_ECC_UNC,
	      CALL(ecc, u->dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ull));
	GET64(ecc_corrected, F_ECC_COR,
	      CALL(ecc, u->dev, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &ull));
	r->remap_corrected = r->remap_uncorrected = r->remap_pending = r->remap_failed =
		REC_NULL32;
	if (!skip(u, F_REMAP) && ok(g, u, F_REMAP, CALL(remapped, u->dev, &a, &b, &c, &d))) {
		r->remap_corrected = clamp32(a);
		r->remap_uncorrected = clamp32(b);
		r->remap_pending = c ? 1 : 0;
		r->remap_failed = d ? 1 : 0;
	}
	GET32(pcie_gen, F_PCIE_GEN, CALL(pcie_gen, u->dev, &v));
	GET32(pcie_width, F_PCIE_WIDTH, CALL(pcie_width, u->dev, &v));
	GET32(pcie_replays, F_PCIE_REPLAY, CALL(pcie_replay, u->dev, &v));

#undef GET32
#undef GET64
#undef CALL
}

int gpu_sampler_sample(struct gpu_sampler *g, int64_t ts_ns,
		       int (*emit)(void *arg, const struct rec_gpu *r), void *arg)
{
	int64_t t0 = clock_ns(CLOCK_MONOTONIC), dt;
	struct rec_gpu r[MAX_GPUS];
	int i;

	/* read everything first, emit after: the cost is NVML's, not the store's */
	drain_xids(g);
	for (i = 0; i < g->n; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].ts_ns = ts_ns;
		sample_one(g, &g->gpu[i], &r[i]);
	}
	/* one GPU's NVLink counters at most, the one waiting longest */
	for (i = 0; i < g->n; i++) {
		struct gpu *u = &g->gpu[(g->nvl_next + i) % g->n];

		if (nvlink_wanted(u) && clock_ns(CLOCK_MONOTONIC) >= u->nvl_next_ns) {
			nvlink_read(g, u);
			g->nvl_next = (g->nvl_next + i + 1) % g->n;
			break;
		}
	}
	for (i = 0; i < g->n; i++) {
		r[i].nvlink_replay = g->gpu[i].nvl_replay;
		r[i].nvlink_recovery = g->gpu[i].nvl_recovery;
		r[i].nvlink_crc = g->gpu[i].nvl_crc;
	}
	dt = clock_ns(CLOCK_MONOTONIC) - t0;
	g->st.samples++;
	g->st.last_ns = dt;
	g->st.total_ns += dt;
	if (dt < g->st.min_ns)
		g->st.min_ns = dt;
	if (dt > g->st.max_ns)
		g->st.max_ns = dt;
	for (i = 0; i < g->n; i++)
		emit(arg, &r[i]);
	return g->n;
}

/* ---- processes to GPUs ---- */

static int find_uuid(const struct gpu_sampler *g, const char *tok, size_t len)
{
	int hit = -1;

	/* CUDA takes any unique prefix of a UUID, with or without "GPU-" */
	for (int i = 0; i < g->n; i++) {
		const char *u = g->gpu[i].uuid;

		if (!strncasecmp(u, "GPU-", 4) && strncasecmp(tok, "GPU-", 4))
			u += 4;
		if (strlen(u) >= len && !strncasecmp(u, tok, len)) {
			if (hit >= 0)
				return -1; /* ambiguous: CUDA stops here too */
			hit = i;
		}
	}
	return hit;
}

/*
 * CUDA_VISIBLE_DEVICES as NVML positions in g->gpu[]: decimal indexes or UUID
 * (prefixes); CUDA stops at the first entry it cannot use, and so does this.
 * MIG instances are not resolved (their UUIDs are not GPUs').
 */
static int parse_cvd(const struct gpu_sampler *g, const char *cvd, int *pos, int max)
{
	int n = 0;

	while (*cvd && n < max) {
		size_t len = strcspn(cvd, ",");
		const char *tok = cvd;
		int p = -1;

		while (len && (*tok == ' ' || *tok == '\t'))
			tok++, len--;
		while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
			len--;
		if (len && strspn(tok, "0123456789") >= len) {
			long idx = strtol(tok, NULL, 10);

			for (int i = 0; i < g->n; i++)
				if (g->gpu[i].index == idx)
					p = i;
		} else if (len && strncasecmp(tok, "MIG-", 4)) {
			p = find_uuid(g, tok, len);
		}
		if (p < 0)
			break;
		pos[n++] = p;
		cvd += strcspn(cvd, ",");
		if (*cvd == ',')
			cvd++;
	}
	return n;
}

int gpu_sampler_env_map(const struct gpu_sampler *g, const char *cvd, const char *local_rank,
			int *idx, int max, const char **src)
{
	int vis[MAX_GPUS], nvis = 0, n = 0;
	long lr = -1;
	char *end;

	*src = NULL;
	if (cvd) {
		nvis = parse_cvd(g, cvd, vis, MAX_GPUS);
	} else {
		for (nvis = 0; nvis < g->n; nvis++)
			vis[nvis] = nvis;
	}
	if (local_rank && *local_rank) {
		errno = 0;
		lr = strtol(local_rank, &end, 10);
		if (errno || *end || lr < 0)
			lr = -1;
	}
	if (lr >= 0 && lr < nvis && max > 0) {
		idx[n++] = g->gpu[vis[lr]].index;
		*src = "local_rank";
	} else if (cvd) {
		for (int i = 0; i < nvis && n < max; i++)
			idx[n++] = g->gpu[vis[i]].index;
		if (n)
			*src = "cuda_visible_devices";
	}
	return n;
}

/* CUDA_VISIBLE_DEVICES and LOCAL_RANK of pid's environment (as it was at exec). */
static int read_env(int pid, char **cvd, char **lrank)
{
	size_t cap = 1 << 16, got = 0;
	char path[64], *env, *s;
	ssize_t r;
	int fd;

	*cvd = *lrank = NULL;
	snprintf(path, sizeof(path), "/proc/%d/environ", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	env = malloc(cap + 1);
	if (!env) {
		close(fd);
		return -ENOMEM;
	}
	while (got < cap && (r = read(fd, env + got, cap - got)) > 0)
		got += (size_t)r;
	close(fd);
	env[got] = '\0';
	for (s = env; s < env + got; s += strlen(s) + 1) {
		if (!strncmp(s, "CUDA_VISIBLE_DEVICES=", 21) && !*cvd)
			*cvd = strdup(s + 21);
		else if (!strncmp(s, "LOCAL_RANK=", 11) && !*lrank)
			*lrank = strdup(s + 11);
	}
	free(env);
	return 0;
}

static struct seen *seen_get(struct gpu_sampler *g, int pid, int64_t start_ns)
{
	struct seen *s;

	for (int i = 0; i < g->nseen; i++)
		if (g->seen[i].pid == pid && g->seen[i].start_ns == start_ns)
			return &g->seen[i];
	if (g->nseen == g->capseen) {
		int cap = g->capseen ? g->capseen * 2 : 64;

		s = realloc(g->seen, (size_t)cap * sizeof(*s));
		if (!s)
			return NULL;
		g->seen = s;
		g->capseen = cap;
	}
	s = &g->seen[g->nseen++];
	memset(s, 0, sizeof(*s));
	s->pid = pid;
	s->start_ns = start_ns;
	return s;
}

static int emit_map(struct gpu_sampler *g, const struct seen *s, int pos, const char *src,
		    int64_t ts_ns, int (*emit)(void *, const struct rec_process_gpu *), void *arg)
{
	struct rec_process_gpu r = {
		.ts_ns = ts_ns,
		.pid = s->pid,
		.start_ns = s->start_ns,
		.gpu_index = g->gpu[pos].index,
		.gpu_uuid = g->gpu[pos].uuid,
		.source = src,
	};

	if (!g->gpu[pos].uuid[0])
		return 0; /* no UUID, nothing to join on */
	emit(arg, &r);
	g->st.mappings++;
	return 1;
}

/* The driver's compute processes of GPU u into g->pinfo; how many, or -1. */
static int list_compute(struct gpu_sampler *g, struct gpu *u)
{
	unsigned int n;
	nvmlReturn_t rc;

	if (!g->f.procs || skip(u, F_PROCS))
		return -1;
	for (int tries = 0; tries < 3; tries++) {
		if (!g->pcap) {
			g->pinfo = calloc(64, sizeof(*g->pinfo));
			if (!g->pinfo)
				return -1;
			g->pcap = 64;
		}
		n = g->pcap;
		rc = g->f.procs(u->dev, &n, g->pinfo);
		if (rc == NVML_SUCCESS)
			return (int)(n < g->pcap ? n : g->pcap);
		if (rc != NVML_ERROR_INSUFFICIENT_SIZE) {
			ok(g, u, F_PROCS, rc);
			return -1;
		}
		/* n is now the count needed; processes may start meanwhile: some room */
		free(g->pinfo);
		g->pcap = 0;
		g->pinfo = calloc(n + 16, sizeof(*g->pinfo));
		if (!g->pinfo)
			return -1;
		g->pcap = n + 16;
	}
	return -1;
}

int gpu_sampler_map(struct gpu_sampler *g, int64_t ts_ns, const struct gpu_proc *procs, int n,
		    int (*emit)(void *arg, const struct rec_process_gpu *r), void *arg)
{
	int rows = 0, i, k, m;

	for (i = 0; i < g->nseen; i++)
		g->seen[i].live = false;
	for (i = 0; i < n; i++) {
		struct seen *s = seen_get(g, procs[i].pid, procs[i].start_ns);
		char *cvd = NULL, *lrank = NULL;
		int idx[MAX_GPUS];
		const char *src;

		if (!s)
			continue;
		s->live = true;
		if (s->env_done)
			continue;
		s->env_done = true;
		if (read_env(s->pid, &cvd, &lrank))
			continue;
		m = gpu_sampler_env_map(g, cvd, lrank, idx, MAX_GPUS, &src);
		for (k = 0; k < m; k++)
			for (int p = 0; p < g->n; p++)
				if (g->gpu[p].index == idx[k])
					rows += emit_map(g, s, p, src, ts_ns, emit, arg);
		free(cvd);
		free(lrank);
	}
	/* forget processes no longer traced (exited): the list stays the size of the job */
	for (i = 0; i < g->nseen;) {
		if (!g->seen[i].live)
			g->seen[i] = g->seen[--g->nseen];
		else
			i++;
	}
	for (int p = 0; p < g->n; p++) {
		struct gpu *u = &g->gpu[p];
		int np = list_compute(g, u);

		for (k = 0; k < np; k++) {
			for (i = 0; i < g->nseen; i++) {
				struct seen *s = &g->seen[i];

				if ((unsigned int)s->pid != g->pinfo[k].pid ||
				    (s->nvml_gpus & (1ULL << p)))
					continue;
				s->nvml_gpus |= 1ULL << p;
				rows += emit_map(g, s, p, "nvml", ts_ns, emit, arg);
			}
		}
	}
	return rows;
}

void gpu_sampler_get_stats(const struct gpu_sampler *g, struct gpu_sampler_stats *st)
{
	*st = g->st;
	if (!st->samples)
		st->min_ns = 0;
}

void gpu_sampler_free(struct gpu_sampler *g)
{
	if (!g)
		return;
	if (g->evset && g->f.evset_free)
		g->f.evset_free(g->evset);
	if (g->inited)
		g->f.shutdown();
	/* NVML leaves threads and handlers behind on some drivers: keep it mapped */
	free(g->pinfo);
	free(g->seen);
	free(g);
}

/* ---- the thread ---- */

#define MAX_PROCS 4096
/* the cost in meta every this many samples (and at stop) */
#define META_EVERY 10

struct gpu_thread {
	struct gpu_sampler *g;
	struct store *st;
	struct gpu_thread_opts o;
	struct gpu_proc *procs;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
};

static int put_gpu(void *arg, const struct rec_gpu *r)
{
	struct rec rec = { .kind = REC_GPU };

	rec.u.gpu = *r;
	return store_put(arg, &rec);
}

static int put_map(void *arg, const struct rec_process_gpu *r)
{
	struct rec rec = { .kind = REC_PROCESS_GPU };

	rec.u.process_gpu = *r;
	return store_put(arg, &rec);
}

static void put_cost(struct gpu_thread *t)
{
	struct gpu_sampler_stats s;

	gpu_sampler_get_stats(t->g, &s);
	if (!s.samples)
		return;
	store_set_meta_int(t->st, "gpu_samples", s.samples);
	store_set_meta_int(t->st, "gpu_sample_ns", s.total_ns / s.samples);
	store_set_meta_int(t->st, "gpu_sample_min_ns", s.min_ns);
	store_set_meta_int(t->st, "gpu_sample_max_ns", s.max_ns);
	store_set_meta_int(t->st, "gpu_nvlink_read_ns", s.nvlink_ns);
	store_set_meta_int(t->st, "gpu_failed_calls", s.failed_calls);
}

static void *gpu_main(void *arg)
{
	struct gpu_thread *t = arg;
	int64_t next = clock_ns(CLOCK_MONOTONIC);
	struct timespec ts;

	pthread_mutex_lock(&t->mu);
	while (!t->stop) {
		int64_t now = clock_ns(CLOCK_MONOTONIC);

		if (now >= next) {
			int np = 0;

			pthread_mutex_unlock(&t->mu);
			gpu_sampler_sample(t->g, clock_ns(CLOCK_REALTIME), put_gpu, t->st);
			if (t->o.list_procs)
				np = t->o.list_procs(t->o.arg, t->procs, MAX_PROCS);
			if (np > 0)
				gpu_sampler_map(t->g, clock_ns(CLOCK_REALTIME), t->procs, np,
						put_map, t->st);
			if (t->g->st.samples % META_EVERY == 1)
				put_cost(t);
			pthread_mutex_lock(&t->mu);
			/* fixed rate; after a stall (suspend, slow driver) start again from now */
			next += (int64_t)t->o.interval_ms * 1000000LL;
			if (next <= now)
				next = now + (int64_t)t->o.interval_ms * 1000000LL;
			continue;
		}
		ts.tv_sec = next / 1000000000LL;
		ts.tv_nsec = next % 1000000000LL;
		pthread_cond_timedwait(&t->cv, &t->mu, &ts);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

struct gpu_thread *gpu_thread_start(const struct gpu_thread_opts *o, struct store *st,
				    char **cause)
{
	struct gpu_thread *t = NULL;
	pthread_condattr_t ca;
	char *why = NULL, line[400];
	int err;

	if (o->interval_ms <= 0) {
		store_set_meta_text(st, "gpu_status", "off (--gpu-interval 0)");
		fq_fail(cause, 0, "off (--gpu-interval 0)");
		errno = EINVAL;
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	if (!t || !(t->procs = calloc(MAX_PROCS, sizeof(*t->procs)))) {
		free(t);
		fq_fail(cause, 0, "out of memory starting the GPU sampler");
		errno = ENOMEM;
		return NULL;
	}
	t->o = *o;
	t->st = st;
	t->g = gpu_sampler_new(o->lib, &why);
	if (!t->g) {
		err = errno;
		snprintf(line, sizeof(line), "off: %s", why ? why : "cannot start NVML");
		store_set_meta_text(st, "gpu_status", line);
		fq_fail(cause, 0, "%s", line);
		free(why);
		free(t->procs);
		free(t);
		errno = err;
		return NULL;
	}
	snprintf(line, sizeof(line), "%s, every %d ms", gpu_sampler_describe(t->g),
		 o->interval_ms);
	store_set_meta_text(st, "gpu_status", line);
	pthread_mutex_init(&t->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	err = pthread_create(&t->th, NULL, gpu_main, t);
	if (err) {
		store_set_meta_text(st, "gpu_status", "off: cannot start the GPU sampling thread");
		fq_fail(cause, 0, "cannot start the GPU sampling thread: %s", strerror(err));
		pthread_mutex_destroy(&t->mu);
		pthread_cond_destroy(&t->cv);
		gpu_sampler_free(t->g);
		free(t->procs);
		free(t);
		errno = err;
		return NULL;
	}
	return t;
}

void gpu_thread_stop(struct gpu_thread *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->th, NULL);
	put_cost(t);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	gpu_sampler_free(t->g);
	free(t->procs);
	free(t);
}
