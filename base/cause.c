/* SPDX-License-Identifier: MIT */
#include "cause.h"

#include <stdarg.h>
#include <stdio.h>

int fq_fail(char **cause, int err, const char *fmt, ...)
{
	va_list ap;

	if (!cause || *cause)
		return err;
	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) < 0)
		*cause = NULL;
	va_end(ap);
	return err;
}
