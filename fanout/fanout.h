/* SPDX-License-Identifier: MIT */
/*
 * The fan-out: one libevent loop, at most `window` connections in flight,
 * one overall deadline. Each node goes resolving -> connecting -> TLS
 * handshake -> HELLO -> (PING -> PONG)* -> QUERY -> COLUMNS -> ROWS* -> END;
 * rows stream into the merge database (or a plain query's direct output),
 * clock samples into its table clock, every node's outcome into the coverage.
 */
#ifndef FLEETQ_FANOUT_H
#define FLEETQ_FANOUT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "coverage.h"
#include "direct.h"
#include "merge.h"

struct fanout_params {
	const char *const *hosts; /* "host", "host:port", "[v6]:port"; outlive the fanout */
	size_t nhosts;
	int port; /* when an entry names none */
	const char *ca, *cert, *key;
	/* Folder of the TLS session cache file (fleetq's), so that the next run
	 * resumes too; NULL: sessions live in this process only (session.h). */
	const char *session_dir;
	int insecure;		    /* plaintext, loopback agents only */
	int window;		    /* connections in flight */
	int64_t connect_timeout_ms; /* until HELLO */
	int64_t timeout_ms;	    /* the whole fan-out */
	const char *sql;  /* NULL: no query, the session ends after the pings (fleetq ping) */
	int64_t max_rows; /* per node, 0 = agent default; a node sending more fails */
	/* ROWS bytes accepted from one node, and from all of them together four
	 * times that; 0 = no bound. Past either, the node whose frame crosses it is
	 * cut (truncated), and so is any after. */
	int64_t max_bytes;
	int progress;	  /* progress line on stderr */
	/* Values for the query's parameters, in order (outlive the fanout). */
	const struct wire_value *params;
	size_t nparams;
	/*
	 * 1-based index of a parameter holding a time on the coordinator's
	 * CLOCK_REALTIME (WIRE_INT ns); each node gets it plus that node's clock
	 * offset, so a window start means the same instant everywhere. 0: none.
	 */
	size_t clock_param;
	int pings; /* PINGs per node between HELLO and QUERY, one at a time */
	/*
	 * Tree fan-out: 0 sends the query to every host (flat). W > 0 splits the
	 * hosts into at most W contiguous groups and sends the query once per
	 * group, to its first host, with the rest as QUERY "peers" (that relay
	 * splits again when it has more than W). Coverage stays per host.
	 */
	int tree_width;
	/* A relay: the client it forwards for, sent as QUERY "for" (NULL: none). */
	const char *on_behalf;
	/* NULL: rows go to the merge, outcomes to the coverage. Else to the sink
	 * (agentd's relay), and fanout_run() takes NULL for both. */
	const struct fanout_sink *sink;
	/*
	 * NULL: rows go to the merge database, in hostlist order through a writer
	 * thread of fanout_run()'s own (direct_new_merge()). Else rows go to this
	 * direct output (fleetq's plain query) and the merge only makes the results
	 * table, from the winning column set (the one most hosts sent), which names
	 * the columns (and fails as it would).
	 */
	struct direct *direct;
	/* When not NULL, polled every 100 ms: nonzero stops the fan-out
	 * (fanout_run() fails with -ECANCELED). A relay whose client left. */
	const int *cancel;
	/* When not NULL, polled every 100 ms: nonzero ends the fan-out as the
	 * deadline would, each unfinished node "interrupted" (fleetq's Ctrl-C:
	 * what arrived is still merged and printed). */
	const volatile sig_atomic_t *interrupt;
};

/*
 * Where a relay's fan-out sends what it hears, host i being an index into
 * fanout_params.hosts. Each callback returns 0 or -errno with *cause; an
 * error stops the fan-out, except -EINVAL from columns(), which fails that
 * host's group with FQ_COLUMNS. vals point into the frame: copy to keep.
 */
struct fanout_sink {
	void *ctx;
	int (*columns)(void *ctx, size_t i, size_t ncols, const char *const *names, char **cause);
	int (*row)(void *ctx, size_t i, size_t ncols, const struct wire_value *vals, char **cause);
	/* Exactly once per host: its outcome (enum fq_outcome), rows it sent, why. */
	int (*done)(void *ctx, size_t i, int outcome, int64_t rows, const char *msg, char **cause);
};

/* Splits n hosts into at most w contiguous groups: group g starts at the
 * returned offsets[g]; *ngroups is set. w <= 0 or n <= w: one host a group. */
size_t fanout_groups(size_t n, int w, size_t *starts);

/*
 * What a node said about itself (its HELLO) and its clock, as measured:
 * the sample with the smallest round trip among the HELLO and the PINGs.
 * offset_ns = node clock minus coordinator clock.
 */
struct fanout_node_info {
	int hello;	   /* its HELLO arrived */
	int samples;	   /* clock samples taken (0: offset/rtt unknown) */
	int64_t offset_ns; /* node CLOCK_REALTIME minus ours */
	int64_t rtt_ns;
	char *agent_version, *node, *clock_source, *peer;
	char *gpu_status; /* meta 'gpu_status' of its trace, or NULL */
	int64_t schema_version, ring_drops, store_lag_ns;
};

struct fanout;

/*
 * Checks the hosts and loads the TLS material. Returns NULL with errno
 * (EINVAL: bad host or certificate; *cause says which and what to do).
 */
struct fanout *fanout_new(const struct fanout_params *p, char **cause);
void fanout_free(struct fanout *fo);

/*
 * Runs the query on every host. Per-node failures land in cov; returns
 * 0, or -errno with *cause for local failures (the merge database).
 */
int fanout_run(struct fanout *fo, struct merge *m, struct coverage *cov, char **cause);

/* Node i's HELLO and clock, valid after fanout_run() until fanout_free(). */
const struct fanout_node_info *fanout_node_info(const struct fanout *fo, size_t i);

#endif
