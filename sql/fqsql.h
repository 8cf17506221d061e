/* SPDX-License-Identifier: MIT */
/*
 * sql/: what both sides do with SQLite — the statistics functions users type
 * (median, percentile, mad, p50..p999, robust_z), the trace schema, and the
 * read-only guard agentd runs every query behind.
 */
#ifndef FLEETQ_FQSQL_H
#define FLEETQ_FQSQL_H

#include <stdint.h>
#include <sqlite3.h>

/* 2: collectives, cuda_calls, offcpu, tcp_retransmits keyed by ts_ns (docs/schema.md) */
#define FQSQL_SCHEMA_VERSION 5

/* Registers median(x), percentile(x, p), p50/p90/p95/p99/p999(x), mad(x),
 * robust_z(x, median, mad) and friends on db. Returns 0 or -errno. */
int fqsql_register(sqlite3 *db);

/* Replaces printf() and format() on db with SQLite's own behind a bound on what one call
 * may cost (fqsql_printf.c); fqsql_open_readonly() applies it. Returns 0 or -errno. */
int fqsql_register_printf(sqlite3 *db);

/*
 * Definitions (docs/schema.md has them in full): percentile(x, p) is numpy's
 * default 'linear' method, p in [0, 100]; median = percentile 50; p999 = 99.9;
 * mad(x) = median(|x - median(x)|), unscaled. All skip NULLs, return NULL for
 * no values, and also work as window functions.
 * robust_z(x, median, mad) = FQSQL_Z_K * (x - median) / mad, clamped to
 * +-FQSQL_Z_CAP. When mad == 0: 0 if x == median, else +-FQSQL_Z_CAP (more than
 * half the ranks agree exactly, so one that differs is as far out as it gets).
 * NULL if any argument is NULL; an error if mad < 0.
 */
#define FQSQL_Z_K 0.6745
#define FQSQL_Z_CAP 1e9

/*
 * Process-wide SQLite settings; call first in main(), before any other SQLite
 * call. Turns off SQLite's memory statistics: with them on, every allocation
 * takes a global mutex (a hot spot when fleetq inserts millions of rows and when
 * agentd serves many short queries). Without them sqlite3_hard_heap_limit64()
 * has no effect, so a program that wants fqsql_limits.heap_limit must not call
 * this. Returns 0, or -EBUSY when SQLite is already initialised.
 */
int fqsql_init_process(void);

/*
 * Per-thread memory budgets for SQLite (fqsql_mem.c). fqsql_mem_install()
 * replaces SQLite's allocator; call it in main() before SQLite is used.
 * total > 0 bounds all open budgets together. Between fqsql_mem_begin() and
 * fqsql_mem_end() every SQLite allocation on the calling thread is charged to
 * a budget of limit bytes; one that would pass it (or total, or comes after
 * deadline_ns, 0 = none) fails, which SQLite reports as SQLITE_NOMEM for that
 * statement. Threads without a budget (a writer) are never refused.
 */
enum fqsql_mem_hit { FQSQL_MEM_QUERY = 1, FQSQL_MEM_TOTAL, FQSQL_MEM_DEADLINE, FQSQL_MEM_STOPPED };
struct fqsql_budget;
int fqsql_mem_install(int64_t total);
int fqsql_mem_begin(int64_t limit, int64_t deadline_ns); /* 0, -EINVAL, -ENOMEM */
void fqsql_mem_set_deadline(int64_t deadline_ns);
int fqsql_mem_hit(void);      /* 0 or the enum fqsql_mem_hit that refused an allocation */
/* 1 when the open budget's deadline passed or it was stopped (fqsql_mem_hit() then says
 * which), as if an allocation had been refused; 0 otherwise or without a budget. */
int fqsql_mem_expired(void);
int64_t fqsql_mem_peak(void); /* most bytes the open budget held at once */
void fqsql_mem_end(void);
int64_t fqsql_mem_total(void); /* bytes charged to budgets, open or not, now */
/* The calling thread's open budget (NULL: none), for fqsql_mem_stop() from another thread. */
struct fqsql_budget *fqsql_mem_current(void);
/* Any thread: b's next allocations fail (FQSQL_MEM_STOPPED), as past a deadline. b must
 * still be open: the caller keeps it from fqsql_mem_end() meanwhile. */
