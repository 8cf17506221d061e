/* SPDX-License-Identifier: MIT */
/*
 * libfleetq-cupti.so: fleetq's CUDA injection library (DESIGN.md §2, the compute stream).
 *
 * The CUDA driver loads the library named by CUDA_INJECTION64_PATH at cuInit and calls its
 * InitializeInjection(), as Nsight and other profilers are loaded; nothing in the job changes.
 * The library opens the CUPTI the job already has (the one loaded, else the one beside its
 * libcudart, else FLEETQ_CUPTI_LIB, else the loader's search), asks for CUPTI's concurrent-kernel
 * activity records (kernels keep running concurrently; no serialization), and folds them into
 * slices of SLICE_NS of each GPU's time: how long at least one compute kernel (any kernel
 * whose name does not start with "nccl") ran, and how long at least one of NCCL's. Each slice
 * is one fixed-size record (bpf/fqtrace.h, struct fq_busy_rec) handed to fq_gpu_busy_done(),
 * a function that does nothing: agentd puts a uprobe on it, as on the NCCL plugin's. Without
 * agentd nothing is written anywhere.
 *
 * What it tells: a GPU that is slower than its peers is the one whose compute stream idles
 * least while its peers' idle in collectives waiting on it (FSDP hides that from every
 * collective timestamp: the peers' lead is steady, docs/analysis.md).
 *
 * Never stalls or crashes the job: records are read from CUPTI's buffers on CUPTI's own
 * thread (and on a thread of ours that asks CUPTI for them every FLUSH_MS); at most MAX_BUFS
 * buffers of BUF_SIZE are out at once (beyond that CUPTI drops records and counts them, and
 * the records say so); MAX_PEND kernels held at most; one mutex, held while a buffer is
 * folded. It costs CPU time at each kernel launch all the same (CUPTI's own: BENCHMARKS.md,
 * round 20). FLEETQ_CUPTI=0 turns it off; FLEETQ_CUPTI_DEBUG=N prints the first N kernel
 * records as CUPTI gave them (to stderr: what a record layout of another CUPTI would show).
 * CUPTI's activity API has one client per process: a profiler the job starts itself
 * (torch.profiler) takes the callbacks over and fleetq's slices stop until the process ends;
 * the analysis judges the compute stream only up to where the first rank's slices end
 * (docs/analysis.md).
 */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fqtrace.h"
#include "jobside.h"

#define EXPORT __attribute__((visibility("default")))

#define SLICE_NS 200000000ull  /* one record per GPU per 200 ms of its time with kernels */
#define FLUSH_MS 250           /* our thread asks CUPTI for its buffers this often */
#define BUF_SIZE (1u << 20)
#define MAX_BUFS 16
#define MAX_DEV 64
#define LAG_NS 1500000000ull /* kernels are folded in once CUPTI has one that started this later */
#define MAX_PEND (1u << 16)  /* kernels held for that, at most (beyond: folded at once) */
#define RING 32		     /* slices open per GPU: LAG_NS and a kernel's length past it */
#define MAX_KERNEL_NS 3600000000000ull /* a kernel's record is taken for an hour at most */

typedef int CUptiResult;
typedef void (*req_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*done_fn)(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);

/* cupti_activity.h: the kinds, and the prefix every CUpti_ActivityKernel4..9 shares */
enum { KIND_KERNEL = 3, KIND_CONCURRENT_KERNEL = 10 };
enum { OFF_START = 16, OFF_END = 24, OFF_DEVICE = 40, OFF_NAME = 104 };
#define FLUSH_FORCED 1u /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */

static struct {
	CUptiResult (*register_callbacks)(req_fn, done_fn);
	CUptiResult (*enable)(uint32_t kind);
	CUptiResult (*next_record)(uint8_t *buf, size_t valid, void **rec);
	CUptiResult (*flush_all)(uint32_t flag);
	CUptiResult (*flush_period)(uint32_t ms); /* optional (CUDA >= 11.x) */
	CUptiResult (*register_ts)(uint64_t (*fn)(void)); /* optional (CUDA >= 11.6) */
	CUptiResult (*get_ts)(uint64_t *ts);
	CUptiResult (*dropped)(void *ctx, uint32_t stream, size_t *n); /* optional */
} cu;

