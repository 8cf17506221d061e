/* SPDX-License-Identifier: MIT */
/*
 * agentd's query server: one libevent loop accepting mutual-TLS sessions,
 * greeting each verified client with HELLO, answering PING, and handing
 * QUERY frames to worker threads (query.h) whose frames it streams back.
 */
#ifndef FLEETQ_AGENTD_SERVER_H
#define FLEETQ_AGENTD_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct tracer;

struct server_opts {
	const char *listen;	     /* "ADDR:PORT", numeric; port 0 picks one */
	const char *db_path;	     /* the trace file queries read */
	const char *ca, *cert, *key; /* all NULL: plaintext (--insecure, loopback only) */
	const char *const *allow;    /* fnmatch patterns for client CN / DNS SANs */
	size_t nallow;
	const char *node; /* name HELLO reports */
	int64_t max_rows, max_bytes, timeout_ms;
	int64_t query_mem, query_mem_total; /* bytes: SQLite memory of one query, of all */
	int max_queries;
	int idle_timeout_s;
	int handshake_timeout_s;
	int max_conns;	       /* sessions at once; past it new ones get ERROR BUSY */
	int max_handshakes;    /* TLS handshakes at once; past it the oldest is closed */
	int max_per_source;    /* connections from one address (IPv6: one /64) */
	int64_t frame_mem;     /* bytes all sessions' frames over 64 KiB may hold together */
	int drain_timeout_s;   /* SIGTERM: how long running queries may finish */
	const char *port_file; /* written with the bound port once listening */
	int relay_max_dial;    /* peers a relay dials itself per query */
	const char *const *relay_allow; /* fnmatch patterns for hosts a relay may dial */
	size_t nrelay_allow;
	struct tracer *tracer; /* NULL: no tracer (drops/lag reported as 0) */
};

struct server;

/* Parses "ADDR:PORT" / "[ADDR]:PORT". 0 or -EINVAL. */
int server_parse_listen(const char *s, struct sockaddr_storage *ss, int *len);
/* 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. */
int server_is_loopback(const struct sockaddr *sa);

/*
 * Loads the TLS material, binds, writes the port file. The options (and the
 * strings they point to) must outlive the server. NULL with *cause set.
 */
struct server *server_new(const struct server_opts *o, char **cause);
/* Runs until SIGTERM/SIGINT and the drain that follows; 0 or -errno. */
int server_run(struct server *s);
void server_free(struct server *s);

#endif
