/* SPDX-License-Identifier: MIT */
/*
 * The fan-out: one libevent loop, at most `window` connections in flight,
 * one overall deadline. Each node goes resolving -> connecting -> TLS
 * handshake -> HELLO -> (PING -> PONG)* -> QUERY -> COLUMNS -> ROWS* -> END;
 * what each node sends, and what became of it, goes to one sink (struct
 * fanout_sink): fleetq's merge and output, or agentd's relay. The engine
 * knows neither.
 */
#ifndef FLEETQ_FANOUT_H
#define FLEETQ_FANOUT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

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
	/*
	 * A relay (agentd): a leaf cut at max_rows stays "truncated", so that the
	 * END passed up says why; the client at the top decides. 0 (fleetq):
	 * max_rows is the user's own limit, and its cut is no failure.
	 */
	int relay;
	/* When not NULL, polled every 100 ms: nonzero stops the fan-out
	 * (fanout_run() fails with -ECANCELED). A relay whose client left. */
	const int *cancel;
	/* When not NULL, polled every 100 ms: nonzero ends the fan-out as the
	 * deadline would, each unfinished node "interrupted" (fleetq's Ctrl-C:
	 * what arrived is still merged and printed). */
	const volatile sig_atomic_t *interrupt;
};

/*
 * Where a fan-out hands what it hears, host h being an index into
 * fanout_params.hosts. Each callback returns 0 or -errno with *cause (NULL:
 * out of memory); an error stops the fan-out, except -EINVAL from columns(),
 * which fails the hosts of that connection with WIRE_OUT_COLUMNS and *cause.
 * names, vals and frames point into the frame: copy to keep.
 */
struct fanout_sink {
	void *ctx;
	/* COLUMNS for hosts first .. first + count - 1 (count > 1: a relay's group). */
	int (*columns)(void *ctx, size_t first, size_t count, size_t ncols,
		       const char *const *names, char **cause);
	/* Optional: a whole ROWS frame of a connection that answers for host h
	 * alone, each row checked by wire_decode(). NULL: rows go to row(). */
	int (*frame)(void *ctx, size_t h, const void *frame, size_t len, char **cause);
	/* Host h's row number index (from 0). */
	int (*row)(void *ctx, size_t h, int64_t index, size_t ncols,
		   const struct wire_value *vals, char **cause);
	/* Exactly once per host: its outcome (enum wire_outcome), the rows it
	 * sent, why (NULL: nothing to say), its END's status (0: none or ok). */
	int (*done)(void *ctx, size_t h, int outcome, int64_t rows, const char *msg, int status,
		    char **cause);
	/* Optional: called whenever no connection is half-way through an event
	 * (a connection ended, a relay's leaf ended, COLUMNS arrived): the one
	 * place where the sink may call fanout_stop(). */
	int (*step)(void *ctx, char **cause);
	/* Optional: an outcome in the messages the engine writes (NULL: wire_outcome_name()). */
	const char *(*outcome_name)(int outcome);
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
 * Runs the query on every host, handing what arrives to sink. Per-node
 * failures go to sink->done(); returns 0, or -errno with *cause when the
 * fan-out stopped (a sink error, out of memory; -ECANCELED: p->cancel).
 */
int fanout_run(struct fanout *fo, const struct fanout_sink *sink, char **cause);

/*
 * From sink->step(): ends the connection that answers for host h, if it
 * still runs; its hosts not yet done end with outcome and msg.
 */
void fanout_stop(struct fanout *fo, size_t h, int outcome, const char *msg);

/* From the sink: host h's rows no longer count on the progress line. */
void fanout_forget_rows(struct fanout *fo, size_t h);

/* Node i's HELLO and clock, valid after fanout_run() until fanout_free(). */
const struct fanout_node_info *fanout_node_info(const struct fanout *fo, size_t i);

#endif
