/* SPDX-License-Identifier: MIT */
/*
 * fleetq's command line, inside: the options as parsed (struct query_opts) and the
 * subcommands' table (commands[], as git's and bpftool's). main.c parses; commands.c
 * runs a subcommand: one shared step from the options to the fan-out's parameters, then
 * the subcommand's own function.
 */
#ifndef FLEETQ_CLI_H
#define FLEETQ_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "gate.h"
#include "hostsel.h"
#include "params.h"

#ifndef FLEETQ_VERSION
#define FLEETQ_VERSION "0"
#endif

/*
 * Per communicator, the newest sequence numbers an analysis reads by default:
 * an incident run never reads a whole trace (a window costs ~10 us per
 * collective on the node and a few us per row in the merge), yet 1000 steps
 * give every rank's medians plenty of samples.
 */
#define DEFAULT_MAX_SEQS 1000
/* stragglers widens a default span cut short by DEFAULT_MAX_SEQS at most this many times */
#define WIDEN_MAX_FACTOR 16

/*
 * Row bytes fleetq accepts from one node (agentd's own default cap), and four
 * times that from all of them in one run: past either a node is cut
 * (truncated, exit 3), so that no agent, broken or hostile, grows fleetq
 * without bound.
 */
#define DEFAULT_MAX_BYTES (256ll << 20)

struct query_opts {
	struct fq_config flags;
	struct hostsel_arg *hsel; /* -w, -x, --hosts in order */
	size_t nhsel, nfiles;
	const char *merge;
	const char **params; /* --param NAME=VALUE */
	size_t nparams;
	struct qparam *qp;
	double min_coverage;
	long long max_rows;
	long long max_bytes; /* -1: DEFAULT_MAX_BYTES */
	int insecure, quiet;
	int pings; /* -1: the command's default */
	int tree_width; /* 0: flat fan-out */
	const char *sql;
	/* analyses */
	int64_t since_ns; /* window length; 0 = all time; -1 = default */
	const char *since_text;
	const char *job;
	char *comm;
	long long max_seqs; /* -1: DEFAULT_MAX_SEQS; 0: no bound */
	/* stragglers asked again over more seqs (commands.c): the first span's seqs and steps */
	long long widened_from, widened_steps;
	double threshold; /* < 0: the file's default */
	double min_effect; /* stragglers, percent; < 0: the file's default */
	double effect_steps; /* stragglers, steps (0: a fixed bar); < 0: the file's default */
	double busy_idle;    /* stragglers, percent; < 0: the file's default */
	int all, show_sql;
	const char *fail_if;
	const char *output; /* timeline -o */
	int bars;	    /* BARS_* */
	int64_t watch_ns;   /* --watch; 0: once */
	const char *watch_text;
	int exit_on_straggler;
	struct watch *watch;
	int junit; /* --format junit */
	/* gate */
	struct gate_args gate;
};

/* Indexes into commands[]; opt_cmds() in main.c says which options each one takes. */
enum cmd_id {
	CMD_QUERY,
	CMD_STRAGGLERS,
	CMD_NETCHECK,
	CMD_PING,
	CMD_GATE,
	CMD_HELP,
	CMD_VERSION,
	CMD_TIMELINE,
	NCMDS,
};

/* What a subcommand is, for the steps every one shares. */
enum {
	CMD_USER_SQL = 1 << 0, /* runs the user's SQL: its output format, --param, "-" */
	CMD_ANALYSIS = 1 << 1, /* node and merge SQL from an analysis file; a window */
	CMD_JUNIT = 1 << 2,    /* takes --format junit */
};

struct run;

struct cmd {
	const char *name;
	int (*now)(void);		 /* help, version: at once, before any option */
	int (*prepare)(struct run *r);	 /* before the hosts: -1 to go on, or an exit status */
	int (*run)(struct run *r);	 /* after the fan-out's parameters: the exit status */
	void (*verdict)(struct run *r); /* the one-line verdict on stderr, or NULL */
	int pings;			 /* clock samples per node unless --pings */
	unsigned flags;			 /* CMD_* */
};

extern const struct cmd commands[NCMDS];

/* "fleetq: " and the message on stderr, made printable; returns FQ_EXIT_USAGE. */
__attribute__((format(printf, 1, 2))) int usage_error(const char *fmt, ...);

/* Adds a -w, -x (kind 'w', 'x') or --hosts ('h') to q. 0 or -ENOMEM. */
int push_hostsel(struct query_opts *q, char kind, const char *text);

/* help and version (main.c): print on stdout, exit status 0. */
int cmd_help(void);
int cmd_version(void);

/* Runs c once with q; --watch: every q->watch_ns until it ends. The exit status. */
int cmd_run(const struct cmd *c, struct query_opts *q);
int cmd_watch(const struct cmd *c, struct query_opts *q);

#endif
