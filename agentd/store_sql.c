/* SPDX-License-Identifier: MIT */
/*
 * The statements the store's writer runs, one cached per record kind, and the
 * binding of each record's fields to them (straight from the ring slot:
 * SQLITE_STATIC). store_schema.c checks each INSERT's columns against the
 * file's tables when the store opens.
 */
#include <sqlite3.h>

#include "store_int.h"

const char *const stmt_sql[ST_MAX] = {
	[ST_BEGIN] = "BEGIN",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_META] = "INSERT INTO meta (key, value) VALUES (?1, ?2) "
		    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
	/* One statement does both the first sighting and the exit update: a
	 * record's NULL fields leave what is stored alone. */
	[ST_PROCESS] = "INSERT INTO processes (pid, start_ns, exit_ns, exit_code, ppid, comm, "
		       "cmdline, cgroup, cgroup_id, rank, local_rank, world_size, job_id) "
		       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) "
		       "ON CONFLICT (pid, start_ns) DO UPDATE SET "
		       "exit_ns = coalesce(excluded.exit_ns, exit_ns), "
		       "exit_code = coalesce(excluded.exit_code, exit_code), "
		       "ppid = coalesce(excluded.ppid, ppid), "
		       "comm = coalesce(excluded.comm, comm), "
		       "cmdline = coalesce(excluded.cmdline, cmdline), "
		       "cgroup = coalesce(excluded.cgroup, cgroup), "
		       "cgroup_id = coalesce(excluded.cgroup_id, cgroup_id), "
		       "rank = coalesce(excluded.rank, rank), "
		       "local_rank = coalesce(excluded.local_rank, local_rank), "
		       "world_size = coalesce(excluded.world_size, world_size), "
		       "job_id = coalesce(excluded.job_id, job_id)",
	[ST_COMM] = "INSERT INTO comms (ts_ns, dur_ns, pid, tid, comm_ptr, comm_hash, rank, "
		    "nranks, fn, ret, nccl_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
		    "?11)",
	[ST_COMM_DESTROY] = "UPDATE comms SET destroyed_ns = ?1 WHERE rowid = "
			    "(SELECT rowid FROM comms WHERE pid = ?2 AND comm_ptr = ?3 "
			    "ORDER BY ts_ns DESC, rowid DESC LIMIT 1)",
	[ST_COLLECTIVE] = "INSERT INTO collectives (ts_ns, dur_ns, pid, tid, comm_ptr, comm_hash, "
			  "rank, nranks, seq, op, count, bytes, datatype, redop, peer, stream, "
			  "busy_ns, ret, sync_ns, gap_ns, cpu_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
			  "?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
	[ST_CUDA] = "INSERT INTO cuda_calls (ts_ns, dur_ns, pid, tid, api, kind, bytes, stream, "
		    "ret) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
	[ST_OFFCPU] = "INSERT INTO offcpu (ts_ns, dur_ns, pid, tid, reason) "
		      "VALUES (?1, ?2, ?3, ?4, ?5)",
	[ST_TCP] = "INSERT INTO tcp_retransmits (ts_ns, pid, saddr, sport, daddr, dport, state) "
		   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[ST_IB] = "INSERT INTO ib_counters (ts_ns, device, port, counter, value, delta) "
		  "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	[ST_GROUP] = "INSERT INTO nccl_groups (ts_ns, dur_ns, end_dur_ns, pid, tid, ncalls, ret) "
		     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[ST_KERNEL] = "INSERT INTO nccl_kernels (ts_ns, host_dur_ns, pid, rank, nranks, nccl_comm, "
		      "comm_hash, op, seq, count, nchannels, gpu_start_ns, gpu_dur_ns, gpu_ch_ns, "
		      "partial, peer) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
		      "?14, ?15, ?16)",
	[ST_GPU] = "INSERT INTO gpu_samples (ts_ns, gpu_index, gpu_uuid, pci_bus_id, "
		   "sm_clock_mhz, mem_clock_mhz, sm_clock_max_mhz, mem_clock_max_mhz, "
		   "clock_reasons, temp_c, power_mw, power_limit_mw, util_gpu_pct, util_mem_pct, "
		   "ecc_uncorrected, ecc_corrected, remap_corrected, remap_uncorrected, "
		   "remap_pending, remap_failed, xid_count, xid_last, pcie_gen, pcie_width, "
		   "pcie_gen_max, pcie_width_max, pcie_replays, nvlink_replay, nvlink_recovery, "
		   "nvlink_crc) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
		   "?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, "
		   "?29, ?30)",
	/* first sighting wins: the row says since when the process has used the GPU */
	[ST_PROCESS_GPU] = "INSERT OR IGNORE INTO process_gpus (pid, start_ns, gpu_index, "
			   "gpu_uuid, source, ts_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
};