struct slice {
	bool open;
	uint32_t kernels, nccl_kernels;
	uint64_t idx;	 /* which: it starts at the GPU's origin + idx * SLICE_NS */
	uint64_t busy, nccl;
	uint64_t late;	 /* compute time of kernels whose slice had been handed over */
};

struct gpu {
	bool seen;
	uint64_t origin;  /* the first kernel's start: slices of processes of one node then
			   * start at different times (their rows' keys do not collide) */
	uint64_t done;	  /* slices below this idx are handed over */
	uint64_t wm[2];	  /* per class (compute, NCCL): the latest end counted */
	struct slice ring[RING]; /* slice idx at idx % RING */
};

struct kern {
	uint64_t start, end;
	uint32_t device;
	uint32_t nccl;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct gpu gpus[MAX_DEV];
static struct kern pend[MAX_PEND]; /* kernels not folded in yet; under mu */
static size_t npend;		   /* under mu */
static uint64_t newest;		   /* the latest start seen; under mu */
static uint64_t dropped_total;	   /* under mu */
static long debug_left;		   /* FLEETQ_CUPTI_DEBUG: records still to print */
static int64_t clock_off;	      /* CLOCK_MONOTONIC minus CUPTI's clock */
static atomic_int bufs_out;
static atomic_int stopping;	      /* at exit: the flusher stops asking */
static pid_t owner;		      /* the process that started the library */

/* The hand-over point agentd probes (jobside.h), as the NCCL plugin's */
FQ_HANDOVER(fq_gpu_busy_done);
EXPORT void fq_gpu_busy_done(const struct fq_busy_rec *r);

/* Hands slice x of device d over; mu held. */
static void emit(struct gpu *g, int d, struct slice *x)
{
	struct fq_busy_rec r = {
		.magic = FQ_BUSY_MAGIC,
		.size = sizeof(r),
		.t0_ns = g->origin + x->idx * SLICE_NS,
		.dur_ns = SLICE_NS,
		.busy_ns = x->busy,
		.nccl_ns = x->nccl,
		.dropped = dropped_total,
		.kernels = x->kernels,
		.nccl_kernels = x->nccl_kernels,
		.device = d,
		.late_ns = x->late,
	};

	fq_gpu_busy_done(&r);
	memset(x, 0, sizeof(*x));
}

/* Hands over, in order, device d's open slices below idx `upto`; mu held. */
static void emit_below(struct gpu *g, int d, uint64_t upto)
{
	for (;;) {
		struct slice *first = NULL;

		for (int i = 0; i < RING; i++)
			if (g->ring[i].open && g->ring[i].idx < upto &&
			    (!first || g->ring[i].idx < first->idx))
				first = &g->ring[i];
		if (!first)
			break;
		emit(g, d, first);
	}
	if (upto > g->done)
		g->done = upto;
}

/*
 * The open slice idx of device d, or NULL where it was handed over already. A slice whose
 * ring place another still holds (a kernel RING slices past it: not in order after the
 * hold) hands that one over first.
 */
static struct slice *slice_at(struct gpu *g, int d, uint64_t idx)
{
	struct slice *x = &g->ring[idx % RING];

