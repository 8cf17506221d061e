/* SPDX-License-Identifier: MIT */
/*
 * libfleetq-nccl-profiler.so: fleetq's NCCL profiler plugin (DESIGN.md §2, GPU-side wait).
 *
 * NCCL (>= 2.26) loads the library named by NCCL_PROFILER_PLUGIN (the environment, or
 * /etc/nccl.conf) and calls it for every collective and every Send/Recv (P2p event, with its
 * peer): startEvent/stopEvent around the host side of the call, then, from its proxy thread,
 * one KernelCh event per channel with the GPU's globaltimer at the channel's start and stop.
 * Once a call's host side and every channel it started have stopped, the plugin hands one
 * fixed-size record (bpf/fqtrace.h, struct fq_prof_rec) to fq_nccl_kernel_done(), a function
 * that does nothing: agentd puts a uprobe on it and copies the record into the trace (its
 * coll_idx, the collectives on the communicator before it, lets an agentd that started
 * after the communicator's init place the job's calls: agentd/trace_adopt.c). Without
 * agentd the call costs a few nanoseconds and nothing is written anywhere: no file, no shared
 * memory, no socket.
 *
 * Never stalls or crashes the job: no allocation after init (each communicator gets a ring
 * of SLOTS calls, recycled in order, and two Send/Recv counters per rank; a record still
 * waiting for channels when its slot comes round again is handed over as it is, marked
 * FQ_PROF_PARTIAL), one mutex per communicator held for a few loads and stores, and every
 * unknown event answered with a NULL handle, which NCCL then never passes back.
 * FLEETQ_NCCL_PROFILER=0 turns it off (activation mask 0). NCCL loads one profiler plugin:
 * when NCCL_PROFILER_PLUGIN names another one, this one is not loaded and fleetq has no
 * GPU-side timing for that job (docs/analysis.md says what `fleetq stragglers` does then).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fqtrace.h"
#include "jobside.h"
#include "nccl_profiler.h"

#define EXPORT __attribute__((visibility("default")))
#define SLOTS 1024	  /* collectives in flight per communicator, at most */
#define MAX_CHANNELS 64 /* NCCL's MAXCHANNELS */

enum tag { TAG_COLL = 0x636f6c6c, TAG_CH = 0x6368616e };

struct coll;

struct chan {
	uint32_t tag;	  /* TAG_CH */
	uint32_t gen;	  /* the collective's generation when this channel started */
	struct coll *coll;
	uint64_t start, stop;
};

struct coll {
	uint32_t tag; /* TAG_COLL */
	uint32_t gen; /* bumped on every reuse of the slot */
	struct ctx *ctx;
	bool live, host_done;
	int started, stopped, expect;
	struct fq_prof_rec rec;
	struct chan ch[MAX_CHANNELS];
};

struct ctx {
	pthread_mutex_t mu;
	uint64_t comm;
	int rank, nranks;
	unsigned int next;
	uint64_t ncoll; /* Coll events so far */
	uint64_t *p2p_seq; /* [2 * peer + is Recv]: Send/Recv so far; NULL: none counted */
	struct coll slot[SLOTS];
};

/* The hand-over point agentd probes (jobside.h) */
FQ_HANDOVER(fq_nccl_kernel_done);
EXPORT void fq_nccl_kernel_done(const struct fq_prof_rec *r);

/* Hands c's record over and frees the slot; c->ctx->mu held. */
static void finish(struct coll *c, uint32_t flags)
{
	struct fq_prof_rec r = c->rec;

	r.flags |= flags;
	c->live = false;
	c->gen++;
	fq_nccl_kernel_done(&r);
}

/* Done when the host side stopped and every channel that started stopped too. */
static void maybe_finish(struct coll *c)
{
	if (c->live && c->host_done && c->started > 0 && c->stopped == c->started &&
	    c->started >= c->expect)
		finish(c, 0);
}