static inline void bind_hash(sqlite3_stmt *st, int i, const char *v)
{
	bind_text(st, i, v[0] ? v : NULL);
}

static sqlite3_stmt *bind_group(struct store *s, const struct rec_group *g)
{
	sqlite3_stmt *st = s->st[ST_GROUP];

	bind_i64(st, 1, g->ts_ns);
	bind_i64(st, 2, g->dur_ns);
	bind_i64(st, 3, g->end_dur_ns);
	bind_i64(st, 4, g->pid);
	bind_i64(st, 5, g->tid);
	bind_i64(st, 6, g->ncalls);
	bind_i64(st, 7, g->ret);
	return st;
}

static sqlite3_stmt *bind_kernel(struct store *s, const struct rec_kernel *k)
{
	sqlite3_stmt *st = s->st[ST_KERNEL];

	bind_i64(st, 1, k->ts_ns);
	bind_i64(st, 2, k->host_dur_ns);
	bind_i64(st, 3, k->pid);
	bind_i64(st, 4, k->rank);
	bind_i64(st, 5, k->nranks);
	bind_hash(st, 6, k->nccl_comm);
	bind_hash(st, 7, k->comm_hash);
	bind_text(st, 8, k->op);
	bind_i64(st, 9, k->seq);
	bind_i64(st, 10, k->count);
	bind_i64(st, 11, k->nchannels);
	bind_i64(st, 12, k->gpu_start_ns);
	bind_i64(st, 13, k->gpu_dur_ns);
	bind_i64(st, 14, k->gpu_ch_ns);
	bind_i64(st, 15, k->partial);
	bind_i64(st, 16, k->peer);
	return st;
}

static inline void bind_i32(sqlite3_stmt *st, int i, int32_t v)
{
	if (v == REC_NULL32)
		sqlite3_bind_null(st, i);
	else
		sqlite3_bind_int64(st, i, v);
}

static sqlite3_stmt *bind_gpu(struct store *s, const struct rec_gpu *g)
{
	sqlite3_stmt *st = s->st[ST_GPU];

	bind_i64(st, 1, g->ts_ns);
	bind_i32(st, 2, g->gpu_index);
	bind_text(st, 3, g->uuid);
	bind_text(st, 4, g->pci_bus_id);
	bind_i32(st, 5, g->sm_clock_mhz);
	bind_i32(st, 6, g->mem_clock_mhz);
	bind_i32(st, 7, g->sm_clock_max_mhz);
	bind_i32(st, 8, g->mem_clock_max_mhz);
	bind_i64(st, 9, g->clock_reasons);
	bind_i32(st, 10, g->temp_c);
	bind_i32(st, 11, g->power_mw);
	bind_i32(st, 12, g->power_limit_mw);
	bind_i32(st, 13, g->util_gpu_pct);
	bind_i32(st, 14, g->util_mem_pct);
	bind_i64(st, 15, g->ecc_uncorrected);
	bind_i64(st, 16, g->ecc_corrected);
	bind_i32(st, 17, g->remap_corrected);
	bind_i32(st, 18, g->remap_uncorrected);
	bind_i32(st, 19, g->remap_pending);
	bind_i32(st, 20, g->remap_failed);
	bind_i64(st, 21, g->xid_count);
	bind_i32(st, 22, g->xid_last);
	bind_i32(st, 23, g->pcie_gen);
	bind_i32(st, 24, g->pcie_width);
	bind_i32(st, 25, g->pcie_gen_max);
	bind_i32(st, 26, g->pcie_width_max);
	bind_i32(st, 27, g->pcie_replays);
	bind_i64(st, 28, g->nvlink_replay);
	bind_i64(st, 29, g->nvlink_recovery);
	bind_i64(st, 30, g->nvlink_crc);
	return st;
}

static sqlite3_stmt *bind_process_gpu(struct store *s, const struct rec_process_gpu *p)
{
	sqlite3_stmt *st = s->st[ST_PROCESS_GPU];

	bind_i64(st, 1, p->pid);
	bind_i64(st, 2, p->start_ns);
	bind_i64(st, 3, p->gpu_index);
	bind_text(st, 4, p->gpu_uuid);
	bind_text(st, 5, p->source);
	bind_i64(st, 6, p->ts_ns);
	return st;
}

