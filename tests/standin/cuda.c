/* SPDX-License-Identifier: MIT */
/*
 * Stand-in libcuda.so.1: the CUDA driver API entry points fleetq probes, with cuda.h's C ABI.
 * There is no GPU: each stream is a bounded queue of work items run in order, in real time, by
 * a "device" thread of its own (started at the stream's first launch). Timed kernels sleep for
 * their duration on it, items with a run hook (the stand-in NCCL's collectives) block in the
 * hook, off-CPU; a launch blocks while the queue is full; a synchronize blocks until the device
 * has finished what was enqueued before it. FQ_STANDIN_DEVICE=inline keeps the earlier model
 * (standin.h): no device thread, the synchronizing thread runs the items.
 *
 * Like the real driver, the first cuInit loads CUDA_INJECTION64_PATH and calls its
 * InitializeInjection (how CUPTI-based tools attach); each kernel the device finishes goes to
 * the activity sink (standin.h), which the stand-in libcupti.so.13 turns into CUPTI records.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "standin.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef const struct fqsi_kernel *CUfunction;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_LAUNCH_TIMEOUT = 702,
	CUDA_ERROR_LAUNCH_FAILED = 719,
};

enum item_kind { ITEM_TIMED, ITEM_RUN, ITEM_EVENT, ITEM_WAIT };

struct item {
	struct item *next;
	enum item_kind kind;
	uint64_t enq_ns;
	const struct fqsi_kernel *k;
	uint64_t argv[FQSI_MAX_PARAMS];
	struct CUevent_st *ev;
	struct CUstream_st *wait_on; /* ITEM_WAIT: the stream the event was recorded on */
	uint64_t ev_gen;
	uint32_t device, corr; /* kernels: for the activity sink */
};

struct CUstream_st {
	pthread_mutex_t lock;
	/* one condition for all: work queued (device), room (launchers), progress (syncs) */
	pthread_cond_t cond;
	struct item *head, *tail;
	unsigned int queued; /* enqueued and not finished, the running item included */
	uint64_t nenq, ndone;
	uint64_t gpu_ns; /* device clock: when the last finished item ended */
	int err;	 /* sticky: the first failed item fails the stream, as a faulted context */
	bool started, stop;
	pthread_t thread;
	struct CUstream_st *next;
	uint32_t id;	 /* creation number, 0 for the default stream */
	uint32_t device; /* the creating thread's device; the default stream has none */
};

struct CUevent_st {
	struct CUstream_st *stream;
	_Atomic uint64_t rec_gen;
	_Atomic uint64_t done_gen;
	_Atomic uint64_t done_ns; /* the device clock when done_gen was reached */
};

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *streams;
static struct CUstream_st default_stream = { .lock = PTHREAD_MUTEX_INITIALIZER,
					     .cond = PTHREAD_COND_INITIALIZER };
static bool default_listed;

/* the calling thread's device (real: its current context), set by cudaSetDevice */
static __thread uint32_t cur_device;
static _Atomic uint32_t nstreams;
static _Atomic uint32_t nlaunches;
static _Atomic(fqsi_activity_fn) activity_sink;

static int ndevices(void)
{
	const char *s = getenv("FQ_STANDIN_DEVICES");
	int n = s ? atoi(s) : 8;

	return n > 0 ? n : 8;
}

/* Items a stream holds before a launch blocks: FQ_STANDIN_LAUNCH_QUEUE, default 64. */
static unsigned int queue_depth(void)
{
	static _Atomic unsigned int depth;
	unsigned int d = atomic_load(&depth);

	if (!d) {
		const char *s = getenv("FQ_STANDIN_LAUNCH_QUEUE");
		long v = s ? strtol(s, NULL, 10) : 0;

		d = v > 0 && v < 1000000 ? (unsigned int)v : 64;
		atomic_store(&depth, d);
	}
	return d;
}

