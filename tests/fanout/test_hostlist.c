/* SPDX-License-Identifier: MIT */
/* hostlist: expansion, zero padding, IPv6, duplicates, errors, folding round trips. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "hostlist.h"

/* Expands expr and joins the hosts with spaces ("ERR: cause" on failure). */
static char *expand(const char *expr)
{
	struct hostlist *hl = hostlist_new();
	char *cause = NULL, *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);

	if (hostlist_push(hl, expr, &cause)) {
		fprintf(f, "ERR: %s", cause ? cause : "?");
	} else {
		for (size_t i = 0; i < hostlist_count(hl); i++)
			fprintf(f, "%s%s", i ? " " : "", hostlist_get(hl, i));
	}
	fclose(f);
	free(cause);
	hostlist_free(hl);
	return s;
}

static void check_expand(const char *expr, const char *want, int line)
{
	char *got = expand(expr);

	if (strcmp(got, want)) {
		fprintf(stderr, "line %d: expand('%s') = '%s', want '%s'\n", line, expr, got, want);
		check_failures++;
	}
	free(got);
}
#define EXPANDS(e, w) check_expand(e, w, __LINE__)

static void check_error(const char *expr, int line)
{
	char *got = expand(expr);

	/* One line naming the expression. */
	if (strncmp(got, "ERR: ", 5) || !strstr(got, expr) || strchr(got, '\n')) {
		fprintf(stderr, "line %d: expand('%s') = '%s', want an error naming it\n", line,
			expr, got);
		check_failures++;
	}
	free(got);
}
#define FAILS(e) check_error(e, __LINE__)