/* Binds r to its statement; returns the statement. */
sqlite3_stmt *bind_rec(struct store *s, const struct rec *r)
{
	sqlite3_stmt *st;

	switch (r->kind) {
	case REC_PROCESS: {
		const struct rec_process *p = &r->u.process;

		st = s->st[ST_PROCESS];
		bind_i64(st, 1, p->pid);
		bind_i64(st, 2, p->start_ns);
		bind_i64(st, 3, p->exit_ns);
		bind_i64(st, 4, p->exit_code);
		bind_i64(st, 5, p->ppid);
		bind_text(st, 6, p->comm);
		bind_text(st, 7, p->cmdline);
		bind_text(st, 8, p->cgroup);
		bind_i64(st, 9, p->cgroup_id);
		bind_i64(st, 10, p->rank);
		bind_i64(st, 11, p->local_rank);
		bind_i64(st, 12, p->world_size);
		bind_text(st, 13, p->job_id);
		return st;
	}
	case REC_COMM: {
		const struct rec_comm *c = &r->u.comm;

		st = s->st[ST_COMM];
		bind_i64(st, 1, c->ts_ns);
		bind_i64(st, 2, c->dur_ns);
		bind_i64(st, 3, c->pid);
		bind_i64(st, 4, c->tid);
		bind_i64(st, 5, c->comm_ptr);
		bind_hash(st, 6, c->comm_hash);
		bind_i64(st, 7, c->rank);
		bind_i64(st, 8, c->nranks);
		bind_text(st, 9, c->fn);
		bind_i64(st, 10, c->ret);
		bind_hash(st, 11, c->nccl_hash);
		return st;
	}
	case REC_COMM_DESTROY: {
		const struct rec_comm_destroy *d = &r->u.comm_destroy;

		st = s->st[ST_COMM_DESTROY];
		bind_i64(st, 1, d->ts_ns);
		bind_i64(st, 2, d->pid);
		bind_i64(st, 3, d->comm_ptr);
		return st;
	}
	case REC_COLLECTIVE: {
		const struct rec_collective *c = &r->u.collective;

		st = s->st[ST_COLLECTIVE];
		bind_i64(st, 1, c->ts_ns);
		bind_i64(st, 2, c->dur_ns);
		bind_i64(st, 3, c->pid);
		bind_i64(st, 4, c->tid);
		bind_i64(st, 5, c->comm_ptr);
		bind_hash(st, 6, c->comm_hash);
		bind_i64(st, 7, c->rank);
		bind_i64(st, 8, c->nranks);
		bind_i64(st, 9, c->seq);
		bind_text(st, 10, c->op);
		bind_i64(st, 11, c->count);
		bind_i64(st, 12, c->bytes);
		bind_text(st, 13, c->datatype);
		bind_text(st, 14, c->redop);
		bind_i64(st, 15, c->peer);
		bind_i64(st, 16, c->stream);
		bind_i64(st, 17, c->busy_ns);
		bind_i64(st, 18, c->ret);
		bind_i64(st, 19, c->sync_ns);
		bind_i64(st, 20, c->gap_ns);
		bind_i64(st, 21, c->cpu_ns);
		return st;
	}
	case REC_CUDA: {
		const struct rec_cuda *c = &r->u.cuda;

		st = s->st[ST_CUDA];
		bind_i64(st, 1, c->ts_ns);
		bind_i64(st, 2, c->dur_ns);
		bind_i64(st, 3, c->pid);
		bind_i64(st, 4, c->tid);
		bind_text(st, 5, c->api);
		bind_text(st, 6, c->kind);
		bind_i64(st, 7, c->bytes);
		bind_i64(st, 8, c->stream);
		bind_i64(st, 9, c->ret);
		return st;
	}
	case REC_OFFCPU: {
		const struct rec_offcpu *o = &r->u.offcpu;

		st = s->st[ST_OFFCPU];
		bind_i64(st, 1, o->ts_ns);
		bind_i64(st, 2, o->dur_ns);
		bind_i64(st, 3, o->pid);
		bind_i64(st, 4, o->tid);
		bind_text(st, 5, o->reason);
		return st;
	}
	case REC_TCP: {
		const struct rec_tcp *t = &r->u.tcp;

		st = s->st[ST_TCP];
		bind_i64(st, 1, t->ts_ns);
		bind_i64(st, 2, t->pid);
		bind_text(st, 3, t->saddr);
		bind_i64(st, 4, t->sport);
		bind_text(st, 5, t->daddr);
		bind_i64(st, 6, t->dport);
		bind_text(st, 7, t->state);
		return st;
	}
	case REC_IB: {
		const struct rec_ib *b = &r->u.ib;

		st = s->st[ST_IB];
		bind_i64(st, 1, b->ts_ns);
		bind_text(st, 2, b->device);
		bind_i64(st, 3, b->port);
		bind_text(st, 4, b->counter);
		bind_i64(st, 5, b->value);
		bind_i64(st, 6, b->delta);
		return st;
	}
	case REC_GROUP:
		return bind_group(s, &r->u.group);
	case REC_KERNEL:
		return bind_kernel(s, &r->u.kernel);
	case REC_GPU:
		return bind_gpu(s, &r->u.gpu);
	case REC_PROCESS_GPU:
		return bind_process_gpu(s, &r->u.process_gpu);
	}
	return NULL; /* store_put refuses other kinds */
}
