/* SPDX-License-Identifier: MIT */
#include "hostlist.h"
#include "readfile.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A hosts file of HOSTLIST_MAX long names fits; more is the wrong file (/dev/zero). */
#define HOSTS_FILE_MAX (64u << 20)

#define HOST_MAX 1024

struct hostlist {
	char **hosts;
	size_t n, cap;
	/* Open-addressing set of indexes+1 into hosts, for "first one wins". */
	size_t *set;
	size_t setcap;
};

struct hostlist *hostlist_new(void)
{
	return calloc(1, sizeof(struct hostlist));
}

void hostlist_free(struct hostlist *hl)
{
	if (!hl)
		return;
	for (size_t i = 0; i < hl->n; i++)
		free(hl->hosts[i]);
	free(hl->hosts);
	free(hl->set);
	free(hl);
}

size_t hostlist_count(const struct hostlist *hl)
{
	return hl->n;
}

const char *hostlist_get(const struct hostlist *hl, size_t i)
{
	return i < hl->n ? hl->hosts[i] : NULL;
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* Returns the slot holding s, or the empty slot where it would go. */
static size_t *set_slot(struct hostlist *hl, const char *s)
{
	size_t mask = hl->setcap - 1;

	for (size_t i = hash_str(s) & mask;; i = (i + 1) & mask) {
		size_t v = hl->set[i];

		if (!v || !strcmp(hl->hosts[v - 1], s))
			return &hl->set[i];
	}
}

static int set_grow(struct hostlist *hl)
{
	size_t ncap = hl->setcap ? hl->setcap * 2 : 64;
	size_t *old = hl->set, oldcap = hl->setcap;

	hl->set = calloc(ncap, sizeof(*hl->set));
	if (!hl->set) {
		hl->set = old;
		return -ENOMEM;
	}
	hl->setcap = ncap;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i])
			*set_slot(hl, hl->hosts[old[i] - 1]) = old[i];
	free(old);
	return 0;
}

/*
 * "host:09401" is "host:9401": one node, queried and counted once. Writes
 * the entry with its port's leading zeros gone into out (HOST_MAX bytes).
 */
static const char *canon_port(const char *s, char *out)
{
	const char *colon = s[0] == '[' ? strstr(s, "]:") : strchr(s, ':');
	const char *d;

	if (!colon)
		return s;
	colon += s[0] == '[';
	/* a bare IPv6 address ("::1") has no port */
	if (s[0] != '[' && strchr(colon + 1, ':'))
		return s;
	d = colon + 1;
	while (d[0] == '0' && d[1])
		d++;
	if (d == colon + 1 || strspn(d, "0123456789") != strlen(d))
		return s;
	snprintf(out, HOST_MAX, "%.*s%s", (int)(colon + 1 - s), s, d);
	return out;
}

static int add_host(struct hostlist *hl, const char *s)
{
	char canon[HOST_MAX];
	size_t *slot;

	s = canon_port(s, canon);

	if ((hl->n + 1) * 2 > hl->setcap && set_grow(hl))
		return -ENOMEM;
	slot = set_slot(hl, s);
	if (*slot)
		return 0;
	if (hl->n == hl->cap) {
		size_t ncap = hl->cap ? hl->cap * 2 : 16;
		char **nh = realloc(hl->hosts, ncap * sizeof(*nh));

		if (!nh)
			return -ENOMEM;
		hl->hosts = nh;
		hl->cap = ncap;
	}
	hl->hosts[hl->n] = strdup(s);
	if (!hl->hosts[hl->n])
		return -ENOMEM;
	*slot = ++hl->n;
	return 0;
}

struct expand {
	struct hostlist *hl;
	const char *expr; /* whole expression, for messages */
	char **cause;
	size_t budget;
	char buf[HOST_MAX];
};

#define HOSTLIST_MAX_TEXT "1000000" /* HOSTLIST_MAX, for messages */

static int bad(struct expand *x, const char *why)
{
	if (x->cause && asprintf(x->cause, "invalid host expression '%s': %s", x->expr, why) < 0)
		*x->cause = NULL;
	return -EINVAL;
}