/* fold(hosts) must equal want, and expanding want must give the hosts back. */
static void check_fold(const char *hosts, const char *want, int line)
{
	char *copy = strdup(hosts), *save = NULL, *tok, *folded, *back;
	const char *arr[64];
	size_t n = 0;

	for (tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
		arr[n++] = tok;
	folded = hostlist_fold(arr, n);
	if (!folded || strcmp(folded, want)) {
		fprintf(stderr, "line %d: fold('%s') = '%s', want '%s'\n", line, hosts,
			folded ? folded : "(null)", want);
		check_failures++;
	}
	back = expand(want);
	/* Folding sorts within a group; compare as the sorted expansion of the input. */
	{
		struct hostlist *hl = hostlist_new();
		char *cause = NULL;
		size_t i, j, ok = 1;

		hostlist_push(hl, folded ? folded : "", &cause);
		free(cause);
		if (hostlist_count(hl) != n)
			ok = 0;
		for (i = 0; ok && i < n; i++) {
			for (j = 0; j < hostlist_count(hl); j++)
				if (!strcmp(arr[i], hostlist_get(hl, j)))
					break;
			if (j == hostlist_count(hl))
				ok = 0;
		}
		if (!ok) {
			fprintf(stderr,
				"line %d: fold('%s') = '%s' does not expand back (got '%s')\n",
				line, hosts, folded ? folded : "", back);
			check_failures++;
		}
		hostlist_free(hl);
	}
	free(back);
	free(folded);
	free(copy);
}
#define FOLDS(h, w) check_fold(h, w, __LINE__)

static void test_split(void)
{
	char *host = NULL;
	int port = 0;

	CHECK(!hostlist_split("gpu01", 7077, &host, &port));
	CHECK_STR(host, "gpu01");
	CHECK(port == 7077);
	free(host);
	CHECK(!hostlist_split("127.0.0.1:9000", 7077, &host, &port));
	CHECK_STR(host, "127.0.0.1");
	CHECK(port == 9000);
	free(host);
	CHECK(!hostlist_split("[::1]:7078", 7077, &host, &port));
	CHECK_STR(host, "::1");
	CHECK(port == 7078);
	free(host);
	CHECK(!hostlist_split("[fe80::1]", 7077, &host, &port));
	CHECK_STR(host, "fe80::1");
	CHECK(port == 7077);
	free(host);
	CHECK(!hostlist_split("::1", 7077, &host, &port));
	CHECK_STR(host, "::1");
	free(host);
	CHECK(hostlist_split("gpu01:0", 7077, &host, &port) == -EINVAL);
	CHECK(hostlist_split("gpu01:70000", 7077, &host, &port) == -EINVAL);
	CHECK(hostlist_split("gpu01:x", 7077, &host, &port) == -EINVAL);
	CHECK(hostlist_split(":7077", 7077, &host, &port) == -EINVAL);
	CHECK(hostlist_split("[::1]x", 7077, &host, &port) == -EINVAL);
}

static void test_file(void)
{
	char path[] = "/tmp/fq-hosts-XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fdopen(fd, "w");
	struct hostlist *hl = hostlist_new();
	char *cause = NULL;

	fputs("# the nodes\n\n  gpu[01-02]  # two\nlocalhost:7078\n\t\ngpu01\n[::1]:7079\n", f);
	fclose(f);
	CHECK(!hostlist_read_file(hl, path, &cause));
	CHECK(hostlist_count(hl) == 4);
	CHECK_STR(hostlist_get(hl, 0), "gpu01");
	CHECK_STR(hostlist_get(hl, 1), "gpu02");
	CHECK_STR(hostlist_get(hl, 2), "localhost:7078");
	CHECK_STR(hostlist_get(hl, 3), "[::1]:7079");
	free(cause);
	cause = NULL;
	f = fopen(path, "w");
	fputs("ok1\nbad[3-1]\n", f);
	fclose(f);
	CHECK(hostlist_read_file(hl, path, &cause) == -EINVAL);
	CHECK(cause && strstr(cause, ":2:") && strstr(cause, "bad[3-1]"));
	free(cause);
	CHECK(hostlist_read_file(hl, "/nonexistent/hosts", &cause) == -ENOENT);
	CHECK(cause && strstr(cause, "/nonexistent/hosts"));
	free(cause);
	/* a NUL cuts no line silently */
	f = fopen(path, "w");
	fwrite("ok1\nbad\0tail\n", 1, 14, f);
	fclose(f);
	CHECK(hostlist_read_file(hl, path, &cause) == -EINVAL);
	CHECK(cause && strstr(cause, "line 2 holds a NUL byte"));
	free(cause);
	/* /dev/zero: refused at once, not read until memory runs out */
	CHECK(hostlist_read_file(hl, "/dev/zero", &cause) == -EINVAL);
	CHECK(cause && strstr(cause, "NUL"));
	free(cause);
	CHECK(hostlist_read_file(hl, "/tmp", &cause) == -EISDIR);
	CHECK(cause && strstr(cause, "is a directory"));
	free(cause);
	unlink(path);
	hostlist_free(hl);
}

int main(void)
{
	EXPANDS("gpu01", "gpu01");
	EXPANDS("gpu[01-03]", "gpu01 gpu02 gpu03");
	EXPANDS("gpu[01-03,20]", "gpu01 gpu02 gpu03 gpu20");
	EXPANDS("gpu[8-10]", "gpu8 gpu9 gpu10");
	EXPANDS("gpu[08-10]", "gpu08 gpu09 gpu10");
	EXPANDS("gpu[098-100]", "gpu098 gpu099 gpu100");
	EXPANDS("r[1-2]n[01-02]", "r1n01 r1n02 r2n01 r2n02");
	EXPANDS("a,b[1-3],c", "a b1 b2 b3 c");
	EXPANDS("node[1-2].example.com", "node1.example.com node2.example.com");
	EXPANDS("gpu[1-2]:7078", "gpu1:7078 gpu2:7078");
	EXPANDS("127.0.0.1:[7077-7078]", "127.0.0.1:7077 127.0.0.1:7078");
	EXPANDS("[::1]:7077", "[::1]:7077");
	EXPANDS("[::1]:7077,[::1]:7078", "[::1]:7077 [::1]:7078");
	EXPANDS("[fe80::1%eth0]", "[fe80::1%eth0]");
	EXPANDS("gpu[1-3],gpu2,gpu1", "gpu1 gpu2 gpu3");
	EXPANDS(" a , b ", "a b");
	EXPANDS("gpu[5]", "gpu5");
	/* one node however its port is spelled */
	EXPANDS("host:9401,host:09401", "host:9401");
	EXPANDS("host:0[9401-9402],host:9401", "host:9401 host:9402");
	EXPANDS("[::1]:09551,[::1]:9551", "[::1]:9551");
	EXPANDS("h:0", "h:0");
	EXPANDS("fd00::17", "fd00::17");
	FAILS("gpu[");
	FAILS("gpu[01-");
	FAILS("gpu[3-1]");
	FAILS("gpu]");
	FAILS("gpu[]");
	FAILS("gpu[a-b]");
	FAILS("gpu[1-2");
	FAILS("gpu[[1-2]]");
	FAILS("gpu[1,]");
	FAILS("a,,b");
	FAILS("gpu 01");
	FAILS("gpu[0-99999999]");
	FAILS("[::1]x");
	FAILS("");

	FOLDS("gpu03 gpu07", "gpu[03,07]");
	FOLDS("gpu01 gpu02 gpu03 gpu04", "gpu[01-04]");
	FOLDS("gpu04 gpu01 gpu03 gpu02", "gpu[01-04]");
	FOLDS("gpu08 gpu09 gpu10", "gpu[08-10]");
	FOLDS("gpu8 gpu9 gpu10 gpu11", "gpu[8-11]");
	FOLDS("gpu01", "gpu01");
	FOLDS("login gpu01 gpu02 r1n01 r1n02", "login,gpu[01-02],r1n[01-02]");
	FOLDS("gpu1 gpu01", "gpu1,gpu01");
	FOLDS("n1.x n2.x n4.x", "n[1-2,4].x");
	FOLDS("127.0.0.1:7077 127.0.0.1:7078 127.0.0.1:7080", "127.0.0.1:[7077-7078,7080]");
	FOLDS("[::1]:7077 [::1]:7078", "[::1]:7077,[::1]:7078");
	{
		const char *dup[] = { "gpu01", "gpu01", "gpu02" };
		char *e = hostlist_fold(dup, 3);

		CHECK_STR(e, "gpu[01-02]");
		free(e);
	}
	{
		char *e = hostlist_fold(NULL, 0);

		CHECK_STR(e, "");
		free(e);
	}
	test_split();
	test_file();
	return check_done(NULL);
}
