/* SPDX-License-Identifier: MIT */
/*
 * fleetq gate: the metric catalogue. The built-in metrics, and --metric and --builtin
 * parsed into a gate's list (each metric a name, its SQL and which way is worse).
 */
#include "gate_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "coverage.h"
#include "strbuf.h"

/* The world communicator: the one with the most ranks (a job's smaller ones are subsets). */
#define WORLD "nranks = (SELECT max(nranks) FROM collectives)"
#define BUCKET                                                                              \
	"CASE WHEN bytes IS NULL THEN '?' WHEN bytes < 65536 THEN '<64KiB' "                \
	"WHEN bytes < 1048576 THEN '<1MiB' WHEN bytes < 16777216 THEN '<16MiB' "            \
	"ELSE '>=16MiB' END"
#define SYNC_PER_RANK                                                                       \
	"WITH r AS (SELECT node, pid, min(rank) AS rank, min(ts_ns) AS t0, max(ts_ns) AS t1 " \
	"FROM collectives WHERE " WORLD " GROUP BY node, pid) "                              \
	"SELECT r.rank AS rank, coalesce(sum(c.dur_ns), 0) AS wait_ns, "                    \
	"max(max(r.t1 - r.t0), 1) AS wall_ns FROM r LEFT JOIN cuda_calls c ON c.node = r.node " \
	"AND c.pid = r.pid AND c.kind = 'sync' AND c.ts_ns BETWEEN r.t0 AND r.t1 GROUP BY r.rank"

/*
 * Built-in metrics. Collective durations are NCCL's enqueue time (docs/schema.md): a
 * regression there is the library or launch path getting slower, not a straggler. The
 * skew metrics are clock-independent (busy gap, sync wait), as DESIGN.md asks.
 */
static const struct builtin {
	const char *name;
	int higher;
	const char *sql;
} builtins[] = {
	{ "coll_p50_us", 0,
	  "SELECT op, " BUCKET " AS size, p50(dur_ns) / 1e3 FROM collectives GROUP BY 1, 2" },
	{ "coll_p99_us", 0,
	  "SELECT op, " BUCKET " AS size, p99(dur_ns) / 1e3 FROM collectives GROUP BY 1, 2" },
	{ "busy_gap_us", 0,
	  "SELECT rank, median(busy_ns) / 1e3 FROM collectives WHERE busy_ns IS NOT NULL AND "
	  WORLD " GROUP BY rank" },
	{ "busy_skew", 0,
	  "SELECT max(g) / median(g) FROM (SELECT median(busy_ns) AS g FROM collectives "
	  "WHERE busy_ns IS NOT NULL AND " WORLD " GROUP BY rank)" },
	{ "sync_wait_share", 0, "SELECT rank, wait_ns * 1.0 / wall_ns FROM (" SYNC_PER_RANK ")" },
	{ "sync_wait_skew", 0,
	  "SELECT max(wait_ns) / max(median(wait_ns), 1) FROM (" SYNC_PER_RANK ")" },
	{ "tcp_retransmits", 0, "SELECT count(*) FROM tcp_retransmits" },
	{ "ib_errors", 0,
	  "SELECT coalesce(sum(delta), 0) FROM ib_counters WHERE counter IN ('port_rcv_errors', "
	  "'symbol_error', 'link_downed', 'port_xmit_discards', 'local_link_integrity_errors', "
	  "'local_ack_timeout_err', 'packet_seq_err')" },
};
#define NBUILTINS (sizeof(builtins) / sizeof(builtins[0]))
int gate_parse_tolerance(const char *s, double *frac)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || (*end && strcmp(end, "%")) || !(v >= 0) || v > 1000)
		return -EINVAL;
	*frac = v / 100;
	return 0;
}

static int valid_name(const char *s, size_t n)
{
	if (!n || !(s[0] == '_' || ((s[0] | 0x20) >= 'a' && (s[0] | 0x20) <= 'z')))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-",
			    s[i]))
			return 0;
	return 1;
}

int gate_add_metric(struct gate *g, const char *name, size_t nlen, const char *sql, int higher,
		      int builtin)
{
	struct metric *m;

	for (size_t i = 0; i < g->nm; i++)
		if (strlen(g->m[i].name) == nlen && !strncmp(g->m[i].name, name, nlen))
			return gate_error("metric '%.*s' named twice: give each metric its own "
					  "name",
					  (int)nlen, name);
	m = realloc(g->m, (g->nm + 1) * sizeof(*m));
	if (!m)
		return gate_error("out of memory");
	g->m = m;
	m = &g->m[g->nm];
	m->name = strndup(name, nlen);
	m->sql = strdup(sql);
	m->higher = higher;
	m->builtin = builtin;
	if (!m->name || !m->sql) {
		free(m->name);
		free(m->sql);
		return gate_error("out of memory");
	}
	g->nm++;
	return -1;
}

/* "NAME=SQL", "NAME:higher=SQL", "NAME:lower=SQL". */
int gate_parse_metric(struct gate *g, const char *spec)
{
	const char *eq = strchr(spec, '='), *colon;
	size_t nlen;
	int higher = 0;

	if (!eq)
		return gate_error("--metric '%s': write NAME=SQL, e.g. --metric "
				  "\"ar_p99_us=SELECT p99(dur_ns)/1e3 FROM collectives\"",
				  spec);
	colon = memchr(spec, ':', eq - spec);
	nlen = colon ? (size_t)(colon - spec) : (size_t)(eq - spec);
	if (colon) {
		size_t dl = eq - colon - 1;

		if (dl == 6 && !strncmp(colon + 1, "higher", 6))
			higher = 1;
		else if (!(dl == 5 && !strncmp(colon + 1, "lower", 5)))
			return gate_error("--metric '%.*s': unknown direction '%.*s': use "
					  "NAME:higher=SQL or NAME:lower=SQL",
					  (int)(eq - spec), spec, (int)dl, colon + 1);
	}
	if (!valid_name(spec, nlen))
		return gate_error("--metric: invalid name '%.*s': use letters, digits, '_', "
				  "'.' and '-', starting with a letter",
				  (int)nlen, spec);
	if (!eq[1])
		return gate_error("--metric '%.*s': no SQL after '='", (int)nlen, spec);
	return gate_add_metric(g, spec, nlen, eq + 1, higher, 0);
}

int gate_add_builtins(struct gate *g, const char *list)
{
	const char *p = list;

	while (*p) {
		size_t n = strcspn(p, ",");
		int found = 0;

		for (size_t i = 0; i < NBUILTINS; i++)
			if ((n == 3 && !strncmp(p, "all", 3)) ||
			    (strlen(builtins[i].name) == n && !strncmp(p, builtins[i].name, n))) {
				int r = -1;

				found = 1;
				for (size_t k = 0; k < g->nm; k++)
					if (!strcmp(g->m[k].name, builtins[i].name))
						r = 0; /* "all" after a named one */
				if (r < 0)
					r = gate_add_metric(g, builtins[i].name,
							    strlen(builtins[i].name), builtins[i].sql,
							    builtins[i].higher, 1);
				if (r > 0)
					return r;
			}
		if (!found) {
			struct strbuf b = STRBUF_INIT;

			for (size_t i = 0; i < NBUILTINS; i++)
				sb_printf(&b, "%s%s", i ? ", " : "", builtins[i].name);
			gate_error("--builtin: unknown metric '%.*s': use all or some of %s",
				   (int)n, p, b.s ? b.s : "");
			sb_release(&b);
			return FQ_EXIT_USAGE;
		}
		p += n;
		if (*p)
			p++;
	}
	return -1;
}
