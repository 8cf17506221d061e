/* SPDX-License-Identifier: MIT */
/* fq_fail(): one behaviour for every error path, the first cause wins. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cause.h"
#include "check.h"

/* An inner failure, then the caller's vaguer one on the way out. */
static int inner(char **cause)
{
	return fq_fail(cause, -ENOENT, "cannot open '%s'", "x.db");
}

static int outer(char **cause)
{
	int err = inner(cause);

	return err ? fq_fail(cause, -EIO, "cannot start the store") : 0;
}

int main(void)
{
	char *cause = NULL;

	CHECK(fq_fail(NULL, -EINVAL, "nobody asks %d", 1) == -EINVAL);
	CHECK(outer(&cause) == -EIO);
	CHECK(cause && !strcmp(cause, "cannot open 'x.db'"));
	free(cause);
	cause = NULL;
	CHECK(fq_fail(&cause, 0, "%s", "") == 0);
	CHECK(cause && !strcmp(cause, ""));
	free(cause);
	if (!check_failures)
		printf("cause: ok\n");
	return check_done(NULL);
}