/*
 * A GPU runs whatever the host's CPUs are doing; a device thread does not: on a box with more
 * ranks' threads than cores, a device thread woken late starts its collective late, and its
 * rank can become the job's straggler with no fault planted (a clean 8-rank job on 2 cores had
 * one rank's kernels shortest all through, its peers waiting 4-5 % of the span on it).
 * FQ_STANDIN_DEVICE_PRIO "rt" has the device thread ask for the CPU first (SCHED_FIFO 1, else
 * nice -20 where the scheduler refuses it, e.g. no CAP_SYS_NICE), "nice" nice -20 only; unset
 * or anything else, as the launching threads (the default: the tests' verdicts were set on
 * that timing, and with "rt" a GPU 50 % slower with a sync every step falls under the effect
 * bar; BENCHMARKS.md round 13). Device threads only sleep or wait (timed kernels sleep,
 * collectives wait on a futex), so the CPU they take is what their bookkeeping needs.
 */
static void device_priority(void)
{
	const char *s = getenv("FQ_STANDIN_DEVICE_PRIO");
	struct sched_param sp = { .sched_priority = 1 };

	if (!s || (strcmp(s, "rt") && strcmp(s, "nice")))
		return;
	if (!strcmp(s, "rt") && !sched_setscheduler(0, SCHED_FIFO, &sp))
		return;
	/* on Linux the nice value is a thread's own */
	(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), -20);
}

static struct CUstream_st *stream_of(CUstream s)
{
	if (s)
		return s;
	pthread_mutex_lock(&streams_lock);
	if (!default_listed) {
		default_stream.next = streams;
		streams = &default_stream;
		default_listed = true;
	}
	pthread_mutex_unlock(&streams_lock);
	return &default_stream;
}

static CUresult cu_err(int err)
{
	switch (err) {
	case 0:
		return CUDA_SUCCESS;
	case -EAGAIN:
		return CUDA_ERROR_NOT_READY;
	case -ETIMEDOUT:
		return CUDA_ERROR_LAUNCH_TIMEOUT;
	case -ENOMEM:
		return CUDA_ERROR_OUT_OF_MEMORY;
	case -EINVAL:
		return CUDA_ERROR_INVALID_VALUE;
	default:
		return CUDA_ERROR_LAUNCH_FAILED;
	}
}

static void drain_inline(struct CUstream_st *s, struct CUevent_st *ev, uint64_t gen);

/* A kernel ran to completion: tell the sink, if one is registered (standin.h). */
static void report_kernel(const struct CUstream_st *s, const struct item *it, uint64_t start,
			  uint64_t end)
{
	fqsi_activity_fn fn = atomic_load_explicit(&activity_sink, memory_order_acquire);
	struct fqsi_activity a;

	if (!fn)
		return;
	a = (struct fqsi_activity){ .start_ns = start, .end_ns = end, .device = it->device,
				    .stream = s->id, .correlation = it->corr };
	/* a run hook is the stand-in NCCL's collective: CUPTI names it ncclDevKernel_<Op> */
	a.name = it->k->name ? it->k->name : it->kind == ITEM_RUN ? "ncclDevKernel" : "kernel";
	fn(&a);
}

/* Runs one item on the device thread; returns its error and sets *end to the device clock. */
static int run_item(struct CUstream_st *s, struct item *it, int failed, uint64_t *end)
{
	uint64_t start = it->enq_ns > s->gpu_ns ? it->enq_ns : s->gpu_ns;
	struct fqsi_exec x = { .start_ns = start, .end_ns = start, .failed = failed };
	char note[96];
	int err = 0;

	switch (it->kind) {
	case ITEM_TIMED:
		x.end_ns = start + it->argv[0];
		if (failed)
			break;
		fqsi_sleep_until(x.end_ns);
		/* (and its launch: a kernel launched onto an idle stream starts there) */
		snprintf(note, sizeof(note), "gstart=%llu gstop=%llu launch=%llu",
			 (unsigned long long)(start + fqsi_gpu_offset_ns()),
			 (unsigned long long)(x.end_ns + fqsi_gpu_offset_ns()),
			 (unsigned long long)(it->enq_ns + fqsi_gpu_offset_ns()));
		fqsi_device_row(it->k->name, -1, 0, it->argv[0], note);
		report_kernel(s, it, start, x.end_ns);
		break;
	case ITEM_RUN:
		err = it->k->run(it->argv, &x);
		if (x.end_ns < x.start_ns)
			x.end_ns = x.start_ns;
		if (!err && !failed)
			report_kernel(s, it, x.start_ns, x.end_ns);
		break;
	case ITEM_WAIT:
		if (fqsi_inline()) {
			/* no device runs the other stream: run it up to the event here */
			if (it->wait_on != s) {
				pthread_mutex_lock(&it->wait_on->lock);
				drain_inline(it->wait_on, it->ev, it->ev_gen);
				pthread_mutex_unlock(&it->wait_on->lock);
			}
			break;
		}
		/* cuStreamWaitEvent: the device idles until the other stream passes the event */
		pthread_mutex_lock(&it->wait_on->lock);
		while (atomic_load(&it->ev->done_gen) < it->ev_gen)
			pthread_cond_wait(&it->wait_on->cond, &it->wait_on->lock);
		pthread_mutex_unlock(&it->wait_on->lock);
		/* on device clocks: when the other stream passed the event, on its clock */
		x.end_ns = fqsi_device_clock() ? atomic_load(&it->ev->done_ns) : fqsi_now_ns();
		if (x.end_ns < x.start_ns)
			x.end_ns = x.start_ns;
		break;
	case ITEM_EVENT:
		break;
	}
	*end = x.end_ns;
	return err;
}