	if (idx < g->done || (x->open && x->idx > idx))
		return NULL;
	if (x->open && x->idx < idx) /* then idx >= RING */
		emit_below(g, d, idx - RING + 1);
	if (!x->open) {
		x->open = true;
		x->idx = idx;
	}
	return x;
}

/*
 * Adds one kernel; kernels are folded in by start, so the part of [start, end) past the
 * class's watermark is exactly what it adds to the union, piece by piece into the open
 * slices it spans. CUPTI hands records over per buffer, not in the order the kernels ran (a
 * kernel's record up to seconds after a later kernel's: 4 H200s, CUDA 13), so kernels wait
 * in pend until CUPTI has one that started LAG_NS later, and a slice is handed over only
 * once the fold has passed its end. A compute kernel whose slice was handed over already
 * (its record came later still) is counted as late_ns in the oldest open slice, not lost.
 */
static void add_kernel(const struct kern *k)
{
	struct gpu *g = &gpus[k->device];
	int d = (int)k->device;
	uint64_t from, *wm = &g->wm[k->nccl ? 1 : 0];
	struct slice *x = NULL;

	if (!g->seen) {
		g->seen = true;
		g->origin = k->start;
	}
	/* its slice handed over already (its record came later still): its compute time goes to
	 * the oldest open slice, as late_ns (whole: what of it overlapped others is unknown) */
	if (k->start < g->origin || (k->start - g->origin) / SLICE_NS < g->done) {
		if (!k->nccl && (x = slice_at(g, d, g->done)))
			x->late += k->end - k->start;
		return;
	}
	from = k->start > *wm ? k->start : *wm;
	if (k->end > *wm)
		*wm = k->end;
	x = slice_at(g, d, (k->start - g->origin) / SLICE_NS);
	if (x) {
		if (k->nccl)
			x->nccl_kernels++;
		else
			x->kernels++;
	}
	while (from < k->end) {
		uint64_t idx = (from - g->origin) / SLICE_NS;
		uint64_t stop = g->origin + (idx + 1) * SLICE_NS;
		uint64_t piece = (k->end < stop ? k->end : stop) - from;

		x = slice_at(g, d, idx);
		if (!x) {
			/* its ring place held by a slice RING later: counted nowhere */
		} else if (k->nccl) {
			x->nccl += piece;
		} else {
			x->busy += piece;
		}
		from += piece;
	}
}

static int by_start(const void *a, const void *b)
{
	const struct kern *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static void buf_req(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*buffer = NULL;
	*size = 0;
	*max_records = 0;
	if (atomic_fetch_add(&bufs_out, 1) >= MAX_BUFS) {
		atomic_fetch_sub(&bufs_out, 1);
		return; /* CUPTI drops records and counts them */
	}
	*buffer = aligned_alloc(8, BUF_SIZE);
	if (!*buffer) {
		atomic_fetch_sub(&bufs_out, 1);
		return;
	}
	*size = BUF_SIZE;
}

/*
 * Whether a kernel is NCCL's: its name (CUPTI's, mangled: _Z29ncclDevKernel_AllReduce_...)
 * starts with "nccl".
 */
static bool is_nccl(const char *n)
{
	if (!n)
		return false;
	if (n[0] == '_' && n[1] == 'Z') {
		n += 2;
		while (*n >= '0' && *n <= '9')
			n++;
	}
	return !strncmp(n, "nccl", 4);
}

/*
 * Folds in the held kernels that started before cut, in order, then hands over every slice
 * that ends by then (a kernel folded later starts at cut or after; one still running into
 * a later slice adds there); mu held.
 */
static void fold(uint64_t cut)
{
	size_t i = 0;

	qsort(pend, npend, sizeof(pend[0]), by_start);
	while (i < npend && pend[i].start < cut)
		add_kernel(&pend[i++]);
	memmove(pend, pend + i, (npend - i) * sizeof(pend[0]));
	npend -= i;
	for (int d = 0; d < MAX_DEV; d++) {
		struct gpu *g = &gpus[d];

		if (g->seen && cut > g->origin)
			emit_below(g, d, cut == UINT64_MAX ? UINT64_MAX :
							      (cut - g->origin) / SLICE_NS);
	}
}

static void buf_done(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
	void *rec = NULL;
	size_t drop = 0;

	pthread_mutex_lock(&mu);
	while (buffer && valid && cu.next_record(buffer, valid, &rec) == 0 && rec) {
		const uint8_t *p = rec;
		uint32_t kind, dev;
		uint64_t s, e;
		const char *name;

		memcpy(&kind, p, sizeof(kind));
		if (kind != KIND_CONCURRENT_KERNEL && kind != KIND_KERNEL)
			continue;
		memcpy(&s, p + OFF_START, sizeof(s));
		memcpy(&e, p + OFF_END, sizeof(e));
		memcpy(&dev, p + OFF_DEVICE, sizeof(dev));
		memcpy(&name, p + OFF_NAME, sizeof(name));
		if (debug_left > 0) {
			debug_left--;
			fprintf(stderr, "fleetq-cupti: kind %u device %u start %llu end %llu (%llu ns, "
					"newest %lld ns later) %.100s\n",
				kind, dev, (unsigned long long)s, (unsigned long long)e,
				(unsigned long long)(e - s),
				(long long)(newest - (uint64_t)((int64_t)s + clock_off)),
				name ? name : "(no name)");
		}
		if (dev >= MAX_DEV || !s || e < s)
			continue;
		/* a record's end is CUPTI's to get right; a wild one must not cost an hour of
		 * 200 ms steps (a kernel that runs longer, a hung collective's, is cut there) */
		if (e - s > MAX_KERNEL_NS)
			e = s + MAX_KERNEL_NS;
		/* held kernels full: fold them all in now, but keep the slices of the newest open */
		if (npend == MAX_PEND)
			fold(newest + 1);
		pend[npend++] = (struct kern){
			.start = (uint64_t)((int64_t)s + clock_off),
			.end = (uint64_t)((int64_t)e + clock_off),
			.device = dev,
			.nccl = is_nccl(name),
		};
		if (pend[npend - 1].start > newest)
			newest = pend[npend - 1].start;
	}
	if (newest > LAG_NS)
		fold(newest - LAG_NS);
	if (cu.dropped && cu.dropped(ctx, stream, &drop) == 0)
		dropped_total += drop;
	pthread_mutex_unlock(&mu);
	if (buffer) {
		free(buffer);
		atomic_fetch_sub(&bufs_out, 1);
	}
}

/* Asks CUPTI for its buffers every FLUSH_MS, until exit. */
static void *flusher(void *arg)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = FLUSH_MS * 1000000L };

