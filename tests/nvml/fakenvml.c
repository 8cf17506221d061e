/* SPDX-License-Identifier: MIT */
/*
 * TEST DOUBLE: a fake libnvidia-ml.so.1 with the ABI of the NVML entry points
 * agentd/nvml.c looks up, and no GPU behind it. It reports driver and NVML
 * versions starting with "fake-" so that a trace made with it says so.
 *
 * What it reports comes from the file named by $FAKE_NVML_CONFIG, read again
 * whenever it changes (a test may change a value, or list a pid, while agentd
 * runs). One setting per line, '#' starts a comment:
 *   gpus N                  N GPUs (default 0)
 *   init_fail CODE          nvmlInit_v2 returns CODE
 *   gpu I KEY VALUE         GPU I's value: sm_clock, mem_clock, reasons, temp, power,
 *                           power_limit, util, pcie_gen, pcie_width, pcie_replay, ecc_unc,
 *                           ecc_cor, remap_cor; GPM's metrics in per mille: sm_active,
 *                           sm_occupancy, tensor, dram_bw (reported as percent, /10)
 *   gpu I fail KEY          that call returns NVML_ERROR_UNKNOWN (999) on GPU I
 *   gpu I unsupported KEY   ... NVML_ERROR_NOT_SUPPORTED (KEY nvlink: no NVLink at all;
 *                           KEY gpm: the GPU says it has no GPM, as before Hopper;
 *                           fail gpm: nvmlGpmSampleGet fails)
 *   proc PID I              the driver lists PID as a compute process of GPU I
 *   xid I NUM               one XID event NUM on GPU I (delivered once)
 * Every GPU is otherwise healthy: SM 1980/1980 MHz, memory 2619/2619 MHz, 45 C,
 * 300 W of 700 W, 90%/40% busy, PCIe gen 5 x16, 18 NVLinks up, no errors, GPM
 * SMs 90.0% active, 50.0% occupancy, tensor 40.0%, DRAM 30.0% between any two samples
 * 100 ms apart or more (closer: 0, as the driver's); fake_gpm_gets(I) counts GPU I's samples;
 * UUID GPU-fa4e0000-0000-4000-8000-00000000000I, bus id 00000000:I1:00.0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef int nvmlReturn_t;

#define OK 0
#define E_INVALID 2
#define E_NOT_SUPPORTED 3
#define E_INSUFFICIENT 7
#define E_DRIVER 9
#define E_TIMEOUT 10
#define E_UNKNOWN 999

#define MAX_GPUS 16
#define MAX_PROCS 64
#define MAX_XIDS 64

enum { K_SM, K_MEM, K_REASONS, K_TEMP, K_POWER, K_UTIL, K_PCIE_GEN, K_PCIE_WIDTH,
       K_PCIE_REPLAY, K_ECC_UNC, K_ECC_COR, K_REMAP, K_NVLINK, K_POWER_LIMIT, K_GPM,
       K_SM_ACTIVE, K_SM_OCC, K_TENSOR, K_DRAM_BW, K_MAX };
static const char *const key_names[K_MAX] = {
	"sm_clock", "mem_clock", "reasons", "temp", "power", "util", "pcie_gen",
	"pcie_width", "pcie_replay", "ecc_unc", "ecc_cor", "remap_cor", "nvlink", "power_limit",
	"gpm", "sm_active", "sm_occupancy", "tensor", "dram_bw",
};

struct fgpu {
	unsigned long long v[K_MAX];
	int rc[K_MAX];
};

static struct {
	int ngpus, init_rc;
	struct fgpu g[MAX_GPUS];
	unsigned int proc_pid[MAX_PROCS], proc_gpu[MAX_PROCS];
	int nprocs;
	int xid_gpu[MAX_XIDS], xid_num[MAX_XIDS], nxids;
	struct timespec mtime;
	off_t size;
	ino_t ino;
	int loaded;
} cf;
static int xids_delivered;

static void defaults(void)
{
	memset(&cf.g, 0, sizeof(cf.g));
	cf.ngpus = cf.init_rc = cf.nprocs = cf.nxids = 0;
	for (int i = 0; i < MAX_GPUS; i++) {
		unsigned long long *v = cf.g[i].v;

		v[K_SM] = 1980;
		v[K_MEM] = 2619;
		v[K_TEMP] = 45;
		v[K_POWER] = 300000;
		v[K_UTIL] = 90;
		v[K_PCIE_GEN] = 5;
		v[K_PCIE_WIDTH] = 16;
		v[K_POWER_LIMIT] = 700000;
		v[K_SM_ACTIVE] = 900;
		v[K_SM_OCC] = 500;
		v[K_TENSOR] = 400;
		v[K_DRAM_BW] = 300;
	}
}

static int key_of(const char *s)
{
	for (int k = 0; k < K_MAX; k++)
		if (!strcmp(s, key_names[k]))
			return k;
	return -1;
}

static void load(void)
{
	const char *path = getenv("FAKE_NVML_CONFIG");
	char line[256], a[64], b[64];
	unsigned long long x;
	struct stat st;
	FILE *f;
	int i;

	if (!path || stat(path, &st)) {
		if (!cf.loaded)
			defaults();
		cf.loaded = 1;
		return;
	}
	if (cf.loaded && st.st_mtim.tv_sec == cf.mtime.tv_sec &&
	    st.st_mtim.tv_nsec == cf.mtime.tv_nsec && st.st_size == cf.size && st.st_ino == cf.ino)
		return;
	f = fopen(path, "r");
	if (!f)
		return;
	defaults();
	cf.loaded = 1;
	cf.mtime = st.st_mtim;
	cf.size = st.st_size;
	cf.ino = st.st_ino;
	while (fgets(line, sizeof(line), f)) {
		int k;

		if (sscanf(line, "gpus %d", &cf.ngpus) == 1) {
			if (cf.ngpus > MAX_GPUS)
				cf.ngpus = MAX_GPUS;
		} else if (sscanf(line, "init_fail %d", &cf.init_rc) == 1) {
		} else if (sscanf(line, "gpu %d fail %63s", &i, a) == 2 && i >= 0 && i < MAX_GPUS &&
			   (k = key_of(a)) >= 0) {
			cf.g[i].rc[k] = E_UNKNOWN;
		} else if (sscanf(line, "gpu %d unsupported %63s", &i, a) == 2 && i >= 0 &&
			   i < MAX_GPUS && (k = key_of(a)) >= 0) {
			cf.g[i].rc[k] = E_NOT_SUPPORTED;
		} else if (sscanf(line, "gpu %d %63s %63s", &i, a, b) == 3 && i >= 0 &&
			   i < MAX_GPUS && (k = key_of(a)) >= 0) {
			x = strtoull(b, NULL, 0);
			cf.g[i].v[k] = x;
		} else if (sscanf(line, "proc %u %u", &cf.proc_pid[cf.nprocs],
				  &cf.proc_gpu[cf.nprocs]) == 2 && cf.nprocs < MAX_PROCS - 1) {
			cf.nprocs++;
		} else if (sscanf(line, "xid %d %d", &cf.xid_gpu[cf.nxids],
				  &cf.xid_num[cf.nxids]) == 2 && cf.nxids < MAX_XIDS - 1) {
			cf.nxids++;
		}
	}
	fclose(f);
}

/* Handles are pointers into cf.g; anything else is an invalid argument. */
typedef struct fgpu *nvmlDevice_t;

