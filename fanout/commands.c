/* SPDX-License-Identifier: MIT */
/*
 * fleetq's subcommands. Each is an entry of commands[] (at the end): a prepare step of
 * its own (its SQL, its plan, its checks), then one shared step from the options to the
 * fan-out's parameters (run_setup()), then its own run function, which for all but the
 * gate is the shared fan-out (run_fanout()), its own output, and the shared ending
 * (run_finish(): --fail-if, the summaries, the exit status). The gate runs its own
 * fan-outs (gate.c). query, ping and gate are here; the analyses, which share their
 * plan, window and verdicts, are in cmd_analysis.c.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis.h"
#include "cli.h"
#include "commands_int.h"
#include "clock.h"
#include "compat.h"
#include "coverage.h"
#include "direct.h"
#include "fanout.h"
#include "gather.h"
#include "hostlist.h"
#include "merge.h"
#include "output.h"
#include "strbuf.h"
#include "watch.h"

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
int print_results(struct merge *m, struct output *out, const char *select_sql,
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

/* The shells' status for a command ended by SIGINT: the same whether one Ctrl-C or two. */
#define EXIT_INTERRUPTED 130

volatile sig_atomic_t fq_interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	fq_interrupted = 1;
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
		fp->interrupt = &fq_interrupted;
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

static int prepare_query(struct run *r)
{
	struct query_opts *q = r->q;
	int err;

	r->plain = !q->merge && !q->fail_if;
	if (q->sql && !strcmp(q->sql, "-")) {
		if (hostsel_reads_stdin(q->hsel, q->nhsel))
			return usage_error("standard input cannot hold both the query (-) and the "
					   "hosts (--hosts -): put one of them in a file");
		r->sql_buf = read_stdin();
		if (!r->sql_buf || !*r->sql_buf)
			return usage_error("no query on standard input");
		q->sql = r->sql_buf;
	}
	/* Named parameters get their values here, or a usage error before any fan-out. */
	err = qparams_setup(q->params, q->nparams, q->sql, q->merge != NULL, &q->qp, &r->qvals,
			    &r->nqvals, &r->cause);
	if (err)
		return usage_error("%s", r->cause ? r->cause : strerror(-err));
	return -1;
}

static int prepare_gate(struct run *r)
{
	struct query_opts *q = r->q;

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
	if (q->show_sql)
		return gate_show_sql(&q->gate);
	return -1;
}

/*
 * The step every subcommand shares, from the options to the fan-out's parameters: the
 * configuration, the output format, the subcommand's own preparation, the hosts. -1 to
 * go on, or an exit status.
 */
