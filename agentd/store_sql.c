/* SPDX-License-Identifier: MIT */
/*
 * The record kinds' tables, the statements the store's writer runs (one cached
 * per record kind) and the binding of records to them.
 *
 * rec_tables[] is the one place that names the columns the writer fills: each
 * kind's INSERT is built from it when the store opens, a record is bound by
 * one loop over it (straight from the ring slot: SQLITE_STATIC, no allocation),
 * and store_schema.c checks it against the file's tables (sql/schema.sql) at
 * open. Each column names its field of the kind's struct in records.h; COL()
 * does not compile when the field's C type is not the column's. The structs
 * stay written out in records.h rather than generated with the tables: their
 * field order is laid out for the 256-byte ring slot (collectives' int32 ret in
 * the hash's padding, gpu_samples' int32 fields together), which is not the
 * order of the file's columns.
 */
#include <stdbool.h>
#include <stddef.h>

#include <sqlite3.h>

#include "strbuf.h"
#include "store_int.h"

const char *const stmt_sql[ST_REC] = {
	[ST_BEGIN] = "BEGIN",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_META] = "INSERT INTO meta (key, value) VALUES (?1, ?2) "
		    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
};

#define COL_CTYPE_I64 int64_t
#define COL_CTYPE_I32 int32_t
#define COL_CTYPE_TEXT const char *
#define COL_CTYPE_HASH char * /* char[17], as _Generic sees it */

/*
 * Column name, stored as type, from field f of struct R (defined around each table); a
 * field whose C type is not type's does not compile ("_Generic selector ... not compatible").
 */
