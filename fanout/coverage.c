/* SPDX-License-Identifier: MIT */
#include "coverage.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostlist.h"
#include "strbuf.h"
#include "wire.h"

struct node_cov {
	int outcome;
	int status; /* the END's wire status (0: none or ok) */
	int64_t rows;
	char *message;
};

struct coverage {
	size_t n;
	const char *const *names;
	struct node_cov *nodes;
};

static const char *const outcome_names[FQ_NOUTCOMES] = {
	[FQ_PENDING] = "pending",	  [FQ_OK] = "ok",
	[FQ_TRUNCATED] = "truncated",	  [FQ_TIMEOUT] = "timeout",
	[FQ_UNREACHABLE] = "unreachable", [FQ_TLS] = "tls",
	[FQ_SQL] = "sql error",		  [FQ_PROTOCOL] = "protocol error",
	[FQ_COLUMNS] = "columns differ",  [FQ_PARTIAL] = "partial",
	[FQ_AGENT] = "agent error",	  [FQ_INTERRUPTED] = "interrupted",
	[FQ_BUSY] = "busy",
};

const char *outcome_name(int outcome)
{
	return outcome >= 0 && outcome < FQ_NOUTCOMES ? outcome_names[outcome] : "?";
}

struct coverage *coverage_new(size_t n, const char *const *names)
{
	struct coverage *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->nodes = calloc(n ? n : 1, sizeof(*c->nodes));
	if (!c->nodes) {
		free(c);
		return NULL;
	}
	c->n = n;
	c->names = names;
	return c;
}

void coverage_free(struct coverage *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		free(c->nodes[i].message);
	free(c->nodes);
	free(c);
}

void coverage_set(struct coverage *c, size_t i, int outcome, int64_t rows, const char *message)
{
	struct node_cov *nc = &c->nodes[i];

	nc->outcome = outcome;
	nc->rows = rows;
	free(nc->message);
	/* Agents write most messages: they reach a terminal, so nothing raw. */
	nc->message = message ? fq_printable(message) : NULL;
}

int coverage_status(const struct coverage *c, size_t i)
{
	return i < c->n ? c->nodes[i].status : 0;
}

void coverage_set_status(struct coverage *c, size_t i, int status)
{
	c->nodes[i].status = status;
}

int coverage_user_sql_error(const struct coverage *c)
{
	size_t mistakes = 0;

	/* Every node that answered refused the SQL itself: the same mistake everywhere. */
	for (size_t i = 0; i < c->n; i++) {
		const struct node_cov *nc = &c->nodes[i];

		if (nc->outcome == FQ_SQL &&
		    (nc->status == WIRE_E_SQL || nc->status == WIRE_E_DENIED))
			mistakes++;
		else if (nc->outcome == FQ_OK || nc->outcome == FQ_TRUNCATED ||
			 nc->outcome == FQ_SQL || nc->outcome == FQ_COLUMNS ||
			 nc->outcome == FQ_BUSY)
			return 0;
	}
	return mistakes > 0;
}

size_t coverage_limited(const struct coverage *c)
{
	size_t k = 0;

	for (size_t i = 0; i < c->n; i++)
		k += c->nodes[i].outcome == FQ_OK && c->nodes[i].status == WIRE_E_ROWS;
	return k;
}

int coverage_outcome(const struct coverage *c, size_t i)
{
	return c->nodes[i].outcome;
}

int64_t coverage_rows(const struct coverage *c, size_t i)
{
	return c->nodes[i].rows;
}

const char *coverage_message(const struct coverage *c, size_t i)
{
	return c->nodes[i].message;
}

size_t coverage_count(const struct coverage *c, int outcome)
{
	size_t k = 0;

	for (size_t i = 0; i < c->n; i++)
		k += c->nodes[i].outcome == outcome;
	return k;
}

size_t coverage_total(const struct coverage *c)
{
	return c->n;
}

static int same_msg(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

/* Order in which failures are listed: the worst (needs the user) first. */
static const int listed[] = {
	FQ_TLS, FQ_UNREACHABLE, FQ_TIMEOUT, FQ_SQL, FQ_COLUMNS,
	FQ_PARTIAL, FQ_PROTOCOL, FQ_AGENT, FQ_BUSY, FQ_INTERRUPTED, FQ_TRUNCATED, FQ_PENDING,
};

static int name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '.' || ch == '-' || ch == '_';
}

/*
 * msg with the host of name (its host part, as a whole word) written as
 * "<host>", so that "cannot resolve 'gpu01'" and "cannot resolve 'gpu02'" are
 * one reason. malloc'd; NULL for no message or no memory.
 */
static char *msg_key(const char *msg, const char *name)
{
	struct strbuf b = STRBUF_INIT;
	char *host = NULL;
	const char *p = msg, *hit;
	size_t hl;
	int port;

	if (!msg)
		return NULL;
	if (hostlist_split(name, -1, &host, &port) || !(hl = strlen(host))) {
		free(host);
		return strdup(msg);
	}
	while ((hit = strstr(p, host))) {
		int word = (hit == msg || !name_char(hit[-1])) && !name_char(hit[hl]);

		sb_add(&b, p, (size_t)(hit - p));
		sb_puts(&b, word ? "<host>" : host);
		p = hit + hl;
	}
	sb_puts(&b, p);
	free(host);
	return sb_detach(&b);
}

