/* SPDX-License-Identifier: MIT */
/*
 * fleetq stragglers --watch: the analysis again every period, and only what changed
 * printed, each line stamped with the time: a verdict that appears, one that goes (with
 * how many periods it held, and since when), ranks that join or leave the window, nodes
 * that stop or start answering.
 */
#ifndef FLEETQ_WATCH_H
#define FLEETQ_WATCH_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sqlite3.h>

#include "coverage.h"

struct watch;

struct watch *watch_new(FILE *out, const char *period);
void watch_free(struct watch *w);

/*
 * One period: db holds the merged rows (table results) and the findings
 * (temp.fq_analysis), or is NULL when no node answered; cov says how each of hosts
 * fared. Prints what differs from the last period (the first: what there is).
 * 0, or -ENOMEM.
 */
int watch_step(struct watch *w, sqlite3 *db, const struct coverage *cov,
	       const char *const *hosts, size_t nhosts);

/* One line, stamped (the interrupt, the exit). */
void watch_say(struct watch *w, const char *text);

/* Sleeps until start_ns + period_ns (CLOCK_MONOTONIC); 1 when *intr was set. */
int watch_sleep(int64_t start_ns, int64_t period_ns, volatile sig_atomic_t *intr);
int64_t watch_now(void);

#endif
