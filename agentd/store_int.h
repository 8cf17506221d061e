/* SPDX-License-Identifier: MIT */
/*
 * The store's insides, shared by its files (agentd/store.h is the interface):
 *   store.c         the ring, store_put, the batching writer thread, meta, open/close
 *   store_sql.c     the record kinds' tables, the statements the writer runs, the binding
 *   store_setup.c   opening the file: whose it is, its schema, pragmas, start-up meta
 *   store_schema.c  the kinds' tables checked against the file's
 *   store_ckpt.c    the checkpointer thread
 *   store_retain.c  retention by age and by size
 */
#ifndef FLEETQ_AGENTD_STORE_INT_H
#define FLEETQ_AGENTD_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <sqlite3.h>

#include "records.h"
#include "store.h"

/* WAL pages after a commit that ask the checkpointer for a pass (SQLite's default) */
#define CKPT_PAGES 1000
/* ... and that make the writer wait for one, so the WAL starts over (32 MiB of 4 KiB
 * pages; journal_size_limit then truncates it) */
#define CKPT_WAIT_PAGES 8192

/* The most strings (TEXT columns) a record carries: rec_process' four */
#define REC_STRINGS 4

/* The store's file and its -wal and -shm, whose inodes store_roll.c follows */
#define ROLL_FILES 3

/* The writer's statements: four fixed ones, then one per record kind (ST_REC_KIND) */
enum {
	ST_BEGIN,
	ST_COMMIT,
	ST_ROLLBACK,
	ST_META,
	ST_REC,
	ST_MAX = ST_REC + REC_KIND_MAX
};
#define ST_REC_KIND(kind) (ST_REC - REC_PROCESS + (kind))

/*
 * The record kinds' tables (store_sql.c: rec_tables[]), the one place that names their
 * columns: each column's name, how its field is stored, where the field is in the kind's
 * struct of records.h. The writer's INSERTs are built from them when the store opens,
 * binding is one loop over them, and store_schema.c checks them against the file's tables.
 */
enum col_type {
	COL_I64,  /* int64_t; REC_NULL is NULL */
	COL_I32,  /* int32_t; REC_NULL32 is NULL */
	COL_TEXT, /* const char *; NULL is NULL */
	COL_HASH, /* char[17], 16 hex digits; "" is NULL */
};

struct rec_col {
	const char *name;
	uint16_t off; /* of the field in the kind's struct */
	uint8_t type; /* enum col_type */
};

enum rec_conflict {
	CONFLICT_FAIL,     /* INSERT: a taken key fails the row (see ts_key) */
	CONFLICT_IGNORE,   /* INSERT OR IGNORE: the first row of a key stays */
	CONFLICT_COALESCE, /* ON CONFLICT (the first nkey columns) DO UPDATE SET every other
			    * column to coalesce(excluded.column, column): NULL fields of a
			    * later record leave what is stored */
};

struct rec_table {
	const char *name;
	const struct rec_col *col; /* in the order of the statement's parameters ?1, ?2, ... */
	const char *sql;           /* the statement when it is not the INSERT the table makes */
	uint16_t size;             /* of the kind's struct (tests: every field has its column) */
	uint8_t ncol, nkey, conflict;
	bool ts_key; /* col[0] is ts_ns, the INTEGER PRIMARY KEY: a taken one is moved on */
};

/* an earlier agent's name for a communicator (store_comm_name) */
struct comm_name {
	uint64_t nccl_hash;
	uint32_t pid;
	char name[17];
};

struct meta_kv {
	struct meta_kv *next;
	bool is_text;
	int64_t i;
	char *text;
	char key[];
};

struct store {
	/* producers */
	_Atomic uint64_t tail __attribute__((aligned(64)));
	_Atomic int64_t drops_full;
	_Atomic int sleeping;     /* the writer waits on wake */
	_Atomic uint64_t wake_at; /* ... and wants a signal at this queue depth */

	/* consumer, published for producers and stats */
	_Atomic uint64_t head __attribute__((aligned(64)));
	_Atomic int64_t rows, drops_write, write_errors, retained, ts_nudged;
	_Atomic int64_t txn_oldest_ns; /* enqueue time of the open batch's first record, or 0 */

	struct slot *ring; /* store.c */
	uint64_t mask;
	/* per record kind, the offsets of its string fields in its struct (rec_tables[]' TEXT
	 * columns), which store_put copies into the slot */
	uint16_t str_off[REC_KIND_MAX + 1][REC_STRINGS];
	uint8_t nstr[REC_KIND_MAX + 1];
	int batch_rows;
	int64_t batch_ns;
	int64_t retain_bytes, retain_age_s;
	char *path;
	struct store_opts opts; /* as opened: store_roll.c opens the path again with them */
	struct comm_name *names; /* read when the store opened, sorted; then read-only */
	int nnames;

