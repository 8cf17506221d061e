/* SPDX-License-Identifier: MIT */
/*
 * NVML sampler. The library is opened with dlopen and every function looked up
 * with dlsym, so agentd neither builds nor links against the driver: the few
 * types and constants used are declared in nvml_int.h from NVIDIA's public nvml.h
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
#include <stddef.h>
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

#include "nvml_int.h"

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
	SYM(gpm_support, "nvmlGpmQueryDeviceSupport");
	SYM(gpm_alloc, "nvmlGpmSampleAlloc");
	SYM(gpm_free, "nvmlGpmSampleFree");
	SYM(gpm_get, "nvmlGpmSampleGet");
	SYM(gpm_metrics, "nvmlGpmMetricsGet");
}

/* GPM on GPU u: two samples to take in turn, where the GPU and the library offer it. */
static void gpm_setup(struct gpu_sampler *g, struct gpu *u)
{
	nvmlGpmSupport_t sup = { .version = NVML_GPM_SUPPORT_VERSION };

	if (!g->f.gpm_support || !g->f.gpm_alloc || !g->f.gpm_free || !g->f.gpm_get ||
	    !g->f.gpm_metrics || g->f.gpm_support(u->dev, &sup) != NVML_SUCCESS ||
	    !sup.isSupportedDevice) {
		u->unsupported |= 1u << F_GPM;
		return;
	}
	if (!g->gpm_q && !(g->gpm_q = calloc(1, sizeof(*g->gpm_q)))) {
		u->unsupported |= 1u << F_GPM;
		return;
	}
	if (g->f.gpm_alloc(&u->gpm[0]) != NVML_SUCCESS) {
		u->gpm[0] = NULL;
		u->unsupported |= 1u << F_GPM;
	} else if (g->f.gpm_alloc(&u->gpm[1]) != NVML_SUCCESS) {
		g->f.gpm_free(u->gpm[0]);
		u->gpm[0] = u->gpm[1] = NULL;
		u->unsupported |= 1u << F_GPM;
	}
}

/* per mille from GPM's percent (a hair over 100 from the driver's rounding is 1000); NULL
 * for what is not a share */
static int32_t gpm_pm(const nvmlGpmMetric_t *m)
{
	if (m->nvmlReturn != NVML_SUCCESS || !(m->value >= 0 && m->value <= 100.5))
		return REC_NULL32;
	return m->value >= 100 ? 1000 : (int32_t)(m->value * 10 + 0.5);
}

/*
 * Takes GPU u's GPM sample and, from its second on, sets u->act to the activity over the
 * interval since the previous one (dur_ns 0: none). Samples closer than GPM_MIN_NS are not
 * taken (NVIDIA: GPM's counters refresh too slowly for shorter intervals, whose metrics
 * read 0): under --gpu-interval 0.1 an interval spans two periods. A GPU that answers
 * NOT_SUPPORTED is not asked again; any other failure loses this interval only (the next
 * starts afresh).
 */
static void gpm_sample(struct gpu_sampler *g, struct gpu *u, int64_t ts_ns)
{
	static const unsigned int ids[] = { NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY,
					    NVML_GPM_METRIC_ANY_TENSOR_UTIL,
					    NVML_GPM_METRIC_DRAM_BW_UTIL };
	nvmlGpmMetricsGet_t *q = g->gpm_q;
	struct rec_gpu_act *a = &u->act;
	int64_t now = clock_ns(CLOCK_MONOTONIC), dur;
	int c = u->gpm_cur;

	*a = (struct rec_gpu_act){ .ts_ns = ts_ns, .uuid = u->uuid[0] ? u->uuid : NULL,
				   .gpu_index = u->index };
	if (skip(u, F_GPM) || !u->gpm[0])
		return;
	if (u->gpm_prev_ns && now - u->gpm_prev_ns < GPM_MIN_NS)
		return;
	if (!ok(g, u, F_GPM, g->f.gpm_get(u->dev, u->gpm[c]))) {
		u->gpm_prev_ns = 0;
		return;
	}
	u->gpm_cur = !c;
	if (!u->gpm_prev_ns) {
		u->gpm_prev_ns = now;
		return;
	}
	memset(q, 0, offsetof(nvmlGpmMetricsGet_t, metrics) + sizeof(ids) / sizeof(ids[0]) *
							       sizeof(q->metrics[0]));
	q->version = NVML_GPM_METRICS_GET_VERSION;
	q->numMetrics = sizeof(ids) / sizeof(ids[0]);
	q->sample1 = u->gpm[!c];
	q->sample2 = u->gpm[c];
	for (unsigned int i = 0; i < q->numMetrics; i++)
		q->metrics[i].metricId = ids[i];
	dur = now - u->gpm_prev_ns;
	u->gpm_prev_ns = now;
	if (!ok(g, u, F_GPM, g->f.gpm_metrics(q)))
		return;
	a->sm_active_pm = gpm_pm(&q->metrics[0]);
	a->sm_occupancy_pm = gpm_pm(&q->metrics[1]);
	a->tensor_pm = gpm_pm(&q->metrics[2]);
	a->dram_bw_pm = gpm_pm(&q->metrics[3]);
	/* a row only where some metric came back */
	if (a->sm_active_pm != REC_NULL32 || a->sm_occupancy_pm != REC_NULL32 ||
	    a->tensor_pm != REC_NULL32 || a->dram_bw_pm != REC_NULL32)
		a->dur_ns = dur;
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
	gpm_setup(g, u);
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
	gpm_sample(g, u, r->ts_ns);

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

bool gpu_sampler_activity(const struct gpu_sampler *g, int i, struct rec_gpu_act *a)
{
	if (i < 0 || i >= g->n || g->gpu[i].act.dur_ns <= 0)
		return false;
	*a = g->gpu[i].act;
	return true;
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
	for (int i = 0; i < g->n; i++)
		for (int k = 0; k < 2; k++)
			if (g->gpu[i].gpm[k])
				g->f.gpm_free(g->gpu[i].gpm[k]);
	free(g->gpm_q);
	if (g->inited)
		g->f.shutdown();
	/* NVML leaves threads and handlers behind on some drivers: keep it mapped */
	free(g->pinfo);
	free(g->seen);
	free(g);
}
