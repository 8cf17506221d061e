/* SPDX-License-Identifier: MIT */
/*
 * fleetq: send one SQL query to every node's agentd, merge the answers and
 * say which nodes answered. Subcommands go through commands[]; the first
 * argument after the global options that names none is the query itself.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bars.h"
#include "cli.h"
#include "config.h"
#include "coverage.h"
#include "fqsql.h"
#include "gate.h"
#include "hostsel.h"
#include "params.h"
#include "strbuf.h"

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
	"                           node reads, whatever --since says; stragglers asks again\n"
	"                           over up to 16000 when the default's span was too few steps\n"
	"                           to name the closest rank\n"
	"  --threshold Z            robust z-score that counts as deviant (default 3.5)\n"
	"  --min-effect PCT         stragglers: name a rank only when its peers lost at least\n"
	"                           PCT% of the span to it (default 3; 5 for a pair of ranks)\n"
	"  --effect-steps N         stragglers: over a span of fewer than N steps the bar grows\n"
	"                           by sqrt(N / steps) (default 100; 0: a fixed bar)\n"
	"  --busy-idle PCT          stragglers: the compute stream (CUDA_INJECTION64_PATH=\n"
	"                           libfleetq-cupti.so) names a rank only where its own GPU ran\n"
	"                           no compute kernel for at most PCT% of the span (default 15),\n"
	"                           or where its peers' kernels waited for it and nothing else\n"
	"                           names it\n"
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
	"     also no rank in the window (no such --job, an old trace), fewer ranks of a\n"
	"     communicator than it declares (some of the job's nodes), or fewer than 16\n"
	"     collectives a rank (an idle stretch, --max-seqs under 16, a pipeline of one\n"
	"     rank a stage: send/recv and a barrier or two)\n"
	"  0  every node answered (or at least --min-coverage of them), nothing found\n"
	"  130  interrupted: the first Ctrl-C prints what arrived and exits 130, a second\n"
	"     one ends fleetq at once\n"
	"\n"
	"See fleetq(1).\n";

int usage_error(const char *fmt, ...)
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
	OPT_MIN_EFFECT,
	OPT_EFFECT_STEPS,
	OPT_BUSY_IDLE,
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
	{ "min-effect", required_argument, NULL, OPT_MIN_EFFECT },
	{ "effect-steps", required_argument, NULL, OPT_EFFECT_STEPS },
	{ "busy-idle", required_argument, NULL, OPT_BUSY_IDLE },
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
	case OPT_MIN_EFFECT:
	case OPT_EFFECT_STEPS:
	case OPT_BUSY_IDLE:
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

int push_hostsel(struct query_opts *q, char kind, const char *text)
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
				opt_name(c), commands[cmd].name);
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
		case OPT_MIN_EFFECT:
			errno = 0;
			q->min_effect = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(q->min_effect > 0) ||
			    q->min_effect >= 100)
				return usage_error("--min-effect: invalid share '%s': use a percentage "
						   "of the span above 0 and below 100, e.g. 3",
						   optarg);
			break;
		case OPT_EFFECT_STEPS:
			errno = 0;
			q->effect_steps = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(q->effect_steps >= 0) ||
			    q->effect_steps > 1e6)
				return usage_error("--effect-steps: invalid count '%s': use a number of "
						   "steps from 0 (a fixed bar) to 1000000, e.g. 100",
						   optarg);
			break;
		case OPT_BUSY_IDLE:
			errno = 0;
			q->busy_idle = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(q->busy_idle >= 0) ||
			    q->busy_idle > 100)
				return usage_error("--busy-idle: invalid share '%s': use a percentage "
						   "of the span from 0 to 100, e.g. 15",
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
	for (size_t i = 0; i < NCMDS; i++) {
		d = edit_distance(sql, commands[i].name);
		if (d < best) {
			best = d;
			near = commands[i].name;
		}
	}
	if (near && best <= 2)
		return usage_error("unknown subcommand '%s'; did you mean '%s'?", sql, near);
	return usage_error("unknown subcommand '%s': see fleetq --help (a query is SQL, e.g. "
			   "\"SELECT count(*) FROM collectives\")",
			   sql);
}

/*
 * The subcommand's arguments (the query's SQL, none for the others) and the options that
 * only make sense together. -1 to go on, or an exit status.
 */
static int cmd_args(const struct cmd *c, struct query_opts *q, const char **pos, size_t npos)
{
	if (q->merge && !(c->flags & CMD_USER_SQL))
		return usage_error("option '--merge' does not apply to '%s': see fleetq --help",
				   c->name);
	if (c->flags & CMD_USER_SQL) {
		if (!npos)
			return usage_error("no query: pass the SQL to run, e.g. fleetq -w "
					   "'gpu[01-04]' \"SELECT count(*) FROM collectives\"");
		if (npos > 1)
			return usage_error("one query at a time: quote the SQL (extra argument "
					   "'%s')",
					   pos[1]);
		q->sql = pos[0];
	} else if (npos) {
		return usage_error("'%s' takes no arguments (extra '%s'): see fleetq --help",
				   c->name, pos[0]);
	}
	if (q->exit_on_straggler && !q->watch_ns)
		return usage_error("--exit-on-straggler goes with --watch (without it, fleetq "
				   "stragglers exits 1 on a straggler anyway)");
	return -1;
}

int cmd_help(void)
{
	fputs(usage_text, stdout);
	return FQ_EXIT_OK;
}

int cmd_version(void)
{
	printf("fleetq %s\n", FLEETQ_VERSION);
	return FQ_EXIT_OK;
}

int main(int argc, char **argv)
{
	struct query_opts q = { .min_coverage = 1.0, .max_bytes = -1, .pings = -1,
				.since_ns = -1, .max_seqs = -1,
				.threshold = -1, .min_effect = -1, .effect_steps = -1,
				.busy_idle = -1,
				.gate = { .tolerance = -1, .mad_k = -1 } };
	const char **pos = NULL;
	size_t npos = 0;
	const struct cmd *c;
	int ret, cmd = CMD_QUERY, first, named = 0;

	fqsql_init_process();
	config_init(&q.flags);
	/* Global options first, up to the subcommand or the SQL. */
	ret = parse_args(argc, argv, &q, -1, &pos, &npos);
	if (ret >= 0)
		goto out;
	first = optind;
	if (first < argc)
		for (size_t i = 0; i < NCMDS; i++)
			if (!strcmp(argv[first], commands[i].name)) {
				cmd = (int)i;
				named = 1;
			}
	c = &commands[cmd];
	if (c->now) {
		ret = c->now();
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
	ret = cmd_args(c, &q, pos, npos);
	if (ret >= 0)
		goto out;
	ret = q.watch_ns ? cmd_watch(c, &q) : cmd_run(c, &q);
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
