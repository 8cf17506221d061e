/* SPDX-License-Identifier: MIT */
/*
 * hostlist(name): an SQL aggregate for the merge database that folds node
 * names back into one hostlist expression, as pdsh's dshbak -c and clush -b
 * do: SELECT hostlist(node), n FROM results GROUP BY n -> gpu[01-04,07] | 42.
 */
#ifndef FLEETQ_HOSTLIST_SQL_H
#define FLEETQ_HOSTLIST_SQL_H

#include <sqlite3.h>

/* Registers hostlist() on db. 0 or -EIO. */
int hostlist_sql_register(sqlite3 *db);

#endif