static int valid_char(char c)
{
	return isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_' || c == ':';
}

/* Appends text[0..len) to buf at pos, expanding the bracket groups left in it. */
static int expand_rest(struct expand *x, size_t pos, const char *s, size_t len)
{
	const char *open = memchr(s, '[', len), *close, *p;
	size_t plen;
	int err;

	plen = open ? (size_t)(open - s) : len;
	if (pos + plen >= HOST_MAX)
		return bad(x, "host name too long");
	for (size_t i = 0; i < plen; i++) {
		if (s[i] == ']')
			return bad(x, "']' without '['");
		if (!valid_char(s[i]))
			return bad(x, "unexpected character in host name");
	}
	memcpy(x->buf + pos, s, plen);
	pos += plen;
	if (!open) {
		if (!pos)
			return bad(x, "empty host name");
		if (!x->budget--)
			return bad(x, "expands to too many hosts");
		x->buf[pos] = 0;
		return add_host(x->hl, x->buf);
	}
	close = memchr(open, ']', len - plen);
	if (!close)
		return bad(x, "'[' without ']'");
	if (close == open + 1)
		return bad(x, "empty brackets");
	for (p = open + 1; p < close;) {
		const char *lo = p, *hi;
		size_t lolen, hilen, width;
		unsigned long long a, b;

		while (p < close && isdigit((unsigned char)*p))
			p++;
		lolen = p - lo;
		if (!lolen)
			return bad(x,
				   *p == '[' ? "nested brackets" : "expected a number in brackets");
		hi = lo;
		hilen = lolen;
		if (p < close && *p == '-') {
			hi = ++p;
			while (p < close && isdigit((unsigned char)*p))
				p++;
			hilen = p - hi;
			if (!hilen)
				return bad(x, "range without an upper bound");
		}
		if (p < close && *p != ',')
			return bad(x, *p == '[' ? "nested brackets"
						: "unexpected character in brackets");
		if (p < close && p + 1 == close)
			return bad(x, "trailing ',' in brackets");
		if (p < close)
			p++;
		if (lolen > 18 || hilen > 18)
			return bad(x, "number too large");
		a = strtoull(lo, NULL, 10);
		b = strtoull(hi, NULL, 10);
		if (a > b)
			return bad(x, "range goes backwards");
		if (b - a >= x->budget)
			return bad(x, "expands to too many hosts");
		/* Zero padding follows the lower bound, as Slurm does: [08-10] -> 08 09 10. */
		width = lolen;
		for (unsigned long long v = a;; v++) {
			int n = snprintf(x->buf + pos, HOST_MAX - pos, "%0*llu", (int)width, v);

			if (n < 0 || pos + n >= HOST_MAX)
				return bad(x, "host name too long");
			err = expand_rest(x, pos + n, close + 1, len - (close + 1 - s));
			if (err)
				return err;
			if (v == b)
				break;
		}
	}
	return 0;
}

/*
 * How many hosts s[0..len) expands to, saturating at limit + 1, counted
 * before any is made: "h[0-9]-[0-9][0-94531]" would otherwise build a
 * million hosts only to be refused at the last one. Malformed brackets count
 * as 1; expand_rest() says what is wrong with them.
 */
static size_t expansion_size(const char *s, size_t len, size_t limit)
{
	const char *end = s + len, *open, *close, *p;
	size_t total = 1;

	while ((open = memchr(s, '[', (size_t)(end - s))) &&
	       (close = memchr(open, ']', (size_t)(end - open)))) {
		size_t group = 0;

		for (p = open + 1; p < close;) {
			unsigned long long a = 0, b;
			int digits = 0;

			while (p < close && isdigit((unsigned char)*p) && digits < 19)
				a = a * 10 + (unsigned)(*p++ - '0'), digits++;
			b = a;
			if (p < close && *p == '-') {
				b = 0;
				digits = 0;
				for (p++; p < close && isdigit((unsigned char)*p) && digits < 19; p++)
					b = b * 10 + (unsigned)(*p - '0'), digits++;
			}
			group += b >= a && b - a < limit ? (size_t)(b - a) + 1 : 1;
			if (group > limit)
				return limit + 1;
			while (p < close && *p != ',')
				p++;
			if (p < close)
				p++;
		}
		if (group && total > limit / group)
			return limit + 1;
		total *= group ? group : 1;
		s = close + 1;
	}
	return total;
}

