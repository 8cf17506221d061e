/* SPDX-License-Identifier: MIT */
#include "readfile.h"
#include "cause.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fq_read_file(const char *path, const char *what, size_t max, char **buf, size_t *len,
		 char **cause)
{
	struct stat st;
	char *b = NULL, *nul;
	size_t n = 0, cap = 0;
	int fd, err = 0, line = 1;

	*cause = NULL;
	*buf = NULL;
	*len = 0;
	/* O_NONBLOCK: opening a FIFO without a writer must not wait for one. */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return fq_fail(cause, -errno, "cannot open %s '%s': %s", what, path,
			       strerror(errno));
	if (fstat(fd, &st)) {
		err = fq_fail(cause, -errno, "cannot read %s '%s': %s", what, path,
			      strerror(errno));
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		err = fq_fail(cause, -EISDIR, "%s '%s' is a directory: name a file", what, path);
		goto out;
	}
	if (S_ISREG(st.st_mode) && (size_t)st.st_size > max)
		goto too_big;
	for (;;) {
		ssize_t r;

		if (n + 1 >= cap) {
			size_t ncap = cap ? cap * 2 : 4096;
			char *nb;

			if (ncap > max + 2)
				ncap = max + 2;
			nb = realloc(b, ncap);
			if (!nb) {
				err = fq_fail(cause, -ENOMEM, "cannot read %s '%s': %s", what, path,
					      "out of memory");
				goto out;
			}
			b = nb;
			cap = ncap;
		}
		r = read(fd, b + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN) {
			/* A pipe with a writer that has not written yet: wait, but not forever. */
			struct pollfd p = { .fd = fd, .events = POLLIN };
			/* (a person typing at a terminal takes the time it takes) */
			int k = poll(&p, 1, isatty(fd) ? -1 : FQ_READ_PIPE_MS);

			if (k == 0) {
				err = fq_fail(cause, -ETIMEDOUT,
					      "cannot read %s '%s': nothing written for %d s", what,
					      path, FQ_READ_PIPE_MS / 1000);
				goto out;
			}
			if (k < 0 && errno != EINTR) {
				err = fq_fail(cause, -errno, "cannot read %s '%s': %s", what, path,
					      strerror(errno));
				goto out;
			}
			continue;
		}
		if (r < 0) {
			err = fq_fail(cause, -errno, "cannot read %s '%s': %s", what, path,
				      strerror(errno));
			goto out;
		}
		if (!r)
			break;
		/* Checked as it comes: /dev/zero is refused at its first byte. */
		nul = memchr(b + n, 0, (size_t)r);
		if (nul) {
			for (char *c = b; c < nul; c++)
				line += *c == '\n';
			if (asprintf(cause, "%s '%s': line %d holds a NUL byte: is it a text file?",
				     what, path, line) < 0)
				*cause = NULL;
			err = -EINVAL;
			goto out;
		}
		n += (size_t)r;
		if (n > max)
			goto too_big;
	}
	b[n] = 0;
	*buf = b;
	*len = n;
	b = NULL;
	goto out;
too_big:
	if (asprintf(cause, "%s '%s' is larger than %zu bytes: is it the right file?", what, path,
		     max) < 0)
		*cause = NULL;
	err = -EFBIG;
out:
	free(b);
	close(fd);
	return err;
}
