/* SPDX-License-Identifier: MIT */
/*
 * fleetq: send one SQL query to every node's agentd, merge the answers and
 * say which nodes answered. Subcommands go through commands[]; the first
 * argument after the global options that names none is the query itself.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "analysis.h"
#include "bars.h"
#include "clock.h"
#include "config.h"
#include "coverage.h"
#include "direct.h"
#include "fanout.h"
#include "gate.h"
#include "gather.h"
#include "fqsql.h"
#include "hostlist.h"
#include "hostsel.h"
#include "merge.h"
#include "output.h"
#include "params.h"
#include "strbuf.h"
#include "timeline.h"
#include "watch.h"
#include "why.h"

#ifndef FLEETQ_VERSION
#define FLEETQ_VERSION "0"
#endif

static const char usage_text[] =
	"usage: fleetq [OPTIONS] \"SQL\"\n"
	"       fleetq [OPTIONS] stragglers | netcheck | ping [OPTIONS]\n"
	"       fleetq [OPTIONS] gate --save FILE | --baseline FILE [OPTIONS]\n"
	"       fleetq [OPTIONS] timeline [-o FILE] [OPTIONS]\n"
	"       fleetq help | version\n"
	"\n"
	"Sends one read-only SQL query to agentd on every node, merges the rows into\n"
	"a table 'results' (first column: node) and prints them, or the result of\n"
	"--merge over them. A coverage summary on stderr says which nodes answered.\n"
	"SQL \"-\" reads the query from standard input. Options may also follow the\n"
	"subcommand (fleetq stragglers -w 'gpu[01-04]' --since 5m). Quote hostlists:\n"
	"the shell would expand gpu[01-04] to a file named gpu1 if there is one.\n"
	"\n"
	"subcommands:\n"
	"  stragglers               rank the ranks that slow their communicators, and hung ones\n"
	"  netcheck                 TCP retransmits and InfiniBand errors inside slow collectives\n"
	"  ping                     per node: round trip, clock offset, agent, trace health\n"
	"  gate                     CI regression gate: record metrics, or compare with a baseline\n"
	"  timeline                 the window's collectives, sync waits, off-CPU, retransmits and\n"
	"                           GPU kernels per rank, as a Perfetto/Chrome trace (JSON)\n"
	"  query SQL                the plain query (also without the word 'query')\n"
	"\n"
	"hosts:\n"
	"  --hosts FILE             one host[:port] or hostlist expression per line, # comments\n"
	"                           (FILE -: standard input)\n"
	"  -w HOSTLIST              e.g. 'gpu[01-16,20]', 'r[1-2]n[01-02]', 'a,b[1-3]',\n"
	"                           '[::1]:7077'; -w ^FILE: as --hosts FILE\n"
	"  -x HOSTLIST              leave these hosts out (-x ^FILE: those of FILE); without\n"
	"                           a port, on every port\n"
	"                           (neither: $SLURM_JOB_NODELIST)\n"
	"  --port N                 agent port when a host names none (default 7077)\n"
	"\n"
	"security:\n"
	"  --ca FILE                CA certificate that signed the agents' certificates\n"
	"  --cert FILE              client certificate\n"
	"  --key FILE               client private key\n"
	"  --insecure               plaintext, to loopback agents started with --insecure only\n"
	"  --no-session-cache       full TLS handshakes: neither read nor write the session\n"
	"                           cache file that lets the next run resume (in\n"
	"                           $XDG_CACHE_HOME/fleetq, else ~/.cache/fleetq)\n"
	"\n"
	"fan-out:\n"
	"  -f, --fanout N           connections in flight at once (default 128)\n"
	"  --connect-timeout SEC    per node, until the agent's HELLO (default 5)\n"
	"  --timeout SEC            deadline for the whole fan-out (default 30)\n"
	"  --tree-width W           relay through agents: at most W groups, each sent to its\n"
	"                           first host, which relays to the rest (0: flat, default)\n"
	"  --max-rows N             row limit per node, sent to the agents (a node cut at N\n"
	"                           rows is ok, and said so; analyses give no verdict); a\n"
	"                           node sending more fails\n"
	"  --max-bytes SIZE         row bytes accepted per node (default 256M), and 4 x SIZE\n"
	"                           from all nodes in one run; past it a node is cut\n"
	"  --pings N                clock samples per node after HELLO (default 4 for the\n"
	"                           subcommands, 0 for queries: HELLO's clock only)\n"
	"\n"
	"results:\n"
	"  --merge SQL              run SQL over the merged table 'results' and print that\n"
	"                           (table 'clock': node, offset_ns, rtt_ns, samples;\n"
	"                           hostlist(node) folds node names into 'gpu[01-04,07]')\n"
	"  --param NAME=VALUE       a value for the query's (and --merge's) parameter :NAME,\n"
	"                           bound, never spliced into the SQL; numbers go as numbers,\n"
	"                           'quoted' or other values as text (repeatable)\n"
	"  --format FMT             table, csv, tsv, json, ndjson; junit (gate only)\n"
	"                           (default: table on a terminal, else tsv; subcommands:\n"
	"                           a report, unless --format is given); json: an array of\n"
	"                           objects keyed by column, ndjson: one a line\n"
	"  --with-coverage          json and ndjson: also the coverage (json: one object with\n"
	"                           columns, rows as arrays and coverage; ndjson: a last line)\n"
	"  --fail-if SQL            after the merge, run SQL over 'results' and 'clock' (gate:\n"
	"                           'gate', 'gate_now' and the trace tables); any row it returns\n"
	"                           is printed on stderr and makes the exit status 1\n"
	"  --min-coverage FRACTION  fewest nodes that must answer fully, 0..1 (default 1.0)\n"
	"  -q, --quiet              no summaries on stderr\n"
	"  -h, --help               this text\n"
	"  --version                print the version\n"
	"\n"
	"stragglers and netcheck:\n"
	"  --since DUR              window: the last DUR (30s, 5m, 2h; default 60s), on each\n"
	"                           node's clock corrected by its offset; 'all' or 0 for all\n"
	"                           time\n"
	"  --job ID                 only processes of this job (SLURM_JOB_ID)\n"
	"  --comm HASH              only this communicator (16 hex digits)\n"
	"  --max-seqs N             per communicator, only its newest N sequence numbers inside\n"
	"                           the window (default 1000; 0 = no bound): bounds what each\n"
	"                           node reads, whatever --since says\n"
	"  --threshold Z            robust z-score that counts as deviant (default 3.5)\n"
	"  --all                    every rank (stragglers) or every counter (netcheck)\n"
	"  --show-sql               print the node and merge SQL with their parameters, exit\n"
	"  --bars[=WHEN]            stragglers: after the report, a bar per rank and signal\n"
	"                           (robust z); WHEN: auto (default: on a terminal), always\n"
	"                           (--bars alone), never\n"
	"  --watch PERIOD           stragglers: run again every PERIOD (e.g. 30s), printing only\n"
	"                           what changed, each line stamped (a verdict found or gone,\n"
	"                           ranks joining or leaving, nodes failing); until Ctrl-C\n"
	"  --exit-on-straggler      with --watch: exit at the first finding (1: a straggler,\n"
	"                           5: a hung rank)\n"
	"                           (--since, --job, --comm, --max-seqs and --show-sql apply to\n"
	"                           timeline too)\n"
	"\n"
	"timeline:\n"
	"  -o, --output FILE        write the trace to FILE (default: standard output); open it\n"
	"                           in ui.perfetto.dev or chrome://tracing\n"
	"\n"
	"gate (see docs/gate.md; --since default 10m there, --job and --show-sql apply too):\n"
	"  --save FILE              record the metrics and the fleet's shape in FILE (JSON)\n"
	"  --append                 with --save: add this run to FILE (repeated clean runs\n"
	"                           give the baseline its spread)\n"
	"  --baseline FILE          compare with FILE; exit 1 when a metric regressed\n"
	"  --junit FILE             with --baseline: also write the comparison to FILE as\n"
	"                           JUnit XML (the same fan-out as the report and exit status)\n"
	"  --metric NAME[:higher]=SQL  a metric: SQL over the merged trace tables (each with a\n"
	"                           node column); last column the value, a 'rank' column makes\n"
	"                           it per rank; :higher when larger is better (repeatable)\n"
	"  --builtin LIST           built-in metrics, comma-separated, or all (without --metric\n"
	"                           or a baseline naming them: all but sync_wait_skew)\n"
	"  --samples N              split the job's span into N slices, one value each\n"
	"                           (default: the baseline's, else 1)\n"
	"  --tolerance P            worse than the baseline median by more than P% fails\n"
	"                           (default 10%) ...\n"
	"  --mad-k K                ... and by more than K baseline MADs (default 3)\n"
	"\n"
	"config file: $FLEETQ_CONFIG, else ~/.config/fleetq/config, else\n"
	"/etc/fleetq/fleetq.conf; 'key = value' lines for ca, cert, key, port, fanout,\n"
	"timeout, connect_timeout, format, session_cache (yes or no). Flags win.\n"
	"Analysis SQL: $FLEETQ_SQL_DIR, else the installed files, else the ones built in.\n"
	"\n"
	"exit status (the first that applies, top down):\n"
	"  2  usage, configuration or local error (also a failing --merge query, SQL that\n"
	"     every node that answered refused, an unknown subcommand; gate: a baseline of\n"
	"     another shape: other node or rank count)\n"
	"  5  stragglers: a hung rank was found (even on partial coverage)\n"
	"  1  stragglers: a straggler found; netcheck: a rank or node named; gate: a metric\n"
	"     regressed; --fail-if returned rows\n"
	"  4  TLS or authentication failed on at least one node (wins over 3)\n"
	"  3  coverage below --min-coverage (timeouts, unreachable, SQL errors, truncation),\n"
	"     or no node answered (whatever --min-coverage says); stragglers and netcheck:\n"
	"     also no rank in the window (no such --job, an old trace) or fewer ranks of a\n"
	"     communicator than it declares (some of the job's nodes)\n"
	"  0  every node answered (or at least --min-coverage of them), nothing found\n"
	"  130  interrupted: the first Ctrl-C prints what arrived and exits 130, a second\n"
	"     one ends fleetq at once\n"
	"\n"
	"See fleetq(1).\n";

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL, *p;

	/* A cause may quote an agent (a column name, a message): nothing raw reaches stderr. */
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	p = s ? fq_printable(s) : NULL;
	fprintf(stderr, "fleetq: %s\n", p ? p : "out of memory");
	free(p);
	free(s);
	return FQ_EXIT_USAGE;
}