/* An item is done. Caller holds s->lock. */
static void finish_item(struct CUstream_st *s, struct item *it, int err, uint64_t end)
{
	if (err && !s->err)
		s->err = err;
	if (end > s->gpu_ns)
		s->gpu_ns = end;
	if (it->kind == ITEM_EVENT) {
		atomic_store(&it->ev->done_ns, end);
		atomic_store(&it->ev->done_gen, it->ev_gen);
	}
	s->queued--;
	s->ndone++;
	pthread_cond_broadcast(&s->cond);
	free(it);
}

static void *device_main(void *arg)
{
	struct CUstream_st *s = arg;

	prctl(PR_SET_NAME, "fqsi-device");
	device_priority();
	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct item *it;
		uint64_t end = 0;
		int err, failed;

		while (!s->head && !s->stop)
			pthread_cond_wait(&s->cond, &s->lock);
		if (!s->head)
			break;
		it = s->head;
		s->head = it->next;
		if (!s->head)
			s->tail = NULL;
		failed = s->err;
		pthread_mutex_unlock(&s->lock);
		err = run_item(s, it, failed, &end);
		pthread_mutex_lock(&s->lock);
		finish_item(s, it, err, end);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Inline mode: the calling thread runs the queued items, holding the stream's lock. */
static void drain_inline(struct CUstream_st *s, struct CUevent_st *ev, uint64_t gen)
{
	while (s->head && !(ev && atomic_load(&ev->done_gen) >= gen)) {
		struct item *it = s->head;
		uint64_t end = 0;
		int err;

		s->head = it->next;
		if (!s->head)
			s->tail = NULL;
		err = run_item(s, it, s->err, &end);
		finish_item(s, it, err, end);
	}
}

/* Queues an item; blocks (off-CPU) while the stream's launch queue is full. */
static int enqueue(struct CUstream_st *s, struct item *it)
{
	unsigned int depth = queue_depth();

	pthread_mutex_lock(&s->lock);
	if (fqsi_inline()) {
		depth = UINT_MAX;
	} else if (!s->started) {
		if (pthread_create(&s->thread, NULL, device_main, s)) {
			pthread_mutex_unlock(&s->lock);
			free(it);
			return -ENOMEM;
		}
		s->started = true;
	}
	while (s->queued >= depth)
		pthread_cond_wait(&s->cond, &s->lock);
	it->enq_ns = fqsi_now_ns();
	if (it->kind == ITEM_EVENT)
		it->ev_gen = atomic_fetch_add(&it->ev->rec_gen, 1) + 1;
	if (s->tail)
		s->tail->next = it;
	else
		s->head = it;
	s->tail = it;
	s->queued++;
	s->nenq++;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Blocks until the device has finished the work enqueued before the call. */
static int stream_sync(struct CUstream_st *s)
{
	uint64_t target;
	int err;

	pthread_mutex_lock(&s->lock);
	target = s->nenq;
	if (fqsi_inline())
		drain_inline(s, NULL, 0);
	while (s->ndone < target)
		pthread_cond_wait(&s->cond, &s->lock);
	err = s->err;
	pthread_mutex_unlock(&s->lock);
	return err;
}

FQSI_EXPORT void fqsi_activity_sink(fqsi_activity_fn fn)
{
	atomic_store_explicit(&activity_sink, fn, memory_order_release);
}

FQSI_EXPORT void fqsi_set_device(int device)
{
	cur_device = device > 0 ? (uint32_t)device : 0;
}

static pthread_once_t inject_once = PTHREAD_ONCE_INIT;
static __thread bool injecting;

/*
 * CUDA_INJECTION64_PATH, as the real driver loads it at the first cuInit: dlopen, then
 * InitializeInjection(), whose return value it ignores (NVIDIA's samples return 1). A library
 * that fails to load or lacks the symbol costs one line on stderr, never the application.
 */
static void inject(void)
{
	const char *path = getenv("CUDA_INJECTION64_PATH");
	int (*init)(void);
	void *h;

	if (!path || !*path)
		return;
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "libcuda (stand-in): cannot load CUDA_INJECTION64_PATH '%s', "
				"running without it: %s\n", path, dlerror());
		return;
	}
	init = (int (*)(void))dlsym(h, "InitializeInjection");
	if (!init) {
		fprintf(stderr, "libcuda (stand-in): CUDA_INJECTION64_PATH '%s' exports no "
				"InitializeInjection, running without it\n", path);
		dlclose(h);
		return;
	}
	/* it may call back into the driver (cuInit too): that call must not wait for itself */
	injecting = true;
	(void)init();
	injecting = false;
}