	(void)arg;
	while (!atomic_load(&stopping)) {
		nanosleep(&ts, NULL);
		if (!atomic_load(&stopping))
			(void)cu.flush_all(0);
	}
	return NULL;
}

/* At exit: what CUPTI still holds, then every open slice. */
static void at_exit(void)
{
	if (getpid() != owner)
		return; /* a child forked by the job: its copies are not ours to hand over */
	atomic_store(&stopping, 1);
	cu.flush_all(FLUSH_FORCED);
	pthread_mutex_lock(&mu);
	fold(UINT64_MAX);
	pthread_mutex_unlock(&mu);
}

struct found {
	char cupti[PATH_MAX];
	char cudart_dir[PATH_MAX];
};

static int find_loaded(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct found *f = arg;
	const char *b = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	size_t dir;

	if (!b)
		return 0;
	dir = (size_t)(b - info->dlpi_name);
	b++;
	if (!strncmp(b, "libcupti.so", 11) && !f->cupti[0])
		snprintf(f->cupti, sizeof(f->cupti), "%s", info->dlpi_name);
	else if (!strncmp(b, "libcudart.so", 12) && !f->cudart_dir[0] && dir < PATH_MAX)
		snprintf(f->cudart_dir, sizeof(f->cudart_dir), "%.*s", (int)dir, info->dlpi_name);
	return 0;
}

/*
 * The CUPTI of the job's own CUDA: FLEETQ_CUPTI_LIB; one already loaded; beside its libcudart
 * (CUDA 13 wheels hold both in nvidia/cu13/lib; CUDA 12 wheels keep CUPTI in
 * nvidia/cuda_cupti/lib beside nvidia/cuda_runtime/lib); the loader's search.
 */