enum {
	OPT_HOSTS = 256,
	OPT_CA,
	OPT_CERT,
	OPT_KEY,
	OPT_PORT,
	OPT_FANOUT,
	OPT_CONNECT_TIMEOUT,
	OPT_TIMEOUT,
	OPT_FORMAT,
	OPT_MERGE,
	OPT_MIN_COVERAGE,
	OPT_MAX_ROWS,
	OPT_MAX_BYTES,
	OPT_INSECURE,
	OPT_VERSION,
	OPT_PINGS,
	OPT_SINCE,
	OPT_JOB,
	OPT_COMM,
	OPT_MAX_SEQS,
	OPT_THRESHOLD,
	OPT_ALL,
	OPT_SHOW_SQL,
	OPT_FAIL_IF,
	OPT_SAVE,
	OPT_APPEND,
	OPT_BASELINE,
	OPT_METRIC,
	OPT_BUILTIN,
	OPT_SAMPLES,
	OPT_TOLERANCE,
	OPT_MAD_K,
	OPT_TREE_WIDTH,
	OPT_NO_SESSION_CACHE,
	OPT_PARAM,
	OPT_JUNIT,
	OPT_WITH_COVERAGE,
	OPT_OUTPUT,
	OPT_BARS,
	OPT_WATCH,
	OPT_EXIT_ON_STRAGGLER,
};

static const struct option long_opts[] = {
	{ "hosts", required_argument, NULL, OPT_HOSTS },
	{ "ca", required_argument, NULL, OPT_CA },
	{ "cert", required_argument, NULL, OPT_CERT },
	{ "key", required_argument, NULL, OPT_KEY },
	{ "port", required_argument, NULL, OPT_PORT },
	{ "fanout", required_argument, NULL, OPT_FANOUT },
	{ "connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "format", required_argument, NULL, OPT_FORMAT },
	{ "merge", required_argument, NULL, OPT_MERGE },
	{ "min-coverage", required_argument, NULL, OPT_MIN_COVERAGE },
	{ "max-rows", required_argument, NULL, OPT_MAX_ROWS },
	{ "max-bytes", required_argument, NULL, OPT_MAX_BYTES },
	{ "insecure", no_argument, NULL, OPT_INSECURE },
	{ "no-session-cache", no_argument, NULL, OPT_NO_SESSION_CACHE },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "pings", required_argument, NULL, OPT_PINGS },
	{ "tree-width", required_argument, NULL, OPT_TREE_WIDTH },
	{ "since", required_argument, NULL, OPT_SINCE },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "comm", required_argument, NULL, OPT_COMM },
	{ "max-seqs", required_argument, NULL, OPT_MAX_SEQS },
	{ "threshold", required_argument, NULL, OPT_THRESHOLD },
	{ "all", no_argument, NULL, OPT_ALL },
	{ "show-sql", no_argument, NULL, OPT_SHOW_SQL },
	{ "fail-if", required_argument, NULL, OPT_FAIL_IF },
	{ "save", required_argument, NULL, OPT_SAVE },
	{ "append", no_argument, NULL, OPT_APPEND },
	{ "baseline", required_argument, NULL, OPT_BASELINE },
	{ "metric", required_argument, NULL, OPT_METRIC },
	{ "builtin", required_argument, NULL, OPT_BUILTIN },
	{ "samples", required_argument, NULL, OPT_SAMPLES },
	{ "tolerance", required_argument, NULL, OPT_TOLERANCE },
	{ "mad-k", required_argument, NULL, OPT_MAD_K },
	{ "param", required_argument, NULL, OPT_PARAM },
	{ "junit", required_argument, NULL, OPT_JUNIT },
	{ "with-coverage", no_argument, NULL, OPT_WITH_COVERAGE },
	{ "output", required_argument, NULL, OPT_OUTPUT },
	{ "bars", optional_argument, NULL, OPT_BARS },
	{ "watch", required_argument, NULL, OPT_WATCH },
	{ "exit-on-straggler", no_argument, NULL, OPT_EXIT_ON_STRAGGLER },
	{ NULL, 0, NULL, 0 },
};

static const char *opt_name(int c)
{
	for (const struct option *o = long_opts; o->name; o++)
		if (o->val == c)
			return o->name;
	return "?";
}

enum cmd_id {
	CMD_QUERY,
	CMD_STRAGGLERS,
	CMD_NETCHECK,
	CMD_PING,
	CMD_GATE,
	CMD_HELP,
	CMD_VERSION,
	CMD_TIMELINE,
};

/* Where an option may appear: global ones anywhere, the rest after their subcommand. */
#define ANALYSES (1u << CMD_STRAGGLERS | 1u << CMD_NETCHECK)
static unsigned opt_cmds(int c)
{
	switch (c) {
	case OPT_MERGE:
	case OPT_PARAM:
		return 1u << CMD_QUERY;
	case OPT_SINCE:
	case OPT_JOB:
	case OPT_SHOW_SQL:
		return ANALYSES | 1u << CMD_GATE | 1u << CMD_TIMELINE;
	case OPT_COMM:
	case OPT_MAX_SEQS:
		return ANALYSES | 1u << CMD_TIMELINE;
	case OPT_OUTPUT:
		return 1u << CMD_TIMELINE;
	case OPT_BARS:
	case OPT_WATCH:
	case OPT_EXIT_ON_STRAGGLER:
		return 1u << CMD_STRAGGLERS;
	case OPT_THRESHOLD:
	case OPT_ALL:
		return ANALYSES;
	case OPT_SAVE:
	case OPT_APPEND:
	case OPT_BASELINE:
	case OPT_METRIC:
	case OPT_BUILTIN:
	case OPT_SAMPLES:
	case OPT_TOLERANCE:
	case OPT_MAD_K:
	case OPT_JUNIT:
		return 1u << CMD_GATE;
	default:
		return ~0u;
	}
}