static int gidx(nvmlDevice_t d)
{
	long i = d - cf.g;

	return d && i >= 0 && i < cf.ngpus ? (int)i : -1;
}

#define DEV(d, k)                                                                         \
	int i_ = (load(), gidx(d));                                                       \
	if (i_ < 0)                                                                       \
		return E_INVALID;                                                         \
	if (cf.g[i_].rc[k])                                                               \
		return cf.g[i_].rc[k];                                                    \
	const unsigned long long *v_ = cf.g[i_].v

nvmlReturn_t nvmlInit_v2(void)
{
	load();
	return cf.init_rc;
}

nvmlReturn_t nvmlShutdown(void)
{
	return OK;
}

const char *nvmlErrorString(nvmlReturn_t rc)
{
	switch (rc) {
	case OK: return "Success";
	case E_INVALID: return "Invalid Argument";
	case E_NOT_SUPPORTED: return "Not Supported";
	case E_DRIVER: return "Driver Not Loaded";
	case E_TIMEOUT: return "Timeout";
	}
	return "Unknown Error";
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *s, unsigned int n)
{
	snprintf(s, n, "fake-999.1");
	return OK;
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *s, unsigned int n)
{
	snprintf(s, n, "fake-13.999");
	return OK;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	load();
	*n = (unsigned int)cf.ngpus;
	return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	load();
	if (i >= (unsigned int)cf.ngpus)
		return E_INVALID;
	*d = &cf.g[i];
	return OK;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *s, unsigned int n)
{
	int i = (load(), gidx(d));

	if (i < 0)
		return E_INVALID;
	snprintf(s, n, "GPU-fa4e0000-0000-4000-8000-%012d", i);
	return OK;
}

typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p)
{
	int i = (load(), gidx(d));

	if (i < 0)
		return E_INVALID;
	memset(p, 0, sizeof(*p));
	p->bus = (unsigned int)(i * 16 + 1);
	snprintf(p->busId, sizeof(p->busId), "00000000:%02X:00.0", p->bus);
	snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "0000:%02X:00.0", p->bus);
	p->pciDeviceId = 0x233010de;
	return OK;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz)
{
	DEV(d, type == 1 ? K_SM : K_MEM);
	*mhz = (unsigned int)(type == 1 ? v_[K_SM] : v_[K_MEM]);
	return OK;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *mhz)
{
	int i = (load(), gidx(d));

	if (i < 0)
		return E_INVALID;
	*mhz = type == 1 ? 1980 : 2619;
	return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r)
{
	DEV(d, K_REASONS);
	*r = v_[K_REASONS];
	return OK;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t)
{
	DEV(d, K_TEMP);
	(void)sensor;
	*t = (unsigned int)v_[K_TEMP];
	return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw)
{
	DEV(d, K_POWER);
	*mw = (unsigned int)v_[K_POWER];
	return OK;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw)
{
	DEV(d, K_POWER_LIMIT);
	*mw = (unsigned int)v_[K_POWER_LIMIT];
	return OK;
}

typedef struct {
	unsigned int gpu, memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	DEV(d, K_UTIL);
	u->gpu = (unsigned int)v_[K_UTIL];
	u->memory = 40;
	return OK;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter,
					 unsigned long long *n)
{
	DEV(d, type == 1 ? K_ECC_UNC : K_ECC_COR);
	(void)counter;
	*n = type == 1 ? v_[K_ECC_UNC] : v_[K_ECC_COR];
	return OK;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *cor, unsigned int *unc,
				       unsigned int *pending, unsigned int *failed)
{
	DEV(d, K_REMAP);
	*cor = (unsigned int)v_[K_REMAP];
	*unc = *pending = *failed = 0;
	return OK;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *x)
{
	DEV(d, K_PCIE_GEN);
	*x = (unsigned int)v_[K_PCIE_GEN];
	return OK;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *x)
{
	DEV(d, K_PCIE_WIDTH);
	*x = (unsigned int)v_[K_PCIE_WIDTH];
	return OK;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *x)
{
	int i = (load(), gidx(d));

	if (i < 0)
		return E_INVALID;
	*x = 5;
	return OK;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *x)
{
	int i = (load(), gidx(d));

	if (i < 0)
		return E_INVALID;
	*x = 16;
	return OK;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned int *x)
{
	DEV(d, K_PCIE_REPLAY);
	*x = (unsigned int)v_[K_PCIE_REPLAY];
	return OK;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int *state)
{
	DEV(d, K_NVLINK);
	(void)v_;
	if (link >= 18)
		return E_INVALID;
	*state = 1;
	return OK;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t d, unsigned int link, int counter,
					     unsigned long long *n)
{
	DEV(d, K_NVLINK);
	(void)v_;
	if (link >= 18 || counter < 0 || counter > 4)
		return E_INVALID;
	*n = counter == 0 ? 1 : 0; /* one replay per link: the sum shows the links were read */
	return OK;
}

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
						     nvmlProcessInfo_t *infos)
{
	unsigned int n = 0, k;
	int i = (load(), gidx(d));

	if (i < 0)
		return E_INVALID;
	for (int p = 0; p < cf.nprocs; p++)
		n += cf.proc_gpu[p] == (unsigned int)i;
	if (n > *count) {
		*count = n;
		return E_INSUFFICIENT;
	}
	k = 0;
	for (int p = 0; p < cf.nprocs; p++) {
		if (cf.proc_gpu[p] != (unsigned int)i)
			continue;
		infos[k].pid = cf.proc_pid[p];
		infos[k].usedGpuMemory = 1ULL << 30;
		infos[k].gpuInstanceId = infos[k].computeInstanceId = 0xFFFFFFFF;
		k++;
	}
	*count = n;
	return OK;
}

