/* SPDX-License-Identifier: MIT */
/*
 * The one clock reading: nanoseconds since the clock's epoch. CLOCK_MONOTONIC
 * for intervals and deadlines; CLOCK_REALTIME for times that leave the
 * process (the wire, the trace, the user's --since).
 */
#ifndef FLEETQ_CLOCK_H
#define FLEETQ_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Inline: the tracer and the store read it per event. */
static inline int64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
