/* SPDX-License-Identifier: MIT */
/*
 * The parts of the stand-in API fq-workload does not drive: ncclCommInitAll, ncclCommSplit,
 * events, cudaDeviceSynchronize, memcpy round trips and the error paths. One thread per rank.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "standin.h"

typedef struct {
	char internal[128];
} ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

int ncclGetVersion(int *v);
int ncclGetUniqueId(ncclUniqueId *id);
int ncclCommInitRank(ncclComm_t *c, int n, ncclUniqueId id, int rank);
int ncclCommInitAll(ncclComm_t *comms, int n, const int *devs);
int ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, void *config);
int ncclCommCount(ncclComm_t c, int *n);
int ncclCommUserRank(ncclComm_t c, int *r);
int ncclCommCuDevice(ncclComm_t c, int *d);
int ncclCommDestroy(ncclComm_t c);
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c,
		  cudaStream_t st);
int ncclBcast(void *b, size_t n, int dt, int root, ncclComm_t c, cudaStream_t st);
int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, ncclComm_t c,
	       cudaStream_t st);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int cudaStreamCreate(cudaStream_t *s);
int cudaStreamSynchronize(cudaStream_t s);
int cudaDeviceSynchronize(void);
int cudaEventCreate(cudaEvent_t *e);
int cudaEventRecord(cudaEvent_t e, cudaStream_t s);
int cudaEventSynchronize(cudaEvent_t e);
int cudaEventQuery(cudaEvent_t e);
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *d, const void *s, size_t n, int kind);
const char *cudaGetErrorString(int e);

#define N 4
static ncclUniqueId uid;

static void *rank_main(void *arg)
{
	int rank = (int)(intptr_t)arg, n = 0, r = -1;
	ncclComm_t world = NULL, half = NULL, none = (ncclComm_t)1;
	cudaStream_t s = NULL;
	cudaEvent_t ev = NULL;

	CHECK(!cudaStreamCreate(&s));
	CHECK(!cudaEventCreate(&ev));
	CHECK(!ncclCommInitRank(&world, N, uid, rank));
	/* even ranks split into one comm with reversed keys; rank 3 opts out */
	CHECK(!ncclCommSplit(world, rank == 3 ? -1 : rank % 2, -rank, rank == 3 ? &none : &half,
			     NULL));
	if (rank == 3) {
		CHECK(none == NULL);
	} else {
		CHECK(!ncclCommCount(half, &n) && n == (rank % 2 ? 1 : 2));
		CHECK(!ncclCommUserRank(half, &r) && r == (rank == 0 ? 1 : 0));
		CHECK(!ncclAllReduce(NULL, NULL, 8, 7, 0, half, s));
	}
	CHECK(!ncclGroupStart());
	CHECK(!ncclBcast(NULL, 8, 7, 0, world, s));
	CHECK(!ncclReduce(NULL, NULL, 8, 7, 0, 1, world, s));
	CHECK(!ncclGroupEnd());
	CHECK(ncclAllReduce(NULL, NULL, 8, 99, 0, world, s) == 4); /* bad dtype */
	CHECK(ncclBcast(NULL, 8, 7, N, world, s) == 4);		    /* root out of range */
	CHECK(!cudaEventRecord(ev, s));
	CHECK(!cudaEventSynchronize(ev));
	CHECK(!cudaEventQuery(ev));
	CHECK(!cudaStreamSynchronize(s));
	if (half)
		CHECK(!ncclCommDestroy(half));
	CHECK(!ncclCommDestroy(world));
	return NULL;
}

int main(void)
{
	pthread_t t[N];
	ncclComm_t comms[2];
	cudaStream_t s[2];
	int v = 0, dev = -1, host[4] = { 1, 2, 3, 4 }, back[4] = { 0 };
	void *d = NULL;

	CHECK(!ncclGetVersion(&v) && v == 22809);
	CHECK(!ncclGetUniqueId(&uid));
	for (int i = 0; i < N; i++)
		pthread_create(&t[i], NULL, rank_main, (void *)(intptr_t)i);
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);

	/* one thread, two ranks: only works because InitAll joins both before waiting */
	CHECK(!ncclCommInitAll(comms, 2, (const int[]){ 0, 1 }));
	CHECK(!ncclCommCuDevice(comms[1], &dev) && dev == 1);
	CHECK(!ncclGroupStart());
	for (int i = 0; i < 2; i++) {
		CHECK(!cudaStreamCreate(&s[i]));
		CHECK(!ncclAllReduce(NULL, NULL, 8, 7, 0, comms[i], s[i]));
	}
	CHECK(!ncclGroupEnd());
	CHECK(!cudaDeviceSynchronize());
	for (int i = 0; i < 2; i++)
		CHECK(!ncclCommDestroy(comms[i]));

	CHECK(!cudaMalloc(&d, sizeof(host)));
	CHECK(!cudaMemcpy(d, host, sizeof(host), 1));
	CHECK(!cudaMemcpy(back, d, sizeof(back), 2));
	CHECK(!memcmp(host, back, sizeof(host)));
	CHECK(!cudaFree(d));
	CHECK(!strcmp(cudaGetErrorString(702), "the launch timed out and was terminated"));
	return check_done("test_api");
}
