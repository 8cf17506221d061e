/* SPDX-License-Identifier: MIT */
/*
 * Whose file is --db? The trace store writes only into a file it created: a
 * path that does not exist yet, an empty file, or a fleetq trace (its meta
 * table names a schema version). Anything else, a user's database above all,
 * is refused before a byte of it changes.
 */
#ifndef FLEETQ_AGENTD_STORE_FILE_H
#define FLEETQ_AGENTD_STORE_FILE_H

#include <stdint.h>

/*
 * Looks at path without writing to it (a read-only SQLite connection, no
 * journal mode change). Returns 0 when the store may write it (new, empty, a
 * trace of this schema or one upgraded in place), -ESTALE for a trace of an
 * older schema (*version says which: move it aside, untouched), or -errno
 * with *cause (caller frees) naming the file and the fix: -ENOTSUP for a
 * newer schema, -EPERM for a file that is not a fleetq trace.
 */
int store_file_check(const char *path, int64_t *version, char **cause);

#endif
