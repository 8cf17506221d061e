/* SPDX-License-Identifier: MIT */
/*
 * A test double of an NCCL profiler plugin (libfq-test-profiler.so): it counts what the stand-in
 * libnccl.so.2 hands it and checks the call order and the handles the way a real plugin relies
 * on them, writing one line per event to $FQ_TEST_PROFILER_OUT.<pid>. As in NCCL, a Coll event
 * may be stopped (host side done) before its kernel's channels start, so Coll events stay valid
 * until finalize, as the pools of NCCL's example plugin keep them.
 *
 *
 *   init <rank> <nranks> <nNodes> <commHash hex> <mask>
 *   coll_start <rank> <id> <func> <seqNumber> <count> <datatype> <nChannels>
 *   p2p_start <rank> <id> <func> <peer> <count> <datatype> <nChannels>
 *   coll_stop <rank> <id>        (a Coll or a P2p event)
 *   kch_stop <rank> <coll id> <func> <seqNumber, a P2p's peer> <channel> <start pTimer>
 *            <stop pTimer>
 *   finalize <rank> <Coll and P2p events> <channels>
 *   error <rank> <what>          (any misuse: the test fails on one)
 *
 * FQ_TEST_PROFILER_MASK sets the activation mask it asks for (default Coll | KernelCh); as
 * NCCL starts a P2p event for KernelCh too, P2p events are taken with either in the mask;
 * FQ_TEST_PROFILER_INIT_FAIL=1 makes init fail (logged as "init_failed <rank>"). Built
 * twice: exporting ncclProfiler_v5, and with FQ_TEST_PROFILER_V4 ncclProfiler_v4.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../agentd/ncclprof/nccl_profiler.h"

#define CTX_MAGIC 0x63747831u
#define COLL_MAGIC 0x636f6c6cu
#define KCH_MAGIC 0x6b636831u
#define DEAD_MAGIC 0xdeadbeefu

struct coll;

struct ctx {
	uint32_t magic;
	int rank, nranks, mask;
	_Atomic long live; /* events started and not yet stopped */
	_Atomic long colls, channels;
	pthread_mutex_t lock;
	struct coll *all; /* kept until finalize: a KernelCh may start after its Coll stopped */
};

struct coll {
	uint32_t magic;
	struct ctx *ctx;
	struct coll *next;
	long id;
	char func[32];
	uint64_t seq;
	_Atomic int stopped;
};

struct kch {
	uint32_t magic;
	struct ctx *ctx;
	struct coll *parent;
	int channel;
	uint64_t start, stop;
	int recorded;
};

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;
static _Atomic long next_id;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&out_lock);
	if (!out) {
		const char *p = getenv("FQ_TEST_PROFILER_OUT");
		char path[4096];

		snprintf(path, sizeof(path), "%s.%d", p ? p : "/dev/null", (int)getpid());
		out = fopen(path, "a");
		if (out)
			setvbuf(out, NULL, _IOLBF, 0);
	}
	if (out) {
		va_start(ap, fmt);
		vfprintf(out, fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&out_lock);
}

static ncclResult_t p_init(void **context, uint64_t hash, int *mask, const char *name, int nnodes,
			   int nranks, int rank, ncclDebugLogger_t logfn)
{
	const char *m = getenv("FQ_TEST_PROFILER_MASK");
	struct ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return 3;
	if (getenv("FQ_TEST_PROFILER_INIT_FAIL")) {
		say("init_failed %d\n", rank);
		free(c);
		return 3;
	}
	c->magic = CTX_MAGIC;
	c->rank = rank;
	c->nranks = nranks;
	pthread_mutex_init(&c->lock, NULL);
	*mask = m ? atoi(m) : (ncclProfileColl | ncclProfileKernelCh);
	c->mask = *mask;
	*context = c;
	if (!logfn)
		say("error %d init without a logger\n", rank);
	say("init %d %d %d %016llx %d\n", rank, nranks, nnodes, (unsigned long long)hash, *mask);
	return 0;
}

#ifdef FQ_TEST_PROFILER_V4
static ncclResult_t p_init_v4(void **context, int *mask, const char *name, uint64_t hash,
			      int nnodes, int nranks, int rank, ncclDebugLogger_t logfn)
{
	return p_init(context, hash, mask, name, nnodes, nranks, rank, logfn);
}
#endif

