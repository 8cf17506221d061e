/* SPDX-License-Identifier: MIT */
/*
 * "-- include: NAME.sql" in an analysis file: the lines of sql/analysis/NAME.sql in its
 * place, so that a CTE every node query needs (jobproc.sql: which rows are the job's) is
 * written once. Expanded where the files are read (fleetq's sqlfiles.c, an-run), from the
 * same place as the file that names it; one level only (an included file includes none).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fqsql.h"
#include "strbuf.h"

#define INCLUDE "-- include: "

/* NAME.sql of letters, digits, '_' and '-': never a path. */
static int name_ok(const char *s, size_t n)
{
	if (n < 5 || n > 64 || memcmp(s + n - 4, ".sql", 4))
		return 0;
	for (size_t i = 0; i < n - 4; i++)
		if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= '0' && s[i] <= '9') && s[i] != '_' &&
		    s[i] != '-')
			return 0;
	return 1;
}

int fqsql_expand_includes(const char *text, fqsql_load_fn load, void *arg, char **out,
			  char **cause)
{
	struct strbuf b = STRBUF_INIT;
	const char *p = text;
	int err = 0;

	*out = NULL;
	while (*p) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);

		if (len > strlen(INCLUDE) && !strncmp(p, INCLUDE, strlen(INCLUDE))) {
			const char *name = p + strlen(INCLUDE);
			size_t n = len - strlen(INCLUDE);
			char file[80], *inc;

			while (n && (name[n - 1] == ' ' || name[n - 1] == '\r'))
				n--;
			if (!name_ok(name, n)) {
				err = fq_fail(cause, -EINVAL, "bad include line '%.*s': want '"
						  INCLUDE "NAME.sql'", (int)len, p);
				goto out;
			}
			memcpy(file, name, n);
			file[n] = 0;
			inc = load(file, arg, cause);
			if (!inc) {
				err = -(errno ? errno : ENOENT);
				goto out;
			}
			if (strstr(inc, "\n" INCLUDE) || !strncmp(inc, INCLUDE, strlen(INCLUDE))) {
				free(inc);
				err = fq_fail(cause, -EINVAL, "'%s' includes another file: one level "
							      "only", file);
				goto out;
			}
			sb_puts(&b, inc);
			if (*inc && inc[strlen(inc) - 1] != '\n')
				sb_puts(&b, "\n");
			free(inc);
		} else {
			sb_add(&b, p, len);
			if (eol)
				sb_puts(&b, "\n");
		}
		p += len + (eol ? 1 : 0);
	}
	if (b.oom) {
		err = fq_fail(cause, -ENOMEM, "out of memory expanding includes");
		goto out;
	}
	*out = b.s ? sb_detach(&b) : strdup("");
	if (!*out)
		err = fq_fail(cause, -ENOMEM, "out of memory expanding includes");
out:
	sb_release(&b);
	return err;
}