/*
 * Per communicator, the newest sequence numbers an analysis reads by default:
 * an incident run never reads a whole trace (a window costs ~10 us per
 * collective on the node and a few us per row in the merge), yet 1000 steps
 * give every rank's medians plenty of samples.
 */
#define DEFAULT_MAX_SEQS 1000

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
	double threshold; /* < 0: the file's default */
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

static int push_hostsel(struct query_opts *q, char kind, const char *text)
{
	struct hostsel_arg *a = realloc(q->hsel, (q->nhsel + 1) * sizeof(*a));

	if (!a)
		return -ENOMEM;
	a[q->nhsel++] = (struct hostsel_arg){ kind, text };
	q->hsel = a;
	q->nfiles += kind == 'h' || text[0] == '^';
	return 0;
}

static int push(const char ***arr, size_t *n, const char *s)
{
	const char **a = realloc(*arr, (*n + 1) * sizeof(*a));

	if (!a)
		return -ENOMEM;
	a[(*n)++] = s;
	*arr = a;
	return 0;
}

/* "30s", "5m", "1.5h", "2d", "500ms", "90" (seconds); "all" or "0": all time. */
static int parse_duration(const char *s, int64_t *ns)
{
	static const struct {
		const char *unit;
		double ns;
	} units[] = { { "ms", 1e6 }, { "s", 1e9 }, { "", 1e9 }, { "m", 60e9 },
		      { "h", 3600e9 }, { "d", 86400e9 } };
	char *end;
	double v;

	if (!strcmp(s, "all")) {
		*ns = 0;
		return 0;
	}
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !(v >= 0) || v > 1e7)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(end, units[i].unit)) {
			*ns = (int64_t)(v * units[i].ns);
			return 0;
		}
	return -EINVAL;
}

static const char *const cmd_names[] = {
	[CMD_QUERY] = "query", [CMD_STRAGGLERS] = "stragglers", [CMD_NETCHECK] = "netcheck",
	[CMD_PING] = "ping",   [CMD_GATE] = "gate",		[CMD_HELP] = "help",
	[CMD_VERSION] = "version", [CMD_TIMELINE] = "timeline",
};

/*
 * Parses options into q. cmd < 0: the global options before a subcommand
 * (stops at the first argument that is not an option); else the options
 * and arguments of cmd, in any order, arguments into pos. Returns -1 to go
 * on, else an exit status.
 */
static int parse_args(int argc, char **argv, struct query_opts *q, int cmd, const char ***pos,
		      size_t *npos)
{
	static const char *const keys[] = {
		[OPT_CA - OPT_HOSTS] = "ca",
		[OPT_CERT - OPT_HOSTS] = "cert",
		[OPT_KEY - OPT_HOSTS] = "key",
		[OPT_PORT - OPT_HOSTS] = "port",
		[OPT_FANOUT - OPT_HOSTS] = "fanout",
		[OPT_CONNECT_TIMEOUT - OPT_HOSTS] = "connect_timeout",
		[OPT_TIMEOUT - OPT_HOSTS] = "timeout",
		[OPT_FORMAT - OPT_HOSTS] = "format",
	};
	char *cause = NULL, *end;
	int c, err;

	opterr = 0;
	/* 0, not 1: GNU getopt starts over (a second pass, another optstring). */
	optind = 0;
	while ((c = getopt_long(argc, argv, cmd < 0 ? "+:w:x:f:o:qh" : "-:w:x:f:o:qh",
				long_opts, NULL)) != -1) {
		if (c == 'o')
			c = OPT_OUTPUT;
		if (c >= OPT_HOSTS && !(opt_cmds(c) & (cmd < 0 ? ~0u : 1u << cmd)))
			return usage_error(
				"option '--%s' does not apply to '%s': see fleetq --help",
				opt_name(c), cmd_names[cmd]);
		if (c >= OPT_HOSTS && cmd < 0 && !(opt_cmds(c) & 1u << CMD_QUERY))
			return usage_error("option '--%s' goes after the subcommand, e.g. fleetq "
					   "-w HOSTS %s --%s ...",
					   opt_name(c),
					   opt_cmds(c) & ANALYSES		   ? "stragglers"
					   : opt_cmds(c) & 1u << CMD_TIMELINE ? "timeline"
									       : "gate",
					   opt_name(c));
		switch (c) {
		case 1:
			if (push(pos, npos, optarg))
				return usage_error("out of memory");
			break;
		case 'w':
		case 'x':
		case OPT_HOSTS:
			if (push_hostsel(q, c == OPT_HOSTS ? 'h' : (char)c, optarg))
				return usage_error("out of memory");
			break;
		case 'f':
			err = config_set(&q->flags, "fanout", optarg, &cause);
			if (err) {
				usage_error("-f: %s", cause ? cause : strerror(-err));
				free(cause);
				return FQ_EXIT_USAGE;
			}
			break;
		case OPT_FORMAT:
			/* junit is the gate's alone, not a config file format */
			q->junit = !strcmp(optarg, "junit");
			if (q->junit)
				break;
			/* fall through */
		case OPT_CA:
		case OPT_CERT:
		case OPT_KEY:
		case OPT_PORT:
		case OPT_FANOUT:
		case OPT_CONNECT_TIMEOUT:
		case OPT_TIMEOUT:
			err = config_set(&q->flags, keys[c - OPT_HOSTS], optarg, &cause);
			if (err) {
				usage_error("--%s: %s", opt_name(c),
					    cause ? cause : strerror(-err));
				free(cause);
				return FQ_EXIT_USAGE;
			}
			break;
		case OPT_MERGE:
			q->merge = optarg;
			break;
		case OPT_PARAM:
			if (push(&q->params, &q->nparams, optarg))
				return usage_error("out of memory");
			break;
		case OPT_MIN_COVERAGE:
			errno = 0;
			q->min_coverage = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(q->min_coverage >= 0) ||
			    q->min_coverage > 1)
				return usage_error(
					"--min-coverage: invalid fraction '%s': use a number "
					"from 0 to 1",
					optarg);
			break;
		case OPT_MAX_ROWS:
			errno = 0;
			q->max_rows = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || q->max_rows < 1)
				return usage_error(
					"--max-rows: invalid count '%s': use a number above 0",
					optarg);
			break;
		case OPT_MAX_BYTES:
			errno = 0;
			q->max_bytes = strtoll(optarg, &end, 10);
			if (!errno && end != optarg && q->max_bytes > 0 && *end &&
			    strchr("KkMmGg", *end)) {
				int sh = *end == 'K' || *end == 'k'   ? 10
					 : *end == 'M' || *end == 'm' ? 20
								      : 30;

				q->max_bytes = q->max_bytes > (1ll << 40) >> sh ? -1
									   : q->max_bytes << sh;
				end++;
			}
			if (errno || end == optarg || *end || q->max_bytes < 1 ||
			    q->max_bytes > (1ll << 40))
				return usage_error(
					"--max-bytes: invalid size '%s': use e.g. 256M or 4G (at most "
					"1024G)",
					optarg);
			break;
		case OPT_TREE_WIDTH:
			errno = 0;
			q->tree_width = (int)strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || q->tree_width < 0 ||
			    q->tree_width > 65536)
				return usage_error("--tree-width: invalid width '%s': use a number "
						   "from 0 (flat) to 65536",
						   optarg);
			break;
		case OPT_PINGS:
			errno = 0;
			q->pings = (int)strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || q->pings < 0 || q->pings > 64)
				return usage_error(
					"--pings: invalid count '%s': use a number from 0 to 64",
					optarg);
			break;
		case OPT_SINCE:
			if (parse_duration(optarg, &q->since_ns))
				return usage_error(
					"--since: invalid duration '%s': use e.g. 30s, 5m, 2h, 1d "
					"or all",
					optarg);
			q->since_text = optarg;
			break;
		case OPT_JOB:
			q->job = optarg;
			break;
		case OPT_COMM:
			if (strlen(optarg) != 16 || strspn(optarg, "0123456789abcdefABCDEF") != 16)
				return usage_error("--comm: invalid communicator '%s': give the 16 "
						   "hex digits of comm_hash",
						   optarg);
			free(q->comm);
			q->comm = strdup(optarg);
			if (!q->comm)
				return usage_error("out of memory");
			for (char *p = q->comm; *p; p++)
				*p |= 0x20; /* comm_hash is stored in lowercase */
			break;
		case OPT_MAX_SEQS:
			errno = 0;
			q->max_seqs = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || q->max_seqs < 0)
				return usage_error("--max-seqs: invalid count '%s': use a number of "
						   "collectives, e.g. 512, or 0 for no bound",
						   optarg);
			break;
		case OPT_THRESHOLD:
			errno = 0;
			q->threshold = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(q->threshold > 0) ||
			    q->threshold > 1e6)
				return usage_error(
					"--threshold: invalid z-score '%s': use a number above 0, "
					"e.g. 3.5",
					optarg);
			break;
		case OPT_ALL:
			q->all = 1;
			break;
		case OPT_FAIL_IF:
			q->fail_if = optarg;
			break;
		case OPT_SAVE:
			q->gate.save = optarg;
			break;
		case OPT_APPEND:
			q->gate.append = 1;
			break;
		case OPT_BASELINE:
			q->gate.baseline = optarg;
			break;
		case OPT_JUNIT:
			q->gate.junit = optarg;
			break;
		case OPT_WITH_COVERAGE:
			q->gate.with_coverage = 1;
			break;
		case OPT_OUTPUT:
			q->output = optarg;
			break;
		case OPT_WATCH:
			if (parse_duration(optarg, &q->watch_ns) || q->watch_ns < 100000000)
				return usage_error("--watch: invalid period '%s': use e.g. 30s, 1m "
						   "or 500ms (at least 100ms)",
						   optarg);
			q->watch_text = optarg;
			break;
		case OPT_EXIT_ON_STRAGGLER:
			q->exit_on_straggler = 1;
			break;
		case OPT_BARS:
			q->bars = bars_parse(optarg);
			if (q->bars < 0)
				return usage_error("--bars: invalid value '%s': use auto, always or "
						   "never",
						   optarg);
			break;
		case OPT_METRIC:
			if (push(&q->gate.metrics, &q->gate.nmetrics, optarg))
				return usage_error("out of memory");
			break;
		case OPT_BUILTIN:
			q->gate.builtin = optarg;
			break;
		case OPT_SAMPLES:
			errno = 0;
			q->gate.samples = (int)strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || q->gate.samples < 1 ||
			    q->gate.samples > 1000)
				return usage_error("--samples: invalid count '%s': use a number "
						   "from 1 to 1000",
						   optarg);
			break;
		case OPT_TOLERANCE:
			if (gate_parse_tolerance(optarg, &q->gate.tolerance))
				return usage_error("--tolerance: invalid percentage '%s': use e.g. "
						   "10%% or 2.5",
						   optarg);
			break;
		case OPT_MAD_K:
			errno = 0;
			q->gate.mad_k = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(q->gate.mad_k >= 0) ||
			    q->gate.mad_k > 1e6)
				return usage_error("--mad-k: invalid factor '%s': use a number from "
						   "0, e.g. 3",
						   optarg);
			break;
		case OPT_INSECURE:
			q->insecure = 1;
			break;
		case OPT_NO_SESSION_CACHE:
			q->flags.session_cache = 0;
			break;
		case OPT_SHOW_SQL:
			q->show_sql = 1;
			break;
		case 'q':
			q->quiet = 1;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return FQ_EXIT_OK;
		case OPT_VERSION:
			printf("fleetq %s\n", FLEETQ_VERSION);
			return FQ_EXIT_OK;
		case ':':
			return usage_error("option '%s' needs a value: see fleetq --help",
					   argv[optind - 1]);
		default:
			if (optopt && optopt < 256)
				return usage_error("unknown option '-%c': see fleetq --help",
						   optopt);
			if (optopt)
				return usage_error("option '%s' needs a value: see fleetq --help",
						   argv[optind - 1]);
			return usage_error("unknown option '%s': see fleetq --help",
					   argv[optind - 1]);
		}
	}
	return -1;
}

