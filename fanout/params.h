/* SPDX-License-Identifier: MIT */
/*
 * --param NAME=VALUE: values for the named parameters (:NAME, @NAME, $NAME) of
 * an ad-hoc query and its --merge SQL. They travel as bound values (the
 * wire's parameter list, sqlite3_bind_* on both sides), never as SQL text.
 */
#ifndef FLEETQ_PARAMS_H
#define FLEETQ_PARAMS_H

#include <stddef.h>
#include <sqlite3.h>

#include "wire.h"

struct qparam {
	const char *name; /* without its sigil, points into the argument */
	size_t namelen;
	struct wire_value v; /* text points into the argument too */
	int used;
};

/*
 * Parses "NAME=VALUE" (NAME may start with ':', '@' or '$'). VALUE is an
 * integer or a real number when it reads fully as one, else text; quote it
 * in single quotes to send digits as text ('007'). arg must outlive p.
 */
int qparam_parse(struct qparam *p, const char *arg, char **cause);

/*
 * The positional values the agents bind to sql (?1..?N), from its named
 * parameters, found by preparing sql against an empty trace of this
 * version's schema. A parameter without a value is an error; *vals (freed by
 * the caller) is NULL when sql has none. Marks the params it used. Without
 * params (n = 0), SQL that does not prepare here is left to the agents.
 */
int qparams_for_query(struct qparam *ps, size_t n, const char *sql, struct wire_value **vals,
		      size_t *nvals, char **cause);

/* Binds the values of ps to st by name (the --merge SQL). Marks those it used. */
int qparams_bind(struct qparam *ps, size_t n, sqlite3_stmt *st, char **cause);

/*
 * All of fleetq's --param handling before the fan-out: parses args[0..n) into
 * *ps (freed by the caller), and plans the values of sql into *vals and *nvals.
 * Without a merge query, a --param the query does not name is an error.
 */
int qparams_setup(const char *const *args, size_t n, const char *sql, int merge,
		  struct qparam **ps, struct wire_value **vals, size_t *nvals, char **cause);

#endif
