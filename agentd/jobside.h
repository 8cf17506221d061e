/* SPDX-License-Identifier: MIT */
/*
 * What fleetq's libraries loaded into the job (ncclprof/: the NCCL profiler plugin, cupti/:
 * the CUDA injection library) share. Header-only: each library stays one object with no
 * dependency beyond libc.
 */
#ifndef FLEETQ_AGENTD_JOBSIDE_H
#define FLEETQ_AGENTD_JOBSIDE_H

#include <stdint.h>
#include <time.h>

/*
 * A hand-over point agentd probes, `void name(const struct ... *)`, written out so that no
 * compiler drops the call or starts the function with anything but `push %rbp`, an
 * instruction a uprobe emulates instead of single-stepping. The call itself is opaque to the
 * compiler, so the record is in memory when it is made.
 */
#define FQ_HANDOVER(name)                                                                  \
	__asm__(".text\n"                                                                  \
		".globl " #name "\n"                                                       \
		".type " #name ", @function\n" #name ":\n"                                 \
		"\tpush %rbp\n"                                                            \
		"\tmov %rsp, %rbp\n"                                                       \
		"\tpop %rbp\n"                                                             \
		"\tret\n"                                                                  \
		".size " #name ", .-" #name "\n")

/* The libraries' clock: CLOCK_MONOTONIC, ns (agentd maps it onto the trace's). */
static inline uint64_t fq_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