#define COL_AS(type, name, f)                                                                \
	{ name, _Generic(((struct R *)0)->f, COL_CTYPE_##type: offsetof(struct R, f)), COL_##type }
#define COL(type, f) COL_AS(type, #f, f)

#define R rec_process
static const struct rec_col process_cols[] = {
	COL(I64, pid),
	COL(I64, start_ns),
	COL(I64, exit_ns),
	COL(I64, exit_code),
	COL(I64, ppid),
	COL(TEXT, comm),
	COL(TEXT, cmdline),
	COL(TEXT, cgroup),
	COL(I64, cgroup_id),
	COL(I64, rank),
	COL(I64, local_rank),
	COL(I64, world_size),
	COL(TEXT, job_id),
};
#undef R

#define R rec_comm
static const struct rec_col comm_cols[] = {
	COL(I64, ts_ns),
	COL(I64, dur_ns),
	COL(I64, pid),
	COL(I64, tid),
	COL(I64, comm_ptr),
	COL(HASH, comm_hash),
	COL(I64, rank),
	COL(I64, nranks),
	COL(TEXT, fn),
	COL(I64, ret),
	COL(HASH, nccl_hash),
};
#undef R

/* the parameters of REC_COMM_DESTROY's UPDATE (rec_tables[]): destroyed_ns, then the row's key */
#define R rec_comm_destroy
static const struct rec_col comm_destroy_cols[] = {
	COL_AS(I64, "destroyed_ns", ts_ns),
	COL(I64, pid),
	COL(I64, comm_ptr),
};
#undef R

#define R rec_collective
static const struct rec_col collective_cols[] = {
	COL(I64, ts_ns),
	COL(I64, dur_ns),
	COL(I64, pid),
	COL(I64, tid),
	COL(I64, comm_ptr),
	COL(HASH, comm_hash),
	COL(I64, rank),
	COL(I64, nranks),
	COL(I64, seq),
	COL(TEXT, op),
	COL(I64, count),
	COL(I64, bytes),
	COL(TEXT, datatype),
	COL(TEXT, redop),
	COL(I64, peer),
	COL(I64, stream),
	COL(I64, busy_ns),
	COL(I32, ret),
	COL(I64, sync_ns),
	COL(I64, gap_ns),
	COL(I64, cpu_ns),
};
#undef R

#define R rec_cuda
static const struct rec_col cuda_cols[] = {
	COL(I64, ts_ns),
	COL(I64, dur_ns),
	COL(I64, pid),
	COL(I64, tid),
	COL(TEXT, api),
	COL(TEXT, kind),
	COL(I64, bytes),
	COL(I64, stream),
	COL(I64, ret),
};
#undef R

#define R rec_offcpu
static const struct rec_col offcpu_cols[] = {
	COL(I64, ts_ns),
	COL(I64, dur_ns),
	COL(I64, pid),
	COL(I64, tid),
	COL(TEXT, reason),
};
#undef R

#define R rec_tcp
static const struct rec_col tcp_cols[] = {
	COL(I64, ts_ns),
	COL(I64, pid),
	COL(TEXT, saddr),
	COL(I64, sport),
	COL(TEXT, daddr),
	COL(I64, dport),
	COL(TEXT, state),
};
#undef R

#define R rec_ib
static const struct rec_col ib_cols[] = {
	COL(I64, ts_ns),
	COL(TEXT, device),
	COL(I64, port),
	COL(TEXT, counter),
	COL(I64, value),
	COL(I64, delta),
};
#undef R

#define R rec_group
static const struct rec_col group_cols[] = {
	COL(I64, ts_ns),
	COL(I64, dur_ns),
	COL(I64, end_dur_ns),
	COL(I64, pid),
	COL(I64, tid),
	COL(I64, ncalls),
	COL(I64, ret),
};
#undef R

#define R rec_kernel
static const struct rec_col kernel_cols[] = {
	COL(I64, ts_ns),
	COL(I64, host_dur_ns),
	COL(I64, pid),
	COL(I64, rank),
	COL(I64, nranks),
	COL(HASH, nccl_comm),
	COL(HASH, comm_hash),
	COL(TEXT, op),
	COL(I64, seq),
	COL(I64, count),
	COL(I64, nchannels),
	COL(I64, gpu_start_ns),
	COL(I64, gpu_dur_ns),
	COL(I64, gpu_ch_ns),
	COL(I64, partial),
	COL(I64, peer),
};
#undef R

#define R rec_busy
static const struct rec_col busy_cols[] = {
	COL(I64, ts_ns),
	COL(I64, dur_ns),
	COL(I64, pid),
	COL(I64, device),
	COL(I64, busy_ns),
	COL(I64, nccl_ns),
	COL(I64, kernels),
	COL(I64, nccl_kernels),
	COL(I64, dropped),
	COL(I64, late_ns),
};
#undef R

#define R rec_gpu
static const struct rec_col gpu_cols[] = {
	COL(I64, ts_ns),
	COL(I32, gpu_index),
	COL_AS(TEXT, "gpu_uuid", uuid),
	COL(TEXT, pci_bus_id),
	COL(I32, sm_clock_mhz),
	COL(I32, mem_clock_mhz),
	COL(I32, sm_clock_max_mhz),
	COL(I32, mem_clock_max_mhz),
	COL(I64, clock_reasons),
	COL(I32, temp_c),
	COL(I32, power_mw),
	COL(I32, power_limit_mw),
	COL(I32, util_gpu_pct),
	COL(I32, util_mem_pct),
	COL(I64, ecc_uncorrected),
	COL(I64, ecc_corrected),
	COL(I32, remap_corrected),
	COL(I32, remap_uncorrected),
	COL(I32, remap_pending),
	COL(I32, remap_failed),
	COL(I64, xid_count),
	COL(I32, xid_last),
	COL(I32, pcie_gen),
	COL(I32, pcie_width),
	COL(I32, pcie_gen_max),
	COL(I32, pcie_width_max),
	COL(I32, pcie_replays),
	COL(I64, nvlink_replay),
	COL(I64, nvlink_recovery),
	COL(I64, nvlink_crc),
};
#undef R

#define R rec_gpu_act
static const struct rec_col gpu_act_cols[] = {
	COL(I64, ts_ns),
	COL(I64, dur_ns),
	COL(I32, gpu_index),
	COL_AS(TEXT, "gpu_uuid", uuid),
	COL(I32, sm_active_pm),
	COL(I32, sm_occupancy_pm),
	COL(I32, tensor_pm),
	COL(I32, dram_bw_pm),
};
#undef R

#define R rec_process_gpu
static const struct rec_col process_gpu_cols[] = {
	COL(I64, pid),
	COL(I64, start_ns),
	COL(I64, gpu_index),
	COL(TEXT, gpu_uuid),
	COL(TEXT, source),
	COL(I64, ts_ns),
};
#undef R

#define TABLE(n, st, cols)                                                              \
	.name = n, .col = cols, .ncol = sizeof(cols) / sizeof(cols[0]), .size = sizeof(struct st)

const struct rec_table rec_tables[REC_KIND_MAX + 1] = {
	/* One statement does both the first sighting and the exit update: a
	 * record's NULL fields leave what is stored alone. */
	[REC_PROCESS] = { TABLE("processes", rec_process, process_cols), .nkey = 2,
			  .conflict = CONFLICT_COALESCE },
	[REC_COMM] = { TABLE("comms", rec_comm, comm_cols) },
	/* not an insert: destroyed_ns of the newest comms row of (pid, comm_ptr) */
	[REC_COMM_DESTROY] = { TABLE("comms", rec_comm_destroy, comm_destroy_cols),
			       .sql = "UPDATE comms SET destroyed_ns = ?1 WHERE rowid = "
				      "(SELECT rowid FROM comms WHERE pid = ?2 AND comm_ptr = ?3 "
				      "ORDER BY ts_ns DESC, rowid DESC LIMIT 1)" },
	[REC_COLLECTIVE] = { TABLE("collectives", rec_collective, collective_cols),
			     .ts_key = true },
	[REC_CUDA] = { TABLE("cuda_calls", rec_cuda, cuda_cols), .ts_key = true },
	[REC_OFFCPU] = { TABLE("offcpu", rec_offcpu, offcpu_cols), .ts_key = true },
	[REC_TCP] = { TABLE("tcp_retransmits", rec_tcp, tcp_cols), .ts_key = true },
	[REC_IB] = { TABLE("ib_counters", rec_ib, ib_cols) },
	[REC_GROUP] = { TABLE("nccl_groups", rec_group, group_cols) },
	[REC_KERNEL] = { TABLE("nccl_kernels", rec_kernel, kernel_cols), .ts_key = true },
	[REC_GPU] = { TABLE("gpu_samples", rec_gpu, gpu_cols) },
	/*
	 * The driver's list: the first sighting stays (since when the process has used the
	 * GPU). The environment's: the latest read that named it, so that the rows of a
	 * process's last read (after its exec; nvml_map.c) are the latest ones, even where
	 * that read named a GPU of an earlier one again
	 */
	[REC_PROCESS_GPU] = { TABLE("process_gpus", rec_process_gpu, process_gpu_cols),
			      .sql = "INSERT INTO process_gpus (pid, start_ns, gpu_index, gpu_uuid, "
				     "source, ts_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
				     "ON CONFLICT (pid, start_ns, gpu_uuid, source) DO UPDATE "
				     "SET ts_ns = max(ts_ns, excluded.ts_ns) WHERE source != 'nvml'" },
	[REC_BUSY] = { TABLE("gpu_busy", rec_busy, busy_cols), .ts_key = true },
	[REC_GPU_ACT] = { TABLE("gpu_activity", rec_gpu_act, gpu_act_cols) },
};

/* "a, b, c" from the columns [from, to) of t, or "a = coalesce(excluded.a, a), ..." */
static void cols_list(struct strbuf *b, const struct rec_table *t, int from, int to,
		      bool coalesce)
{
	for (int i = from; i < to; i++) {
		const char *n = t->col[i].name;

		if (i > from)
			sb_puts(b, ", ");
		if (coalesce)
			sb_printf(b, "%s = coalesce(excluded.%s, %s)", n, n, n);
		else
			sb_puts(b, n);
	}
}

char *rec_table_sql(const struct rec_table *t)
{
	struct strbuf b = STRBUF_INIT;

	if (t->sql) {
		sb_puts(&b, t->sql);
		return sb_detach(&b);
	}
	sb_printf(&b, "INSERT %sINTO %s (", t->conflict == CONFLICT_IGNORE ? "OR IGNORE " : "",
		  t->name);
	cols_list(&b, t, 0, t->ncol, false);
	sb_puts(&b, ") VALUES (");
	for (int i = 0; i < t->ncol; i++)
		sb_printf(&b, "%s?%d", i ? ", " : "", i + 1);
	sb_putc(&b, ')');
	if (t->conflict == CONFLICT_COALESCE) {
		sb_puts(&b, " ON CONFLICT (");
		cols_list(&b, t, 0, t->nkey, false);
		sb_puts(&b, ") DO UPDATE SET ");
		cols_list(&b, t, t->nkey, t->ncol, true);
	}
	return sb_detach(&b);
}

sqlite3_stmt *bind_rec(struct store *s, const struct rec *r)
{
	const struct rec_table *t;
	const char *base = (const char *)&r->u;
	sqlite3_stmt *st;

	if (r->kind < REC_PROCESS || r->kind > REC_KIND_MAX)
		return NULL; /* a hole store_put could not fill */
	t = &rec_tables[r->kind];
	st = s->st[ST_REC_KIND(r->kind)];
	for (int i = 0; i < t->ncol; i++) {
		const void *f = base + t->col[i].off;

		switch (t->col[i].type) {
		case COL_I64:
			bind_i64(st, i + 1, *(const int64_t *)f);
			break;
		case COL_I32:
			if (*(const int32_t *)f == REC_NULL32)
				sqlite3_bind_null(st, i + 1);
			else
				sqlite3_bind_int64(st, i + 1, *(const int32_t *)f);
			break;
		case COL_TEXT:
			bind_text(st, i + 1, *(const char *const *)f);
			break;
		case COL_HASH:
			bind_text(st, i + 1, *(const char *)f ? f : NULL);
			break;
		}
	}
	return st;
}
