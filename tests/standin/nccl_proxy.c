// SPDX-License-Identifier: MIT
/*
 * NCCL's own threads. Real NCCL starts a proxy service thread from inside ncclCommInitRank
 * (from the thread of its init job), and that thread starts the proxy progress thread, which
 * spins beside the job while it has work (0.5-1.0 of a CPU per rank on a 4-GPU DDP job).
 * agentd must not count that spin as the job's CPU work. FQ_STANDIN_PROXY_SPIN_PCT=P starts
 * the same pair at ncclCommInitRank (FQ_STANDIN_PROXY_SPIN_RANK=R: on rank R only): the
 * service thread, started by the thread in the call, starts the progress thread, which spins
 * P % of every millisecond until the communicator goes; the service thread then reports the
 * progress thread's CPU time on stderr ("fq-standin nccl: rank R proxy progress cpu_ns N").
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nccl_int.h"

struct proxy {
	pthread_t service;
	atomic_int stop;
	int pct, rank;
	uint64_t cpu_ns; /* the progress thread's CPU time, set as it ends */
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void *progress_main(void *arg)
{
	struct proxy *p = arg;

	while (!atomic_load(&p->stop)) {
		uint64_t t0 = fqsi_now_ns();

		while (fqsi_now_ns() - t0 < (uint64_t)p->pct * 10000)
			;
		fqsi_sleep_until(t0 + 1000000);
	}
	p->cpu_ns = thread_cpu_ns();
	return NULL;
}

static void *service_main(void *arg)
{
	struct proxy *p = arg;
	pthread_t progress;

	if (pthread_create(&progress, NULL, progress_main, p)) {
		fail("rank %d: cannot start the proxy progress thread", p->rank);
		return NULL;
	}
	pthread_join(progress, NULL);
	fprintf(stderr, "fq-standin nccl: rank %d proxy progress cpu_ns %llu\n", p->rank,
		(unsigned long long)p->cpu_ns);
	return NULL;
}

void proxy_start(struct ncclComm *c)
{
	const char *pct = getenv("FQ_STANDIN_PROXY_SPIN_PCT");
	const char *only = getenv("FQ_STANDIN_PROXY_SPIN_RANK");
	struct proxy *p;
	int v;

	if (!pct || (v = atoi(pct)) <= 0 || (only && *only && atoi(only) != c->rank))
		return;
	p = calloc(1, sizeof(*p));
	if (!p)
		return;
	p->pct = v > 100 ? 100 : v;
	p->rank = c->rank;
	if (pthread_create(&p->service, NULL, service_main, p)) {
		fail("rank %d: cannot start the proxy service thread", c->rank);
		free(p);
		return;
	}
	c->proxy = p;
}

void proxy_stop(struct ncclComm *c)
{
	struct proxy *p = c->proxy;

	if (!p)
		return;
	c->proxy = NULL;
	atomic_store(&p->stop, 1);
	pthread_join(p->service, NULL);
	free(p);
}
