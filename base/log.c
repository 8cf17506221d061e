/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static int log_fd = 2;
static char *log_path;
static const char *log_ident;

void log_set_ident(const char *ident)
{
	log_ident = ident;
}

int log_open(const char *path, char **cause)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);

	if (fd < 0) {
		int err = errno;

		if (cause &&
		    asprintf(cause, "cannot open log file '%s': %s", path, strerror(err)) < 0)
			*cause = NULL;
		return -err;
	}
	free(log_path);
	log_path = strdup(path);
	log_fd = fd;
	return 0;
}

int log_reopen(void)
{
	int fd;

	if (!log_path)
		return 0;
	fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
	if (fd < 0)
		return -errno;
	/* dup2 keeps log_fd valid for threads writing at this moment. */
	dup2(fd, log_fd);
	close(fd);
	return 0;
}

void log_line(const char *fmt, ...)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	size_t n;
	int k;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	n += snprintf(line + n, sizeof(line) - n, ".%03ldZ %s: ", ts.tv_nsec / 1000000,
		      log_ident ? log_ident : program_invocation_short_name);
	va_start(ap, fmt);
	k = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (k < 0)
		k = 0;
	n += (size_t)k;
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	/* One write: lines from several threads stay whole (O_APPEND or a tty/pipe). */
	if (write(log_fd, line, n) < 0) {
		/* Nowhere left to report it. */
	}
}

char *log_escape(char *dst, size_t n, const char *s, size_t max)
{
	size_t o = 0, i;

	if (!n)
		return dst;
	for (i = 0; s && s[i] && o + 5 < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (i >= max) {
			if (o + 4 < n) {
				memcpy(dst + o, "...", 3);
				o += 3;
			}
			break;
		}
		if (ch == '\n' || ch == '\t' || ch == '\r' || ch == '"' || ch == '\\') {
			dst[o++] = '\\';
			dst[o++] = ch == '\n'	? 'n'
				   : ch == '\t' ? 't'
				   : ch == '\r' ? 'r'
						: (char)ch;
		} else if (ch < 0x20 || ch == 0x7f) {
			o += (size_t)snprintf(dst + o, n - o, "\\x%02x", ch);
		} else {
			dst[o++] = (char)ch;
		}
	}
	dst[o] = '\0';
	return dst;
}