/* One comma-free element: a literal, an IPv6 literal or a bracket expression. */
static int expand_one(struct expand *x, const char *s, size_t len)
{
	const char *close;

	while (len && isspace((unsigned char)*s))
		s++, len--;
	while (len && isspace((unsigned char)s[len - 1]))
		len--;
	if (!len)
		return bad(x, "empty host name");
	/* "[::1]" / "[::1]:7077": brackets holding a ':' are an IPv6 literal. */
	if (s[0] == '[' && (close = memchr(s, ']', len)) && memchr(s, ':', close - s)) {
		size_t i;

		for (i = 1; s + i < close; i++)
			if (!valid_char(s[i]) && s[i] != '%')
				return bad(x, "unexpected character in IPv6 address");
		if (close + 1 != s + len) {
			if (close[1] != ':' || close + 2 == s + len)
				return bad(x, "expected ':port' after IPv6 address");
			for (const char *q = close + 2; q < s + len; q++)
				if (!isdigit((unsigned char)*q))
					return bad(x, "port is not a number");
		}
		if (len >= HOST_MAX)
			return bad(x, "host name too long");
		memcpy(x->buf, s, len);
		x->buf[len] = 0;
		if (!x->budget--)
			return bad(x, "expands to too many hosts");
		return add_host(x->hl, x->buf);
	}
	if (expansion_size(s, len, x->budget) > x->budget) {
		bad(x, "expands to more than " HOSTLIST_MAX_TEXT " hosts");
		return -E2BIG;
	}
	return expand_rest(x, 0, s, len);
}

