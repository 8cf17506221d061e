/* SPDX-License-Identifier: MIT */
/*
 * Which hosts a run asks, with pdsh's and clush's conventions: --hosts FILE
 * (FILE "-": standard input), -w HOSTLIST or -w ^FILE, and -x HOSTLIST or
 * -x ^FILE to leave hosts out.
 */
#ifndef FLEETQ_HOSTSEL_H
#define FLEETQ_HOSTSEL_H

#include <stddef.h>

#include "hostlist.h"

/* One -w, -x or --hosts argument, in the order given. */
struct hostsel_arg {
	char kind; /* 'w', 'x' or 'h' (--hosts) */
	const char *text;
};

/*
 * Appends to hl the hosts args name ('w' and 'h'), then drops those any
 * 'x' names: an excluded entry without a port drops its host on every port.
 * Returns 0, or -errno with *cause (caller frees). *included says whether
 * any 'w' or 'h' was given.
 */
int hostsel_load(struct hostlist *hl, const struct hostsel_arg *args, size_t n, int *included,
		 char **cause);

/* Whether any of args reads standard input (--hosts -, -w ^-, -x ^-). */
int hostsel_reads_stdin(const struct hostsel_arg *args, size_t n);

#endif
