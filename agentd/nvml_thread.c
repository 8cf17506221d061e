/* SPDX-License-Identifier: MIT */
/*
 * The GPU sampling thread: one sample of every GPU each --gpu-interval, the processes
 * mapped to GPUs, the sampler's cost and status in the store's meta.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvml.h"
#include "cause.h"
#include "clock.h"
#include "store.h"

#include "nvml_int.h"

#define MAX_PROCS 4096
/* the cost in meta every this many samples (and at stop) */
#define META_EVERY 10

struct gpu_thread {
	struct gpu_sampler *g;
	struct store *st;
	struct gpu_thread_opts o;
	struct gpu_proc *procs;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
};

static int put_gpu(void *arg, const struct rec_gpu *r)
{
	struct rec rec = { .kind = REC_GPU };

	rec.u.gpu = *r;
	return store_put(arg, &rec);
}

static int put_map(void *arg, const struct rec_process_gpu *r)
{
	struct rec rec = { .kind = REC_PROCESS_GPU };

	rec.u.process_gpu = *r;
	return store_put(arg, &rec);
}

static void put_cost(struct gpu_thread *t)
{
	struct gpu_sampler_stats s;

	gpu_sampler_get_stats(t->g, &s);
	if (!s.samples)
		return;
	store_set_meta_int(t->st, "gpu_samples", s.samples);
	store_set_meta_int(t->st, "gpu_sample_ns", s.total_ns / s.samples);
	store_set_meta_int(t->st, "gpu_sample_min_ns", s.min_ns);
	store_set_meta_int(t->st, "gpu_sample_max_ns", s.max_ns);
	store_set_meta_int(t->st, "gpu_nvlink_read_ns", s.nvlink_ns);
	store_set_meta_int(t->st, "gpu_failed_calls", s.failed_calls);
}

static void *gpu_main(void *arg)
{
	struct gpu_thread *t = arg;
	int64_t next = clock_ns(CLOCK_MONOTONIC);
	struct timespec ts;

	pthread_mutex_lock(&t->mu);
	while (!t->stop) {
		int64_t now = clock_ns(CLOCK_MONOTONIC);

		if (now >= next) {
			int np = 0;

			pthread_mutex_unlock(&t->mu);
			gpu_sampler_sample(t->g, clock_ns(CLOCK_REALTIME), put_gpu, t->st);
			for (int i = 0; i < gpu_sampler_count(t->g); i++) {
				struct rec rec = { .kind = REC_GPU_ACT };

				if (gpu_sampler_activity(t->g, i, &rec.u.gpu_act))
					store_put(t->st, &rec);
			}
			if (t->o.list_procs)
				np = t->o.list_procs(t->o.arg, t->procs, MAX_PROCS);
			if (np > 0)
				gpu_sampler_map(t->g, clock_ns(CLOCK_REALTIME), t->procs, np,
						put_map, t->st);
			if (t->g->st.samples % META_EVERY == 1)
				put_cost(t);
			pthread_mutex_lock(&t->mu);
			/* fixed rate; after a stall (suspend, slow driver) start again from now */
			next += (int64_t)t->o.interval_ms * 1000000LL;
			if (next <= now)
				next = now + (int64_t)t->o.interval_ms * 1000000LL;
			continue;
		}
		ts.tv_sec = next / 1000000000LL;
		ts.tv_nsec = next % 1000000000LL;
		pthread_cond_timedwait(&t->cv, &t->mu, &ts);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

struct gpu_thread *gpu_thread_start(const struct gpu_thread_opts *o, struct store *st,
				    char **cause)
{
	struct gpu_thread *t = NULL;
	pthread_condattr_t ca;
	char *why = NULL, line[400];
	int err;

	if (o->interval_ms <= 0) {
		store_set_meta_text(st, "gpu_status", "off (--gpu-interval 0)");
		fq_fail(cause, 0, "off (--gpu-interval 0)");
		errno = EINVAL;
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	if (!t || !(t->procs = calloc(MAX_PROCS, sizeof(*t->procs)))) {
		free(t);
		fq_fail(cause, 0, "out of memory starting the GPU sampler");
		errno = ENOMEM;
		return NULL;
	}
	t->o = *o;
	t->st = st;
	t->g = gpu_sampler_new(o->lib, &why);
	if (!t->g) {
		err = errno;
		snprintf(line, sizeof(line), "off: %s", why ? why : "cannot start NVML");
		store_set_meta_text(st, "gpu_status", line);
		fq_fail(cause, 0, "%s", line);
		free(why);
		free(t->procs);
		free(t);
		errno = err;
		return NULL;
	}
	snprintf(line, sizeof(line), "%s, every %d ms", gpu_sampler_describe(t->g),
		 o->interval_ms);
	store_set_meta_text(st, "gpu_status", line);
	pthread_mutex_init(&t->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	err = pthread_create(&t->th, NULL, gpu_main, t);
	if (err) {
		store_set_meta_text(st, "gpu_status", "off: cannot start the GPU sampling thread");
		fq_fail(cause, 0, "cannot start the GPU sampling thread: %s", strerror(err));
		pthread_mutex_destroy(&t->mu);
		pthread_cond_destroy(&t->cv);
		gpu_sampler_free(t->g);
		free(t->procs);
		free(t);
		errno = err;
		return NULL;
	}
	return t;
}

void gpu_thread_stop(struct gpu_thread *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->th, NULL);
	put_cost(t);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	gpu_sampler_free(t->g);
	free(t->procs);
	free(t);
}