/* Events: one set; XIDs from the config, each delivered once. */
typedef struct {
	nvmlDevice_t device;
	unsigned long long eventType, eventData;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
static int the_set;

nvmlReturn_t nvmlEventSetCreate(void **set)
{
	*set = &the_set;
	return OK;
}

nvmlReturn_t nvmlEventSetFree(void *set)
{
	(void)set;
	return OK;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, void *set)
{
	(void)types, (void)set;
	return (load(), gidx(d)) < 0 ? E_INVALID : OK;
}

nvmlReturn_t nvmlEventSetWait_v2(void *set, nvmlEventData_t *ev, unsigned int ms)
{
	(void)set, (void)ms;
	load();
	if (xids_delivered >= cf.nxids)
		return E_TIMEOUT;
	memset(ev, 0, sizeof(*ev));
	ev->device = &cf.g[cf.xid_gpu[xids_delivered]];
	ev->eventType = 0x8;
	ev->eventData = (unsigned long long)cf.xid_num[xids_delivered];
	xids_delivered++;
	return OK;
}

/*
 * GPM: a sample remembers its GPU and when it was taken (a counter); metrics come from the
 * config of the second sample's GPU, for two samples of one GPU taken in that order.
 */
typedef struct {
	unsigned int version, isSupportedDevice;
} nvmlGpmSupport_t;
struct fsample {
	int magic, gpu;
	unsigned long long at;
	long long at_ns; /* CLOCK_MONOTONIC */
};
#define SAMPLE_MAGIC 0x67706d31
static unsigned long long samples_taken;
static int gets[MAX_GPUS]; /* nvmlGpmSampleGet calls per GPU, for fake_gpm_gets() */

/* Not NVML's: how often a test's agent asked GPU i for a GPM sample. */
int fake_gpm_gets(int i)
{
	return i >= 0 && i < MAX_GPUS ? gets[i] : -1;
}

static long long mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}
typedef struct {
	unsigned int metricId;
	nvmlReturn_t nvmlReturn;
	double value;
	struct {
		char *shortName, *longName, *unit;
	} metricInfo;
} nvmlGpmMetric_t;
typedef struct {
	unsigned int version, numMetrics;
	struct fsample *sample1, *sample2;
	nvmlGpmMetric_t metrics[210]; /* NVML_GPM_METRIC_MAX of the 535 drivers' header */
} nvmlGpmMetricsGet_t;

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s)
{
	int i = (load(), gidx(d));

	if (i < 0 || !s || s->version != 1)
		return E_INVALID;
	s->isSupportedDevice = cf.g[i].rc[K_GPM] != E_NOT_SUPPORTED;
	return OK;
}

nvmlReturn_t nvmlGpmSampleAlloc(struct fsample **s)
{
	if (!s || !(*s = calloc(1, sizeof(**s))))
		return E_INVALID;
	(*s)->magic = SAMPLE_MAGIC;
	(*s)->gpu = -1;
	return OK;
}

nvmlReturn_t nvmlGpmSampleFree(struct fsample *s)
{
	if (!s || s->magic != SAMPLE_MAGIC)
		return E_INVALID;
	s->magic = 0;
	free(s);
	return OK;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, struct fsample *s)
{
	int g_ = (load(), gidx(d));

	if (g_ >= 0)
		gets[g_]++;
	DEV(d, K_GPM);
	(void)v_;
	if (!s || s->magic != SAMPLE_MAGIC)
		return E_INVALID;
	s->gpu = i_;
	s->at = ++samples_taken;
	s->at_ns = mono_ns();
	return OK;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *q)
{
	const struct fsample *a, *b;

	load();
	if (!q || q->version != 1 || q->numMetrics > 210)
		return E_INVALID;
	a = q->sample1;
	b = q->sample2;
	if (!a || !b || a->magic != SAMPLE_MAGIC || b->magic != SAMPLE_MAGIC || a->gpu < 0 ||
	    a->gpu != b->gpu || a->at >= b->at)
		return E_INVALID;
	for (unsigned int k = 0; k < q->numMetrics; k++) {
		nvmlGpmMetric_t *m = &q->metrics[k];
		int key = m->metricId == 2 ? K_SM_ACTIVE : m->metricId == 3 ? K_SM_OCC :
			  m->metricId == 5 ? K_TENSOR : m->metricId == 10 ? K_DRAM_BW : -1;

		m->nvmlReturn = key < 0 ? E_NOT_SUPPORTED : OK;
		/* as the driver's: samples under 100 ms apart read 0 */
		m->value = key < 0 || b->at_ns - a->at_ns < 100000000 ? 0
								   : cf.g[b->gpu].v[key] / 10.0;
	}
	return OK;
}
