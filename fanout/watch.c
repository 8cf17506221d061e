/* SPDX-License-Identifier: MIT */
#include "watch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strbuf.h"

/* A set of keyed lines, sorted by key. A finding also keeps the first period of the run of
 * periods it has been found in, and that period's time. */
struct entry {
	char *key, *val, *text;
	int since;
	char since_at[32];
};
struct set {
	struct entry *e;
	size_t n;
};

struct watch {
	FILE *out;
	char *period;
	int periods; /* seen so far */
	char at[32]; /* the time of this period's lines, while one is printed; else "" */
	struct set findings, ranks, nodes;
	/* ranks_moved(): how many, the first, and the word for them */
	size_t n_moved;
	const struct entry *first_moved;
	const char *verb;
};

/* past this many ranks joining or leaving at once, one line says how many */
#define FOLD 8

static void set_release(struct set *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->e[i].key);
		free(s->e[i].val);
		free(s->e[i].text);
	}
	free(s->e);
	memset(s, 0, sizeof(*s));
}

static int set_add(struct set *s, const char *key, const char *val, const char *text)
{
	struct entry *e = realloc(s->e, (s->n + 1) * sizeof(*e));

	if (!e)
		return -ENOMEM;
	s->e = e;
	e = &s->e[s->n];
	e->key = strdup(key ? key : "");
	e->val = strdup(val ? val : "");
	e->text = strdup(text ? text : "");
	e->since = 0;
	e->since_at[0] = '\0';
	s->n++;
	return e->key && e->val && e->text ? 0 : -ENOMEM;
}

static int by_key(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->key, ((const struct entry *)b)->key);
}

/* Rows of sql (key, val, text) into s, sorted. A query that does not prepare (a user's
 * merge file without these columns) leaves s empty. */
