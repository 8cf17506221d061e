/* SPDX-License-Identifier: MIT */
/*
 * Stand-in libcudart.so.13: the CUDA runtime API calls fleetq probes, with cuda_runtime_api.h's
 * C ABI, each calling into the stand-in libcuda.so.1 the way the real runtime calls the driver,
 * so a trace sees both layers (cudaStreamSynchronize, then cuStreamSynchronize under it).
 */
#include <stddef.h>
#include <stdint.h>

#include "standin.h"

typedef int cudaError_t;
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef const struct fqsi_kernel *CUfunction;

typedef struct dim3 {
	unsigned int x, y, z;
} dim3;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4,
};

/* the driver entry points, as the stand-in libcuda.so.1 exports them */
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGetCount(int *count);
CUresult cuStreamCreate(cudaStream_t *phStream, unsigned int flags);
CUresult cuStreamDestroy_v2(cudaStream_t hStream);
CUresult cuStreamSynchronize(cudaStream_t hStream);
CUresult cuStreamQuery(cudaStream_t hStream);
CUresult cuStreamWaitEvent(cudaStream_t hStream, cudaEvent_t hEvent, unsigned int flags);
CUresult cuCtxSynchronize(void);
CUresult cuEventCreate(cudaEvent_t *phEvent, unsigned int flags);
CUresult cuEventDestroy_v2(cudaEvent_t hEvent);
CUresult cuEventRecord(cudaEvent_t hEvent, cudaStream_t hStream);
CUresult cuEventSynchronize(cudaEvent_t hEvent);
CUresult cuEventQuery(cudaEvent_t hEvent);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
			cudaStream_t hStream, void **kernelParams, void **extra);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, cudaStream_t hStream);

enum {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorNotReady = 600,
	cudaErrorLaunchTimeout = 702,
	cudaErrorLaunchFailure = 719,
};

static __thread int cur_device;

/* driver and runtime codes coincide for every code the stand-in driver returns */
static cudaError_t rt_err(CUresult r)
{
	return (cudaError_t)r;
}

FQSI_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
	return rt_err(cuDeviceGetCount(count));
}

FQSI_EXPORT cudaError_t cudaSetDevice(int device)
{
	int n = 0;

	cuInit(0);
	cuDeviceGetCount(&n);
	if (device < 0 || device >= n)
		return cudaErrorInvalidDevice;
	cur_device = device;
	/* as the real runtime makes the device's primary context current in the driver */
	fqsi_set_device(device);
	return cudaSuccess;
}

FQSI_EXPORT cudaError_t cudaGetDevice(int *device)
{
	if (!device)
		return cudaErrorInvalidValue;
	*device = cur_device;
	return cudaSuccess;
}

FQSI_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return rt_err(cuStreamCreate(pStream, 0));
}

FQSI_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	return rt_err(cuStreamDestroy_v2(stream));
}

FQSI_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	return rt_err(cuStreamSynchronize(stream));
}

FQSI_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	return rt_err(cuStreamQuery(stream));
}

FQSI_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
					    unsigned int flags)
{
	return rt_err(cuStreamWaitEvent(stream, event, flags));
}

FQSI_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
	return rt_err(cuCtxSynchronize());
}

FQSI_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return rt_err(cuEventCreate(event, 0));
}

FQSI_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	return rt_err(cuEventDestroy_v2(event));
}

FQSI_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	return rt_err(cuEventRecord(event, stream));
}

FQSI_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	return rt_err(cuEventSynchronize(event));
}

FQSI_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
	return rt_err(cuEventQuery(event));
}

FQSI_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream)
{
	/* the real runtime maps the host stub to a CUfunction; here the stub is the function */
	return rt_err(cuLaunchKernel(func, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y,
				     blockDim.z, (unsigned int)sharedMem, stream, args, NULL));
}

FQSI_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	CUdeviceptr p = 0;
	CUresult r;

	if (!devPtr)
		return cudaErrorInvalidValue;
	r = cuMemAlloc_v2(&p, size);
	if (r)
		return r == 2 ? cudaErrorMemoryAllocation : rt_err(r);
	*devPtr = (void *)(uintptr_t)p;
	return cudaSuccess;
}

FQSI_EXPORT cudaError_t cudaFree(void *devPtr)
{
	return rt_err(cuMemFree_v2((CUdeviceptr)(uintptr_t)devPtr));
}

FQSI_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
				   enum cudaMemcpyKind kind)
{
	switch (kind) {
	case cudaMemcpyHostToDevice:
		return rt_err(cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)dst, src, count));
	case cudaMemcpyDeviceToHost:
		return rt_err(cuMemcpyDtoH_v2(dst, (CUdeviceptr)(uintptr_t)src, count));
	case cudaMemcpyHostToHost:
	case cudaMemcpyDeviceToDevice:
	case cudaMemcpyDefault:
		return rt_err(cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst,
					    (CUdeviceptr)(uintptr_t)src, count, NULL));
	}
	return cudaErrorInvalidValue;
}

FQSI_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
					enum cudaMemcpyKind kind, cudaStream_t stream)
{
	if ((unsigned int)kind > cudaMemcpyDefault)
		return cudaErrorInvalidValue;
	return rt_err(cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, count,
				    stream));
}

FQSI_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
	switch (error) {
	case cudaSuccess:
		return "no error";
	case cudaErrorInvalidValue:
		return "invalid argument";
	case cudaErrorMemoryAllocation:
		return "out of memory";
	case cudaErrorInitializationError:
		return "initialization error";
	case cudaErrorNoDevice:
		return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice:
		return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle:
		return "invalid resource handle";
	case cudaErrorNotReady:
		return "device not ready";
	case cudaErrorLaunchTimeout:
		return "the launch timed out and was terminated";
	case cudaErrorLaunchFailure:
		return "unspecified launch failure";
	}
	return "unrecognized error code";
}
