/* SPDX-License-Identifier: MIT */
/*
 * fleetq gate: the fetch. One fan-out per trace table a metric reads, each node's rows
 * merged with a node column added, the coverages folded into one.
 */
#include "gate_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coverage.h"
#include "gather.h"
#include "merge.h"
#include "strbuf.h"

/* Folds one fan-out's coverage into the gate's: a node is ok only if ok in every one. */
static void fold_coverage(struct coverage *all, const struct coverage *one, size_t n, int first)
{
	for (size_t i = 0; i < n; i++) {
		int o = coverage_outcome(one, i);
		int64_t rows = coverage_rows(one, i) + (first ? 0 : coverage_rows(all, i));

		if (first || (coverage_outcome(all, i) == FQ_OK && o != FQ_OK)) {
			coverage_set(all, i, o, rows, coverage_message(one, i));
		} else {
			/* coverage_set frees the old message before copying the new one */
			const char *msg = coverage_message(all, i);
			char *keep = msg ? strdup(msg) : NULL;

			coverage_set(all, i, coverage_outcome(all, i), rows, keep);
			free(keep);
		}
	}
}

static int create_empty(sqlite3 *db, const struct table *t)
{
	struct strbuf b = STRBUF_INIT;
	int rc;

	sb_printf(&b, "CREATE TABLE \"%s\"(node", t->name);
	for (int k = 0; k < t->ncols; k++)
		if (t->need & 1u << k)
			sb_printf(&b, ", \"%s\"", t->cols[k]);
	sb_puts(&b, ")");
	rc = b.oom ? SQLITE_NOMEM : sqlite3_exec(db, b.s, NULL, NULL, NULL);
	sb_release(&b);
	return rc;
}

/*
 * One fan-out per table some metric reads, into tables of the same name in m. The first
 * fan-out's HELLOs are kept in *first (for the shape). Returns -1 or an exit status.
 */
int gate_fetch(struct gate *g, struct fanout_params *fp, struct merge *m,
		 struct coverage *cov, struct fanout **first)
{
	struct wire_value params[2];
	int64_t len = g->a->since_ns < 0 ? DEFAULT_SINCE_NS : g->a->since_ns;
	struct timespec ts;
	int nfan = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	params[0] = len ? (struct wire_value){ .type = WIRE_INT,
					       .i = (int64_t)ts.tv_sec * 1000000000 +
						    ts.tv_nsec - len }
			: (struct wire_value){ .type = WIRE_NULL };
	params[1] = g->a->job ? (struct wire_value){ .type = WIRE_TEXT,
						     .p = g->a->job,
						     .n = strlen(g->a->job) }
			      : (struct wire_value){ .type = WIRE_NULL };
	fp->params = params;
	fp->nparams = 2;
	fp->clock_param = len ? 1 : 0;
	for (int i = 0; i < g->nt; i++) {
		struct table *t = &g->t[i];
		struct coverage *one = NULL;
		struct fanout *fo = NULL;
		char *sql, *cause = NULL;
		int err;

		if (!t->need)
			continue;
		sql = gate_fetch_sql(t, &cause);
		one = coverage_new(fp->nhosts, fp->hosts);
		fp->sql = sql;
		fo = sql && one ? fanout_new(fp, &cause) : NULL;
		err = fo ? gather_run(fo, fp, m, one, NULL, &cause) : -ENOMEM;
		if (!err)
			err = merge_rename(m, t->name, &cause);
		if (!err) {
			sqlite3_stmt *st = NULL;
			int exists = 0;

			if (!sqlite3_prepare_v2(merge_db(m), "SELECT 1 FROM main.sqlite_schema "
							     "WHERE name = ?",
						-1, &st, NULL)) {
				sqlite3_bind_text(st, 1, t->name, -1, SQLITE_STATIC);
				exists = sqlite3_step(st) == SQLITE_ROW;
			}
			sqlite3_finalize(st);
			if (!exists && create_empty(merge_db(m), t))
				err = -EIO;
		}
		fp->sql = NULL;
		free(sql);
		if (err) {
			gate_error("fetching table %s: %s", t->name,
				   cause ? cause : strerror(err < 0 ? -err : ENOMEM));
			free(cause);
			coverage_free(one);
			fanout_free(fo);
			return FQ_EXIT_USAGE;
		}
		t->fetched = 1;
		fold_coverage(cov, one, fp->nhosts, !nfan++);
		coverage_free(one);
		if (!*first)
			*first = fo;
		else
			fanout_free(fo);
	}
	fp->params = NULL;
	fp->nparams = 0;
	return -1;
}