FQSI_EXPORT CUresult cuInit(unsigned int flags)
{
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!injecting)
		pthread_once(&inject_once, inject);
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuDriverGetVersion(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 13000;
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuDeviceGetCount(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = ndevices();
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= ndevices())
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int flags)
{
	struct CUstream_st *s;

	if (!phStream)
		return CUDA_ERROR_INVALID_VALUE;
	s = calloc(1, sizeof(*s));
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->id = atomic_fetch_add(&nstreams, 1) + 1;
	s->device = cur_device;
	pthread_mutex_lock(&streams_lock);
	s->next = streams;
	streams = s;
	pthread_mutex_unlock(&streams_lock);
	*phStream = s;
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
	struct CUstream_st **pp;
	int err;

	if (!hStream || hStream == &default_stream)
		return CUDA_ERROR_INVALID_HANDLE;
	/* the real driver finishes queued work before it frees the stream */
	err = stream_sync(hStream);
	pthread_mutex_lock(&streams_lock);
	for (pp = &streams; *pp; pp = &(*pp)->next) {
		if (*pp == hStream) {
			*pp = hStream->next;
			break;
		}
	}
	pthread_mutex_unlock(&streams_lock);
	pthread_mutex_lock(&hStream->lock);
	hStream->stop = true;
	pthread_cond_broadcast(&hStream->cond);
	pthread_mutex_unlock(&hStream->lock);
	if (hStream->started)
		pthread_join(hStream->thread, NULL);
	pthread_cond_destroy(&hStream->cond);
	pthread_mutex_destroy(&hStream->lock);
	free(hStream);
	return cu_err(err);
}

FQSI_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
	return cu_err(stream_sync(stream_of(hStream)));
}

FQSI_EXPORT CUresult cuStreamQuery(CUstream hStream)
{
	struct CUstream_st *s = stream_of(hStream);
	int err;

	/* never blocks: a watchdog thread polls while another synchronizes (inline: runs) */
	if (pthread_mutex_trylock(&s->lock))
		return CUDA_ERROR_NOT_READY;
	err = s->ndone < s->nenq ? -EAGAIN : s->err;
	pthread_mutex_unlock(&s->lock);
	return cu_err(err);
}

FQSI_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	struct item *it;
	int err;

	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	if (Flags)
		return CUDA_ERROR_INVALID_VALUE;
	/* an event never recorded is complete: nothing to wait for */
	if (!hEvent->stream || !atomic_load(&hEvent->rec_gen))
		return CUDA_SUCCESS;
	it = calloc(1, sizeof(*it));
	if (!it)
		return CUDA_ERROR_OUT_OF_MEMORY;
	it->kind = ITEM_WAIT;
	it->ev = hEvent;
	it->wait_on = hEvent->stream;
	it->ev_gen = atomic_load(&hEvent->rec_gen);
	err = enqueue(stream_of(hStream), it);
	return cu_err(err);
}