/* Each node's msg_key() (NULL where it has no message); free with keys_free(). */
static char **keys_new(const struct coverage *c)
{
	char **k = calloc(c->n ? c->n : 1, sizeof(*k));

	for (size_t i = 0; k && i < c->n; i++)
		if (c->nodes[i].message && !(k[i] = msg_key(c->nodes[i].message, c->names[i]))) {
			for (size_t j = 0; j < i; j++)
				free(k[j]);
			free(k);
			return NULL;
		}
	return k;
}

static void keys_free(char **k, size_t n)
{
	for (size_t i = 0; k && i < n; i++)
		free(k[i]);
	free(k);
}

static size_t listed_rank(int outcome)
{
	for (size_t l = 0; l < sizeof(listed) / sizeof(listed[0]); l++)
		if (listed[l] == outcome)
			return l;
	return SIZE_MAX;
}

/* qsort() has no context argument: the coverage being grouped and its keys. */
static const struct coverage *sorting;
static char **sorting_keys;

/* Nodes by listed rank, then reason (msg_key()), then hostlist order: a group is a run. */
static int cmp_node(const void *pa, const void *pb)
{
	size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
	const struct node_cov *x = &sorting->nodes[a], *y = &sorting->nodes[b];
	const char *kx = sorting_keys[a], *ky = sorting_keys[b];
	size_t ra = listed_rank(x->outcome), rb = listed_rank(y->outcome);
	int c;

	if (ra != rb)
		return ra < rb ? -1 : 1;
	if (!kx != !ky)
		return !kx ? -1 : 1;
	if (kx && (c = strcmp(kx, ky)))
		return c;
	return a < b ? -1 : a > b;
}

struct group {
	size_t rank, first; /* listed rank, first node (hostlist order) */
	size_t at, n;	    /* its nodes: idx[at .. at + n) */
};

static int cmp_group(const void *pa, const void *pb)
{
	const struct group *a = pa, *b = pb;

	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return a->first < b->first ? -1 : a->first > b->first;
}

/*
 * Calls fn for every group of nodes with the same outcome and reason (the
 * message, the host's own name aside), in listed[] order, then
 * first-appearance order; a group of several nodes whose messages name
 * themselves gets the message with "<host>". Sorting, not pairwise
 * comparison: 200,000 unreachable hosts, each with its own message, group
 * in a fraction of a second.
 */
static int for_groups(const struct coverage *c,
		      void (*fn)(void *ctx, int outcome, const char *msg, const char *const *hosts,
				 size_t n, int64_t rows),
		      void *ctx)
{
	size_t *idx = malloc((c->n ? c->n : 1) * sizeof(*idx));
	const char **hosts = malloc((c->n ? c->n : 1) * sizeof(*hosts));
	struct group *g = malloc((c->n ? c->n : 1) * sizeof(*g));
	char **keys = keys_new(c);
	size_t k = 0, ng = 0;
	int err = 0;

	if (!idx || !hosts || !g || !keys) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < c->n; i++)
		if (listed_rank(c->nodes[i].outcome) != SIZE_MAX)
			idx[k++] = i;
	sorting = c;
	sorting_keys = keys;
	qsort(idx, k, sizeof(*idx), cmp_node);
	for (size_t i = 0; i < k; i++) {
		const struct node_cov *x = &c->nodes[idx[i]];

		if (ng && g[ng - 1].rank == listed_rank(x->outcome) &&
		    same_msg(keys[idx[g[ng - 1].at]], keys[idx[i]])) {
			g[ng - 1].n++;
			continue;
		}
		g[ng++] = (struct group){ listed_rank(x->outcome), idx[i], i, 1 };
	}
	qsort(g, ng, sizeof(*g), cmp_group);
	for (size_t j = 0; j < ng; j++) {
		int64_t rows = 0;

		for (size_t i = 0; i < g[j].n; i++) {
			hosts[i] = c->names[idx[g[j].at + i]];
			rows += c->nodes[idx[g[j].at + i]].rows;
		}
		fn(ctx, listed[g[j].rank],
		   g[j].n > 1 ? keys[g[j].first] : c->nodes[g[j].first].message, hosts, g[j].n,
		   rows);
	}
out:
	keys_free(keys, c->n);
	free(idx);
	free(hosts);
	free(g);
	return err;
}

static int64_t ok_rows(const struct coverage *c)
{
	int64_t rows = 0;

	for (size_t i = 0; i < c->n; i++)
		if (c->nodes[i].outcome == FQ_OK || c->nodes[i].outcome == FQ_TRUNCATED)
			rows += c->nodes[i].rows;
	return rows;
}

