/* SPDX-License-Identifier: MIT */
#include "bars.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

/* characters a bar has at most: five of them, a node name of 12 and a verdict fit 100 columns */
#define BAR_W 12

static const char *const signals[] = { "late", "wait", "gpu", "cpu", "pace" };
#define NSIG ((int)(sizeof(signals) / sizeof(signals[0])))

int bars_parse(const char *when)
{
	if (!when || !strcmp(when, "always"))
		return BARS_ALWAYS;
	if (!strcmp(when, "auto"))
		return BARS_AUTO;
	if (!strcmp(when, "never"))
		return BARS_NEVER;
	return -1;
}

struct rankrow {
	char *comm, *node, *rank, *verdict;
	double z[NSIG];
	int has[NSIG];
};

static char *dup_col(sqlite3_stmt *st, int i)
{
	const unsigned char *s = sqlite3_column_text(st, i);

	return strdup(s ? (const char *)s : "?");
}

static void bar(struct strbuf *b, const struct rankrow *r, int k, double scale, double thr)
{
	int n = 0, mark = (int)lround(BAR_W * thr / scale);

	if (!r->has[k]) {
		sb_printf(b, "  %-*s", BAR_W, "-");
		return;
	}
	if (r->z[k] > 0)
		n = (int)lround(BAR_W * r->z[k] / scale);
	sb_puts(b, "  ");
	for (int i = 0; i < BAR_W; i++)
		sb_putc(b, i < n ? '#' : i == mark ? '|' : ' ');
}

/* Ends a line without trailing blanks. */
static void end_line(struct strbuf *b)
{
	while (b->len && b->s[b->len - 1] == ' ')
		b->s[--b->len] = 0;
	sb_putc(b, '\n');
}

/* One communicator's ranks, rows[0..n), all of one comm_hash. */
static void draw(struct strbuf *b, const struct rankrow *rows, size_t n, double thr)
{
	double scale[NSIG];
	int nodew = 4;

	for (int k = 0; k < NSIG; k++) {
		scale[k] = thr;
		for (size_t i = 0; i < n; i++)
			if (rows[i].has[k] && rows[i].z[k] > scale[k])
				scale[k] = rows[i].z[k];
	}
	for (size_t i = 0; i < n; i++)
		if ((int)strlen(rows[i].node) > nodew)
			nodew = (int)strlen(rows[i].node);
	sb_printf(b, "\ncommunicator %s, robust z per rank (longer: more straggler-like; "
		     "| at %g):\n", rows[0].comm, thr);
	sb_printf(b, "  %4s %-*s", "rank", nodew, "node");
	for (int k = 0; k < NSIG; k++)
		sb_printf(b, "  %-*s", BAR_W, signals[k]);
	end_line(b);
	for (size_t i = 0; i < n; i++) {
		sb_printf(b, "  %4s %-*s", rows[i].rank, nodew, rows[i].node);
		for (int k = 0; k < NSIG; k++)
			bar(b, &rows[i], k, scale[k], thr);
		if (strcmp(rows[i].verdict, "ok"))
			sb_printf(b, "  %s", rows[i].verdict);
		end_line(b);
	}
}

char *bars_take(sqlite3 *db, double thr, int keep_ok)
{
	/* (a merge file without z_pace, a user's: its pace bars read "-") */
	static const char sql[] =
		"SELECT comm_hash, node, rank, verdict, z_late, z_wait, z_gpu, z_cpu, z_pace "
		"FROM temp.fq_analysis ORDER BY comm_hash, rank, node";
	static const char sql4[] =
		"SELECT comm_hash, node, rank, verdict, z_late, z_wait, z_gpu, z_cpu, NULL "
		"FROM temp.fq_analysis ORDER BY comm_hash, rank, node";
	struct strbuf b = STRBUF_INIT;
	struct rankrow *rows = NULL, *nr;
	sqlite3_stmt *st = NULL;
	size_t n = 0, first = 0;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK &&
	    sqlite3_prepare_v2(db, sql4, -1, &st, NULL) != SQLITE_OK)
		goto out; /* a user's merge file without these columns: no picture */
	while (sqlite3_step(st) == SQLITE_ROW) {
		nr = realloc(rows, (n + 1) * sizeof(*rows));
		if (!nr)
			goto out;
		rows = nr;
		memset(&rows[n], 0, sizeof(rows[n]));
		rows[n].comm = dup_col(st, 0);
		rows[n].node = dup_col(st, 1);
		rows[n].rank = dup_col(st, 2);
		rows[n].verdict = dup_col(st, 3);
		for (int k = 0; k < NSIG; k++) {
			rows[n].has[k] = sqlite3_column_type(st, 4 + k) != SQLITE_NULL;
			rows[n].z[k] = sqlite3_column_double(st, 4 + k);
		}
		if (!rows[n].comm || !rows[n].node || !rows[n].rank || !rows[n].verdict) {
			n++;
			goto out;
		}
		n++;
	}
	for (size_t i = 1; i <= n; i++)
		if (i == n || strcmp(rows[i].comm, rows[first].comm)) {
			draw(&b, rows + first, i - first, thr);
			first = i;
		}
out:
	sqlite3_finalize(st);
	for (size_t i = 0; i < n; i++) {
		free(rows[i].comm);
		free(rows[i].node);
		free(rows[i].rank);
		free(rows[i].verdict);
	}
	free(rows);
	if (!keep_ok)
		sqlite3_exec(db, "DELETE FROM temp.fq_analysis WHERE verdict = 'ok'", NULL, NULL,
			     NULL);
	if (b.oom || !b.len) {
		sb_release(&b);
		return NULL;
	}
	return sb_detach(&b);
}