static void *open_cupti(void)
{
	static const char *const rel[] = { "libcupti.so.13", "libcupti.so.12",
					   "../../cuda_cupti/lib/libcupti.so.12",
					   "../../cuda_cupti/lib/libcupti.so.13" };
	const char *env = getenv("FLEETQ_CUPTI_LIB");
	struct found f = { "", "" };
	char path[PATH_MAX * 2];
	void *h;

	if (env && *env)
		return dlopen(env, RTLD_NOW | RTLD_LOCAL);
	dl_iterate_phdr(find_loaded, &f);
	if (f.cupti[0] && (h = dlopen(f.cupti, RTLD_NOW | RTLD_LOCAL)))
		return h;
	for (size_t i = 0; f.cudart_dir[0] && i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", f.cudart_dir, rel[i]);
		if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
			return h;
	}
	for (size_t i = 0; i < 2; i++)
		if ((h = dlopen(rel[i], RTLD_NOW | RTLD_LOCAL)))
			return h;
	return NULL;
}

static int start(void)
{
	const char *off = getenv("FLEETQ_CUPTI");
	const char *dbg = getenv("FLEETQ_CUPTI_DEBUG");
	uint64_t ts;
	void *h;

	if (off && !strcmp(off, "0"))
		return 0;
	debug_left = dbg ? strtol(dbg, NULL, 10) : 0;
	h = open_cupti();
	if (!h) {
		fprintf(stderr, "fleetq-cupti: no libcupti found (set FLEETQ_CUPTI_LIB): no GPU "
				"busy time for this process\n");
		return -1;
	}
	*(void **)&cu.register_callbacks = dlsym(h, "cuptiActivityRegisterCallbacks");
	*(void **)&cu.enable = dlsym(h, "cuptiActivityEnable");
	*(void **)&cu.next_record = dlsym(h, "cuptiActivityGetNextRecord");
	*(void **)&cu.flush_all = dlsym(h, "cuptiActivityFlushAll");
	*(void **)&cu.flush_period = dlsym(h, "cuptiActivityFlushPeriod");
	*(void **)&cu.register_ts = dlsym(h, "cuptiActivityRegisterTimestampCallback");
	*(void **)&cu.get_ts = dlsym(h, "cuptiGetTimestamp");
	*(void **)&cu.dropped = dlsym(h, "cuptiActivityGetNumDroppedRecords");
	if (!cu.register_callbacks || !cu.enable || !cu.next_record || !cu.flush_all ||
	    !cu.get_ts) {
		fprintf(stderr, "fleetq-cupti: libcupti lacks the activity API: no GPU busy time\n");
		return -1;
	}
	/* CUPTI's own clock, unless it takes ours (before any kind is enabled): its offset
	 * from the tightest of a few samples (a preempted one is off by the preemption) */
	if (!cu.register_ts || cu.register_ts(fq_mono_ns) != 0) {
		uint64_t best = UINT64_MAX;

		for (int i = 0; i < 5; i++) {
			uint64_t a = fq_mono_ns(), b;

			if (cu.get_ts(&ts) != 0)
				return -1;
			b = fq_mono_ns();
			if (b - a < best) {
				best = b - a;
				clock_off = (int64_t)(a + (b - a) / 2 - ts);
			}
		}
	}
	if (cu.register_callbacks(buf_req, buf_done) != 0 ||
	    cu.enable(KIND_CONCURRENT_KERNEL) != 0) {
		fprintf(stderr, "fleetq-cupti: CUPTI refused kernel activity (another profiler?): "
				"no GPU busy time\n");
		return -1;
	}
	/*
	 * CUPTI's own periodic flush (cuptiActivityFlushPeriod) hands over full buffers only:
	 * on a job of few kernels a buffer takes seconds to fill. A thread of ours asks for
	 * every buffer's completed records each FLUSH_MS instead (cuptiActivityFlushAll(0)).
	 */
	owner = getpid();
	{
		pthread_attr_t a;
		pthread_t t;

		if (pthread_attr_init(&a) == 0) {
			pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
			if (pthread_create(&t, &a, flusher, NULL) != 0 && cu.flush_period)
				(void)cu.flush_period(FLUSH_MS); /* full buffers, at least */
			pthread_attr_destroy(&a);
		}
	}
	atexit(at_exit);
	return 0;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void start_once(void)
{
	(void)start();
}

/* The driver's entry point: 1 = loaded fine (a failure to start is not the job's). */
EXPORT int InitializeInjection(void)
{
	pthread_once(&once, start_once);
	return 1;
}