void fqsql_mem_stop(struct fqsql_budget *b);

/*
 * Creates (IF NOT EXISTS) the trace schema and records schema_version in meta.
 * A file of an older schema version is left as it is: -ESTALE (a writer moves
 * it aside and starts a new file); a newer one: -ENOTSUP.
 */
int fqsql_schema_apply(sqlite3 *db, char **cause);
extern const char fqsql_schema_sql[]; /* sql/schema.sql, embedded at build time */

struct fqsql_limits {
	int64_t max_length;   /* largest string/blob a query may make (SQLITE_LIMIT_LENGTH) */
	/* process-wide sqlite3_hard_heap_limit64, 0 = leave; needs SQLite's memory
	 * statistics (SQLITE_CONFIG_MEMSTATUS, which agentd turns off for ingest) */
	int64_t heap_limit;
	int max_vdbe_op;      /* 0 = default */
};

/* Used when lim is NULL or a field is 0 */
#define FQSQL_DEFAULT_MAX_LENGTH (64 << 20)
#define FQSQL_MAX_SQL_LENGTH (1 << 20)

/*
 * Opens path for queries that can only read: SQLITE_OPEN_READONLY, query_only,
 * defensive mode, no extension loading, no ATTACH (limit 0), and an authorizer
 * that denies writes, ATTACH/DETACH, PRAGMA other than a read-only allow-list,
 * and functions that touch files or load code. fqsql_register() is applied.
 * Works on a file another process is writing in WAL mode. Its temporary files
 * (sorts, transient tables) are kept in memory by fqsql_tmpvfs().
 * Returns 0, or -errno with *cause (caller frees) naming the file and the fix.
 */
int fqsql_open_readonly(const char *path, const struct fqsql_limits *lim, sqlite3 **db,
			char **cause);

/*
 * Name of a VFS (fqsql_tmpvfs.c) that keeps a connection's temporary files in
 * memory allocated on the running thread, so a memory budget covers them, and
 * opens every named file through the default VFS; NULL if it cannot be made.
 */
const char *fqsql_tmpvfs(void);

/*
 * Makes a connection from fqsql_open_readonly() ready for its next query, as
 * if just opened: limits (lim as for open), defensive mode, query_only, the
 * authorizer and no deadline. For a caller that keeps connections between
 * queries. Statements it keeps must be reset: with one mid-step (a read
 * transaction open) this fails.
 * Returns 0, or -errno: then close db and open a new one.
 */
int fqsql_rearm(sqlite3 *db, const struct fqsql_limits *lim);

/*
 * Prepares exactly one statement; more than one (anything but whitespace and
 * comments after the first) is refused. Returns 0, -EACCES when the
 * authorizer denied it (the cause says what), -EINVAL for SQL errors.
 */
int fqsql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, char **cause);

/* Interrupts the running statement once CLOCK_MONOTONIC passes deadline_ns
 * (0 clears). sqlite3_step then fails with SQLITE_INTERRUPT. */
void fqsql_set_deadline(sqlite3 *db, int64_t deadline_ns);
/* True when the last SQLITE_INTERRUPT on db came from the deadline. */
int fqsql_deadline_passed(sqlite3 *db);

/*
 * Turns a failed sqlite3_step() (rc) on db into -errno and a one-line *cause
 * (caller frees): -ETIMEDOUT past the deadline, -E2BIG over the length limit,
 * -ENOMEM over the heap limit, -EACCES denied by the authorizer (e.g. a
 * pragma_* table that would change a setting), -EIO otherwise.
 */
int fqsql_step_cause(sqlite3 *db, int rc, char **cause);

void fqsql_close(sqlite3 *db);

/*
 * Loads an included file by name (e.g. "jobproc.sql"): the malloc'd text, or NULL with
 * errno and *cause set.
 */
typedef char *(*fqsql_load_fn)(const char *name, void *arg, char **cause);
/*
 * text with each line "-- include: NAME.sql" replaced by load(NAME.sql) (sql/analysis/:
 * a CTE written once for every node query). *out is malloc'd; 0 or -errno with *cause.
 */
int fqsql_expand_includes(const char *text, fqsql_load_fn load, void *arg, char **out,
			  char **cause);

#endif
