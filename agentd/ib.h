/* SPDX-License-Identifier: MIT */
/*
 * InfiniBand port counters from sysfs, as rec_ib rows with deltas: the
 * network signal for slow collectives where TCP is silent (DESIGN.md §4).
 */
#ifndef FLEETQ_AGENTD_IB_H
#define FLEETQ_AGENTD_IB_H

#include <stdint.h>
#include "records.h"

struct ib_poller;

struct ib_poller_stats {
	int64_t polls;      /* ib_poller_poll calls that read the tree */
	int64_t counters;   /* counters known (device, port, counter) */
	int64_t resets;     /* times a counter went down (driver reset, wrap): delta = value */
	int64_t unreadable; /* counter files skipped because they did not read as a number */
};

/*
 * sysfs_root: NULL for "/", else a directory holding sys/class/infiniband
 * (tests use a fake tree). Fails (NULL, errno, *cause the caller frees) only
 * when sysfs_root does not exist; a host without InfiniBand polls to nothing.
 */
struct ib_poller *ib_poller_new(const char *sysfs_root, char **cause);

/*
 * Reads <root>/sys/class/infiniband/<dev>/ports/<port>/{counters,hw_counters}/<name>
 * and calls emit once per row, with ts_ns as the row's time. The strings in
 * *r live until emit returns (store_put copies them).
 *
 * What is emitted: on a counter's first sighting, every counter with delta
 * REC_NULL (so the error counters of DESIGN.md §4 — port_rcv_errors,
 * symbol_error, link_downed, port_xmit_discards, local_link_integrity_errors,
 * local_ack_timeout_err, packet_seq_err, ... — always have a baseline row);
 * afterwards only counters that changed, with delta = value - previous, which
 * keeps the table small (sum(delta) over a window is still exact, and an
 * absent row means delta 0). Every IB_FULL_EVERY polls all counters are
 * emitted again (delta 0 when unchanged) so a baseline survives retention.
 * A counter that went down (reset, wrap) gets delta = value and is counted in
 * resets. IB error counters saturate rather than wrap: a pinned counter shows
 * delta 0.
 *
 * emit's return value is not acted on (the store counts its own drops): the
 * poller's memory of values advances either way. Returns the number of rows
 * emitted, or -errno when the tree exists but cannot be listed.
 */
int ib_poller_poll(struct ib_poller *p, int64_t ts_ns,
		   int (*emit)(void *arg, const struct rec_ib *r), void *arg);

void ib_poller_get_stats(struct ib_poller *p, struct ib_poller_stats *st);

/* NULL is fine. */
void ib_poller_free(struct ib_poller *p);

#define IB_FULL_EVERY 360

#endif