static int run_setup(struct run *r)
{
	const struct cmd *c = r->c;
	struct query_opts *q = r->q;
	struct fanout_params *fp = &r->fp;
	int ret, err;

	err = config_load(&r->conf, NULL, &r->cause);
	if (err)
		return usage_error("%s", r->cause ? r->cause : strerror(-err));
	if (config_overlay(&r->conf, &q->flags))
		return usage_error("out of memory");
	config_defaults(&r->conf);
	/* Certificates named on the command line are meant to be used: say they are not. */
	if (q->insecure && (q->flags.ca || q->flags.cert || q->flags.key))
		return usage_error("--insecure talks plaintext: --%s does not apply; drop one or "
				   "the other",
				   q->flags.ca ? "ca" : q->flags.cert ? "cert" : "key");
	if (q->junit && !(c->flags & CMD_JUNIT))
		return usage_error("--format junit applies to 'gate' only: use table, csv, tsv, "
				   "json or ndjson");
	if (!(c->flags & CMD_USER_SQL))
		/* Reports are for people; machine formats only when asked for. */
		r->format = q->flags.format ? output_format_parse(q->flags.format) : FMT_REPORT;
	else
		r->format = r->conf.format	   ? output_format_parse(r->conf.format)
			    : isatty(STDOUT_FILENO) ? FQ_FMT_TABLE
						    : FQ_FMT_TSV;
	if (c->prepare && (ret = c->prepare(r)) >= 0)
		return ret;
	r->hl = hostlist_new();
	if (!r->hl)
		return usage_error("out of memory");
	ret = load_hosts(q, r->hl);
	if (ret >= 0)
		return ret;
	r->hosts = calloc(hostlist_count(r->hl), sizeof(*r->hosts));
	if (!r->hosts)
		return usage_error("out of memory");
	for (size_t i = 0; i < hostlist_count(r->hl); i++)
		r->hosts[i] = hostlist_get(r->hl, i);
	fp->hosts = r->hosts;
	fp->nhosts = hostlist_count(r->hl);
	fp->port = r->conf.port;
	fp->ca = r->conf.ca;
	fp->cert = r->conf.cert;
	fp->key = r->conf.key;
	/* Without a folder of its own (no HOME) fleetq still runs, with full handshakes. */
	if (r->conf.session_cache && !q->insecure)
		r->sess_dir = session_dir();
	fp->session_dir = r->sess_dir;
	fp->insecure = q->insecure;
	fp->window = r->conf.fanout;
	fp->tree_width = q->tree_width;
	fp->connect_timeout_ms = (int64_t)ceil(r->conf.connect_timeout * 1000);
	fp->timeout_ms = (int64_t)ceil(r->conf.timeout * 1000);
	fp->sql = q->sql; /* ping: NULL, HELLO and clocks only */
	fp->max_rows = q->max_rows;
	fp->max_bytes = q->max_bytes < 0 ? DEFAULT_MAX_BYTES : q->max_bytes;
	fp->progress = isatty(STDERR_FILENO);
	fp->params = c->flags & CMD_USER_SQL ? r->qvals : r->plan.params;
	fp->nparams = c->flags & CMD_USER_SQL ? r->nqvals : r->plan.nparams;
	fp->clock_param = r->plan.clock_param;
	/* Clock samples cost a round trip each: only where clocks matter by default. */
	fp->pings = q->pings >= 0 ? q->pings : c->pings;
	catch_sigint(fp);
	return -1;
}

int run_fanout(struct run *r)
{
	struct query_opts *q = r->q;
	int64_t started;
	int err;

	r->out = output_new(STDOUT_FILENO, r->format == FMT_REPORT ? FQ_FMT_TABLE : r->format);
	if (r->out && q->gate.with_coverage)
		output_with_coverage(r->out);
	/*
	 * A plain query prints its rows straight from the wire: SELECT * FROM results
	 * would only give them back as they went in. The progress line shares a
	 * terminal with stdout: then nothing prints before the fan-out ends.
	 */
	if (r->out && r->plain) {
		r->dout = direct_new(r->out, r->fp.nhosts, r->hosts,
				     r->fp.progress && isatty(STDOUT_FILENO));
	}
	r->fo = fanout_new(&r->fp, &r->cause);
	if (!r->fo)
		return usage_error("%s", r->cause ? r->cause : strerror(errno));
	r->m = merge_new(&r->cause);
	r->cov = coverage_new(r->fp.nhosts, r->hosts);
	if (!r->m || !r->cov || !r->out || (r->plain && !r->dout))
		return usage_error("%s", r->cause ? r->cause : "out of memory");
	/* A closed stdout must not kill us (and SSL writes must not either). */
	signal(SIGPIPE, SIG_IGN);
	started = clock_ns(CLOCK_MONOTONIC);
	err = gather_run(r->fo, &r->fp, r->m, r->cov, r->dout, &r->cause);
	/* an analysis reads tables older agents lack: those nodes are asked again */
	free(r->compat_note);
	r->compat_note = NULL;
	if (!err && r->c->flags & CMD_ANALYSIS && r->fp.sql)
		err = compat_retry(&r->fp, started, r->m, r->cov, &r->compat_note, &r->cause);
	if (err)
		return usage_error("%s", r->cause ? r->cause : strerror(-err));
	r->cov_json = coverage_json(r->cov);
	r->summary = coverage_summary(r->cov);
	r->common = coverage_common_failure(r->cov);
	if ((r->format != FQ_FMT_JSON && r->format != FQ_FMT_NDJSON) || !q->gate.with_coverage) {
		free(r->cov_json);
		r->cov_json = NULL;
	}
	return -1;
}

