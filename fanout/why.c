/* SPDX-License-Identifier: MIT */
#include "why.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "compat.h"
#include "coverage.h"
#include "gather.h"
#include "merge.h"
#include "rowcol.h"
#include "strbuf.h"

/* The verdict's rows and the evidence's meet on these; the rest of the evidence is added. */
static const char *const keys[] = { "comm_hash", "node", "rank", "pid" };

static int is_key(const char *name)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strcmp(name, keys[i]))
			return 1;
	return 0;
}

void why_show(const struct an_plan *p, FILE *f)
{
	size_t len;

	fprintf(f, "\n-- evidence (a second fan-out, when a rank was named), node SQL: %s\n"
		   "-- parameters: the same values as the verdict's node SQL\n",
		p->node_origin);
	len = strlen(p->node_sql);
	fprintf(f, "%s%s", p->node_sql, len && p->node_sql[len - 1] != '\n' ? "\n" : "");
	fprintf(f, "\n-- evidence merge SQL, run over its rows (table results): %s\n",
		p->merge_origin);
	len = strlen(p->merge_sql);
	fprintf(f, "%s%s", p->merge_sql, len && p->merge_sql[len - 1] != '\n' ? "\n" : "");
}

/* Is there a verdict row that evidence could explain? A user's merge file may have no verdict. */
static int wanted(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	int yes = 0;

	if (sqlite3_prepare_v2(db, "SELECT 1 FROM temp.fq_analysis WHERE verdict NOT IN "
				   "('hung', 'desync') LIMIT 1", -1, &st, NULL) == SQLITE_OK)
		yes = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	return yes;
}

/* Copies from's temp.fq_analysis into to's temp.fq_why (made here). */
static int copy_rows(sqlite3 *from, sqlite3 *to, char **cause)
{
	sqlite3_stmt *src = NULL, *ins = NULL;
	struct strbuf mk = STRBUF_INIT, in = STRBUF_INIT;
	int err = -ENOMEM, n, rc;

	if (sqlite3_prepare_v2(from, "SELECT * FROM temp.fq_analysis", -1, &src, NULL)) {
		err = fq_fail(cause, -EIO, "evidence: %s", sqlite3_errmsg(from));
		goto out;
	}
	n = sqlite3_column_count(src);
	sb_puts(&mk, "CREATE TEMP TABLE fq_why(");
	sb_puts(&in, "INSERT INTO temp.fq_why VALUES(");
	for (int i = 0; i < n; i++) {
		char *q = sqlite3_mprintf("%s\"%w\"", i ? "," : "", sqlite3_column_name(src, i));

		if (!q)
			goto out;
		sb_puts(&mk, q);
		sb_puts(&in, i ? ",?" : "?");
		sqlite3_free(q);
	}
	sb_puts(&mk, ")");
	sb_puts(&in, ")");
	if (mk.oom || in.oom)
		goto out;
	if (sqlite3_exec(to, "DROP TABLE IF EXISTS temp.fq_why", NULL, NULL, NULL) ||
	    sqlite3_exec(to, mk.s, NULL, NULL, NULL) ||
	    sqlite3_prepare_v2(to, in.s, -1, &ins, NULL)) {
		err = fq_fail(cause, -EIO, "evidence: %s", sqlite3_errmsg(to));
		goto out;
	}
	while ((rc = sqlite3_step(src)) == SQLITE_ROW) {
		for (int i = 0; i < n; i++)
			sqlite3_bind_value(ins, i + 1, sqlite3_column_value(src, i));
		if (sqlite3_step(ins) != SQLITE_DONE || sqlite3_reset(ins)) {
			err = fq_fail(cause, -EIO, "evidence: %s", sqlite3_errmsg(to));
			goto out;
		}
	}
	err = rc == SQLITE_DONE ? 0 : fq_fail(cause, -EIO, "evidence: %s", sqlite3_errmsg(from));
out:
	sqlite3_finalize(src);
	sqlite3_finalize(ins);
	sb_release(&mk);
	sb_release(&in);
	return err;
}