int hostlist_push(struct hostlist *hl, const char *expr, char **cause)
{
	struct expand *x;
	const char *s = expr, *p;
	int depth = 0, err = 0;

	if (cause)
		*cause = NULL;
	x = malloc(sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->hl = hl;
	x->expr = expr;
	x->cause = cause;
	x->budget = HOSTLIST_MAX;
	for (p = expr;; p++) {
		if (*p == '[')
			depth++;
		else if (*p == ']')
			depth--;
		if (*p == 0 || (*p == ',' && depth <= 0)) {
			err = expand_one(x, s, p - s);
			if (err || !*p)
				break;
			s = p + 1;
		}
	}
	free(x);
	return err;
}

int hostlist_read_file(struct hostlist *hl, const char *path, char **cause)
{
	FILE *f;
	char *line = NULL, *c, *text;
	size_t cap = 0, tlen;
	ssize_t len;
	unsigned lineno = 0;
	int err = 0;

	*cause = NULL;
	err = fq_read_file(path, "hosts file", HOSTS_FILE_MAX, &text, &tlen, cause);
	if (err)
		return err;
	f = fmemopen(text, tlen ? tlen : 1, "r");
	if (!f) {
		free(text);
		return -ENOMEM;
	}
	while ((len = getline(&line, &cap, f)) >= 0) {
		char *sub = NULL;

		lineno++;
		if ((c = strchr(line, '#')))
			*c = 0;
		c = line;
		while (isspace((unsigned char)*c))
			c++;
		if (!*c)
			continue;
		len = strlen(c);
		while (len && isspace((unsigned char)c[len - 1]))
			c[--len] = 0;
		err = hostlist_push(hl, c, &sub);
		if (err) {
			if (asprintf(cause, "%s:%u: %s", path, lineno, sub ? sub : strerror(-err)) <
			    0)
				*cause = NULL;
			free(sub);
			break;
		}
	}
	if (!err && ferror(f)) {
		err = -EIO;
		if (asprintf(cause, "cannot read hosts file '%s'", path) < 0)
			*cause = NULL;
	}
	free(line);
	fclose(f);
	free(text);
	return err;
}

int hostlist_split(const char *entry, int default_port, char **host, int *port)
{
	const char *colon, *end;
	size_t hlen;
	long v = default_port;

	if (entry[0] == '[') {
		end = strchr(entry, ']');
		if (!end)
			return -EINVAL;
		entry++;
		hlen = end - entry;
		colon = end[1] == ':' ? end + 1 : NULL;
		if (!colon && end[1])
			return -EINVAL;
	} else {
		colon = strchr(entry, ':');
		/* A bare IPv6 address ("::1") has several colons and no port. */
		if (colon && strchr(colon + 1, ':'))
			colon = NULL;
		hlen = colon ? (size_t)(colon - entry) : strlen(entry);
	}
	if (colon) {
		char *e;

		errno = 0;
		v = strtol(colon + 1, &e, 10);
		if (errno || *e || e == colon + 1 || v < 1 || v > 65535)
			return -EINVAL;
	}
	if (!hlen)
		return -EINVAL;
	*host = strndup(entry, hlen);
	if (!*host)
		return -ENOMEM;
	*port = (int)v;
	return 0;
}

/* ---- folding ---- */

struct fold_item {
	size_t order; /* first appearance of the group */
	size_t group; /* group id */
	unsigned long long num;
	const char *host;
	size_t plen; /* prefix length; the number follows */
	size_t nlen; /* digits */
	int width;   /* zero-padded width, 0 when unpadded */
};

/* Finds the last run of digits; hosts with brackets or none stay literal. */
static int split_num(const char *h, size_t *plen, size_t *nlen)
{
	size_t len = strlen(h), e, b;

	if (strpbrk(h, "[]"))
		return 0;
	for (e = len; e > 0 && !isdigit((unsigned char)h[e - 1]); e--)
		;
	if (!e)
		return 0;
	for (b = e; b > 0 && isdigit((unsigned char)h[b - 1]); b--)
		;
	if (e - b > 18)
		return 0;
	*plen = b;
	*nlen = e - b;
	return 1;
}

static int same_affix(const struct fold_item *a, const struct fold_item *b)
{
	return a->plen == b->plen && !strncmp(a->host, b->host, a->plen) &&
	       !strcmp(a->host + a->plen + a->nlen, b->host + b->plen + b->nlen);
}

/*
 * Groups by affix (the host around its number) and width, found by hash:
 * 200,000 hosts fold in linear time. kind 0: a group (value: its id); kind
 * 1: "some host of this affix is padded to this width" (value unused).
 */
struct fold_map {
	struct fold_slot {
		const struct fold_item *item; /* NULL: empty */
		int width, kind;
		size_t group;
	} *slot;
	size_t cap;
};

static size_t fold_hash(const struct fold_item *x, int width, int kind)
{
	uint64_t h = 1469598103934665603ull;
	const char *suffix = x->host + x->plen + x->nlen;

	for (size_t i = 0; i < x->plen; i++)
		h = (h ^ (unsigned char)x->host[i]) * 1099511628211ull;
	h = (h ^ 0x100) * 1099511628211ull;
	for (; *suffix; suffix++)
		h = (h ^ (unsigned char)*suffix) * 1099511628211ull;
	h = (h ^ (uint64_t)width) * 1099511628211ull;
	h = (h ^ (uint64_t)kind) * 1099511628211ull;
	return (size_t)h;
}

static struct fold_slot *fold_find(struct fold_map *m, const struct fold_item *x, int width,
				   int kind)
{
	size_t i = fold_hash(x, width, kind) & (m->cap - 1);

	while (m->slot[i].item && !(m->slot[i].width == width && m->slot[i].kind == kind &&
				    same_affix(m->slot[i].item, x)))
		i = (i + 1) & (m->cap - 1);
	return &m->slot[i];
}

static int cmp_item(const void *pa, const void *pb)
{
	const struct fold_item *a = pa, *b = pb;

	if (a->order != b->order)
		return a->order < b->order ? -1 : 1;
	if (a->num != b->num)
		return a->num < b->num ? -1 : 1;
	return 0;
}

struct sbuf {
	char *s;
	size_t len, cap;
	int oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t ncap = (b->len + n + 1) * 2;
		char *ns = realloc(b->s, ncap);

		if (!ns) {
			b->oom = 1;
			return;
		}
		b->s = ns;
		b->cap = ncap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
}

static void sb_num(struct sbuf *b, unsigned long long v, int width)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%0*llu", width, v);

	sb_add(b, tmp, n);
}