static void summary_group(void *ctx, int outcome, const char *msg, const char *const *hosts,
			  size_t n, int64_t rows)
{
	struct strbuf *b = ctx;
	char *folded = hostlist_fold(hosts, n);

	sb_printf(b, "; %s: %s", outcome_name(outcome), folded ? folded : "?");
	if (msg)
		sb_printf(b, " (%s)", msg);
	free(folded);
}

/* Nodes whose rows the user's --max-rows cut: ok, and said so. */
static void summary_limited(const struct coverage *c, struct strbuf *b)
{
	const char **hosts = NULL;
	char *folded;
	size_t k = 0;

	for (size_t i = 0; i < c->n; i++) {
		if (c->nodes[i].outcome != FQ_OK || c->nodes[i].status != WIRE_E_ROWS)
			continue;
		if (!hosts)
			hosts = malloc(c->n * sizeof(*hosts));
		if (!hosts) {
			b->oom = 1;
			return;
		}
		hosts[k++] = c->names[i];
	}
	if (!k)
		return;
	folded = hostlist_fold(hosts, k);
	sb_printf(b, "; rows limited by --max-rows: %s", folded ? folded : "?");
	free(folded);
	free(hosts);
}

char *coverage_summary(const struct coverage *c)
{
	struct strbuf b = STRBUF_INIT;

	sb_printf(&b, "coverage: %zu/%zu node%s ok, %" PRId64 " row%s", coverage_count(c, FQ_OK),
		  c->n, c->n == 1 ? "" : "s", ok_rows(c), ok_rows(c) == 1 ? "" : "s");
	if (for_groups(c, summary_group, &b))
		b.oom = 1;
	summary_limited(c, &b);
	return sb_detach(&b);
}

char *coverage_common_failure(const struct coverage *c)
{
	char *s = NULL, count[48], **keys;
	const char *msg;

	if (!c->n || coverage_count(c, FQ_OK) || coverage_count(c, FQ_TRUNCATED))
		return NULL;
	keys = keys_new(c);
	if (!keys)
		return NULL;
	for (size_t i = 1; i < c->n; i++)
		if (c->nodes[i].outcome != c->nodes[0].outcome || !same_msg(keys[i], keys[0]))
			goto out;
	msg = c->n > 1 ? keys[0] : c->nodes[0].message;
	/* "on 1 node", "on both nodes", "on all 16 nodes" */
	if (c->n == 2)
		snprintf(count, sizeof(count), "both nodes");
	else
		snprintf(count, sizeof(count), "%s%zu node%s", c->n > 1 ? "all " : "", c->n,
			 c->n == 1 ? "" : "s");
	if (asprintf(&s, "%s on %s%s%s", outcome_name(c->nodes[0].outcome), count,
		     msg ? ": " : "", msg ? msg : "") < 0)
		s = NULL;
out:
	keys_free(keys, c->n);
	return s;
}

static void json_group(void *ctx, int outcome, const char *msg, const char *const *hosts, size_t n,
		       int64_t rows)
{
	struct strbuf *b = ctx;
	char *folded = hostlist_fold(hosts, n);

	if (b->s[b->len - 1] != '[')
		sb_putc(b, ',');
	sb_puts(b, "{\"outcome\":");
	sb_json_str(b, outcome_name(outcome), strlen(outcome_name(outcome)));
	sb_puts(b, ",\"nodes\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			sb_putc(b, ',');
		sb_json_str(b, hosts[i], strlen(hosts[i]));
	}
	sb_puts(b, "],\"hostlist\":");
	sb_json_str(b, folded ? folded : "", folded ? strlen(folded) : 0);
	sb_puts(b, ",\"message\":");
	if (msg)
		sb_json_str(b, msg, strlen(msg));
	else
		sb_puts(b, "null");
	if (outcome == FQ_TRUNCATED)
		sb_printf(b, ",\"rows\":%" PRId64, rows);
	sb_putc(b, '}');
	free(folded);
}

char *coverage_json(const struct coverage *c)
{
	struct strbuf b = STRBUF_INIT;
	size_t ok = coverage_count(c, FQ_OK);

	sb_printf(&b,
		  "{\"total\":%zu,\"ok\":%zu,\"fraction\":%.6g,\"rows\":%" PRId64 ",\"failures\":[",
		  c->n, ok, c->n ? (double)ok / c->n : 0.0, ok_rows(c));
	if (for_groups(c, json_group, &b))
		b.oom = 1;
	sb_puts(&b, "]}");
	return sb_detach(&b);
}

int coverage_exit(const struct coverage *c, double min_fraction)
{
	size_t ok = coverage_count(c, FQ_OK);

	if (coverage_count(c, FQ_TLS))
		return FQ_EXIT_TLS;
	/* --min-coverage 0 forgives some nodes, never all: no answer is no all-clear. */
	if (c->n && !ok)
		return FQ_EXIT_COVERAGE;
	/* ok/n < min, without trusting a division to land exactly on 0.5. */
	if ((double)ok < min_fraction * (double)c->n - 1e-9)
		return FQ_EXIT_COVERAGE;
	return FQ_EXIT_OK;
}