/* temp.fq_analysis, in its order, with temp.fq_why's columns but the keys appended. */
static int join_rows(sqlite3 *db, char **cause)
{
	sqlite3_stmt *st = NULL;
	struct strbuf b = STRBUF_INIT;
	int err = -ENOMEM;

	if (sqlite3_prepare_v2(db, "SELECT * FROM temp.fq_why", -1, &st, NULL)) {
		err = fq_fail(cause, -EIO, "evidence: %s", sqlite3_errmsg(db));
		goto out;
	}
	sb_puts(&b, "SAVEPOINT why; CREATE TEMP TABLE fq_joined AS SELECT a.*");
	for (int i = 0; i < sqlite3_column_count(st); i++) {
		const char *name = sqlite3_column_name(st, i);
		char *q;

		if (is_key(name))
			continue;
		q = sqlite3_mprintf(", w.\"%w\"", name);
		if (!q)
			goto out;
		sb_puts(&b, q);
		sqlite3_free(q);
	}
	sb_puts(&b, " FROM temp.fq_analysis a LEFT JOIN temp.fq_why w ON w.comm_hash IS "
		    "a.comm_hash AND w.node IS a.node AND w.rank IS a.rank AND w.pid IS a.pid "
		    "ORDER BY a.rowid; DROP TABLE temp.fq_analysis; "
		    "ALTER TABLE temp.fq_joined RENAME TO fq_analysis; RELEASE why");
	if (b.oom)
		goto out;
	if (sqlite3_exec(db, b.s, NULL, NULL, NULL)) {
		err = fq_fail(cause, -EIO, "evidence: %s", sqlite3_errmsg(db));
		sqlite3_exec(db, "ROLLBACK TO why; RELEASE why", NULL, NULL, NULL);
		goto out;
	}
	err = 0;
out:
	sqlite3_finalize(st);
	sb_release(&b);
	return err;
}

int why_attach(sqlite3 *db, const struct an_plan *plan, const struct fanout_params *fp,
	       const struct an_param *merge_params, size_t n, char **cause)
{
	struct fanout_params p = *fp;
	struct fanout *fo = NULL;
	struct merge *m = NULL;
	struct coverage *cov = NULL;
	int64_t started;
	int err;

	*cause = NULL;
	if (!wanted(db))
		return 0;
	/* The same hosts and window; the clock offset from each node's HELLO. */
	p.sql = plan->node_sql;
	p.params = plan->params;
	p.nparams = plan->nparams;
	p.clock_param = plan->clock_param;
	p.pings = 0;
	p.progress = 0;
	fo = fanout_new(&p, cause);
	m = merge_new(cause);
	cov = coverage_new(p.nhosts, p.hosts);
	if (!fo || !m || !cov) {
		err = *cause ? -EIO : fq_fail(cause, -ENOMEM, "out of memory");
		goto out;
	}
	started = clock_ns(CLOCK_MONOTONIC);
	err = gather_run(fo, &p, m, cov, NULL, cause);
	if (!err) {
		char *note = NULL; /* (the verdict's fan-out said it) */

		err = compat_retry(&p, started, m, cov, &note, cause);
		free(note);
	}
	if (err)
		goto out;
	if (!merge_has_table(m)) {
		err = fq_fail(cause, -EIO, "no node answered the evidence query");
		goto out;
	}
	err = an_merge(merge_db(m), plan->merge_sql, merge_params, n, cause);
	if (!err)
		err = copy_rows(merge_db(m), db, cause);
	if (!err)
		err = join_rows(db, cause);
out:
	fanout_free(fo);
	merge_free(m);
	coverage_free(cov);
	return err;
}

static int is_hung_verdict(const char *v)
{
	return v && (!strcmp(v, "hung") || !strcmp(v, "desync"));
}

