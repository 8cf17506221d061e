/* SPDX-License-Identifier: MIT */
/*
 * The trace plane as agentd's main sees it: start the eBPF tracer, the store
 * writer and the InfiniBand poller on one SQLite file; ask for counters; stop.
 */
#ifndef FLEETQ_AGENTD_TRACE_H
#define FLEETQ_AGENTD_TRACE_H

#include <stdint.h>

struct trace_opts {
	const char *db_path;    /* trace file the store writes (WAL) */
	const char *node;       /* node name recorded in meta */
	const char *cgroup;     /* NULL: whole host; else a cgroup v2 path to scope to */
	const char *probes;     /* NULL: default probe set; else comma list, see agentd(8) */
	const char *sysfs_root; /* NULL: "/" ; tests point this at a fake tree */
	int ib_interval_s;      /* InfiniBand poll period; 0 disables */
	int gpu_interval_ms;    /* NVML sample period (agentd/nvml.h); 0 disables */
	const char *nvml_lib;   /* NULL: libnvidia-ml.so.1 */
	int64_t retain_bytes;   /* 0: no size limit */
	int64_t retain_age_s;   /* 0: no age limit */
	int verbose;
};

struct trace_stats {
	int64_t events;       /* events taken from the ring buffer */
	int64_t ring_drops;   /* events the kernel could not put in the ring buffer */
	int64_t store_drops;  /* events lost by the store (e.g. disk full) */
	int64_t store_lag_ns; /* age of the oldest event not yet committed */
	int64_t rows;         /* rows committed */
};

struct tracer;

/* Starts tracing; returns NULL with *cause set (caller frees) on failure. */
struct tracer *tracer_start(const struct trace_opts *o, char **cause);
void tracer_get_stats(struct tracer *t, struct trace_stats *st);
/* Detaches, flushes what is in flight, closes the store. NULL is fine. */
void tracer_stop(struct tracer *t);

#endif