static char *read_stdin(void)
{
	struct strbuf b = STRBUF_INIT;
	char tmp[65536];
	size_t n;

	while ((n = fread(tmp, 1, sizeof(tmp), stdin)) > 0)
		sb_add(&b, tmp, n);
	return sb_detach(&b);
}

static int load_hosts(struct query_opts *q, struct hostlist *hl)
{
	const char *env = getenv("SLURM_JOB_NODELIST");
	char *cause = NULL;
	int err, included, nx = 0;

	for (size_t i = 0; i < q->nhsel; i++)
		nx += q->hsel[i].kind == 'x';
	err = hostsel_load(hl, q->hsel, q->nhsel, &included, &cause);
	if (!err && !included) {
		if (!env || !*env)
			return usage_error("no hosts: pass --hosts FILE or -w HOSTLIST, or run "
					   "inside a Slurm job (SLURM_JOB_NODELIST)");
		/* the job's nodes, less those of -x */
		if (push_hostsel(q, 'w', env))
			return usage_error("out of memory");
		err = hostsel_load(hl, q->hsel, q->nhsel, &included, &cause);
	}
	if (err) {
		usage_error("%s", cause ? cause : strerror(-err));
		free(cause);
		return FQ_EXIT_USAGE;
	}
	if (!hostlist_count(hl) && nx)
		return usage_error("no hosts: -x left none");
	if (!hostlist_count(hl))
		return usage_error("no hosts: the hosts file%s named none",
				   q->nfiles > 1 ? "s" : "");
	return -1;
}

static void column_value(sqlite3_stmt *st, int i, struct wire_value *v)
{
	switch (sqlite3_column_type(st, i)) {
	case SQLITE_INTEGER:
		v->type = WIRE_INT;
		v->i = sqlite3_column_int64(st, i);
		break;
	case SQLITE_FLOAT:
		v->type = WIRE_REAL;
		v->d = sqlite3_column_double(st, i);
		break;
	case SQLITE_TEXT:
		v->type = WIRE_TEXT;
		v->p = sqlite3_column_text(st, i);
		v->n = sqlite3_column_bytes(st, i);
		break;
	case SQLITE_BLOB:
		v->type = WIRE_BLOB;
		v->p = sqlite3_column_blob(st, i);
		v->n = sqlite3_column_bytes(st, i);
		break;
	default:
		v->type = WIRE_NULL;
	}
}

/*
 * Prints the rows of select_sql over the merge database (NULL: no table to
 * read, print no rows). what names it in errors. Returns 0 or an exit status.
 */
static int print_results(struct merge *m, struct output *out, const char *select_sql,
			 const char *what, const char *cov_json, struct query_opts *q)
{
	sqlite3 *db = merge_db(m);
	sqlite3_stmt *st = NULL;
	struct wire_value *vals = NULL;
	const char **names = NULL;
	char *cause = NULL;
	int ncols = 0, rc = SQLITE_DONE, ret = 0, err = 0;

	if (select_sql) {
		if (sqlite3_prepare_v2(db, select_sql, -1, &st, NULL) != SQLITE_OK) {
			usage_error("%s: %s: fix the merge query (it runs over table 'results')",
				    what, sqlite3_errmsg(db));
			ret = FQ_EXIT_USAGE;
			goto out;
		}
		ncols = sqlite3_column_count(st);
		if (q->nparams && qparams_bind(q->qp, q->nparams, st, &cause)) {
			ret = usage_error("%s", cause);
			goto out;
		}
	}
	vals = calloc(ncols ? ncols : 1, sizeof(*vals));
	names = calloc(ncols ? ncols : 1, sizeof(*names));
	if (!vals || !names) {
		ret = usage_error("out of memory");
		goto out;
	}
	for (int i = 0; i < ncols; i++)
		names[i] = sqlite3_column_name(st, i);
	err = output_begin(out, ncols, names);
	while (!err && st && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (int i = 0; i < ncols; i++)
			column_value(st, i, &vals[i]);
		err = output_row(out, vals);
	}
	if (!err && st && rc != SQLITE_DONE) {
		usage_error("%s: %s", what, sqlite3_errmsg(db));
		ret = FQ_EXIT_USAGE;
	}
	if (!err)
		err = output_end(out, cov_json);
	if (err && err != -EPIPE) {
		usage_error("cannot write the output: %s", strerror(-err));
		ret = FQ_EXIT_USAGE;
	}
out:
	free(cause);
	sqlite3_finalize(st);
	free(vals);
	free(names);
	return ret;
}