FQSI_EXPORT CUresult cuCtxSynchronize(void)
{
	struct CUstream_st *list[256];
	int n = 0, err = 0;

	stream_of(NULL);
	/* snapshot, so a blocking stream does not hold the list lock for the whole wait */
	pthread_mutex_lock(&streams_lock);
	for (struct CUstream_st *s = streams; s && n < 256; s = s->next)
		list[n++] = s;
	pthread_mutex_unlock(&streams_lock);
	for (int i = 0; i < n; i++) {
		int e = stream_sync(list[i]);

		if (e && !err)
			err = e;
	}
	return cu_err(err);
}

FQSI_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int flags)
{
	struct CUevent_st *ev;

	if (!phEvent)
		return CUDA_ERROR_INVALID_VALUE;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phEvent = ev;
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	/* an EVENT item still queued would touch it: complete the stream first */
	if (atomic_load(&hEvent->done_gen) < atomic_load(&hEvent->rec_gen))
		stream_sync(hEvent->stream);
	free(hEvent);
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	struct item *it;

	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	it = calloc(1, sizeof(*it));
	if (!it)
		return CUDA_ERROR_OUT_OF_MEMORY;
	it->kind = ITEM_EVENT;
	it->ev = hEvent;
	hEvent->stream = stream_of(hStream);
	return cu_err(enqueue(hEvent->stream, it));
}

FQSI_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
	struct CUstream_st *s;
	uint64_t gen;
	int err;

	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	gen = atomic_load(&hEvent->rec_gen);
	if (atomic_load(&hEvent->done_gen) >= gen)
		return CUDA_SUCCESS;
	s = hEvent->stream;
	pthread_mutex_lock(&s->lock);
	if (fqsi_inline())
		drain_inline(s, hEvent, gen);
	while (atomic_load(&hEvent->done_gen) < gen)
		pthread_cond_wait(&s->cond, &s->lock);
	err = s->err;
	pthread_mutex_unlock(&s->lock);
	return cu_err(err);
}

FQSI_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
	int err;

	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	if (atomic_load(&hEvent->done_gen) < atomic_load(&hEvent->rec_gen))
		return CUDA_ERROR_NOT_READY;
	if (!hEvent->stream)
		return CUDA_SUCCESS;
	/* a failed stream says so; never blocks on a synchronize that runs items inline */
	if (pthread_mutex_trylock(&hEvent->stream->lock))
		return CUDA_SUCCESS;
	err = hEvent->stream->err;
	pthread_mutex_unlock(&hEvent->stream->lock);
	return cu_err(err);
}

FQSI_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				    unsigned int gridDimZ, unsigned int blockDimX,
				    unsigned int blockDimY, unsigned int blockDimZ,
				    unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
				    void **extra)
{
	struct CUstream_st *s = stream_of(hStream);
	struct item *it;

	if (!f || f->magic != FQSI_KERNEL_MAGIC || f->nparams > FQSI_MAX_PARAMS)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ)
		return CUDA_ERROR_INVALID_VALUE;
	if (f->nparams && !kernelParams)
		return CUDA_ERROR_INVALID_VALUE;
	it = calloc(1, sizeof(*it));
	if (!it)
		return CUDA_ERROR_OUT_OF_MEMORY;
	it->kind = f->run ? ITEM_RUN : ITEM_TIMED;
	it->k = f;
	for (uint32_t i = 0; i < f->nparams; i++)
		memcpy(&it->argv[i], kernelParams[i], sizeof(uint64_t));
	/* a stream runs on its creator's device; the default stream on the launcher's */
	it->device = s == &default_stream ? cur_device : s->device;
	it->corr = atomic_fetch_add(&nlaunches, 1) + 1;
	return cu_err(enqueue(s, it));
}

FQSI_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	void *p;

	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	/* device memory is host memory here; pages stay untouched unless copied into */
	p = malloc(bytesize);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	free((void *)(uintptr_t)dptr);
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	if (ByteCount && (!dstDevice || !srcHost))
		return CUDA_ERROR_INVALID_VALUE;
	memmove((void *)(uintptr_t)dstDevice, srcHost, ByteCount);
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	if (ByteCount && (!dstHost || !srcDevice))
		return CUDA_ERROR_INVALID_VALUE;
	memmove(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount);
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
				   CUstream hStream)
{
	if (ByteCount && (!dst || !src))
		return CUDA_ERROR_INVALID_VALUE;
	/* copied at once: no stand-in collective moves data, so ordering cannot be observed */
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount);
	return CUDA_SUCCESS;
}