	sqlite3 *db;
	sqlite3_stmt *st[ST_MAX];
	sqlite3_stmt *gap[REC_KIND_MAX + 1]; /* ts_key kinds: first free ts_ns >= ?1, made when
					      * needed */
	pthread_t thread;
	bool thread_started;
	sqlite3 *ckpt_db; /* the checkpointer's connection, or NULL: the writer checkpoints */
	pthread_t ckpt_thread;
	bool ckpt_started;
	int wal_pages; /* frames in the WAL after the writer's last commit */

	/* writer-only */
	bool txn_open, failing, row_warned, roll_warned;
	/* the file, -wal and -shm the writer opened (store_roll.c), and when to look again */
	dev_t roll_dev[ROLL_FILES];
	ino_t roll_ino[ROLL_FILES];
	int64_t next_roll_ns;
	struct roll_meta *carry; /* the closed file's meta, for the next file */
	int ncarry;
	int in_txn;
	int64_t nudged_txn; /* rows of the open batch whose ts_ns was moved */
	int64_t next_retain_ns;
	uint64_t wr_head;

	/* under mu */
	pthread_mutex_t mu;
	pthread_cond_t wake; /* writer waits here */
	pthread_cond_t done; /* store_flush / store_retain_now wait here */
	pthread_cond_t ckpt_wake; /* the checkpointer waits here */
	uint64_t ckpt_req, ckpt_done; /* passes asked for / the last one done (its request) */
	bool ckpt_stop;
	uint64_t committed;    /* every record before this position is committed or dropped */
	uint64_t flush_target; /* a flusher waits for committed >= this */
	uint64_t retain_req, retain_done;
	int retain_rc;
	bool stop;
	struct meta_kv *meta;
	uint64_t meta_gen, meta_done; /* meta set / meta written (or tried) */
};

static inline void bind_i64(sqlite3_stmt *st, int i, int64_t v)
{
	if (v == REC_NULL)
		sqlite3_bind_null(st, i);
	else
		sqlite3_bind_int64(st, i, v);
}

static inline void bind_text(sqlite3_stmt *st, int i, const char *v)
{
	if (!v)
		sqlite3_bind_null(st, i);
	else
		sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
}

/* store.c: the writer's steps, used by its other files too */
int step_reset(sqlite3_stmt *st);
void meta_put_int(struct store *s, const char *key, int64_t v);
void meta_put_text(struct store *s, const char *key, const char *v);
void write_failed(struct store *s, int rc);
void stop_thread(struct store *s, pthread_t thread, bool *started, bool *stop,
		 pthread_cond_t *wake);

/* store_sql.c: the fixed statements, the kinds' tables by enum rec_kind, the statement of
 * table t (malloc'd; NULL: out of memory), and r bound to its statement (returned) */
extern const char *const stmt_sql[ST_REC];
extern const struct rec_table rec_tables[REC_KIND_MAX + 1];
char *rec_table_sql(const struct rec_table *t);
sqlite3_stmt *bind_rec(struct store *s, const struct rec *r);

/* store_setup.c: opens the file and prepares the statements; 0 or -errno with *cause */
int store_setup_db(struct store *s, const struct store_opts *o, char **cause);
/* store_setup.c: s->names from the file's comms rows (before the writer starts) */
void store_read_names(struct store *s);

/*
 * store_schema.c: the columns of tabs (rec_tables, or a test's) against PRAGMA table_info
 * of their tables; 0, or -errno with *cause naming the table and the column that disagree.
 */
int store_schema_check(sqlite3 *db, const char *path, const struct rec_table *tabs,
		       char **cause);

/* store_ckpt.c */
void ckpt_request(struct store *s, bool wait);
void ckpt_start(struct store *s, const char *path);
void ckpt_stop(struct store *s);

/*
 * store_roll.c: roll_note() records the inodes of the file just opened; roll_check(), between
 * batches, closes a file renamed away and starts a new one at the path when the path is free
 * or empty (records are dropped while it is neither); roll_free() frees the meta it carries.
 */
void roll_note(struct store *s);
void roll_check(struct store *s, int64_t now);
void roll_free(struct store *s);

/* store_retain.c */
int exec_int(sqlite3 *db, const char *sql, int64_t *out);
bool retain_due(struct store *s, uint64_t retain_req, int64_t now);
void retain_run(struct store *s, uint64_t retain_req);

#endif
