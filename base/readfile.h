/* SPDX-License-Identifier: MIT */
/*
 * Reading a small text file the user named (hosts file, config file) so that
 * no path can hang or exhaust fleetq: /dev/zero, a FIFO nobody writes, a
 * directory, a file of gigabytes.
 */
#ifndef FLEETQ_READFILE_H
#define FLEETQ_READFILE_H

#include <stddef.h>

/* How long a pipe or FIFO (not a terminal) may stay silent before the read gives up. */
#define FQ_READ_PIPE_MS 10000

/*
 * Reads all of path into *buf (malloc'd, NUL-terminated; *len bytes before
 * the NUL). Refuses a directory, more than max bytes, a NUL byte, and a pipe
 * or FIFO silent for FQ_READ_PIPE_MS (a FIFO no writer has open reads as
 * empty). what names the file in *cause ("hosts file"). Returns 0 or -errno
 * with *cause; -ENOENT when the file does not exist, with a cause too.
 */
int fq_read_file(const char *path, const char *what, size_t max, char **buf, size_t *len,
		 char **cause);

#endif
