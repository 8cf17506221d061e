/* SPDX-License-Identifier: MIT */
/*
 * The tracer's discovery thread: a scan of processes and libraries every
 * second, quicker looks at processes that just exec'ed, moved cgroup or loaded
 * a library, and the InfiniBand poll.
 */
#include <time.h>

#include "clock.h"
#include "discover.h"
#include "ib.h"
#include "store.h"
#include "trace_int.h"

/* Has the discovery thread look at pid again soon, and for a while (EXEC_WATCH_NS). */
void watch_pid(struct tracer *t, int pid, enum watch_why why)
{
	pthread_mutex_lock(&t->mu);
	if (t->nwatch < EXEC_PENDING) {
		int64_t now = clock_ns(CLOCK_MONOTONIC);
		struct exec_watch *w = &t->watch[t->nwatch++];

		w->pid = pid;
		w->exec = why == WATCH_EXEC;
		w->libs = why == WATCH_LIBS;
		w->since_ns = now;
		w->next_ns = now;
		w->until_ns = now + EXEC_WATCH_NS;
	}
	t->woken = 1;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

static int ib_emit(void *arg, const struct rec_ib *r)
{
	struct rec rec = { .kind = REC_IB };

	rec.u.ib = *r;
	return store_put(arg, &rec);
}

void *disc_main(void *arg)
{
	struct tracer *t = arg;
	int64_t next_scan = 0, next_ib = 0;

	while (!atomic_load(&t->stop)) {
		int64_t now = clock_ns(CLOCK_MONOTONIC), wake = next_scan;
		struct exec_watch w[EXEC_PENDING];
		struct timespec ts;
		int n, i;

		if (now >= next_scan) {
			discover_scan(t->disc, lib_found, proc_found, t);
			next_scan = now + 1000000000LL;
		}
		if (t->ib && now >= next_ib) {
			ib_poller_poll(t->ib, clock_ns(CLOCK_REALTIME), ib_emit, t->store);
			next_ib = now + (int64_t)t->ib_interval_s * 1000000000LL;
		}
		/* exec'ed processes: libraries map after exec (ld.so, dlopen), look again soon */
		pthread_mutex_lock(&t->mu);
		n = 0;
		for (i = 0; i < t->nwatch; i++) {
			struct exec_watch *x = &t->watch[i];

			if (x->next_ns > now)
				continue;
			w[n++] = *x;
			x->exec = 0; /* forget once */
			x->next_ns = now + (now - x->since_ns < EXEC_FAST_NS ? 2000000LL
									     : 20000000LL);
		}
		pthread_mutex_unlock(&t->mu);
		for (i = 0; i < n; i++) {
			if (w[i].libs) {
				discover_scan_libs(t->disc, w[i].pid, lib_found, t);
				continue;
			}
			if (w[i].exec)
				discover_forget(t->disc, w[i].pid);
			discover_scan_pid(t->disc, w[i].pid, lib_found, proc_found, t);
		}
		pthread_mutex_lock(&t->mu);
		now = clock_ns(CLOCK_MONOTONIC);
		for (i = 0; i < t->nwatch;) {
			if (t->watch[i].until_ns < now) {
				t->watch[i] = t->watch[--t->nwatch];
				continue;
			}
			if (t->watch[i].next_ns < wake)
				wake = t->watch[i].next_ns;
			i++;
		}
		if (t->ib && next_ib < wake)
			wake = next_ib;
		if (!atomic_load(&t->stop) && wake > now && !t->woken) {
			int64_t rt = clock_ns(CLOCK_REALTIME) + (wake - now);

			ts.tv_sec = rt / 1000000000LL;
			ts.tv_nsec = rt % 1000000000LL;
			pthread_cond_timedwait(&t->cv, &t->mu, &ts);
		}
		t->woken = 0;
		pthread_mutex_unlock(&t->mu);
	}
	return NULL;
}