/* "1,980": clocks read as people write them. */
static const char *grouped(char *buf, size_t n, double v)
{
	long long x = (long long)(v < 0 ? v - 0.5 : v + 0.5);

	if (x >= 1000 || x <= -1000)
		snprintf(buf, n, "%lld,%03lld", x / 1000, (x < 0 ? -x : x) % 1000);
	else
		snprintf(buf, n, "%lld", x);
	return buf;
}

/* One measurement and the peers' median, when known: "12.5%, peers 0.3%". */
static void pair(FILE *out, sqlite3_stmt *st, const char *own, const char *peer,
		 const char *unit)
{
	if (row_has(st, own))
		fprintf(out, "%g%s", row_dbl(st, own), unit);
	else
		fputs("?", out);
	if (row_has(st, peer))
		fprintf(out, ", peers %g%s", row_dbl(st, peer), unit);
}

void why_report(FILE *out, sqlite3_stmt *st)
{
	char a[32], b[32];

	if (row_col(st, "likely_cause") < 0 || is_hung_verdict(row_txt(st, "verdict")))
		return;
	if (!row_has(st, "likely_cause")) {
		fprintf(out, "  likely cause: not measured (its node sent no evidence)\n");
		return;
	}
	if (row_has(st, "gpu_samples") && row_dbl(st, "gpu_samples") > 0) {
		fprintf(out, "  why: GPU %s at %s MHz", row_txt(st, "gpu_index"),
			row_has(st, "sm_mhz") ? grouped(a, sizeof(a), row_dbl(st, "sm_mhz")) : "?");
		if (row_has(st, "sm_max_mhz"))
			fprintf(out, " (max %s)", grouped(a, sizeof(a), row_dbl(st, "sm_max_mhz")));
		if (row_has(st, "peer_sm_mhz"))
			fprintf(out, ", peers %s", grouped(b, sizeof(b), row_dbl(st, "peer_sm_mhz")));
		fprintf(out, "; %s; util ", row_has(st, "gpu_reason") ? row_txt(st, "gpu_reason")
								    : "no clock-event reason");
		pair(out, st, "util_pct", "peer_util_pct", "%");
		/* a kernel spinning in wait for a late rank is busy to NVML */
		if (row_has(st, "coll_gpu_pct")) {
			fprintf(out, " (collective kernels ");
			pair(out, st, "coll_gpu_pct", "peer_coll_gpu_pct", "%");
			fputc(')', out);
		}
		/* GPM: how much of the GPU worked (a spinning collective kernel: a few SMs) */
		if (row_has(st, "sm_busy_pct")) {
			fprintf(out, "; SMs busy ");
			pair(out, st, "sm_busy_pct", "peer_sm_busy_pct", "%");
		}
		if (row_has(st, "temp_c"))
			fprintf(out, "; %s C", row_txt(st, "temp_c"));
		fputc('\n', out);
	} else {
		fprintf(out, "  why: no GPU samples for its process\n");
	}
	fprintf(out, "       main thread preempted ");
	pair(out, st, "preempted_pct", "peer_preempted_pct", "%");
	fprintf(out, " of its window; blocked outside waits ");
	pair(out, st, "blocked_pct", "peer_blocked_pct", "%");
	fprintf(out, "\n       its node: TCP retransmits ");
	pair(out, st, "tcp_retrans", "peer_tcp_retrans", "");
	/* a host shared by several ranks: only the sockets' owner tells them apart */
	if (row_has(st, "tcp_own")) {
		fprintf(out, " (its own sockets ");
		pair(out, st, "tcp_own", "peer_tcp_own", "");
		fputc(')', out);
	}
	fprintf(out, "; InfiniBand errors ");
	pair(out, st, "ib_errors", "peer_ib_errors", "");
	fprintf(out, "\n  likely cause: %s\n", row_txt(st, "likely_cause"));
}
