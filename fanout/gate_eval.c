/* SPDX-License-Identifier: MIT */
/*
 * fleetq gate: the evaluation. Each metric's values per time slice into temp.gate_now,
 * and the comparison with the baseline's into temp.gate.
 */
#include "gate_int.h"

#include <errno.h>
#include <string.h>

#include "coverage.h"
#include "strbuf.h"

/*
 * Restricts the time-stamped tables to slice s of n of the job's span (collectives, on the
 * coordinator's clock: each node's ts_ns less its offset) with temp views of the same names,
 * which shadow the fetched tables. n == 1: drops them.
 */
static int slice_views(struct gate *g, int s, int n, int64_t lo, int64_t hi)
{
	for (int i = 0; i < g->nt; i++) {
		const struct table *t = &g->t[i];
		int64_t a = lo + (int64_t)((double)(hi - lo) * s / n);
		int64_t b = s == n - 1 ? hi + 1 : lo + (int64_t)((double)(hi - lo) * (s + 1) / n);
		char *sql;
		int rc;

		if (!t->fetched || !t->has_ts)
			continue;
		sql = sqlite3_mprintf("DROP VIEW IF EXISTS temp.\"%w\"", t->name);
		rc = sql ? sqlite3_exec(g->db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
		sqlite3_free(sql);
		if (rc)
			return -EIO;
		if (n == 1)
			continue;
		sql = sqlite3_mprintf("CREATE TEMP VIEW \"%w\" AS SELECT * FROM main.\"%w\" AS x "
				      "WHERE x.ts_ns - coalesce((SELECT offset_ns FROM main.clock c "
				      "WHERE c.node = x.node), 0) BETWEEN %lld AND %lld",
				      t->name, t->name, (long long)a, (long long)b - 1);
		rc = sql ? sqlite3_exec(g->db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
		sqlite3_free(sql);
		if (rc)
			return -EIO;
	}
	return 0;
}

/*
 * Runs one metric and records its values for sample s in temp.gate_now. The shape rules
 * (docs/gate.md): the last column is the value; a column named rank makes it per rank;
 * any other columns before the value are a key (e.g. op, size); one column is a scalar.
 */
static int eval_metric(struct gate *g, const struct metric *m, int s, sqlite3_stmt *ins)
{
	sqlite3_stmt *st = NULL;
	struct strbuf key = STRBUF_INIT;
	int n, rankcol = -1, rc, rows = 0, ret = FQ_EXIT_USAGE;

	if (sqlite3_prepare_v2(g->db, m->sql, -1, &st, NULL) != SQLITE_OK) {
		gate_error("metric '%s': %s: fix its SQL", m->name, sqlite3_errmsg(g->db));
		goto out;
	}
	n = sqlite3_column_count(st);
	for (int i = 0; i < n - 1; i++)
		if (!strcasecmp(sqlite3_column_name(st, i), "rank"))
			rankcol = i;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int vt = sqlite3_column_type(st, n - 1);

		if (n == 1 && rows) {
			gate_error("metric '%s' returns more than one row of one column: return "
				   "one value, or add a rank or key column before it",
				   m->name);
			goto out;
		}
		rows++;
		if (vt == SQLITE_TEXT || vt == SQLITE_BLOB) {
			gate_error("metric '%s': its value (the last column, '%s') is not a "
				   "number: '%s'",
				   m->name, sqlite3_column_name(st, n - 1),
				   vt == SQLITE_TEXT ? (const char *)sqlite3_column_text(st, n - 1)
						     : "(blob)");
			goto out;
		}
		key.len = 0;
		sb_puts(&key, "");
		for (int i = 0; i < n - 1; i++) {
			const char *v = (const char *)sqlite3_column_text(st, i);

			if (i == rankcol)
				continue;
			sb_printf(&key, "%s%s", key.len ? "," : "", v ? v : "NULL");
		}
		sqlite3_bind_text(ins, 1, m->name, -1, SQLITE_STATIC);
		sqlite3_bind_text(ins, 2, key.s ? key.s : "", -1, SQLITE_STATIC);
		if (rankcol >= 0 && sqlite3_column_type(st, rankcol) != SQLITE_NULL)
			sqlite3_bind_int64(ins, 3, sqlite3_column_int64(st, rankcol));
		else
			sqlite3_bind_null(ins, 3);
		sqlite3_bind_int(ins, 4, s);
		if (vt == SQLITE_NULL)
			sqlite3_bind_null(ins, 5);
		else
			sqlite3_bind_double(ins, 5, sqlite3_column_double(st, n - 1));
		rc = sqlite3_step(ins);
		sqlite3_reset(ins);
		if (rc == SQLITE_CONSTRAINT) {
			gate_error("metric '%s' returns %s%s%s%s twice: GROUP BY the rank and key "
				   "columns",
				   m->name, *key.s ? "key " : "", key.s,
				   *key.s && rankcol >= 0 ? " and " : "",
				   rankcol >= 0 ? "the same rank" : "");
			goto out;
		}
		if (rc != SQLITE_DONE) {
			gate_error("cannot record metric '%s': %s", m->name, sqlite3_errmsg(g->db));
			goto out;
		}
	}
	if (rc != SQLITE_DONE) {
		gate_error("metric '%s': %s", m->name, sqlite3_errmsg(g->db));
		goto out;
	}
	if (!rows && n == 1) {
		/* a scalar over no rows is "no value", still a series to compare */
		sqlite3_bind_text(ins, 1, m->name, -1, SQLITE_STATIC);
		sqlite3_bind_text(ins, 2, "", -1, SQLITE_STATIC);
		sqlite3_bind_null(ins, 3);
		sqlite3_bind_int(ins, 4, s);
		sqlite3_bind_null(ins, 5);
		rc = sqlite3_step(ins);
		sqlite3_reset(ins);
		if (rc != SQLITE_DONE) {
			gate_error("cannot record metric '%s': %s", m->name, sqlite3_errmsg(g->db));
			goto out;
		}
	}
	ret = -1;
out:
	sb_release(&key);
	sqlite3_finalize(st);
	return ret;
}

int gate_evaluate(struct gate *g)
{
	sqlite3_stmt *st = NULL, *ins = NULL;
	int64_t lo = 0, hi = 0;
	int ret = FQ_EXIT_USAGE;

	if (sqlite3_exec(g->db,
			 "CREATE TEMP TABLE gate_now(metric TEXT, key TEXT, rank INTEGER, sample "
			 "INTEGER, value REAL); CREATE UNIQUE INDEX temp.gate_now_series ON "
			 "gate_now(metric, key, coalesce(rank, -9223372036854775807 - 1), sample); "
			 "CREATE TEMP TABLE IF NOT EXISTS gate_base(metric, key, rank, value, i); "
			 "CREATE TEMP TABLE gate_metric(name TEXT, higher INTEGER, pos INTEGER)",
			 NULL, NULL, NULL) ||
	    sqlite3_prepare_v2(g->db, "INSERT INTO temp.gate_now VALUES (?, ?, ?, ?, ?)", -1, &ins,
			       NULL)) {
		gate_error("cannot set up the metrics: %s", sqlite3_errmsg(g->db));
		goto out;
	}
	for (size_t i = 0; i < g->nm; i++) {
		char *sql = sqlite3_mprintf("INSERT INTO temp.gate_metric VALUES ('%q', %d, %d)",
					    g->m[i].name, g->m[i].higher, (int)i);

		if (!sql || sqlite3_exec(g->db, sql, NULL, NULL, NULL)) {
			sqlite3_free(sql);
			gate_error("cannot set up the metrics: %s", sqlite3_errmsg(g->db));
			goto out;
		}
		sqlite3_free(sql);
	}
	if (g->samples > 1) {
		if (sqlite3_prepare_v2(g->db, "SELECT min(x.ts_ns - coalesce(c.offset_ns, 0)), "
					      "max(x.ts_ns - coalesce(c.offset_ns, 0)) FROM "
					      "main.collectives x LEFT JOIN main.clock c ON c.node "
					      "= x.node",
				       -1, &st, NULL) ||
		    sqlite3_step(st) != SQLITE_ROW) {
			gate_error("cannot find the job's span: %s", sqlite3_errmsg(g->db));
			goto out;
		}
		lo = sqlite3_column_int64(st, 0);
		hi = sqlite3_column_int64(st, 1);
	}
	for (int s = 0; s < g->samples; s++) {
		if (slice_views(g, s, g->samples, lo, hi)) {
			gate_error("cannot slice the window: %s", sqlite3_errmsg(g->db));
			goto out;
		}
		for (size_t i = 0; i < g->nm; i++) {
			int r = eval_metric(g, &g->m[i], s, ins);

			if (r >= 0) {
				ret = r;
				goto out;
			}
		}
	}
	if (g->samples > 1 && slice_views(g, 0, 1, 0, 0)) {
		gate_error("cannot drop the slices: %s", sqlite3_errmsg(g->db));
		goto out;
	}
	ret = -1;
out:
	sqlite3_finalize(st);
	sqlite3_finalize(ins);
	return ret;
}
int gate_compare(struct gate *g)
{
	static const char sql[] =
		"CREATE TEMP TABLE gate AS "
		"WITH b AS (SELECT metric, key, rank, median(value) AS med, "
		"  1.4826 * mad(value) AS mad, "
		"  count(value) AS n FROM temp.gate_base GROUP BY metric, key, rank), "
		"w AS (SELECT metric, key, rank, median(value) AS now FROM temp.gate_now "
		"  GROUP BY metric, key, rank), "
		"k AS (SELECT metric, key, rank FROM b UNION SELECT metric, key, rank FROM w), "
		"j AS (SELECT k.metric, k.key, k.rank, m.pos, m.higher, b.med, b.mad, b.n, w.now, "
		"  CASE WHEN m.higher THEN min(b.med - abs(b.med) * ?1, b.med - ?2 * b.mad) "
		"    ELSE max(b.med + abs(b.med) * ?1, b.med + ?2 * b.mad) END AS lim, "
		"  CASE WHEN m.higher THEN max(b.med + abs(b.med) * ?1, b.med + ?2 * b.mad) "
		"    ELSE min(b.med - abs(b.med) * ?1, b.med - ?2 * b.mad) END AS better "
		"  FROM k JOIN temp.gate_metric m ON m.name = k.metric "
		"  LEFT JOIN b ON b.metric = k.metric AND b.key = k.key AND b.rank IS k.rank "
		"  LEFT JOIN w ON w.metric = k.metric AND w.key = k.key AND w.rank IS k.rank) "
		"SELECT metric, nullif(key, '') AS key, rank, med AS baseline, now, "
		"  CASE WHEN med IS NULL OR now IS NULL THEN NULL WHEN med = 0 THEN "
		"    (CASE WHEN now = 0 THEN 0.0 END) ELSE 100.0 * (now - med) / abs(med) END "
		"    AS change_pct, "
		"  lim AS \"limit\", mad AS baseline_mad, n AS baseline_samples, "
		"  CASE WHEN n IS NULL THEN 'new' WHEN med IS NULL AND now IS NULL THEN 'n/a' "
		"    WHEN now IS NULL THEN 'missing' WHEN med IS NULL THEN 'new' "
		"    WHEN (higher AND now < lim) OR (NOT higher AND now > lim) THEN 'regressed' "
		"    WHEN (higher AND now > better) OR (NOT higher AND now < better) "
		"      THEN 'improved' ELSE 'ok' END AS verdict "
		"FROM j ORDER BY pos, key, rank";
	sqlite3_stmt *st = NULL;
	int rc;

	if (sqlite3_prepare_v2(g->db, sql, -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_double(st, 1, g->tol);
		sqlite3_bind_double(st, 2, g->k);
		rc = sqlite3_step(st);
	} else {
		rc = SQLITE_ERROR;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return gate_error("cannot compare with the baseline: %s", sqlite3_errmsg(g->db));
	return -1;
}