static ncclResult_t init_common(void **context, int *mask, uint64_t comm, int nranks, int rank)
{
	const char *off = getenv("FLEETQ_NCCL_PROFILER");
	struct ctx *x;

	*context = NULL;
	*mask = 0;
	if (off && !strcmp(off, "0"))
		return 0;
	x = calloc(1, sizeof(*x));
	if (!x)
		return 0; /* no memory: profile nothing rather than fail the communicator */
	pthread_mutex_init(&x->mu, NULL);
	x->comm = comm;
	x->rank = rank;
	x->nranks = nranks;
	for (int i = 0; i < SLOTS; i++)
		x->slot[i].tag = TAG_COLL;
	if (nranks > 0)
		x->p2p_seq = calloc(2 * (size_t)nranks, sizeof(*x->p2p_seq));
	*context = x;
	*mask = ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh;
	return 0;
}

static ncclResult_t init_v5(void **context, uint64_t commId, int *mask, const char *name,
			    int nNodes, int nranks, int rank, ncclDebugLogger_t logfn)
{
	(void)name, (void)nNodes, (void)logfn;
	return init_common(context, mask, commId, nranks, rank);
}

static ncclResult_t init_v4(void **context, int *mask, const char *name, uint64_t commHash,
			    int nNodes, int nranks, int rank, ncclDebugLogger_t logfn)
{
	(void)name, (void)nNodes, (void)logfn;
	return init_common(context, mask, commHash, nranks, rank);
}

/* The next slot of x, its record started; x->mu held. */
static struct coll *claim(struct ctx *x, const char *func, uint64_t count, int expect)
{
	struct coll *c = &x->slot[x->next++ % SLOTS];

	if (c->live) /* its channels never all reported: hand over what there is */
		finish(c, FQ_PROF_PARTIAL);
	c->live = true;
	c->host_done = false;
	c->started = c->stopped = 0;
	c->expect = expect;
	c->ctx = x;
	memset(&c->rec, 0, sizeof(c->rec));
	c->rec.magic = FQ_PROF_MAGIC;
	c->rec.size = sizeof(c->rec);
	c->rec.nccl_comm = x->comm;
	c->rec.count = count;
	c->rec.rank = x->rank;
	c->rec.nranks = x->nranks;
	c->rec.peer = -1;
	c->rec.coll_idx = UINT64_MAX;
	c->rec.host_start_ns = fq_mono_ns();
	if (func)
		strncpy(c->rec.func, func, sizeof(c->rec.func) - 1);
	return c;
}

static void start_coll(struct ctx *x, void **handle, const fq_nccl_descr_t *d)
{
	struct coll *c;

	pthread_mutex_lock(&x->mu);
	c = claim(x, d->coll.func, d->coll.count, d->coll.nChannels);
	c->rec.seq = d->coll.seqNumber;
	c->rec.coll_idx = x->ncoll++;
	*handle = c;
	pthread_mutex_unlock(&x->mu);
}

/*
 * A Send or Recv. NCCL gives it no sequence number: the n-th Send to a peer is numbered n
 * here, and so is the peer's n-th Recv from this rank, which is the one it pairs with, as
 * long as every Send/Recv reaches the plugin (the Coll events' seqNumber has that limit too).
 */
static void start_p2p(struct ctx *x, void **handle, const fq_nccl_descr_t *d)
{
	const char *f = d->p2p.func;
	int recv = f && !strcmp(f, "Recv"), peer = d->p2p.peer;
	struct coll *c;

	if (!x->p2p_seq || peer < 0 || peer >= x->nranks || !f || (!recv && strcmp(f, "Send")))
		return;
	pthread_mutex_lock(&x->mu);
	c = claim(x, f, d->p2p.count, d->p2p.nChannels);
	c->rec.seq = x->p2p_seq[2 * peer + recv]++;
	c->rec.peer = peer;
	*handle = c;
	pthread_mutex_unlock(&x->mu);
}

static void start_chan(void **handle, const fq_nccl_descr_t *d)
{
	struct coll *c = d->parentObj;
	struct chan *h;
	struct ctx *x;

	if (!c || c->tag != TAG_COLL || d->kernelCh.channelId >= MAX_CHANNELS)
		return;
	x = c->ctx;
	pthread_mutex_lock(&x->mu);
	if (c->live) {
		h = &c->ch[d->kernelCh.channelId];
		h->tag = TAG_CH;
		h->coll = c;
		h->gen = c->gen;
		h->start = d->kernelCh.pTimer;
		h->stop = 0;
		c->started++;
		*handle = h;
	}
	pthread_mutex_unlock(&x->mu);
}

