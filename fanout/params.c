/* SPDX-License-Identifier: MIT */
/*
 * --param: the values of an ad-hoc query's named parameters. An agent binds
 * values by position (wire/PROTOCOL.md: QUERY's params), so fleetq prepares the
 * query locally, against an empty trace of its own schema version, to learn
 * which name each position has, exactly as the analyses' files are planned.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fqsql.h"
#include "params.h"
#include "strbuf.h"

int qparam_parse(struct qparam *p, const char *arg, char **cause)
{
	const char *eq = strchr(arg, '='), *val, *name = arg;
	size_t vlen;
	char *end;

	memset(p, 0, sizeof(*p));
	if (*name == ':' || *name == '@' || *name == '$')
		name++;
	if (!eq || eq == name)
		return fq_fail(cause, -EINVAL,
			       "--param '%s': give NAME=VALUE, e.g. --param c=9a646edbb275b4fe",
			       arg);
	for (const char *s = name; s < eq; s++)
		if (!(*s == '_' || (*s >= '0' && *s <= '9') || ((*s | 0x20) >= 'a' &&
								    (*s | 0x20) <= 'z')))
			return fq_fail(cause, -EINVAL,
				       "--param '%s': a name is letters, digits and '_'", arg);
	p->name = name;
	p->namelen = (size_t)(eq - name);
	val = eq + 1;
	vlen = strlen(val);
	if (vlen >= 2 && val[0] == '\'' && val[vlen - 1] == '\'') {
		p->v = (struct wire_value){ .type = WIRE_TEXT, .p = val + 1, .n = vlen - 2 };
		return 0;
	}
	if (*val) {
		errno = 0;
		p->v.i = strtoll(val, &end, 10);
		if (!errno && !*end) {
			p->v.type = WIRE_INT;
			return 0;
		}
		errno = 0;
		p->v.d = strtod(val, &end);
		if (!errno && !*end && p->v.d == p->v.d) {
			p->v.type = WIRE_REAL;
			return 0;
		}
	}
	p->v = (struct wire_value){ .type = WIRE_TEXT, .p = val, .n = vlen };
	return 0;
}

/* The param named by a statement's parameter name (":c"), or NULL. */
static struct qparam *lookup(struct qparam *ps, size_t n, const char *pn)
{
	if (!pn || !*pn)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strlen(pn + 1) == ps[i].namelen && !strncmp(pn + 1, ps[i].name, ps[i].namelen))
			return &ps[i];
	return NULL;
}

int qparams_for_query(struct qparam *ps, size_t n, const char *sql, struct wire_value **vals,
		      size_t *nvals, char **cause)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	struct wire_value *v = NULL;
	char *why = NULL;
	int err, np;

	*vals = NULL;
	*nvals = 0;
	if (sqlite3_open(":memory:", &db) != SQLITE_OK || fqsql_register(db) ||
	    fqsql_schema_apply(db, &why)) {
		err = fq_fail(cause, -EIO, "--param: cannot check the query: %s",
			      why ? why : sqlite3_errmsg(db));
		goto out;
	}
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK || !st) {
		/* without --param, the agents judge SQL this schema version does not know */
		err = !n ? 0
			 : fq_fail(cause, -EINVAL,
				   "--param: cannot find the query's parameters: %s",
				   st ? sqlite3_errmsg(db) : "no statement");
		goto out;
	}
	np = sqlite3_bind_parameter_count(st);
	v = calloc(np ? np : 1, sizeof(*v));
	if (!v) {
		err = fq_fail(cause, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < np; i++) {
		const char *pn = sqlite3_bind_parameter_name(st, i + 1);
		struct qparam *p = lookup(ps, n, pn);

		if (!p) {
			err = pn ? fq_fail(cause, -EINVAL,
					   "query parameter '%s' has no value: pass --param "
					   "%s=VALUE",
					   pn, pn + 1)
				 : fq_fail(cause, -EINVAL,
					   "query parameter %d is a bare '?': name it (:NAME) and "
					   "pass --param NAME=VALUE", i + 1);
			goto out;
		}
		p->used = 1;
		v[i] = p->v;
	}
	*vals = np ? v : NULL;
	*nvals = (size_t)np;
	if (np)
		v = NULL;
	err = 0;
out:
	free(v);
	free(why);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return err;
}

int qparams_bind(struct qparam *ps, size_t n, sqlite3_stmt *st, char **cause)
{
	int np = sqlite3_bind_parameter_count(st), rc = SQLITE_OK;

	for (int i = 1; i <= np && rc == SQLITE_OK; i++) {
		struct qparam *p = lookup(ps, n, sqlite3_bind_parameter_name(st, i));

		if (!p)
			continue;
		p->used = 1;
		switch (p->v.type) {
		case WIRE_INT:
			rc = sqlite3_bind_int64(st, i, p->v.i);
			break;
		case WIRE_REAL:
			rc = sqlite3_bind_double(st, i, p->v.d);
			break;
		default:
			rc = sqlite3_bind_text(st, i, p->v.p, (int)p->v.n, SQLITE_STATIC);
		}
	}
	return rc == SQLITE_OK ? 0 : fq_fail(cause, -EINVAL, "--param: cannot bind: %s",
					     sqlite3_errstr(rc));
}

int qparams_setup(const char *const *args, size_t n, const char *sql, int merge,
		  struct qparam **ps, struct wire_value **vals, size_t *nvals, char **cause)
{
	struct qparam *p = calloc(n ? n : 1, sizeof(*p));
	int err = 0;

	*ps = p;
	*vals = NULL;
	*nvals = 0;
	if (!p)
		return fq_fail(cause, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n && !err; i++)
		err = qparam_parse(&p[i], args[i], cause);
	for (size_t i = 0; i < n && !err; i++)
		for (size_t k = 0; k < i && !err; k++)
			if (p[k].namelen == p[i].namelen &&
			    !strncmp(p[k].name, p[i].name, p[i].namelen))
				err = fq_fail(cause, -EINVAL, "--param '%.*s' given twice",
					      (int)p[i].namelen, p[i].name);
	if (!err)
		err = qparams_for_query(p, n, sql, vals, nvals, cause);
	for (size_t i = 0; i < n && !err && !merge; i++)
		if (!p[i].used)
			err = fq_fail(cause, -EINVAL,
				      "--param '%.*s': the query has no parameter :%.*s",
				      (int)p[i].namelen, p[i].name, (int)p[i].namelen, p[i].name);
	return err;
}
