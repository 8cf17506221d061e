/* SPDX-License-Identifier: MIT */
/* hostsel: -w, -w ^FILE, --hosts FILE and -, -x HOSTLIST and -x ^FILE, in pdsh's manner. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "hostsel.h"

/* The hosts args select, joined with spaces ("ERR: cause" on failure). */
static char *sel(const struct hostsel_arg *args, size_t n)
{
	struct hostlist *hl = hostlist_new();
	char *cause = NULL, *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	int inc;

	if (hostsel_load(hl, args, n, &inc, &cause)) {
		fprintf(f, "ERR: %s", cause ? cause : "?");
	} else {
		for (size_t i = 0; i < hostlist_count(hl); i++)
			fprintf(f, "%s%s", i ? " " : "", hostlist_get(hl, i));
		if (!inc)
			fprintf(f, "(none included)");
	}
	fclose(f);
	free(cause);
	hostlist_free(hl);
	return s;
}

#define SEL(want, ...)                                                                      \
	do {                                                                                \
		const struct hostsel_arg a_[] = { __VA_ARGS__ };                            \
		char *s_ = sel(a_, sizeof(a_) / sizeof(a_[0]));                             \
		CHECK_STR(s_, want);                                                        \
		free(s_);                                                                   \
	} while (0)

int main(void)
{
	char path[] = "/tmp/fq-hostsel.XXXXXX", *s;
	FILE *f;
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	f = fdopen(fd, "w");
	fputs("# rack 1\ngpu[02-03]\n\nlogin1:7078  # the login node\n", f);
	fclose(f);

	SEL("gpu01 gpu02 gpu04", { 'w', "gpu[01-04]" }, { 'x', "gpu03" });
	SEL("gpu01 gpu04", { 'x', "gpu03" }, { 'w', "gpu[01-04]" }, { 'x', "gpu02" });
	SEL("gpu01 gpu02 gpu04", { 'w', "gpu[01-04]" }, { 'x', "gpu[03,05]" });
	/* -w ^FILE reads a hosts file, as --hosts FILE */
	{
		char w[64], x[64];

		snprintf(w, sizeof(w), "^%s", path);
		snprintf(x, sizeof(x), "^%s", path);
		SEL("gpu02 gpu03 login1:7078", { 'w', w });
		SEL("gpu02 gpu03 login1:7078", { 'h', path });
		/* -x ^FILE leaves a file's hosts out */
		SEL("gpu01 gpu04", { 'w', "gpu[01-04]" }, { 'x', x });
	}
	/* without a port, -x drops the host on every port; with one, that port only */
	SEL("b:2", { 'w', "a:1,a:2,b:1,b:2" }, { 'x', "a" }, { 'x', "b:1" });
	SEL("a:2", { 'w', "a:[1-2]" }, { 'x', "a:1" });
	/* only -x: nothing included (the caller then takes $SLURM_JOB_NODELIST) */
	SEL("(none included)", { 'x', "gpu01" });
	/* all left out */
	SEL("", { 'w', "gpu01" }, { 'x', "gpu01" });
	/* errors name the expression or the file */
	s = sel(&(struct hostsel_arg){ 'x', "gpu[01-" }, 1);
	CHECK(!strncmp(s, "ERR: ", 5) && strstr(s, "gpu[01-"));
	free(s);
	s = sel(&(struct hostsel_arg){ 'w', "^/nonexistent/hosts" }, 1);
	CHECK(!strncmp(s, "ERR: cannot open hosts file '/nonexistent/hosts'", 48));
	free(s);
	unlink(path);
	return check_done(NULL);
}