static int set_load(struct set *s, sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int err = 0;

	memset(s, 0, sizeof(*s));
	if (!db || sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return 0;
	while (!err && sqlite3_step(st) == SQLITE_ROW)
		err = set_add(s, (const char *)sqlite3_column_text(st, 0),
			      (const char *)sqlite3_column_text(st, 1),
			      (const char *)sqlite3_column_text(st, 2));
	sqlite3_finalize(st);
	if (s->n)
		qsort(s->e, s->n, sizeof(*s->e), by_key);
	return err;
}

struct watch *watch_new(FILE *out, const char *period)
{
	struct watch *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->out = out;
	w->period = strdup(period);
	if (!w->period) {
		free(w);
		return NULL;
	}
	return w;
}

void watch_free(struct watch *w)
{
	if (!w)
		return;
	set_release(&w->findings);
	set_release(&w->ranks);
	set_release(&w->nodes);
	free(w->period);
	free(w);
}

/* The time as each line starts with it: 2026-11-28T21:59:01Z. */
static void now_text(char *buf, size_t n)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void stamp(struct watch *w)
{
	char buf[32];

	if (!w->at[0])
		now_text(buf, sizeof(buf));
	fprintf(w->out, "%s ", w->at[0] ? w->at : buf);
}

void watch_say(struct watch *w, const char *text)
{
	stamp(w);
	fprintf(w->out, "%s\n", text);
	fflush(w->out);
}

/*
 * Walks old and new together: gone(e) for keys only in old, came(e, NULL) for keys only
 * in new, came(e, was) for those whose val changed.
 */
static void diff(struct watch *w, const struct set *old, const struct set *new,
		 void (*gone)(struct watch *, const struct entry *),
		 void (*came)(struct watch *, const struct entry *, const struct entry *))
{
	size_t i = 0, j = 0;

	while (i < old->n || j < new->n) {
		int c = i == old->n ? 1 : j == new->n ? -1 : strcmp(old->e[i].key, new->e[j].key);

		if (c < 0) {
			if (gone)
				gone(w, &old->e[i]);
			i++;
		} else if (c > 0) {
			if (came)
				came(w, &new->e[j], NULL);
			j++;
		} else {
			if (came && strcmp(old->e[i].val, new->e[j].val))
				came(w, &new->e[j], &old->e[i]);
			i++;
			j++;
		}
	}
}

static void finding_new(struct watch *w, const struct entry *e, const struct entry *was)
{
	(void)was;
	stamp(w);
	fprintf(w->out, "%s\n", e->text);
}

/* How long it lasted says whether it was a rank that stays slow or one of those that pace
 * a job by turns (a launch-bound job's, which change within tens of seconds). */
static void finding_gone(struct watch *w, const struct entry *e)
{
	int polls = w->periods - 1 - e->since;

	stamp(w);
	fprintf(w->out, "no longer %s: %s; %s for %d period%s, from %s\n", e->val,
		e->text + strlen(e->val) + 2, strcmp(e->val, "hung") ? "named" : "hung", polls,
		polls == 1 ? "" : "s", e->since_at);
}

/* Each finding of now that was one before keeps when it began; the others begin now. */
static void findings_since(const struct set *old, struct set *now, int period, const char *at)
{
	size_t i = 0;

	for (size_t j = 0; j < now->n; j++) {
		struct entry *e = &now->e[j];

		while (i < old->n && strcmp(old->e[i].key, e->key) < 0)
			i++;
		if (i < old->n && !strcmp(old->e[i].key, e->key)) {
			e->since = old->e[i].since;
			memcpy(e->since_at, old->e[i].since_at, sizeof(e->since_at));
		} else {
			e->since = period;
			snprintf(e->since_at, sizeof(e->since_at), "%s", at);
		}
	}
}

/* A node new to the list (the hosts file changed) is news only when it fails. */
static void node_new(struct watch *w, const struct entry *e, const struct entry *was)
{
	if (!was && !strcmp(e->val, "ok"))
		return;
	stamp(w);
	if (!strcmp(e->val, "ok"))
		fprintf(w->out, "node %s answers again\n", e->key);
	else
		fprintf(w->out, "node %s: %s\n", e->key, e->text);
}

/* ranks joining or leaving: one line each, or one for many */
static void count_moved(struct watch *w, const struct entry *e, const struct entry *was)
{
	(void)was;
	if (!w->n_moved++)
		w->first_moved = e;
}

static void rank_line(struct watch *w, const struct entry *e, const struct entry *was)
{
	(void)was;
	stamp(w);
	fprintf(w->out, "%s: %s\n", w->verb, e->text);
}

/* The keys of to that from lacks. */
static void ranks_moved(struct watch *w, const struct set *from, const struct set *to,
			const char *verb)
{
	w->n_moved = 0;
	w->first_moved = NULL;
	w->verb = verb;
	diff(w, from, to, NULL, count_moved);
	if (w->n_moved > FOLD) {
		stamp(w);
		fprintf(w->out, "%s: %zu ranks, among them %s\n", verb, w->n_moved,
			w->first_moved->text);
	} else if (w->n_moved) {
		diff(w, from, to, NULL, rank_line);
	}
}

static const char findings_sql[] =
	"SELECT comm_hash || char(9) || node || char(9) || rank || char(9) || pid, verdict, "
	"CASE WHEN verdict = 'hung' THEN 'hung: rank ' || rank || ' on ' || node || "
	"' stopped at seq ' || coalesce(stopped_at_seq, '?') || ' (' || coalesce(stopped_op, '?') "
	"|| '), communicator ' || comm_hash "
	"ELSE verdict || ': rank ' || rank || ' on ' || node || ', communicator ' || comm_hash || "
	"coalesce(' (signals ' || signals || ')', '') END "
	"FROM temp.fq_analysis WHERE verdict <> 'ok'";

static const char ranks_sql[] =
	"SELECT DISTINCT comm_hash || char(9) || node || char(9) || rank || char(9) || pid, '', "
	"'rank ' || rank || ' on ' || node || ', communicator ' || comm_hash "
	"FROM results WHERE kind = 'rank'";

int watch_step(struct watch *w, sqlite3 *db, const struct coverage *cov,
	       const char *const *hosts, size_t nhosts)
{
	struct set f, r, n;
	int err;

	err = set_load(&f, db, findings_sql);
	err = err ?: set_load(&r, db, ranks_sql);
	memset(&n, 0, sizeof(n));
	for (size_t i = 0; !err && i < nhosts; i++) {
		int o = coverage_outcome(cov, i);
		const char *msg = coverage_message(cov, i);
		char *text = NULL;

		if (asprintf(&text, "%s%s%s", outcome_name(o), msg ? ": " : "", msg ? msg : "") < 0)
			err = -ENOMEM;
		else
			err = set_add(&n, hosts[i], o == FQ_TRUNCATED ? "ok" : outcome_name(o),
				      text);
		free(text);
	}
	if (err) {
		set_release(&f);
		set_release(&r);
		set_release(&n);
		return err;
	}
	qsort(n.e, n.n, sizeof(*n.e), by_key);
	now_text(w->at, sizeof(w->at));
	findings_since(&w->findings, &f, w->periods, w->at);
	if (!w->periods++) {
		size_t comms = 0;

		for (size_t i = 0; i < r.n; i++)
			comms += !i || strncmp(r.e[i].key, r.e[i - 1].key,
					      strcspn(r.e[i].key, "\t") + 1);
		stamp(w);
		fprintf(w->out,
			"watching %zu rank%s in %zu communicator%s on %zu node%s, every %s\n", r.n, r.n == 1 ? "" : "s", comms, comms == 1 ? "" : "s", nhosts,
			nhosts == 1 ? "" : "s", w->period);
		for (size_t i = 0; i < n.n; i++)
			node_new(w, &n.e[i], NULL);
		for (size_t i = 0; i < f.n; i++)
			finding_new(w, &f.e[i], NULL);
	} else {
		diff(w, &w->nodes, &n, NULL, node_new);
		ranks_moved(w, &r, &w->ranks, "left");
		ranks_moved(w, &w->ranks, &r, "joined");
		if (w->ranks.n && !r.n) {
			stamp(w);
			fprintf(w->out, "no rank in the window\n");
		}
		diff(w, &w->findings, &f, finding_gone, finding_new);
	}
	set_release(&w->findings);
	set_release(&w->ranks);
	set_release(&w->nodes);
	w->findings = f;
	w->ranks = r;
	w->nodes = n;
	w->at[0] = '\0';
	fflush(w->out);
	return 0;
}

int64_t watch_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int watch_sleep(int64_t start_ns, int64_t period_ns, volatile sig_atomic_t *intr)
{
	int64_t end = start_ns + period_ns, left;

	while (!*intr && (left = end - watch_now()) > 0) {
		struct timespec ts = { left / 1000000000, left % 1000000000 };

		nanosleep(&ts, NULL); /* a signal ends it early: *intr says which */
	}
	return *intr != 0;
}
