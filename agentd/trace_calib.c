/* SPDX-License-Identifier: MIT */
/*
 * The tracer's start-up measurement of what a probe hit costs the traced
 * process (meta probe_cost_ns), on a function of agentd's own.
 */
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "clock.h"
#include "fqtrace.h"
#include "fqtrace.skel.h"
#include "probe.h"
#include "trace_int.h"

/* ---- start-up probe cost ---- */

static int64_t time_calls(int (*volatile fn)(int), int n)
{
	int64_t t0 = clock_ns(CLOCK_MONOTONIC);
	int i, acc = 0;

	for (i = 0; i < n; i++)
		acc += fn(i);
	__asm__ volatile("" : : "r"(acc));
	return clock_ns(CLOCK_MONOTONIC) - t0;
}

/*
 * ns added per call of fn by the collective entry+return programs, measured on this
 * process only; events go through the ring buffer and are discarded. -1 on failure.
 */
int64_t calibrate(struct tracer *t, int (*fn)(int), int calls)
{
	uint64_t ck = (uint64_t)FQ_K_CALIB << 8, off;
	int64_t base = INT64_MAX, traced = INT64_MAX;
	char path[PATH_MAX];
	size_t first = t->nlinks, i;
	int rep, err;

	if (probe_self_offset((const void *)fn, path, sizeof(path), &off))
		return -1;
	for (rep = 0; rep < 3; rep++) {
		int64_t d = time_calls(fn, calls);

		base = d < base ? d : base;
	}
	err = attach_one(t, t->skel->progs.nccl_entry, 0, getpid(), path, off, ck);
	if (!err)
		err = attach_one(t, t->skel->progs.nccl_return, 1, getpid(), path, off, ck);
	if (!err) {
		atomic_store(&t->calib_hits, 0);
		for (rep = 0; rep < 3; rep++) {
			int64_t d = 0;
			int done;

			for (done = 0; done < calls; done += 1000) {
				d += time_calls(fn, 1000);
				ring_buffer__consume(t->rb);
			}
			traced = d < traced ? d : traced;
		}
	}
	pthread_mutex_lock(&t->link_mu);
	for (i = first; i < t->nlinks; i++)
		bpf_link__destroy(t->links[i]);
	t->nlinks = first;
	pthread_mutex_unlock(&t->link_mu);
	if (err) {
		tlog("cannot attach the calibration probe: %s", strerror(-err));
		return -1;
	}
	if (atomic_load(&t->calib_hits) < 3LL * calls) {
		tlog("calibration probe fired %lld times for %d calls",
		     (long long)atomic_load(&t->calib_hits), 3 * calls);
		return -1;
	}
	return traced > base ? (traced - base) / calls : 0;
}
