/* SPDX-License-Identifier: MIT */
/*
 * Sync wait per process, for collectives.sync_ns (DESIGN.md §2: a late rank
 * waits least): the total of each process's top-level synchronize calls, kept
 * as the calls return, so that each collective can record the wait since its
 * previous one without a query over cuda_calls.
 */
#ifndef FLEETQ_AGENTD_SYNCWAIT_H
#define FLEETQ_AGENTD_SYNCWAIT_H

#include <stdint.h>

struct syncwait;

struct syncwait *syncwait_new(void);
void syncwait_free(struct syncwait *w);

/*
 * A synchronize call [ts, ts + dur) of pid/tid has returned. A thread's calls
 * return innermost first (cuStreamSynchronize inside cudaStreamSynchronize):
 * a call that encloses calls already counted replaces them, and a call that
 * starts inside a counted one adds nothing (the trace's rule: a call starting
 * before an earlier call of its thread has returned is nested). Each thread
 * remembers its newest SYNCWAIT_KEEP counted calls. Returns -ENOMEM or 0.
 */
#define SYNCWAIT_KEEP 8
int syncwait_call(struct syncwait *w, uint32_t pid, uint32_t tid, int64_t ts, int64_t dur);

/* ns of top-level sync wait of pid so far (0 for a process with none). */
int64_t syncwait_total(const struct syncwait *w, uint32_t pid);

/* Forgets a process that exited, and its threads. */
void syncwait_drop_pid(struct syncwait *w, uint32_t pid);

#endif