/* fleetq ping: one row per node, from its HELLO, its clock samples and its outcome. */
static int print_ping(struct fanout *fo, struct coverage *cov, struct output *out,
		      const char *const *hosts, size_t n, const char *cov_json)
{
	static const char *const names[] = { "node",  "status", "rtt_us", "offset_us",
					      "agent", "schema", "name",   "clock",
					      "lag_ms", "drops", "error", "gpu" };
	struct wire_value v[12];
	int err;

	err = output_begin(out, 12, names);
	for (size_t i = 0; i < n && !err; i++) {
		const struct fanout_node_info *in = fanout_node_info(fo, i);
		const char *st = outcome_name(coverage_outcome(cov, i));
		const char *msg = coverage_message(cov, i);
		const char *strs[] = { in->agent_version, in->node, in->clock_source };

		memset(v, 0, sizeof(v));
		v[0] = (struct wire_value){ .type = WIRE_TEXT, .p = hosts[i],
					    .n = strlen(hosts[i]) };
		v[1] = (struct wire_value){ .type = WIRE_TEXT, .p = st, .n = strlen(st) };
		if (in->samples) {
			v[2] = (struct wire_value){ .type = WIRE_INT, .i = in->rtt_ns / 1000 };
			v[3] = (struct wire_value){ .type = WIRE_INT, .i = in->offset_ns / 1000 };
		}
		for (int k = 0; k < 3; k++)
			if (strs[k])
				v[k == 0 ? 4 : k + 5] = (struct wire_value){
					.type = WIRE_TEXT, .p = strs[k], .n = strlen(strs[k])
				};
		if (in->hello) {
			v[5] = (struct wire_value){ .type = WIRE_INT, .i = in->schema_version };
			v[8] = (struct wire_value){ .type = WIRE_REAL,
						    .d = (double)(in->store_lag_ns / 1000) / 1000 };
			v[9] = (struct wire_value){ .type = WIRE_INT, .i = in->ring_drops };
		}
		if (msg)
			v[10] = (struct wire_value){ .type = WIRE_TEXT, .p = msg,
						     .n = strlen(msg) };
		if (in->gpu_status)
			v[11] = (struct wire_value){ .type = WIRE_TEXT, .p = in->gpu_status,
						     .n = strlen(in->gpu_status) };
		err = output_row(out, v);
	}
	if (!err)
		err = output_end(out, cov_json);
	if (err && err != -EPIPE)
		return usage_error("cannot write the output: %s", strerror(-err));
	return 0;
}

/*
 * The session cache folder: $XDG_CACHE_HOME/fleetq, else ~/.cache/fleetq
 * (XDG: a relative $XDG_CACHE_HOME is ignored). NULL: no cache.
 */
static char *session_dir(void)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	char *dir = NULL;

	if (xdg && xdg[0] == '/') {
		if (asprintf(&dir, "%s/fleetq", xdg) < 0)
			dir = NULL;
	} else if (home && home[0] == '/') {
		if (asprintf(&dir, "%s/.cache/fleetq", home) < 0)
			dir = NULL;
	}
	return dir;
}

#define FMT_REPORT (-1)

/* The shells' status for a command ended by SIGINT: the same whether one Ctrl-C or two. */
#define EXIT_INTERRUPTED 130

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/*
 * The first Ctrl-C ends the fan-out: what arrived is printed, the nodes still
 * pending are "interrupted" in the coverage. SA_RESETHAND: the second one
 * kills as usual. A SIGINT ignored by whoever started us stays ignored.
 */
static void catch_sigint(struct fanout_params *fp)
{
	struct sigaction sa = { .sa_handler = on_sigint, .sa_flags = SA_RESETHAND };
	struct sigaction old;

	if (sigaction(SIGINT, NULL, &old) || old.sa_handler == SIG_IGN)
		return;
	sigemptyset(&sa.sa_mask);
	if (!sigaction(SIGINT, &sa, NULL))
		fp->interrupt = &interrupted;
}

/*
 * Exit status of an analysis, first match wins: a hang (5), a finding (1),
 * then coverage as for queries (4, 3), and 3 also when no node answered at
 * all: "clean" must mean "looked everywhere and found nothing".
 */
static int analysis_exit(const struct an_findings *fd, const struct coverage *cov, double min,
			 int fail_if, const char *short_of)
{
	int c;

	if (fd->hung)
		return FQ_EXIT_HANG;
	if (fd->stragglers || fd->flagged || fail_if)
		return FQ_EXIT_GATE;
	c = coverage_exit(cov, min);
	if (c)
		return c;
	if (!coverage_count(cov, FQ_OK) || short_of)
		return FQ_EXIT_COVERAGE;
	return FQ_EXIT_OK;
}

/*
 * "Nothing found" is a verdict only over every rank of every communicator
 * looked at: none at all (no such job, a window before the trace) or part
 * of a communicator (-w naming some of the job's nodes) is no verdict. The
 * line that says what to check (malloc'd), or NULL when the rows cover it.
 */
static char *analysis_short(const struct an_seen *s, const struct query_opts *q,
			    size_t nodes)
{
	char *m = NULL, job[160] = "", win[96];
	int r;

	if (!s->known)
		return NULL;
	if (q->job)
		snprintf(job, sizeof(job), " of job %s", q->job);
	if (q->comm)
		snprintf(job + strlen(job), sizeof(job) - strlen(job), "%s communicator %s",
			 q->job ? " in" : " of", q->comm);
	if (q->since_ns)
		snprintf(win, sizeof(win), "the last %s", q->since_text ? q->since_text : "60s");
	else
		snprintf(win, sizeof(win), "all time");
	if (!s->ranks)
		r = asprintf(&m, "no collectives%s in %s on %zu node%s: check %s", job, win,
			     nodes, nodes == 1 ? "" : "s",
			     q->since_ns ? q->job ? "--job/--since" : "--since"
			     : q->job	 ? "--job and the hosts (-w)"
					 : "the hosts (-w) and that their agents trace");
	else if (s->partial)
		r = asprintf(&m, "%d of %d ranks of communicator %s answered%s: query every node "
				 "of the job",
			     s->answered, s->declared, s->comm,
			     s->partial > 1 ? " (and more communicators are short)" : "");
	else
		return NULL;
	return r < 0 ? strdup("too few ranks answered") : m;
}

