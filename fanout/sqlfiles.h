/* SPDX-License-Identifier: MIT */
/*
 * The built-in analyses' .sql files, found at run time so users can read and
 * adapt them: $FLEETQ_SQL_DIR, else the install folder, else the source tree
 * next to a build tree's binary; else the copies embedded at build time, so
 * a binary carried alone to another machine still works.
 */
#ifndef FLEETQ_SQLFILES_H
#define FLEETQ_SQLFILES_H

/*
 * Loads name (e.g. "stragglers.node.sql"), its "-- include: NAME.sql" lines expanded
 * from the same place (fqsql_expand_includes). Returns the malloc'd text and sets
 * *origin to a malloc'd description of where it came from (a path, or
 * "built in"); NULL with errno and *cause (caller frees) when $FLEETQ_SQL_DIR
 * names a folder without the file or the file cannot be read.
 */
char *sqlfile_load(const char *name, char **origin, char **cause);

#endif
