/* SPDX-License-Identifier: MIT */
/* Sync wait per process (syncwait.h). One thread (the tracer's poll thread) uses it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "syncwait.h"

#define BUCKETS 1024

struct proc {
	uint32_t pid;
	int64_t total_ns;
	struct proc *next;
};

struct call {
	int64_t start, end, counted;
};

struct thr {
	uint32_t tid, pid;
	int n;
	struct call c[SYNCWAIT_KEEP]; /* counted calls, oldest first */
	struct thr *next;
};

struct syncwait {
	struct proc *procs[BUCKETS];
	struct thr *thrs[BUCKETS];
};

struct syncwait *syncwait_new(void)
{
	return calloc(1, sizeof(struct syncwait));
}

void syncwait_free(struct syncwait *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < BUCKETS; i++) {
		while (w->procs[i]) {
			struct proc *p = w->procs[i];

			w->procs[i] = p->next;
			free(p);
		}
		while (w->thrs[i]) {
			struct thr *t = w->thrs[i];

			w->thrs[i] = t->next;
			free(t);
		}
	}
	free(w);
}

static struct proc *proc_find(const struct syncwait *w, uint32_t pid)
{
	struct proc *p;

	for (p = w->procs[pid % BUCKETS]; p; p = p->next)
		if (p->pid == pid)
			break;
	return p;
}

static struct proc *proc_get(struct syncwait *w, uint32_t pid)
{
	struct proc *p = proc_find(w, pid);

	if (p || !(p = calloc(1, sizeof(*p))))
		return p;
	p->pid = pid;
	p->next = w->procs[pid % BUCKETS];
	w->procs[pid % BUCKETS] = p;
	return p;
}

static struct thr *thr_get(struct syncwait *w, uint32_t tid, uint32_t pid)
{
	struct thr *t;

	for (t = w->thrs[tid % BUCKETS]; t; t = t->next)
		if (t->tid == tid)
			break;
	if (!t) {
		if (!(t = calloc(1, sizeof(*t))))
			return NULL;
		t->tid = tid;
		t->pid = pid;
		t->next = w->thrs[tid % BUCKETS];
		w->thrs[tid % BUCKETS] = t;
	}
	if (t->pid != pid) { /* a new thread under a reused id */
		t->pid = pid;
		t->n = 0;
	}
	return t;
}

int syncwait_call(struct syncwait *w, uint32_t pid, uint32_t tid, int64_t ts, int64_t dur)
{
	struct proc *p = proc_get(w, pid);
	struct thr *t = p ? thr_get(w, tid, pid) : NULL;
	int64_t end = ts + dur, inner = 0;
	int k = 0;

	if (!t)
		return -ENOMEM;
	if (dur < 0)
		return 0;
	/* first decide, then change the list: a nested call leaves it as it was */
	for (int i = 0; i < t->n; i++)
		if (t->c[i].start < ts && ts < t->c[i].end)
			return 0; /* starts inside a counted call: nested in it */
	for (int i = 0; i < t->n; i++) {
		if (t->c[i].start >= ts && t->c[i].start < end) {
			inner += t->c[i].counted; /* enclosed: this call counts instead */
			continue;
		}
		t->c[k++] = t->c[i];
	}
	if (k == SYNCWAIT_KEEP) { /* forget the oldest */
		memmove(t->c, t->c + 1, (SYNCWAIT_KEEP - 1) * sizeof(t->c[0]));
		k--;
	}
	t->c[k] = (struct call){ .start = ts, .end = end, .counted = dur };
	t->n = k + 1;
	p->total_ns += dur - inner;
	return 0;
}

int64_t syncwait_total(const struct syncwait *w, uint32_t pid)
{
	const struct proc *p = proc_find(w, pid);

	return p ? p->total_ns : 0;
}

void syncwait_drop_pid(struct syncwait *w, uint32_t pid)
{
	struct proc **pp = &w->procs[pid % BUCKETS], *p;

	for (; (p = *pp); pp = &p->next)
		if (p->pid == pid) {
			*pp = p->next;
			free(p);
			break;
		}
	for (size_t i = 0; i < BUCKETS; i++) {
		struct thr **tp = &w->thrs[i], *t;

		while ((t = *tp)) {
			if (t->pid == pid) {
				*tp = t->next;
				free(t);
			} else {
				tp = &t->next;
			}
		}
	}
}