int run_finish(struct run *r, int ret)
{
	const struct cmd *c = r->c;
	struct query_opts *q = r->q;
	struct merge *m = r->m;
	int err;

	/* The gate's condition: over the merged rows, once they are all in. */
	if (q->fail_if && !ret && merge_has_table(m)) {
		err = gate_fail_if(merge_db(m), q->fail_if, &r->fail_rows, &r->cause);
		if (err)
			ret = usage_error("%s", r->cause ? r->cause : strerror(-err));
	} else if (q->fail_if && !ret) {
		fprintf(stderr, "fleetq: --fail-if not run: no node answered (see the coverage)\n");
	}
	/* The same failure everywhere is one message, said once and plainly. */
	if (r->common && !q->watch)
		fprintf(stderr, "fleetq: %s\n", r->common);
	/* Not under -q: it says why the exit status is 3. */
	if (r->short_of && (r->fd.hung || r->fd.stragglers || r->fd.flagged || r->fail_rows)) {
		free(r->short_of); /* a finding is a verdict on the ranks that answered */
		r->short_of = NULL;
	}
	if (r->short_of && !ret && !q->watch)
		fprintf(stderr, "fleetq: %s\n", r->short_of);
	if (c->verdict && !q->quiet && !ret && !r->short_of)
		c->verdict(r);
	if (!q->quiet && r->compat_note)
		fprintf(stderr, "fleetq: %s\n", r->compat_note);
	if (!q->quiet && r->summary)
		fprintf(stderr, "%s\n", r->summary);
	/* The same refusal of the SQL on every node that answered: the query is wrong. */
	if (!ret && c->flags & CMD_USER_SQL && !r->fail_rows && coverage_user_sql_error(r->cov))
		ret = FQ_EXIT_USAGE;
	if (!ret)
		ret = c->flags & CMD_ANALYSIS
			      ? analysis_exit(&r->fd, r->cov, q->min_coverage, r->fail_rows > 0,
					      r->short_of)
		      : r->fail_rows ? FQ_EXIT_GATE
				     : coverage_exit(r->cov, q->min_coverage);
	return ret;
}

static int run_query(struct run *r)
{
	struct query_opts *q = r->q;
	struct merge *m;
	int ret, err;

	if ((ret = run_fanout(r)) >= 0)
		return ret;
	m = r->m;
	if (r->dout) {
		err = direct_end(r->dout, r->cov_json);
		ret = err && err != -EPIPE
			      ? usage_error("cannot write the output: %s", strerror(-err))
			      : 0;
	} else {
		ret = print_results(m, r->out, !merge_has_table(m) ? NULL
					       : q->merge	  ? q->merge
								  : "SELECT * FROM results",
				    q->merge ? "--merge" : "merge database", r->cov_json, q);
	}
	return run_finish(r, ret);
}

static int run_ping(struct run *r)
{
	int ret;

	if (!r->fp.pings)
		r->fp.pings = 1; /* a refused certificate shows only after HELLO */
	if ((ret = run_fanout(r)) >= 0)
		return ret;
	ret = print_ping(r->fo, r->cov, r->out, r->hosts, r->fp.nhosts, r->cov_json);
	return run_finish(r, ret);
}

static int run_gate(struct run *r)
{
	return gate_main(&r->q->gate, &r->fp);
}

static void run_release(struct run *r)
{
	if (r->tl && r->tl != stdout)
		fclose(r->tl);
	free(r->bar_text);
	free(r->near_text);
	free(r->qvals);
	free(r->cause);
	free(r->sql_buf);
	free(r->sess_dir);
	free(r->summary);
	free(r->compat_note);
	free(r->common);
	free(r->cov_json);
	an_findings_release(&r->fd);
	an_seen_release(&r->seen);
	free(r->short_of);
	an_plan_release(&r->plan);
	an_plan_release(&r->why);
	direct_free(r->dout);
	output_free(r->out);
	coverage_free(r->cov);
	merge_free(r->m);
	fanout_free(r->fo);
	free(r->hosts);
	hostlist_free(r->hl);
	config_release(&r->conf);
}

