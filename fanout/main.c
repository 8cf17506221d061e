/* SPDX-License-Identifier: MIT */
/*
 * fleetq: send one SQL query to every node's agentd, merge the answers and
 * say which nodes answered. Subcommands go through commands[]; a first
 * argument that names none is the query itself.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "coverage.h"
#include "fanout.h"
#include "hostlist.h"
#include "merge.h"
#include "output.h"
#include "strbuf.h"

#ifndef FLEETQ_VERSION
#define FLEETQ_VERSION "0"
#endif

static const char usage_text[] =
	"usage: fleetq [OPTIONS] \"SQL\"\n"
	"       fleetq help | version\n"
	"\n"
	"Sends one read-only SQL query to agentd on every node, merges the rows into\n"
	"a table 'results' (first column: node) and prints them, or the result of\n"
	"--merge over them. A coverage summary on stderr says which nodes answered.\n"
	"SQL \"-\" reads the query from standard input.\n"
	"\n"
	"hosts:\n"
	"  --hosts FILE             one host[:port] or hostlist expression per line, # comments\n"
	"  -w HOSTLIST              e.g. gpu[01-16,20], r[1-2]n[01-02], a,b[1-3], [::1]:7077\n"
	"                           (neither: $SLURM_JOB_NODELIST)\n"
	"  --port N                 agent port when a host names none (default 7077)\n"
	"\n"
	"security:\n"
	"  --ca FILE                CA certificate that signed the agents' certificates\n"
	"  --cert FILE              client certificate\n"
	"  --key FILE               client private key\n"
	"  --insecure               plaintext, to loopback agents started with --insecure only\n"
	"\n"
	"fan-out:\n"
	"  --fanout N               connections in flight at once (default 128)\n"
	"  --connect-timeout SEC    per node, until the agent's HELLO (default 5)\n"
	"  --timeout SEC            deadline for the whole fan-out (default 30)\n"
	"  --max-rows N             row limit per node, sent to the agents\n"
	"\n"
	"results:\n"
	"  --merge SQL              run SQL over the merged table 'results' and print that\n"
	"  --format FMT             table, csv, tsv, json, ndjson\n"
	"                           (default: table on a terminal, else tsv)\n"
	"  --min-coverage FRACTION  fewest nodes that must answer fully, 0..1 (default 1.0)\n"
	"  -q, --quiet              no coverage summary on stderr\n"
	"  -h, --help               this text\n"
	"  --version                print the version\n"
	"\n"
	"config file: $FLEETQ_CONFIG, else ~/.config/fleetq/config, else\n"
	"/etc/fleetq/fleetq.conf; 'key = value' lines for ca, cert, key, port, fanout,\n"
	"timeout, connect_timeout, format. Flags win.\n"
	"\n"
	"exit status:\n"
	"  0  every node answered (or at least --min-coverage of them)\n"
	"  1  a gate tripped (reserved for analyses)\n"
	"  2  usage, configuration or local error (also a failing --merge query)\n"
	"  3  coverage below --min-coverage (timeouts, unreachable, SQL errors, truncation)\n"
	"  4  TLS or authentication failed on at least one node (wins over 3)\n"
	"\n"
	"See fleetq(1).\n";

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("fleetq: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
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
	OPT_INSECURE,
	OPT_VERSION,
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
	{ "insecure", no_argument, NULL, OPT_INSECURE },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

struct query_opts {
	struct fq_config flags;
	const char **host_files, **host_exprs;
	size_t nfiles, nexprs;
	const char *merge;
	double min_coverage;
	long long max_rows;
	int insecure, quiet;
	const char *sql;
};

static int push(const char ***arr, size_t *n, const char *s)
{
	const char **a = realloc(*arr, (*n + 1) * sizeof(*a));

	if (!a)
		return -ENOMEM;
	a[(*n)++] = s;
	*arr = a;
	return 0;
}

/* Returns -1 to go on, else an exit status. */
static int parse_args(int argc, char **argv, struct query_opts *q)
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
	optind = 1;
	while ((c = getopt_long(argc, argv, ":w:qh", long_opts, NULL)) != -1) {
		switch (c) {
		case 'w':
			if (push(&q->host_exprs, &q->nexprs, optarg))
				return usage_error("out of memory");
			break;
		case OPT_HOSTS:
			if (push(&q->host_files, &q->nfiles, optarg))
				return usage_error("out of memory");
			break;
		case OPT_CA:
		case OPT_CERT:
		case OPT_KEY:
		case OPT_PORT:
		case OPT_FANOUT:
		case OPT_CONNECT_TIMEOUT:
		case OPT_TIMEOUT:
		case OPT_FORMAT:
			err = config_set(&q->flags, keys[c - OPT_HOSTS], optarg, &cause);
			if (err) {
				usage_error("--%s: %s", long_opts[c - OPT_HOSTS].name,
					    cause ? cause : strerror(-err));
				free(cause);
				return FQ_EXIT_USAGE;
			}
			break;
		case OPT_MERGE:
			q->merge = optarg;
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
		case OPT_INSECURE:
			q->insecure = 1;
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
	if (optind == argc)
		return usage_error("no query: pass the SQL to run, e.g. fleetq -w gpu[01-04] "
				   "\"SELECT count(*) FROM collectives\"");
	if (optind + 1 < argc)
		return usage_error("one query at a time: quote the SQL (extra argument '%s')",
				   argv[optind + 1]);
	q->sql = argv[optind];
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
	const char *env;
	char *cause = NULL;
	int err = 0;

	for (size_t i = 0; i < q->nfiles && !err; i++)
		err = hostlist_read_file(hl, q->host_files[i], &cause);
	for (size_t i = 0; i < q->nexprs && !err; i++)
		err = hostlist_push(hl, q->host_exprs[i], &cause);
	if (!err && !q->nfiles && !q->nexprs) {
		env = getenv("SLURM_JOB_NODELIST");
		if (!env || !*env)
			return usage_error("no hosts: pass --hosts FILE or -w HOSTLIST, or run "
					   "inside a Slurm job (SLURM_JOB_NODELIST)");
		err = hostlist_push(hl, env, &cause);
	}
	if (err) {
		usage_error("%s", cause ? cause : strerror(-err));
		free(cause);
		return FQ_EXIT_USAGE;
	}
	if (!hostlist_count(hl))
		return usage_error("no hosts: the hosts file%s named none",
				   q->nfiles > 1 ? "s" : "");
	return -1;
}

/* Prints the merged rows, or the --merge query's. Returns 0 or an exit status. */
static int print_results(struct merge *m, struct output *out, const char *merge_sql,
			 const char *cov_json)
{
	sqlite3 *db = merge_db(m);
	sqlite3_stmt *st = NULL;
	struct wire_value *vals = NULL;
	const char **names = NULL;
	int ncols = 0, rc, ret = 0, err = 0;

	if (merge_has_table(m)) {
		if (sqlite3_prepare_v2(db, merge_sql ? merge_sql : "SELECT * FROM results", -1, &st,
				       NULL) != SQLITE_OK) {
			usage_error(
				"--merge: %s: fix the merge query (it runs over table 'results')",
				sqlite3_errmsg(db));
			ret = FQ_EXIT_USAGE;
			goto out;
		}
		ncols = sqlite3_column_count(st);
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
		for (int i = 0; i < ncols; i++) {
			struct wire_value *v = &vals[i];

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
		err = output_row(out, vals);
	}
	if (!err && st && rc != SQLITE_DONE) {
		usage_error("%s: %s", merge_sql ? "--merge" : "merge database", sqlite3_errmsg(db));
		ret = FQ_EXIT_USAGE;
	}
	if (!err)
		err = output_end(out, cov_json);
	if (err && err != -EPIPE) {
		usage_error("cannot write the output: %s", strerror(-err));
		ret = FQ_EXIT_USAGE;
	}
out:
	sqlite3_finalize(st);
	free(vals);
	free(names);
	return ret;
}

static int do_query(int argc, char **argv)
{
	struct query_opts q = { .min_coverage = 1.0 };
	struct fq_config conf;
	struct fanout_params fp = { 0 };
	struct hostlist *hl = NULL;
	struct fanout *fo = NULL;
	struct merge *m = NULL;
	struct coverage *cov = NULL;
	struct output *out = NULL;
	const char **hosts = NULL;
	char *cause = NULL, *sql_buf = NULL, *summary = NULL, *common = NULL, *cov_json = NULL;
	int ret, err, format;

	config_init(&q.flags);
	config_init(&conf);
	ret = parse_args(argc, argv, &q);
	if (ret >= 0)
		goto out;
	ret = FQ_EXIT_USAGE;
	err = config_load(&conf, NULL, &cause);
	if (err) {
		usage_error("%s", cause ? cause : strerror(-err));
		goto out;
	}
	if (config_overlay(&conf, &q.flags)) {
		usage_error("out of memory");
		goto out;
	}
	config_defaults(&conf);
	format = conf.format		 ? output_format_parse(conf.format)
		 : isatty(STDOUT_FILENO) ? FQ_FMT_TABLE
					 : FQ_FMT_TSV;
	if (!strcmp(q.sql, "-")) {
		sql_buf = read_stdin();
		if (!sql_buf || !*sql_buf) {
			usage_error("no query on standard input");
			goto out;
		}
		q.sql = sql_buf;
	}
	hl = hostlist_new();
	if (!hl) {
		usage_error("out of memory");
		goto out;
	}
	ret = load_hosts(&q, hl);
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
	fp.insecure = q.insecure;
	fp.window = conf.fanout;
	fp.connect_timeout_ms = (int64_t)ceil(conf.connect_timeout * 1000);
	fp.timeout_ms = (int64_t)ceil(conf.timeout * 1000);
	fp.sql = q.sql;
	fp.max_rows = q.max_rows;
	fp.progress = isatty(STDERR_FILENO);
	fo = fanout_new(&fp, &cause);
	if (!fo) {
		usage_error("%s", cause ? cause : strerror(errno));
		goto out;
	}
	m = merge_new(&cause);
	cov = coverage_new(fp.nhosts, hosts);
	out = output_new(STDOUT_FILENO, format);
	if (!m || !cov || !out) {
		usage_error("%s", cause ? cause : "out of memory");
		goto out;
	}
	/* A closed stdout must not kill us (and SSL writes must not either). */
	signal(SIGPIPE, SIG_IGN);
	err = fanout_run(fo, m, cov, &cause);
	if (err) {
		usage_error("%s", cause ? cause : strerror(-err));
		goto out;
	}
	cov_json = coverage_json(cov);
	summary = coverage_summary(cov);
	common = coverage_common_failure(cov);
	ret = print_results(m, out, q.merge,
			    format == FQ_FMT_JSON || format == FQ_FMT_NDJSON ? cov_json : NULL);
	/* The same failure everywhere is one message, said once and plainly. */
	if (common)
		fprintf(stderr, "fleetq: %s\n", common);
	if (!q.quiet && summary)
		fprintf(stderr, "%s\n", summary);
	if (!ret)
		ret = coverage_exit(cov, q.min_coverage);
out:
	free(cause);
	free(sql_buf);
	free(summary);
	free(common);
	free(cov_json);
	output_free(out);
	coverage_free(cov);
	merge_free(m);
	fanout_free(fo);
	free(hosts);
	hostlist_free(hl);
	free(q.host_files);
	free(q.host_exprs);
	config_release(&q.flags);
	config_release(&conf);
	return ret;
}

static int do_help(int argc, char **argv)
{
	fputs(usage_text, stdout);
	return FQ_EXIT_OK;
}

static int do_version(int argc, char **argv)
{
	printf("fleetq %s\n", FLEETQ_VERSION);
	return FQ_EXIT_OK;
}

/* bpftool style: later analyses ("stragglers", "ping", "gate") plug in here. */
static const struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
} commands[] = {
	{ "query", do_query },
	{ "help", do_help },
	{ "version", do_version },
};

int main(int argc, char **argv)
{
	if (argc > 1)
		for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
			if (!strcmp(argv[1], commands[i].name))
				return commands[i].fn(argc - 1, argv + 1);
	return do_query(argc, argv);
}