static int run(int cmd, struct query_opts *q)
{
	struct fq_config conf;
	struct fanout_params fp = { 0 };
	struct hostlist *hl = NULL;
	struct fanout *fo = NULL;
	struct merge *m = NULL;
	struct coverage *cov = NULL;
	struct output *out = NULL;
	struct direct *dout = NULL;
	struct an_plan plan = { 0 }, why = { 0 };
	struct an_findings fd = { 0 };
	struct an_seen seen = { 0 };
	struct an_param np[5], mp[2];
	struct wire_value *qvals = NULL;
	size_t nqvals = 0;
	const char **hosts = NULL;
	char *cause = NULL, *sql_buf = NULL, *summary = NULL, *common = NULL, *cov_json = NULL;
	char *sess_dir = NULL, *short_of = NULL, window[96];
	long long fail_rows = 0;
	int ret, err, format, analysis = cmd == CMD_STRAGGLERS || cmd == CMD_NETCHECK;
	FILE *tl = NULL;
	char *bar_text = NULL;
	int bars;
	int plain = cmd == CMD_QUERY && !q->merge && !q->fail_if;
	size_t nnp = 0, nmp = 0, answered;

	config_init(&conf);
	ret = FQ_EXIT_USAGE;
	err = config_load(&conf, NULL, &cause);
	if (err) {
		usage_error("%s", cause ? cause : strerror(-err));
		goto out;
	}
	if (config_overlay(&conf, &q->flags)) {
		usage_error("out of memory");
		goto out;
	}
	config_defaults(&conf);
	/* Certificates named on the command line are meant to be used: say they are not. */
	if (q->insecure && (q->flags.ca || q->flags.cert || q->flags.key)) {
		usage_error("--insecure talks plaintext: --%s does not apply; drop one or the "
			    "other",
			    q->flags.ca ? "ca" : q->flags.cert ? "cert" : "key");
		goto out;
	}
	if (q->junit && cmd != CMD_GATE) {
		usage_error("--format junit applies to 'gate' only: use table, csv, tsv, json or "
			    "ndjson");
		goto out;
	}
	if (cmd == CMD_GATE) {
		q->gate.format = q->junit	   ? GATE_FMT_JUNIT
				 : q->flags.format ? output_format_parse(q->flags.format)
						   : GATE_FMT_REPORT;
		q->gate.since_ns = q->since_ns;
		q->gate.since_text = q->since_text;
		q->gate.job = q->job;
		q->gate.quiet = q->quiet;
		q->gate.min_coverage = q->min_coverage;
		q->gate.fail_if = q->fail_if;
		q->gate.version = FLEETQ_VERSION;
		if (q->show_sql) {
			ret = gate_show_sql(&q->gate);
			goto out;
		}
	}
	if (cmd != CMD_QUERY)
		/* Reports are for people; machine formats only when asked for. */
		format = q->flags.format ? output_format_parse(q->flags.format) : FMT_REPORT;
	else
		format = conf.format		 ? output_format_parse(conf.format)
			 : isatty(STDOUT_FILENO) ? FQ_FMT_TABLE
						 : FQ_FMT_TSV;
	analysis |= cmd == CMD_TIMELINE; /* its window and node SQL are an analysis's */
	if (q->bars == BARS_ALWAYS && cmd == CMD_STRAGGLERS && format != FMT_REPORT) {
		usage_error("--bars draws under the report: drop --format (or --bars)");
		goto out;
	}
	if (cmd == CMD_TIMELINE && format != FMT_REPORT) {
		usage_error("timeline writes a Perfetto/Chrome trace (JSON): drop --format");
		goto out;
	}
	if (q->watch_ns && format != FMT_REPORT) {
		usage_error("--watch prints what changes: drop --format");
		goto out;
	}
	/* The bars need every rank's row: the merge gives them all, the report reads findings. */
	bars = cmd == CMD_STRAGGLERS && format == FMT_REPORT && !q->watch_ns &&
	       (q->bars == BARS_ALWAYS || (q->bars == BARS_AUTO && isatty(STDOUT_FILENO)));
	if (analysis) {
		int64_t len = q->since_ns < 0 ? 60000000000ll : q->since_ns;
		int64_t start = len ? clock_ns(CLOCK_REALTIME) - len : 0;

		long long seqs = q->max_seqs < 0 ? DEFAULT_MAX_SEQS : q->max_seqs;

		if (len)
			snprintf(window, sizeof(window), "last %s",
				 q->since_text ? q->since_text : "60s");
		else
			snprintf(window, sizeof(window), "all time");
		if (seqs)
			snprintf(window + strlen(window), sizeof(window) - strlen(window),
				 ", newest %lld seqs", seqs);
		np[nnp++] = (struct an_param){
			":max_seqs",
			seqs ? (struct wire_value){ .type = WIRE_INT, .i = seqs }
			     : (struct wire_value){ .type = WIRE_NULL },
			seqs ? "per communicator, the newest N sequence numbers (--max-seqs)"
			     : "no bound (--max-seqs 0)",
		};
		np[nnp++] = (struct an_param){
			":since_ns",
			{ .type = WIRE_INT, .i = start },
			len ? "coordinator clock now minus the window, plus each node's "
			      "clock offset"
			    : "all time",
		};
		np[nnp++] = (struct an_param){ ":job",
					       q->job ? (struct wire_value){ .type = WIRE_TEXT,
									     .p = q->job,
									     .n = strlen(q->job) }
						      : (struct wire_value){ .type = WIRE_NULL },
					       NULL };
		np[nnp++] = (struct an_param){ ":comm",
					       q->comm ? (struct wire_value){ .type = WIRE_TEXT,
									      .p = q->comm,
									      .n = strlen(q->comm) }
						       : (struct wire_value){ .type = WIRE_NULL },
					       NULL };
		mp[nmp++] = (struct an_param){
			":threshold",
			q->threshold > 0
				? (struct wire_value){ .type = WIRE_REAL, .d = q->threshold }
				: (struct wire_value){ .type = WIRE_NULL },
			NULL,
		};
		mp[nmp++] = (struct an_param){
			cmd == CMD_STRAGGLERS ? ":all_ranks" : ":all_rows",
			q->all || bars ? (struct wire_value){ .type = WIRE_INT, .i = 1 }
				       : (struct wire_value){ .type = WIRE_NULL },
			NULL,
		};
		err = an_plan_load(&plan, cmd_names[cmd], np, nnp, len ? ":since_ns" : NULL,
				   &cause);
		/* The evidence files are checked now too: a broken one fails before any fan-out. */
		if (!err && cmd == CMD_STRAGGLERS)
			err = an_plan_load(&why, "why", np, nnp, len ? ":since_ns" : NULL, &cause);
		/* A folder of files adapted before why.*.sql existed: the verdict alone. */
		if (err == -ENOENT && cmd == CMD_STRAGGLERS && plan.merge_sql) {
			if (!q->quiet)
				fprintf(stderr, "fleetq: stragglers: no evidence of why: %s\n", cause);
			free(cause);
			cause = NULL;
			an_plan_release(&why);
			err = 0;
		}
		if (err) {
			usage_error("%s", cause ? cause : strerror(-err));
			goto out;
		}
		if (q->show_sql) {
			an_plan_show(&plan, stdout, np, nnp, mp, nmp);
			if (why.node_sql)
				why_show(&why, stdout);
			ret = fflush(stdout) ? FQ_EXIT_USAGE : FQ_EXIT_OK;
			goto out;
		}
		q->sql = plan.node_sql;
	}
	/* A path that cannot be written fails before any node is asked. */
	if (cmd == CMD_TIMELINE && !(tl = timeline_open(q->output, &cause))) {
		usage_error("%s", cause);
		goto out;
	}
	if (q->sql && !strcmp(q->sql, "-")) {
		if (hostsel_reads_stdin(q->hsel, q->nhsel)) {
			usage_error("standard input cannot hold both the query (-) and the hosts "
				    "(--hosts -): put one of them in a file");
			goto out;
		}
		sql_buf = read_stdin();
		if (!sql_buf || !*sql_buf) {
			usage_error("no query on standard input");
			goto out;
		}
		q->sql = sql_buf;
	}
	/* Named parameters get their values here, or a usage error before any fan-out. */
	if (cmd == CMD_QUERY) {
		err = qparams_setup(q->params, q->nparams, q->sql, q->merge != NULL, &q->qp,
				    &qvals, &nqvals, &cause);
		if (err) {
			usage_error("%s", cause ? cause : strerror(-err));
			goto out;
		}
	}
	hl = hostlist_new();
	if (!hl) {
		usage_error("out of memory");
		goto out;
	}
	ret = load_hosts(q, hl);
	if (ret >= 0)
		goto out;
	ret = FQ_EXIT_USAGE;
	hosts = calloc(hostlist_count(hl), sizeof(*hosts));
	if (!hosts) {
		usage_error("out of memory");
		goto out;
	}
	for (size_t i = 0; i < hostlist_count(hl); i++)
		hosts[i] = hostlist_get(hl, i);
	fp.hosts = hosts;
	fp.nhosts = hostlist_count(hl);
	fp.port = conf.port;
	fp.ca = conf.ca;
	fp.cert = conf.cert;
	fp.key = conf.key;
	/* Without a folder of its own (no HOME) fleetq still runs, with full handshakes. */
	if (conf.session_cache && !q->insecure)
		sess_dir = session_dir();
	fp.session_dir = sess_dir;
	fp.insecure = q->insecure;
	fp.window = conf.fanout;
	fp.tree_width = q->tree_width;
	fp.connect_timeout_ms = (int64_t)ceil(conf.connect_timeout * 1000);
	fp.timeout_ms = (int64_t)ceil(conf.timeout * 1000);
	fp.sql = cmd == CMD_PING ? NULL : q->sql;
	fp.max_rows = q->max_rows;
	fp.max_bytes = q->max_bytes < 0 ? DEFAULT_MAX_BYTES : q->max_bytes;
	fp.progress = isatty(STDERR_FILENO);
	fp.params = cmd == CMD_QUERY ? qvals : plan.params;
	fp.nparams = cmd == CMD_QUERY ? nqvals : plan.nparams;
	fp.clock_param = plan.clock_param;
	/* Clock samples cost a round trip each: only where clocks matter by default. */
	fp.pings = q->pings >= 0 ? q->pings : cmd == CMD_QUERY ? 0 : 4;
	if (cmd == CMD_PING && !fp.pings)
		fp.pings = 1; /* a refused certificate shows only after HELLO */
	catch_sigint(&fp);
	if (cmd == CMD_GATE) {
		/* Several fan-outs (one per trace table): gate.c runs them. */
		fp.pings = q->pings >= 0 ? q->pings : 0;
		ret = gate_main(&q->gate, &fp);
		goto out;
	}
	out = output_new(STDOUT_FILENO, format == FMT_REPORT ? FQ_FMT_TABLE : format);
	if (out && q->gate.with_coverage)
		output_with_coverage(out);
	/*
	 * A plain query prints its rows straight from the wire: SELECT * FROM results
	 * would only give them back as they went in. The progress line shares a
	 * terminal with stdout: then nothing prints before the fan-out ends.
	 */
	if (out && plain) {
		dout = direct_new(out, fp.nhosts, hosts, fp.progress && isatty(STDOUT_FILENO));
	}
	fo = fanout_new(&fp, &cause);
	if (!fo) {
		usage_error("%s", cause ? cause : strerror(errno));
		goto out;
	}
	m = merge_new(&cause);
	cov = coverage_new(fp.nhosts, hosts);
	if (!m || !cov || !out || (plain && !dout)) {
		usage_error("%s", cause ? cause : "out of memory");
		goto out;
	}
	/* A closed stdout must not kill us (and SSL writes must not either). */
	signal(SIGPIPE, SIG_IGN);
	err = gather_run(fo, &fp, m, cov, dout, &cause);
	if (err) {
		usage_error("%s", cause ? cause : strerror(-err));
		goto out;
	}
	cov_json = coverage_json(cov);
	summary = coverage_summary(cov);
	common = coverage_common_failure(cov);
	if ((format != FQ_FMT_JSON && format != FQ_FMT_NDJSON) || !q->gate.with_coverage) {
		free(cov_json);
		cov_json = NULL;
	}
	switch (cmd) {
	case CMD_QUERY:
		if (dout) {
			err = direct_end(dout, cov_json);
			ret = err && err != -EPIPE
				      ? usage_error("cannot write the output: %s", strerror(-err))
				      : 0;
			break;
		}
		ret = print_results(m, out, !merge_has_table(m) ? NULL
					    : q->merge	    ? q->merge
							    : "SELECT * FROM results",
				    q->merge ? "--merge" : "merge database", cov_json, q);
		break;
	case CMD_PING:
		ret = print_ping(fo, cov, out, hosts, fp.nhosts, cov_json);
		break;
	case CMD_TIMELINE:
		err = timeline_emit(merge_has_table(m) ? merge_db(m) : NULL, plan.merge_sql, tl,
				    q->output, window, q->quiet, &short_of, &cause);
		tl = NULL;
		ret = err ? usage_error("%s", cause ? cause : strerror(-err)) : 0;
		break;
	default:
		ret = 0;
		if (merge_has_table(m)) {
			err = an_merge(merge_db(m), plan.merge_sql, mp, nmp, &cause);
			if (err) {
				ret = usage_error("%s: %s", plan.merge_origin,
						  cause ? cause : strerror(-err));
				break;
			}
			if (bars)
				bar_text = bars_take(merge_db(m), q->threshold > 0 ? q->threshold
										     : 3.5,
						     q->all);
			/* Why: the verdict stands without it, so a failure is only said. */
			free(cause);
			cause = NULL;
			if (why.node_sql && !q->watch &&
			    why_attach(merge_db(m), &why, &fp, mp, nmp, &cause) && !interrupted)
				fprintf(stderr, "fleetq: stragglers: no evidence of why: %s\n",
					cause ? cause : "out of memory");
		}
		answered = coverage_count(cov, FQ_OK) + coverage_count(cov, FQ_TRUNCATED);
		if (format == FMT_REPORT && merge_has_table(m) && answered && !q->watch)
			err = cmd == CMD_STRAGGLERS
				      ? an_report_stragglers(merge_db(m), stdout, window, &fd)
				      : an_report_netcheck(merge_db(m), stdout, window, &fd);
		else if (merge_has_table(m))
			err = an_count(merge_db(m), cmd == CMD_NETCHECK, &fd);
		else
			err = 0;
		if (!err && merge_has_table(m) && answered) {
			err = an_seen(merge_db(m), cmd == CMD_NETCHECK, &seen);
			/* A verdict over the first N rows of a node is none. */
			if (!err && coverage_limited(cov) &&
			    asprintf(&short_of, "--max-rows %lld cut the rows of %zu node%s: "
						"drop --max-rows for a verdict",
				     q->max_rows, coverage_limited(cov),
				     coverage_limited(cov) == 1 ? "" : "s") < 0)
				short_of = NULL;
			/* Short coverage says it first: the missing ranks follow from it. */
			if (!err && !short_of && !coverage_exit(cov, q->min_coverage))
				short_of = analysis_short(&seen, q, answered);
		}
		if (err) {
			ret = usage_error("cannot read the analysis: %s",
					  sqlite3_errmsg(merge_db(m)));
			break;
		}
		if (bar_text && answered)
			fputs(bar_text, stdout);
		/* a fan-out cut short by Ctrl-C would read as ranks that left */
		if (q->watch && !interrupted &&
		    watch_step(q->watch, merge_has_table(m) && answered ? merge_db(m) : NULL, cov,
			       hosts, fp.nhosts)) {
			ret = usage_error("out of memory");
			break;
		}
		if (format == FMT_REPORT && (!merge_has_table(m) || !answered) && !q->watch)
			printf("no answer: no node ran the %s query (see the coverage)\n",
			       cmd_names[cmd]);
		else if (format != FMT_REPORT)
			ret = print_results(m, out,
					    merge_has_table(m)
						    ? "SELECT * FROM temp.fq_analysis ORDER BY rowid"
						    : NULL,
					    plan.merge_origin, cov_json, q);
	}
	/* The gate's condition: over the merged rows, once they are all in. */
	if (q->fail_if && !ret && merge_has_table(m)) {
		err = gate_fail_if(merge_db(m), q->fail_if, &fail_rows, &cause);
		if (err)
			ret = usage_error("%s", cause ? cause : strerror(-err));
	} else if (q->fail_if && !ret) {
		fprintf(stderr, "fleetq: --fail-if not run: no node answered (see the coverage)\n");
	}
	/* The same failure everywhere is one message, said once and plainly. */
	if (common && !q->watch)
		fprintf(stderr, "fleetq: %s\n", common);
	/* Not under -q: it says why the exit status is 3. */
	if (short_of && (fd.hung || fd.stragglers || fd.flagged || fail_rows)) {
		free(short_of); /* a finding is a verdict on the ranks that answered */
		short_of = NULL;
	}
	if (short_of && !ret && !q->watch)
		fprintf(stderr, "fleetq: %s\n", short_of);
	if (analysis && cmd != CMD_TIMELINE && !q->quiet && !ret && !short_of) {
		if (cmd == CMD_STRAGGLERS && (fd.hung || fd.stragglers))
			fprintf(stderr, "fleetq: stragglers: %d hung, %d straggler%s (first: %s), %s\n",
				fd.hung, fd.stragglers, fd.stragglers == 1 ? "" : "s",
				fd.first ? fd.first : "?", window);
		else if (cmd == CMD_STRAGGLERS)
			fprintf(stderr, "fleetq: stragglers: none among %d ranks in %d "
					"communicator%s, %s\n",
				fd.ranks, fd.comms, fd.comms == 1 ? "" : "s", window);
		else if (fd.flagged)
			fprintf(stderr, "fleetq: netcheck: %d finding%s (first: %s), %s\n",
				fd.flagged, fd.flagged == 1 ? "" : "s", fd.first ? fd.first : "?",
				window);
		else
			fprintf(stderr, "fleetq: netcheck: nothing among %d ranks, %s\n", fd.ranks,
				window);
	}
	if (!q->quiet && summary)
		fprintf(stderr, "%s\n", summary);
	/* The same refusal of the SQL on every node that answered: the query is wrong. */
	if (!ret && cmd == CMD_QUERY && !fail_rows && coverage_user_sql_error(cov))
		ret = FQ_EXIT_USAGE;
	if (!ret)
		ret = analysis	   ? analysis_exit(&fd, cov, q->min_coverage, fail_rows > 0,
					       short_of)
		      : fail_rows ? FQ_EXIT_GATE
				  : coverage_exit(cov, q->min_coverage);
out:
	if (interrupted && ret != FQ_EXIT_USAGE && q->watch) {
		ret = EXIT_INTERRUPTED;
	} else if (interrupted && ret != FQ_EXIT_USAGE) {
		fprintf(stderr, "fleetq: interrupted: printed what arrived (nodes still pending "
				"are 'interrupted' in the coverage)\n");
		ret = EXIT_INTERRUPTED;
	}
	if (tl && tl != stdout)
		fclose(tl);
	free(bar_text);
	free(qvals);
	free(cause);
	free(sql_buf);
	free(sess_dir);
	free(summary);
	free(common);
	free(cov_json);
	an_findings_release(&fd);
	an_seen_release(&seen);
	free(short_of);
	an_plan_release(&plan);
	an_plan_release(&why);
	direct_free(dout);
	output_free(out);
	coverage_free(cov);
	merge_free(m);
	fanout_free(fo);
	free(hosts);
	hostlist_free(hl);
	config_release(&conf);
	return ret;
}

