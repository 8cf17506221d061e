/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hostsel.h"
#include "strbuf.h"

/* "^FILE" and "-" (standard input) read a hosts file; anything else is an expression. */
static int push_arg(struct hostlist *hl, char kind, const char *text, char **cause)
{
	if (kind == 'h')
		return hostlist_read_file(hl, strcmp(text, "-") ? text : "/dev/stdin", cause);
	if (text[0] == '^')
		return hostlist_read_file(hl, strcmp(text + 1, "-") ? text + 1 : "/dev/stdin",
					  cause);
	return hostlist_push(hl, text, cause);
}

/* Whether entry (host or host:port) is one of ex's: by host alone where ex has no port. */
static int excluded(const char *entry, const struct hostlist *ex)
{
	char *h = NULL, *xh = NULL;
	int p, xp, hit = 0;

	if (hostlist_split(entry, -1, &h, &p))
		return 0;
	for (size_t i = 0; i < hostlist_count(ex) && !hit; i++) {
		if (hostlist_split(hostlist_get(ex, i), -1, &xh, &xp))
			continue;
		hit = !strcmp(h, xh) && (xp < 0 || xp == p);
		free(xh);
	}
	free(h);
	return hit;
}

int hostsel_load(struct hostlist *hl, const struct hostsel_arg *args, size_t n, int *included,
		 char **cause)
{
	struct hostlist *all = hostlist_new(), *ex = hostlist_new();
	int err = 0;

	*cause = NULL;
	*included = 0;
	if (!all || !ex) {
		err = fq_fail(cause, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && !err; i++) {
		if (args[i].kind != 'x')
			*included = 1;
		err = push_arg(args[i].kind == 'x' ? ex : all, args[i].kind, args[i].text, cause);
	}
	for (size_t i = 0; i < hostlist_count(all) && !err; i++)
		if (!excluded(hostlist_get(all, i), ex))
			err = hostlist_push(hl, hostlist_get(all, i), cause);
out:
	hostlist_free(all);
	hostlist_free(ex);
	return err;
}

int hostsel_reads_stdin(const struct hostsel_arg *args, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((args[i].kind == 'h' && !strcmp(args[i].text, "-")) ||
		    !strcmp(args[i].text, "^-"))
			return 1;
	return 0;
}
