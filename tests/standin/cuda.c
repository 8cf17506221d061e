/* SPDX-License-Identifier: MIT */
/*
 * Stand-in libcuda.so.1: the CUDA driver API entry points fleetq probes, with cuda.h's C ABI.
 * There is no GPU: a stream is a queue of work items that the thread which synchronizes runs
 * in order. Timed kernels advance a per-stream GPU clock and a synchronize sleeps until it;
 * items with a run hook (the stand-in NCCL's collectives) block in the hook, off-CPU.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

enum item_kind { ITEM_TIMED, ITEM_RUN, ITEM_EVENT };

struct item {
	struct item *next;
	enum item_kind kind;
	uint64_t enq_ns;
	const struct fqsi_kernel *k;
	uint64_t argv[FQSI_MAX_PARAMS];
	struct CUevent_st *ev;
	uint64_t ev_gen;
};

struct CUstream_st {
	/* held while items run, so a synchronize and a polling watchdog never run one twice */
	pthread_mutex_t lock;
	struct item *head, *tail;
	uint64_t gpu_ns; /* GPU clock: when the last completed item finished */
	struct CUstream_st *next;
};

struct CUevent_st {
	struct CUstream_st *stream;
	_Atomic uint64_t rec_gen;
	_Atomic uint64_t done_gen;
};

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *streams;
static struct CUstream_st default_stream = { .lock = PTHREAD_MUTEX_INITIALIZER };
static bool default_listed;

static int ndevices(void)
{
	const char *s = getenv("FQ_STANDIN_DEVICES");
	int n = s ? atoi(s) : 8;

	return n > 0 ? n : 8;
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

static void enqueue(struct CUstream_st *s, struct item *it)
{
	it->enq_ns = fqsi_now_ns();
	pthread_mutex_lock(&s->lock);
	if (s->tail)
		s->tail->next = it;
	else
		s->head = it;
	s->tail = it;
	pthread_mutex_unlock(&s->lock);
}

/* Runs the head item. Caller holds s->lock. 0 when it completed (and was popped). */
static int run_head(struct CUstream_st *s, int block)
{
	struct item *it = s->head;
	uint64_t start = it->enq_ns > s->gpu_ns ? it->enq_ns : s->gpu_ns;
	uint64_t end = start;
	int err = 0;

	switch (it->kind) {
	case ITEM_TIMED:
		end = start + it->argv[0];
		if (fqsi_now_ns() < end) {
			struct timespec ts = { .tv_sec = (time_t)(end / 1000000000ull),
					       .tv_nsec = (long)(end % 1000000000ull) };

			if (!block)
				return -EAGAIN;
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		}
		break;
	case ITEM_RUN:
		err = it->k->run(it->argv, block);
		if (err == -EAGAIN)
			return err;
		end = fqsi_now_ns();
		break;
	case ITEM_EVENT:
		atomic_store(&it->ev->done_gen, it->ev_gen);
		break;
	}
	if (end > s->gpu_ns)
		s->gpu_ns = end;
	/* a failed item is dropped like a faulted kernel; the caller sees its error once */
	s->head = it->next;
	if (!s->head)
		s->tail = NULL;
	free(it);
	return err;
}

/* Runs items until the queue is empty or *stop says so. Caller holds s->lock. */
static int drain(struct CUstream_st *s, int block, struct CUevent_st *ev, uint64_t gen)
{
	int err = 0;

	while (s->head && !(ev && atomic_load(&ev->done_gen) >= gen)) {
		err = run_head(s, block);
		if (err)
			break;
	}
	return err;
}

static int stream_sync(struct CUstream_st *s)
{
	int err;

	pthread_mutex_lock(&s->lock);
	err = drain(s, 1, NULL, 0);
	pthread_mutex_unlock(&s->lock);
	return err;
}

FQSI_EXPORT CUresult cuInit(unsigned int flags)
{
	return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
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

	if (pthread_mutex_trylock(&s->lock))
		return CUDA_ERROR_NOT_READY;
	err = drain(s, 0, NULL, 0);
	pthread_mutex_unlock(&s->lock);
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
	it->ev_gen = atomic_fetch_add(&hEvent->rec_gen, 1) + 1;
	enqueue(hEvent->stream, it);
	return CUDA_SUCCESS;
}

FQSI_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
	uint64_t gen;
	int err;

	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	gen = atomic_load(&hEvent->rec_gen);
	if (atomic_load(&hEvent->done_gen) >= gen)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&hEvent->stream->lock);
	err = drain(hEvent->stream, 1, hEvent, gen);
	pthread_mutex_unlock(&hEvent->stream->lock);
	return cu_err(err);
}

FQSI_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
	uint64_t gen;
	int err;

	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	gen = atomic_load(&hEvent->rec_gen);
	if (atomic_load(&hEvent->done_gen) >= gen)
		return CUDA_SUCCESS;
	/* a watchdog polls while another thread synchronizes: never block, never run twice */
	if (pthread_mutex_trylock(&hEvent->stream->lock))
		return CUDA_ERROR_NOT_READY;
	err = drain(hEvent->stream, 0, hEvent, gen);
	pthread_mutex_unlock(&hEvent->stream->lock);
	if (err)
		return cu_err(err);
	return atomic_load(&hEvent->done_gen) >= gen ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FQSI_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				    unsigned int gridDimZ, unsigned int blockDimX,
				    unsigned int blockDimY, unsigned int blockDimZ,
				    unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
				    void **extra)
{
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
	enqueue(stream_of(hStream), it);
	return CUDA_SUCCESS;
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