int cmd_run(const struct cmd *c, struct query_opts *q)
{
	struct run r = { .c = c, .q = q };
	int ret;

	config_init(&r.conf);
	ret = run_setup(&r);
	if (ret < 0)
		ret = c->run(&r);
	/* stragglers over a default span cut short: once more over the seqs it asked for */
	if (r.widen_to > 0 && !fq_interrupted) {
		long long to = r.widen_to, steps = r.widen_steps;

		run_release(&r);
		r = (struct run){ .c = c, .q = q };
		config_init(&r.conf);
		q->max_seqs = to;
		q->widened_from = DEFAULT_MAX_SEQS;
		q->widened_steps = steps;
		ret = run_setup(&r);
		if (ret < 0)
			ret = c->run(&r);
		q->max_seqs = -1;
		q->widened_from = q->widened_steps = 0;
	}
	if (fq_interrupted && ret != FQ_EXIT_USAGE && q->watch) {
		ret = EXIT_INTERRUPTED;
	} else if (fq_interrupted && ret != FQ_EXIT_USAGE) {
		fprintf(stderr, "fleetq: interrupted: printed what arrived (nodes still pending "
				"are 'interrupted' in the coverage)\n");
		ret = EXIT_INTERRUPTED;
	}
	run_release(&r);
	return ret;
}

/*
 * --watch: cmd_run() every period, and watch_step() in it prints what changed. Ends on
 * Ctrl-C (130), a usage or local error (2), a reader gone from stdout, or with
 * --exit-on-straggler at the first finding (1, or 5 for a hung rank).
 */
int cmd_watch(const struct cmd *c, struct query_opts *q)
{
	int64_t start;
	int ret;

	q->watch = watch_new(stdout, q->watch_text);
	if (!q->watch)
		return usage_error("out of memory");
	q->quiet = 1; /* the changes say it: no coverage and summary lines every period */
	for (;;) {
		start = watch_now();
		ret = cmd_run(c, q);
		if (ret == FQ_EXIT_USAGE || fq_interrupted || ferror(stdout))
			break;
		if (q->exit_on_straggler && (ret == FQ_EXIT_GATE || ret == FQ_EXIT_HANG))
			break;
		if (watch_sleep(start, q->watch_ns, &fq_interrupted))
			break;
	}
	if (fq_interrupted) {
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

/* Indexed by enum cmd_id: main.c's opt_cmds() says which options each one takes. */
const struct cmd commands[NCMDS] = {
	[CMD_QUERY] = { .name = "query", .prepare = prepare_query, .run = run_query,
			.pings = 0, .flags = CMD_USER_SQL },
	[CMD_STRAGGLERS] = { .name = "stragglers", .prepare = prepare_stragglers,
			     .run = run_stragglers, .verdict = verdict_stragglers, .pings = 4,
			     .flags = CMD_ANALYSIS },
	[CMD_NETCHECK] = { .name = "netcheck", .prepare = prepare_netcheck,
			   .run = run_netcheck, .verdict = verdict_netcheck, .pings = 4,
			   .flags = CMD_ANALYSIS },
	[CMD_PING] = { .name = "ping", .run = run_ping, .pings = 4 },
	/* The gate's own fan-outs take HELLO's clock only unless --pings says otherwise. */
	[CMD_GATE] = { .name = "gate", .prepare = prepare_gate, .run = run_gate, .pings = 0,
		       .flags = CMD_JUNIT },
	[CMD_HELP] = { .name = "help", .now = cmd_help },
	[CMD_VERSION] = { .name = "version", .now = cmd_version },
	/* its window and node SQL are an analysis's */
	[CMD_TIMELINE] = { .name = "timeline", .prepare = prepare_timeline, .run = run_timeline,
			   .pings = 4, .flags = CMD_ANALYSIS },
};