/*
 * --watch: run() every period, and watch_step() in it prints what changed. Ends on Ctrl-C
 * (130), a usage or local error (2), a reader gone from stdout, or with
 * --exit-on-straggler at the first finding (1, or 5 for a hung rank).
 */
static int watch_loop(int cmd, struct query_opts *q)
{
	int64_t start;
	int ret;

	q->watch = watch_new(stdout, q->watch_text);
	if (!q->watch)
		return usage_error("out of memory");
	q->quiet = 1; /* the changes say it: no coverage and summary lines every period */
	for (;;) {
		start = watch_now();
		ret = run(cmd, q);
		if (ret == FQ_EXIT_USAGE || interrupted || ferror(stdout))
			break;
		if (q->exit_on_straggler && (ret == FQ_EXIT_GATE || ret == FQ_EXIT_HANG))
			break;
		if (watch_sleep(start, q->watch_ns, &interrupted))
			break;
	}
	if (interrupted) {
		watch_say(q->watch, "interrupted");
		ret = EXIT_INTERRUPTED;
	} else if (q->exit_on_straggler && (ret == FQ_EXIT_GATE || ret == FQ_EXIT_HANG)) {
		watch_say(q->watch, ret == FQ_EXIT_HANG
					    ? "exit 5: a hung rank (--exit-on-straggler)"
					    : "exit 1: a straggler (--exit-on-straggler)");
	}
	watch_free(q->watch);
	q->watch = NULL;
	return ret;
}

