/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the host list parsers (base/hostlist.h). The input
 * is used three ways: up to its first NUL as one expression for
 * hostlist_push(); whole, as a hosts file for hostlist_read_file() (through a
 * memfd, so no file is left behind); and every host that comes out goes
 * through hostlist_split(). When a list is small enough to fold cheaply, the
 * fold must read back to the same set: that is hostlist_fold()'s contract.
 */
#include "hostlist.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Folding is quadratic-ish; past this the round trip is not worth the time. */
#define FOLD_MAX 4096

volatile unsigned fuzz_hostlist_sink;

/* Every entry splits cleanly or says no; a split host is a real string. */
static void split_all(const struct hostlist *hl)
{
	size_t i, n = hostlist_count(hl);

	for (i = 0; i < n && i < FOLD_MAX; i++) {
		char *host = NULL;
		int port = -1;

		if (hostlist_split(hostlist_get(hl, i), 7077, &host, &port) == 0) {
			if (!host || port < 0 || port > 65535)
				abort();
			fuzz_hostlist_sink += (unsigned)strlen(host);
		}
		free(host);
	}
}

/*
 * fold(hosts) pushed into a fresh list gives the same set: the same count,
 * and pushing each original host again adds nothing.
 */
static void fold_roundtrip(const struct hostlist *hl)
{
	size_t i, n = hostlist_count(hl);
	const char **hosts;
	struct hostlist *back = NULL;
	char *folded = NULL, *cause = NULL;

	if (!n || n > FOLD_MAX)
		return;
	hosts = calloc(n, sizeof(*hosts));
	if (!hosts)
		return;
	for (i = 0; i < n; i++)
		hosts[i] = hostlist_get(hl, i);
	folded = hostlist_fold(hosts, n);
	if (!folded)
		goto out;
	back = hostlist_new();
	if (!back)
		goto out;
	if (hostlist_push(back, folded, &cause)) {
		fprintf(stderr, "fold '%s' does not parse: %s\n", folded, cause ? cause : "?");
		abort();
	}
	if (hostlist_count(back) != n) {
		fprintf(stderr, "fold '%s' gives %zu hosts, want %zu\n", folded,
			hostlist_count(back), n);
		abort();
	}
	for (i = 0; i < n; i++) {
		struct hostlist *one = hostlist_new();
		char *c2 = NULL;

		/* Only hosts that read back as themselves can be checked this way. */
		if (one && hostlist_push(one, hosts[i], &c2) == 0 && hostlist_count(one) == 1 &&
		    !strcmp(hostlist_get(one, 0), hosts[i])) {
			if (hostlist_push(back, hosts[i], &cause) || hostlist_count(back) != n) {
				fprintf(stderr, "fold '%s' lacks host '%s'\n", folded, hosts[i]);
				abort();
			}
		}
		free(c2);
		hostlist_free(one);
	}
out:
	free(cause);
	free(folded);
	hostlist_free(back);
	free(hosts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hostlist *hl = hostlist_new();
	char *expr = malloc(size + 1), *cause = NULL, path[64];
	int fd = -1, rc;

	if (!hl || !expr)
		goto out;
	memcpy(expr, data, size);
	expr[size] = '\0';
	rc = hostlist_push(hl, expr, &cause);
	/* Every refusal explains itself. */
	if (rc && rc != -ENOMEM && !cause)
		abort();
	free(cause);
	cause = NULL;
	split_all(hl);
	fold_roundtrip(hl);
	hostlist_free(hl);

	hl = hostlist_new();
	fd = memfd_create("hosts", MFD_CLOEXEC);
	if (!hl || fd < 0 || write(fd, data, size) != (ssize_t)size)
		goto out;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	rc = hostlist_read_file(hl, path, &cause);
	if (rc && rc != -ENOMEM && !cause)
		abort();
	split_all(hl);
	fold_roundtrip(hl);
out:
	if (fd >= 0)
		close(fd);
	free(cause);
	free(expr);
	hostlist_free(hl);
	return 0;
}