static ncclResult_t start_event(void *context, void **handle, fq_nccl_descr_t *d)
{
	struct ctx *x = context;

	*handle = NULL;
	if (!d)
		return 0;
	switch ((uint8_t)d->type) { /* v4's type is one byte */
	case ncclProfileColl:
		if (x)
			start_coll(x, handle, d);
		break;
	case ncclProfileP2p:
		if (x)
			start_p2p(x, handle, d);
		break;
	case ncclProfileKernelCh:
		start_chan(handle, d);
		break;
	}
	return 0;
}

/* A channel stopped at stop (GPU globaltimer); h's collective lock held. */
static void chan_stopped(struct chan *h, uint64_t stop)
{
	struct coll *c = h->coll;
	struct fq_prof_rec *r = &c->rec;

	if (!c->live || h->gen != c->gen || h->stop)
		return;
	h->stop = stop ? stop : 1;
	c->stopped++;
	if (stop >= h->start) {
		if (!r->gpu_start_ns || h->start < r->gpu_start_ns)
			r->gpu_start_ns = h->start;
		if (stop > r->gpu_stop_ns)
			r->gpu_stop_ns = stop;
		r->gpu_ch_ns += stop - h->start;
		r->nchannels++;
	}
	maybe_finish(c);
}

static ncclResult_t record_state(void *handle, int state, fq_nccl_state_args_t *a)
{
	struct chan *h = handle;
	struct ctx *x;

	if (!h || h->tag != TAG_CH || state != ncclProfilerKernelChStop || !a)
		return 0;
	x = h->coll->ctx;
	pthread_mutex_lock(&x->mu);
	chan_stopped(h, a->kernelCh.pTimer);
	pthread_mutex_unlock(&x->mu);
	return 0;
}

static ncclResult_t stop_event(void *handle)
{
	uint32_t tag = handle ? *(const uint32_t *)handle : 0;
	struct ctx *x;

	if (tag == TAG_COLL) {
		struct coll *c = handle;

		x = c->ctx;
		pthread_mutex_lock(&x->mu);
		if (c->live && !c->host_done) {
			c->host_done = true;
			c->rec.host_stop_ns = fq_mono_ns();
			maybe_finish(c);
		}
		pthread_mutex_unlock(&x->mu);
	} else if (tag == TAG_CH) {
		/* a channel stopped without its KernelChStop state: no GPU time for it */
		struct chan *h = handle;

		x = h->coll->ctx;
		pthread_mutex_lock(&x->mu);
		if (h->coll->live && h->gen == h->coll->gen && !h->stop) {
			h->stop = 1;
			h->coll->stopped++;
			maybe_finish(h->coll);
		}
		pthread_mutex_unlock(&x->mu);
	}
	return 0;
}

static ncclResult_t finalize(void *context)
{
	struct ctx *x = context;

	if (!x)
		return 0;
	pthread_mutex_lock(&x->mu);
	for (int i = 0; i < SLOTS; i++)
		if (x->slot[i].live && x->slot[i].started)
			finish(&x->slot[i], FQ_PROF_PARTIAL);
	pthread_mutex_unlock(&x->mu);
	pthread_mutex_destroy(&x->mu);
	free(x->p2p_seq);
	free(x);
	return 0;
}

EXPORT const fq_nccl_profiler_v5_t ncclProfiler_v5 = {
	.name = "fleetq",
	.init = init_v5,
	.startEvent = start_event,
	.stopEvent = stop_event,
	.recordEventState = record_state,
	.finalize = finalize,
};

EXPORT const fq_nccl_profiler_v4_t ncclProfiler_v4 = {
	.name = "fleetq",
	.init = init_v4,
	.startEvent = start_event,
	.stopEvent = stop_event,
	.recordEventState = record_state,
	.finalize = finalize,
};