/* Edits (insert, delete, replace) from a to b, both short. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), d[33];

	if (la > 32 || lb > 32)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		d[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = d[0];

		d[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = d[j], v = diag + (a[i - 1] != b[j - 1]);

			v = up + 1 < v ? up + 1 : v;
			v = d[j - 1] + 1 < v ? d[j - 1] + 1 : v;
			diag = up;
			d[j] = v;
		}
	}
	return d[lb];
}

/*
 * One bare word that is no SQL keyword (VACUUM, BEGIN ...) is a mistyped
 * subcommand, not a query to send to every node: 2 and a suggestion.
 * Returns -1 when sql is no such word.
 */
static int bare_word(const char *sql)
{
	size_t n = strlen(sql), best = SIZE_MAX, d;
	const char *near = NULL;

	if (!n || n > 64 || !strcmp(sql, "-") ||
	    strspn(sql, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != n ||
	    sqlite3_keyword_check(sql, (int)n))
		return -1;
	for (size_t i = 0; i < sizeof(cmd_names) / sizeof(cmd_names[0]); i++) {
		d = edit_distance(sql, cmd_names[i]);
		if (d < best) {
			best = d;
			near = cmd_names[i];
		}
	}
	if (near && best <= 2)
		return usage_error("unknown subcommand '%s'; did you mean '%s'?", sql, near);
	return usage_error("unknown subcommand '%s': see fleetq --help (a query is SQL, e.g. "
			   "\"SELECT count(*) FROM collectives\")",
			   sql);
}

int main(int argc, char **argv)
{
	struct query_opts q = { .min_coverage = 1.0, .max_bytes = -1, .pings = -1,
				.since_ns = -1, .max_seqs = -1,
				.threshold = -1, .gate = { .tolerance = -1, .mad_k = -1 } };
	const char **pos = NULL;
	size_t npos = 0;
	int ret, cmd = CMD_QUERY, first, named = 0;

	fqsql_init_process();
	config_init(&q.flags);
	/* Global options first, up to the subcommand or the SQL. */
	ret = parse_args(argc, argv, &q, -1, &pos, &npos);
	if (ret >= 0)
		goto out;
	first = optind;
	if (first < argc)
		for (size_t i = 0; i < sizeof(cmd_names) / sizeof(cmd_names[0]); i++)
			if (!strcmp(argv[first], cmd_names[i])) {
				cmd = (int)i;
				named = 1;
			}
	if (cmd == CMD_HELP) {
		fputs(usage_text, stdout);
		ret = FQ_EXIT_OK;
		goto out;
	}
	if (cmd == CMD_VERSION) {
		printf("fleetq %s\n", FLEETQ_VERSION);
		ret = FQ_EXIT_OK;
		goto out;
	}
	/* Before its options: a typo's options are the subcommand's, not the query's. */
	if (!named && first < argc && (ret = bare_word(argv[first])) >= 0)
		goto out;
	/* Then the subcommand's options, global ones included, and its arguments. */
	ret = named ? parse_args(argc - first, argv + first, &q, cmd, &pos, &npos)
		    : parse_args(argc - first + 1, argv + first - 1, &q, cmd, &pos, &npos);
	if (ret >= 0)
		goto out;
	if (q.merge && cmd != CMD_QUERY) {
		ret = usage_error("option '--merge' does not apply to '%s': see fleetq --help",
				  cmd_names[cmd]);
		goto out;
	}
	if (cmd == CMD_QUERY) {
		if (!npos) {
			ret = usage_error("no query: pass the SQL to run, e.g. fleetq -w "
					  "'gpu[01-04]' \"SELECT count(*) FROM collectives\"");
			goto out;
		}
		if (npos > 1) {
			ret = usage_error("one query at a time: quote the SQL (extra argument '%s')",
					  pos[1]);
			goto out;
		}
		q.sql = pos[0];
	} else if (npos) {
		ret = usage_error("'%s' takes no arguments (extra '%s'): see fleetq --help",
				  cmd_names[cmd], pos[0]);
		goto out;
	}
	if (q.exit_on_straggler && !q.watch_ns) {
		ret = usage_error("--exit-on-straggler goes with --watch (without it, fleetq "
				  "stragglers exits 1 on a straggler anyway)");
		goto out;
	}
	ret = q.watch_ns ? watch_loop(cmd, &q) : run(cmd, &q);
out:
	free(pos);
	free(q.hsel);
	free(q.params);
	free(q.qp);
	free(q.comm);
	free(q.gate.metrics);
	config_release(&q.flags);
	return ret;
}