static ncclResult_t p_start(void *context, void **handle, fq_nccl_descr_t *d)
{
	struct ctx *c = context;

	*handle = NULL;
	if (!c || c->magic != CTX_MAGIC) {
		say("error -1 startEvent with a bad context\n");
		return 0;
	}
	switch ((uint8_t)d->type) {
	case ncclProfileColl: {
		struct coll *e = calloc(1, sizeof(*e));

		if (!e)
			return 3;
		if (d->parentObj)
			say("error %d Coll event with a parent\n", c->rank);
		if (d->rank != c->rank)
			say("error %d Coll event of rank %d\n", c->rank, d->rank);
		e->magic = COLL_MAGIC;
		e->ctx = c;
		e->id = atomic_fetch_add(&next_id, 1);
		snprintf(e->func, sizeof(e->func), "%s", d->coll.func ? d->coll.func : "?");
		e->seq = d->coll.seqNumber;
		pthread_mutex_lock(&c->lock);
		e->next = c->all;
		c->all = e;
		pthread_mutex_unlock(&c->lock);
		atomic_fetch_add(&c->live, 1);
		atomic_fetch_add(&c->colls, 1);
		say("coll_start %d %ld %s %llu %zu %s %d\n", c->rank, e->id, e->func,
		    (unsigned long long)e->seq, d->coll.count,
		    d->coll.datatype ? d->coll.datatype : "?", d->coll.nChannels);
		*handle = e;
		return 0;
	}
	case ncclProfileP2p: {
		struct coll *e;

		if (!(c->mask & (ncclProfileP2p | ncclProfileKernelCh))) {
			say("error %d P2p event without P2p or KernelCh asked for\n", c->rank);
			return 0;
		}
		if (d->parentObj)
			say("error %d P2p event with a parent\n", c->rank);
		if (d->rank != c->rank)
			say("error %d P2p event of rank %d\n", c->rank, d->rank);
		if (d->p2p.peer < 0 || d->p2p.peer >= c->nranks)
			say("error %d P2p event with peer %d of %d ranks\n", c->rank, d->p2p.peer,
			    c->nranks);
		e = calloc(1, sizeof(*e));
		if (!e)
			return 3;
		e->magic = COLL_MAGIC;
		e->ctx = c;
		e->id = atomic_fetch_add(&next_id, 1);
		snprintf(e->func, sizeof(e->func), "%s", d->p2p.func ? d->p2p.func : "?");
		e->seq = (uint64_t)d->p2p.peer;
		pthread_mutex_lock(&c->lock);
		e->next = c->all;
		c->all = e;
		pthread_mutex_unlock(&c->lock);
		atomic_fetch_add(&c->live, 1);
		atomic_fetch_add(&c->colls, 1);
		say("p2p_start %d %ld %s %d %zu %s %d\n", c->rank, e->id, e->func, d->p2p.peer,
		    d->p2p.count, d->p2p.datatype ? d->p2p.datatype : "?", d->p2p.nChannels);
		*handle = e;
		return 0;
	}
	case ncclProfileKernelCh: {
		struct coll *p = d->parentObj;
		struct kch *k;

		if (!p || p->magic != COLL_MAGIC || p->ctx != c) {
			say("error %d KernelCh whose parent is not a Coll or P2p event of this "
			    "context\n",
			    c->rank);
			return 0;
		}
		k = calloc(1, sizeof(*k));
		if (!k)
			return 3;
		k->magic = KCH_MAGIC;
		k->ctx = c;
		k->parent = p;
		k->channel = d->kernelCh.channelId;
		k->start = d->kernelCh.pTimer;
		atomic_fetch_add(&c->live, 1);
		atomic_fetch_add(&c->channels, 1);
		*handle = k;
		return 0;
	}
	default:
		say("error %d event of type %llu not asked for\n", c->rank,
		    (unsigned long long)d->type);
		return 0;
	}
}

static ncclResult_t p_record(void *handle, int state, fq_nccl_state_args_t *a)
{
	struct kch *k = handle;

	if (!k || k->magic != KCH_MAGIC) {
		say("error -1 recordEventState on a handle that is not a live KernelCh\n");
		return 0;
	}
	if (state != ncclProfilerKernelChStop || !a) {
		say("error %d recordEventState %d on a KernelCh\n", k->ctx->rank, state);
		return 0;
	}
	if (k->recorded++)
		say("error %d KernelChStop recorded twice\n", k->ctx->rank);
	k->stop = a->kernelCh.pTimer;
	return 0;
}

static ncclResult_t p_stop(void *handle)
{
	uint32_t magic = handle ? *(uint32_t *)handle : 0;

	if (magic == COLL_MAGIC) {
		struct coll *e = handle;

		if (atomic_exchange(&e->stopped, 1))
			say("error %d Coll event stopped twice\n", e->ctx->rank);
		say("coll_stop %d %ld\n", e->ctx->rank, e->id);
		atomic_fetch_sub(&e->ctx->live, 1);
	} else if (magic == KCH_MAGIC) {
		struct kch *k = handle;
		struct ctx *c = k->ctx;

		if (!k->recorded)
			say("error %d KernelCh stopped before its KernelChStop state\n", c->rank);
		else if (k->stop < k->start)
			say("error %d KernelCh stop %llu before start %llu\n", c->rank,
			    (unsigned long long)k->stop, (unsigned long long)k->start);
		say("kch_stop %d %ld %s %llu %d %llu %llu\n", c->rank, k->parent->id,
		    k->parent->func, (unsigned long long)k->parent->seq, k->channel,
		    (unsigned long long)k->start, (unsigned long long)k->stop);
		k->magic = DEAD_MAGIC;
		atomic_fetch_sub(&c->live, 1);
		free(k);
	} else {
		say("error -1 stopEvent on a handle that is not a live event\n");
	}
	return 0;
}

static ncclResult_t p_finalize(void *context)
{
	struct ctx *c = context;

	if (!c || c->magic != CTX_MAGIC) {
		say("error -1 finalize with a bad context\n");
		return 0;
	}
	if (atomic_load(&c->live))
		say("error %d finalize with %ld events outstanding\n", c->rank,
		    atomic_load(&c->live));
	say("finalize %d %ld %ld\n", c->rank, atomic_load(&c->colls), atomic_load(&c->channels));
	while (c->all) {
		struct coll *e = c->all;

		c->all = e->next;
		e->magic = DEAD_MAGIC;
		free(e);
	}
	c->magic = DEAD_MAGIC;
	pthread_mutex_destroy(&c->lock);
	free(c);
	return 0;
}

#ifdef FQ_TEST_PROFILER_V4
__attribute__((visibility("default"))) fq_nccl_profiler_v4_t ncclProfiler_v4 = {
	"fq-test-v4", p_init_v4, p_start, p_stop, p_record, p_finalize,
};
#else
__attribute__((visibility("default"))) fq_nccl_profiler_v5_t ncclProfiler_v5 = {
	"fq-test", p_init, p_start, p_stop, p_record, p_finalize,
};
#endif