char *hostlist_fold(const char *const *hosts, size_t n)
{
	struct fold_item *it = calloc(n ? n : 1, sizeof(*it));
	struct fold_map m = { NULL, 16 };
	struct sbuf b = { 0 };
	size_t ngroups = 0, i, j;

	while (m.cap < 4 * (n + 1))
		m.cap *= 2;
	m.slot = calloc(m.cap, sizeof(*m.slot));
	if (!it || !m.slot) {
		free(it);
		free(m.slot);
		return NULL;
	}
	sb_add(&b, "", 0);
	for (i = 0; i < n; i++) {
		struct fold_item *x = &it[i];

		x->host = hosts[i];
		x->group = SIZE_MAX;
		if (!split_num(x->host, &x->plen, &x->nlen))
			continue;
		x->num = strtoull(x->host + x->plen, NULL, 10);
		if (x->nlen > 1 && x->host[x->plen] == '0')
			x->width = (int)x->nlen;
	}
	/* Padded numbers group by width; an unpadded one joins a padded group of
	 * its own length ("10" with "08"), else the unpadded group. */
	for (i = 0; i < n; i++)
		if (it[i].nlen && it[i].width) {
			struct fold_slot *s = fold_find(&m, &it[i], it[i].width, 1);

			if (!s->item)
				*s = (struct fold_slot){ &it[i], it[i].width, 1, 0 };
		}
	for (i = 0; i < n; i++) {
		struct fold_item *x = &it[i];
		struct fold_slot *s;
		int want = x->width;

		if (!x->nlen) {
			x->group = ngroups++;
			x->order = x->group;
			continue;
		}
		if (!want && fold_find(&m, x, (int)x->nlen, 1)->item)
			want = (int)x->nlen;
		s = fold_find(&m, x, want, 0);
		x->width = want;
		if (!s->item)
			*s = (struct fold_slot){ x, want, 0, ngroups++ };
		x->group = s->group;
		x->order = x->group;
	}
	qsort(it, n, sizeof(*it), cmp_item);
	for (i = 0; i < n; i = j) {
		size_t k, count = 0;

		for (j = i; j < n && it[j].group == it[i].group; j++)
			if (j == i || it[j].num != it[j - 1].num)
				count++;
		if (b.len)
			sb_add(&b, ",", 1);
		if (!it[i].nlen || count == 1) {
			sb_add(&b, it[i].host, strlen(it[i].host));
			continue;
		}
		sb_add(&b, it[i].host, it[i].plen);
		sb_add(&b, "[", 1);
		for (k = i; k < j;) {
			size_t e = k;

			while (e + 1 < j &&
			       (it[e + 1].num == it[e].num || it[e + 1].num == it[e].num + 1))
				e++;
			if (k != i)
				sb_add(&b, ",", 1);
			sb_num(&b, it[k].num, it[i].width);
			if (it[e].num != it[k].num) {
				sb_add(&b, "-", 1);
				sb_num(&b, it[e].num, it[i].width);
			}
			k = e + 1;
		}
		sb_add(&b, "]", 1);
		sb_add(&b, it[i].host + it[i].plen + it[i].nlen,
		       strlen(it[i].host + it[i].plen + it[i].nlen));
	}
	free(m.slot);
	free(it);
	if (b.oom) {
		free(b.s);
		errno = ENOMEM;
		return NULL;
	}
	return b.s;
}
