/* SPDX-License-Identifier: MIT */
/*
 * ncclprof-drive PLUGIN N: calls fleetq's NCCL profiler plugin the way NCCL 2.28 does
 * (src/plugin/profiler.cc) for N all-reduces and N/2 all-gathers on one communicator, then
 * N/4 rounds of a Send to rank 3, a Send to rank 0 and a Recv from rank 1 (P2p events, this
 * being rank 2 of 4), from two threads as NCCL does (the host thread starts and stops the
 * call; a "proxy" thread reports each of its 2 kernel channels later), with GPU times that a
 * test can check exactly: call i of kind k (AllReduce 0, AllGather 1, then the three p2p
 * calls 2, 3, 4 of round i) starts at 1e9 + 1e6 * i + 1000 * k on the GPU, and its channel c
 * lasts 10000 + 100 * i + c ns. A Send to rank 4, out of range, goes in each round too: it
 * must leave no row. Prints the communicator hash it gave the plugin.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqtrace.h"
#include "ncclprof/nccl_profiler.h"

struct job {
	const fq_nccl_profiler_v5_t *p;
	void *ctx;
	void *coll;
	int ch;
	uint64_t start, stop;
};

static void *proxy(void *arg)
{
	struct job *j = arg;
	fq_nccl_descr_t d = { .type = ncclProfileKernelCh, .parentObj = j->coll };
	fq_nccl_state_args_t a = { 0 };
	void *h = NULL;

	d.kernelCh.channelId = (uint8_t)j->ch;
	d.kernelCh.pTimer = j->start;
	j->p->startEvent(j->ctx, &h, &d);
	a.kernelCh.pTimer = j->stop;
	if (h) {
		j->p->recordEventState(h, ncclProfilerKernelChStop, &a);
		j->p->stopEvent(h);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static const char *const ops[2] = { "AllReduce", "AllGather" };
	static const struct {
		const char *func;
		int peer;
	} p2p[4] = { { "Send", 3 }, { "Send", 0 }, { "Recv", 1 }, { "Send", 4 } };
	const fq_nccl_profiler_v5_t *p;
	unsigned char id[128];
	void *lib, *ctx = NULL;
	uint64_t hash, seq[2] = { 0, 0 };
	int n, mask = 0;

	if (argc != 3 || (n = atoi(argv[2])) <= 0) {
		fprintf(stderr, "usage: ncclprof-drive PLUGIN N\n");
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib || !(p = dlsym(lib, "ncclProfiler_v5"))) {
		fprintf(stderr, "ncclprof-drive: cannot load '%s': %s\n", argv[1], dlerror());
		return 1;
	}
	for (size_t i = 0; i < sizeof(id); i++)
		id[i] = (unsigned char)(i * 7 + 3);
	hash = fq_nccl_hash(id, sizeof(id));
	if (p->init(&ctx, hash, &mask, "drive", 1, 4, 2, NULL) || !ctx ||
	    mask != (ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh)) {
		fprintf(stderr, "ncclprof-drive: init gave context %p, mask %#x\n", ctx, mask);
		return 1;
	}
	for (int i = 0; i < n + n / 2 + 4 * (n / 4); i++) {
		int k = i >= n; /* the all-gathers after the all-reduces, then the p2p rounds */
		fq_nccl_descr_t d = { .type = ncclProfileColl, .rank = 2 };
		struct job j[2];
		pthread_t th[2];
		void *coll = NULL;
		uint64_t s;

		if (i < n + n / 2) {
			s = seq[k]++;
			d.coll.seqNumber = s;
			d.coll.func = ops[k];
			d.coll.count = 1024;
			d.coll.datatype = "ncclFloat32";
			d.coll.nChannels = 2;
		} else {
			int q = (i - n - n / 2) % 4;

			s = (uint64_t)(i - n - n / 2) / 4;
			k = 2 + q;
			d.type = ncclProfileP2p;
			d.p2p.func = p2p[q].func;
			d.p2p.count = 256;
			d.p2p.datatype = "ncclFloat32";
			d.p2p.peer = p2p[q].peer;
			d.p2p.nChannels = 2;
		}
		p->startEvent(ctx, &coll, &d);
		if (k == 5) { /* the peer out of range: no record, no handle */
			if (coll) {
				fprintf(stderr, "ncclprof-drive: a handle for a Send to rank 4\n");
				return 1;
			}
			continue;
		}
		if (!coll) {
			fprintf(stderr, "ncclprof-drive: no handle for call %d\n", i);
			return 1;
		}
		p->stopEvent(coll); /* the host side ends before the kernel */
		for (int c = 0; c < 2; c++) {
			j[c] = (struct job){ .p = p, .ctx = ctx, .coll = coll, .ch = c,
					     .start = 1000000000ull + 1000000ull * s + 1000ull * k };
			j[c].stop = j[c].start + 10000 + 100 * s + (uint64_t)c;
			pthread_create(&th[c], NULL, proxy, &j[c]);
		}
		for (int c = 0; c < 2; c++)
			pthread_join(th[c], NULL);
	}
	p->finalize(ctx);
	printf("%016" PRIx64 "\n", hash);
	return 0;
}
