/* SPDX-License-Identifier: MIT */
/*
 * The stand-in libnccl's calls into a profiler plugin named by NCCL_PROFILER_PLUGIN, as NCCL
 * 2.28 makes them: loaded once per process, v5 or else v4, init once per communicator.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nccl_int.h"

/* The profiler plugin, loaded once per process as NCCL does; NULL: none. */
static pthread_once_t prof_once = PTHREAD_ONCE_INIT;
static const fq_nccl_profiler_v5_t *prof_v5;
static const fq_nccl_profiler_v4_t *prof_v4;

ncclResult_t prof_start(struct ncclComm *c, void **h, fq_nccl_descr_t *d)
{
	*h = NULL;
	if (prof_v5)
		return prof_v5->startEvent(c->prof_ctx, h, d);
	return prof_v4->startEvent(c->prof_ctx, h, d);
}

void prof_stop(void *h)
{
	if (prof_v5)
		prof_v5->stopEvent(h);
	else
		prof_v4->stopEvent(h);
}

void prof_record(void *h, int state, fq_nccl_state_args_t *a)
{
	if (prof_v5)
		prof_v5->recordEventState(h, state, a);
	else
		prof_v4->recordEventState(h, state, a);
}

static void prof_log(int level, unsigned long flags, const char *file, int line,
		     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void prof_log(int level, unsigned long flags, const char *file, int line,
		     const char *fmt, ...)
{
	const char *dbg = getenv("NCCL_DEBUG");
	va_list ap;

	if (!dbg || (strcasecmp(dbg, "INFO") && strcasecmp(dbg, "TRACE")))
		return;
	va_start(ap, fmt);
	fprintf(stderr, "fq-standin nccl: profiler: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* NCCL_PROFILER_PLUGIN: a path or name dlopen finds, else libnccl-profiler-<name>.so. */
static void prof_load(void)
{
	const char *name = getenv("NCCL_PROFILER_PLUGIN");
	char alt[256];
	void *lib;

	if (!name || !*name || !strcasecmp(name, "none"))
		return;
	lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!lib && !strchr(name, '/')) {
		snprintf(alt, sizeof(alt), "libnccl-profiler-%s.so", name);
		lib = dlopen(alt, RTLD_NOW | RTLD_LOCAL);
	}
	if (!lib) {
		fprintf(stderr, "fq-standin nccl: cannot load profiler plugin '%s': %s\n", name,
			dlerror());
		return;
	}
	prof_v5 = dlsym(lib, "ncclProfiler_v5");
	if (!prof_v5)
		prof_v4 = dlsym(lib, "ncclProfiler_v4");
	if (!prof_v5 && !prof_v4) {
		fprintf(stderr, "fq-standin nccl: profiler plugin '%s' has neither ncclProfiler_v5 "
				"nor ncclProfiler_v4; ignored\n", name);
		dlclose(lib);
	}
}

/* NCCL's communicator hash: of the unique id, or for a split of (parent's, split count, color) */
uint64_t plugin_hash(const struct ncclComm *c)
{
	return c->phash ? c->phash : fq_nccl_hash(c->uid, NCCL_UNIQUE_ID_BYTES);
}

/* Once per communicator, after it is complete: the plugin's init, as NCCL's. */
void prof_init(struct ncclComm *c)
{
	const char *lws = getenv("LOCAL_WORLD_SIZE");
	int per = lws ? atoi(lws) : 0, nnodes = 1, mask = 0;
	uint64_t hash = plugin_hash(c);
	ncclResult_t r;

	pthread_once(&prof_once, prof_load);
	if (!prof_v5 && !prof_v4)
		return;
	if (per > 0 && per < c->nranks)
		nnodes = (c->nranks + per - 1) / per;
	if (prof_v5)
		r = prof_v5->init(&c->prof_ctx, hash, &mask, NULL, nnodes, c->nranks, c->rank,
				  prof_log);
	else
		r = prof_v4->init(&c->prof_ctx, &mask, NULL, hash, nnodes, c->nranks, c->rank,
				  prof_log);
	if (r) {
		fprintf(stderr, "fq-standin nccl: profiler init failed (%d); continuing without\n",
			(int)r);
		c->prof_ctx = NULL;
		return;
	}
	c->prof_mask = mask;
}

void prof_finalize(struct ncclComm *c)
{
	if (!c->prof_ctx)
		return;
	if (prof_v5)
		prof_v5->finalize(c->prof_ctx);
	else
		prof_v4->finalize(c->prof_ctx);
	c->prof_ctx = NULL;
}
