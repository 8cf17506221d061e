/* SPDX-License-Identifier: MIT */
/*
 * The tracer's decoding: ring-buffer events (bpf/fqtrace.h) into store records.
 *
 * Sequence numbers: counted here, per (pid, comm_ptr), from 0 at the
 * communicator's init event; collectives and p2p (Send/Recv) have separate
 * counters (the N-th collective on a communicator is seq N-1 on every rank; p2p
 * seq is per process only). A communicator whose init we did not see (agentd
 * started mid-job) gets seq and comm_hash NULL until fleetq's NCCL profiler plugin places
 * it (trace_adopt.c).
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "fqtrace.h"
#include "ncclprof/nccl_profiler.h"
#include "probe.h"
#include "store.h"
#include "syncwait.h"
#include "trace_int.h"

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= c[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

#define FNV_BASIS 0xcbf29ce484222325ULL

/* ---- event decoding ---- */

static const char *fn_label(uint32_t fn)
{
	return fn < probe_nfns ? probe_fns[fn].label : "?";
}

static void on_comm(struct tracer *t, const struct fq_ev_comm *e)
{
	struct rec r = { .kind = REC_COMM };
	struct rec_comm *c = &r.u.comm;
	struct comm_ent *ce;
	uint64_t h = 0, nh = 0;
	int have = 0;

	if (e->kind == FQ_K_INIT || e->kind == FQ_K_INIT_SCALABLE) {
		if (e->has_id) {
			h = fnv1a(FNV_BASIS, e->id, FQ_UNIQUE_ID_BYTES);
			nh = fq_nccl_hash(e->id, FQ_UNIQUE_ID_BYTES);
			have = 1;
		}
	} else if (e->kind == FQ_K_SPLIT) {
		/*
		 * No unique id crosses ranks: every rank of the parent calls ncclCommSplit
		 * in the same order, so (parent hash, color, n-th split of that parent)
		 * names the child alike on every rank of one color.
		 */
		struct comm_ent *p = comm_find(t, e->h.pid, e->parent, 0);

		/* NCCL counts every split of the parent, a color-less one too (of a parent
		 * made before agentd, the splits before it are unknown: no hash) */
		if (p && p->nccl_hash && !p->adopted)
			nh = fq_nccl_hash_split(p->nccl_hash, ++p->nccl_splits, e->color);
		if (p && p->hash[0]) {
			int32_t color = e->color;

			h = fnv1a(FNV_BASIS, &p->hash_v, sizeof(p->hash_v));
			h = fnv1a(h, &color, sizeof(color));
			if (!p->adopted) {
				uint32_t k = p->nsplits++;

				h = fnv1a(h, &k, sizeof(k));
			} else {
				/*
				 * An adopted parent's splits before agentd are unknown (it may
				 * keep the name it had before a restart), and ranks adopt it at
				 * different seqs: named by the seq it is split at, the same on
				 * every rank, and the count of splits at that seq.
				 */
				int64_t at = p->seq;
				uint32_t k;

				if (p->split_seq != at) {
					p->split_seq = at;
					p->splits_at = 0;
				}
				k = p->splits_at++;
				h = fnv1a(h, "adopted", 7);
				h = fnv1a(h, &at, sizeof(at));
				h = fnv1a(h, &k, sizeof(k));
			}
			have = 1;
		}
	} else if (e->kind == FQ_K_INIT_ALL) {
		/* one process owns every rank: a process-local name */
		uint64_t pid = e->h.pid;

		h = fnv1a(FNV_BASIS, "initall", 7);
		h = fnv1a(h, &pid, sizeof(pid));
		h = fnv1a(h, &e->h.ts, sizeof(e->h.ts));
		have = 1;
	}
	*c = (struct rec_comm){
		.ts_ns = (int64_t)e->h.ts - t->clock_off,
		.dur_ns = (int64_t)e->dur,
		.pid = e->h.pid,
		.tid = e->h.tid,
		.comm_ptr = (int64_t)e->comm,
		.rank = e->rank >= 0 ? e->rank : REC_NULL,
		.nranks = e->nranks >= 0 ? e->nranks : REC_NULL,
		.fn = fn_label(e->h.fn),
		.ret = e->ret,
	};
	if (have)
		snprintf(c->comm_hash, sizeof(c->comm_hash), "%016" PRIx64, h);
	if (nh)
		snprintf(c->nccl_hash, sizeof(c->nccl_hash), "%016" PRIx64, nh);
	if (e->comm && e->ret == 0 && (ce = comm_find(t, e->h.pid, e->comm, 1))) {
		snprintf(ce->hash, sizeof(ce->hash), "%s", c->comm_hash);
		ce->hash_v = h;
		ce->rank = c->rank;
		ce->nranks = c->nranks;
		ce->seq = ce->p2p_seq = 0;
		ce->last_tid = 0;
		ce->last_oncpu = 0;
		ce->sync_mark = ce->p2p_sync_mark = -1;
		ce->last_ts = ce->p2p_last_ts = REC_NULL;
		ce->nsplits = 0;
		ce->nccl_hash = nh;
		ce->nccl_splits = 0;
		ce->last_proc_cpu = 0;
		ce->adopted = false;
		adopt_forget(t, ce); /* (its pointer was a communicator agentd did not see made) */
	}
	store_put(t->store, &r);
	/* NCCL loaded its profiler plugin during this init: look for it in the maps now */
	if (e->ret == 0)
		watch_pid(t, (int)e->h.pid, WATCH_LIBS);
}

static void on_coll(struct tracer *t, const struct fq_ev_call *e)
{
	struct rec r = { .kind = REC_COLLECTIVE };
	struct rec_collective *c = &r.u.collective;
	struct comm_ent *ce = comm_find(t, e->h.pid, e->comm, 1);
	int dsz = probe_nccl_dtype_size(e->dtype);

	*c = (struct rec_collective){
		.ts_ns = (int64_t)e->h.ts - t->clock_off,
		.dur_ns = (int64_t)e->dur,
		.pid = e->h.pid,
		.tid = e->h.tid,
		.comm_ptr = (int64_t)e->comm,
		.rank = REC_NULL,
		.nranks = REC_NULL,
		.seq = REC_NULL,
		.op = fn_label(e->h.fn),
		.count = (int64_t)e->count,
		.bytes = dsz ? (int64_t)e->count * dsz : REC_NULL,
		.datatype = probe_nccl_dtype(e->dtype),
		.redop = probe_nccl_redop(e->redop),
		.peer = e->peer >= 0 ? e->peer : REC_NULL,
		.stream = (int64_t)e->stream,
		.busy_ns = REC_NULL,
		.ret = e->ret,
		.sync_ns = REC_NULL,
		.gap_ns = REC_NULL,
		.cpu_ns = REC_NULL,
	};
	if (ce) {
		/* sync wait and time since the previous collective (or Send/Recv: since the
		 * previous Send/Recv, as their seqs are their own) on this communicator */
		int p2p = e->kind == FQ_K_P2P;
		int64_t total = syncwait_total(t->sync, e->h.pid);
		int64_t *mark = p2p ? &ce->p2p_sync_mark : &ce->sync_mark;
		int64_t *last = p2p ? &ce->p2p_last_ts : &ce->last_ts;

		if (*mark >= 0)
			c->sync_ns = total - *mark;
		*mark = total;
		if (*last != REC_NULL)
			c->gap_ns = c->ts_ns - *last;
		*last = c->ts_ns;
		memcpy(c->comm_hash, ce->hash, sizeof(c->comm_hash));
		c->rank = ce->rank;
		c->nranks = ce->nranks;
		if (e->kind == FQ_K_P2P) {
			if (ce->p2p_seq >= 0)
				c->seq = ce->p2p_seq++;
		} else if (ce->seq >= 0) {
			c->seq = ce->seq++;
		} else {
			/* its init came before agentd: trace_adopt.c may place it */
			adopt_note_call(t, ce, c->op, c->count, c->ts_ns, c->dur_ns, c->tid);
		}
		if (ce->last_tid == e->h.tid && ce->last_oncpu && e->oncpu >= ce->last_oncpu)
			c->busy_ns = (int64_t)(e->oncpu - ce->last_oncpu);
		ce->last_tid = e->h.tid;
		ce->last_oncpu = e->oncpu;
		if (!p2p && e->proc_cpu) {
			if (ce->last_proc_cpu && e->proc_cpu >= ce->last_proc_cpu)
				c->cpu_ns = (int64_t)(e->proc_cpu - ce->last_proc_cpu);
			ce->last_proc_cpu = e->proc_cpu;
		}
	}
	store_put(t->store, &r);
}

/*
 * A collective or Send/Recv from fleetq's NCCL profiler plugin (bpf/fqtrace.h, struct
 * fq_prof_rec); a plugin older than its peer field has no Send/Recv and a NULL peer.
 */
static void on_kernel(struct tracer *t, const struct fq_ev_kernel *e)
{
	const struct fq_prof_rec *p = &e->r;
	struct rec r = { .kind = REC_KERNEL };
	struct rec_kernel *k = &r.u.kernel;
	const struct comm_ent *ce;
	char op[FQ_PROF_FUNC_LEN];

	if (p->magic != FQ_PROF_MAGIC || p->size < offsetof(struct fq_prof_rec, peer))
		return;
	memcpy(op, p->func, sizeof(op));
	op[sizeof(op) - 1] = '\0';
	*k = (struct rec_kernel){
		/* the plugin's clock is CLOCK_MONOTONIC; the event's own ts is on bpf's */
		.ts_ns = (int64_t)p->host_start_ns + t->mono_off,
		.host_dur_ns = p->host_stop_ns >= p->host_start_ns ?
				       (int64_t)(p->host_stop_ns - p->host_start_ns) : REC_NULL,
		.pid = e->h.pid,
		.rank = p->rank >= 0 ? p->rank : REC_NULL,
		.nranks = p->nranks > 0 ? p->nranks : REC_NULL,
		.op = op,
		.seq = p->seq <= INT64_MAX ? (int64_t)p->seq : REC_NULL,
		.count = p->count <= INT64_MAX ? (int64_t)p->count : REC_NULL,
		.nchannels = p->nchannels,
		.gpu_start_ns = p->nchannels ? (int64_t)p->gpu_start_ns : REC_NULL,
		.gpu_dur_ns = p->nchannels && p->gpu_stop_ns >= p->gpu_start_ns ?
				      (int64_t)(p->gpu_stop_ns - p->gpu_start_ns) : REC_NULL,
		.gpu_ch_ns = p->nchannels ? (int64_t)p->gpu_ch_ns : REC_NULL,
		.partial = !!(p->flags & FQ_PROF_PARTIAL),
		.peer = p->size >= sizeof(*p) && p->peer >= 0 ? p->peer : REC_NULL,
	};
	if (k->seq == REC_NULL)
		return;
	snprintf(k->nccl_comm, sizeof(k->nccl_comm), "%016" PRIx64, p->nccl_comm);
	ce = comm_by_nccl(t, e->h.pid, p->nccl_comm);
	if (!ce && t->adopting)
		ce = adopt_try(t, e->h.pid, p, k->ts_ns);
	if (ce)
		memcpy(k->comm_hash, ce->hash, sizeof(k->comm_hash));
	store_put(t->store, &r);
}

static void on_busy(struct tracer *t, const struct fq_ev_busy *e)
{
	const struct fq_busy_rec *p = &e->r;
	struct rec r = { .kind = REC_BUSY };

	/* a slice is at most a few seconds; anything else is not a record of ours */
	if (p->magic != FQ_BUSY_MAGIC || p->size < sizeof(*p) || !p->dur_ns ||
	    p->dur_ns > 10000000000ull || p->busy_ns > p->dur_ns || p->nccl_ns > p->dur_ns ||
	    p->t0_ns > INT64_MAX / 2)
		return;
	r.u.busy = (struct rec_busy){
		/* the library's clock is CLOCK_MONOTONIC */
		.ts_ns = (int64_t)p->t0_ns + t->mono_off,
		.dur_ns = (int64_t)p->dur_ns,
		.pid = e->h.pid,
		.device = p->device >= 0 ? p->device : REC_NULL,
		.busy_ns = (int64_t)p->busy_ns,
		.nccl_ns = (int64_t)p->nccl_ns,
		.kernels = p->kernels,
		.nccl_kernels = p->nccl_kernels,
		.dropped = p->dropped <= INT64_MAX ? (int64_t)p->dropped : REC_NULL,
		.late_ns = p->late_ns <= p->dur_ns * 100 ? (int64_t)p->late_ns : REC_NULL,
	};
	store_put(t->store, &r);
}

static const char *cuda_kind(uint32_t k)
{
	switch (k) {
	case FQ_K_SYNC: return "sync";
	case FQ_K_LAUNCH: return "launch";
	case FQ_K_MEMCPY: return "memcpy";
	case FQ_K_MALLOC: return "malloc";
	case FQ_K_FREE: return "free";
	}
	return "other";
}

static void on_cuda(struct tracer *t, const struct fq_ev_call *e)
{
	struct rec r = { .kind = REC_CUDA };
	const struct probe_fn *f = e->h.fn < probe_nfns ? &probe_fns[e->h.fn] : NULL;

	if (e->kind == FQ_K_SYNC)
		syncwait_call(t->sync, e->h.pid, e->h.tid, (int64_t)e->h.ts, (int64_t)e->dur);
	r.u.cuda = (struct rec_cuda){
		.ts_ns = (int64_t)e->h.ts - t->clock_off,
		.dur_ns = (int64_t)e->dur,
		.pid = e->h.pid,
		.tid = e->h.tid,
		.api = fn_label(e->h.fn),
		.kind = cuda_kind(e->kind),
		.bytes = f && f->count ? (int64_t)e->count : REC_NULL,
		.stream = f && f->stream ? (int64_t)e->stream : REC_NULL,
		.ret = e->ret,
	};
	store_put(t->store, &r);
}

static const char *tcp_state(unsigned int s)
{
	static const char *const names[] = { "", "ESTABLISHED", "SYN_SENT", "SYN_RECV",
					     "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "CLOSE",
					     "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING",
					     "NEW_SYN_RECV" };

	return s > 0 && s < sizeof(names) / sizeof(names[0]) ? names[s] : "UNKNOWN";
}

static void on_tcp(struct tracer *t, const struct fq_ev_tcp *e)
{
	struct rec r = { .kind = REC_TCP };
	char sa[INET6_ADDRSTRLEN], da[INET6_ADDRSTRLEN];
	int af = e->family == 2 ? AF_INET : AF_INET6;

	if (!inet_ntop(af, e->saddr, sa, sizeof(sa)))
		sa[0] = 0;
	if (!inet_ntop(af, e->daddr, da, sizeof(da)))
		da[0] = 0;
	r.u.tcp = (struct rec_tcp){
		.ts_ns = (int64_t)e->h.ts - t->clock_off,
		.pid = e->h.pid ? (int64_t)e->h.pid : REC_NULL,
		.saddr = sa,
		.sport = e->sport,
		.daddr = da,
		.dport = e->dport,
		.state = tcp_state(e->state),
	};
	store_put(t->store, &r);
}

static void on_exit_ev(struct tracer *t, const struct fq_ev_proc *e)
{
	struct rec r = { .kind = REC_PROCESS };
	int64_t start;
	int st = e->exit_code;

	if (!known_process(t, (int)e->h.pid))
		emit_process(t, (int)e->h.pid); /* a zombie still has its /proc entry */
	start = forget_process(t, (int)e->h.pid);
	comm_drop_pid(t, e->h.pid);
	syncwait_drop_pid(t->sync, e->h.pid);
	if (start == REC_NULL)
		return;
	r.u.process = (struct rec_process){
		.pid = e->h.pid,
		.start_ns = start,
		.exit_ns = (int64_t)e->h.ts - t->clock_off,
		/* exit status, or minus the signal number that killed it */
		.exit_code = (st & 0x7f) ? -(int64_t)(st & 0x7f) : (int64_t)((st >> 8) & 0xff),
		.ppid = REC_NULL,
		.cgroup_id = REC_NULL,
		.rank = REC_NULL,
		.local_rank = REC_NULL,
		.world_size = REC_NULL,
	};
	store_put(t->store, &r);
}

static void on_exec(struct tracer *t, const struct fq_ev_proc *e)
{
	int exec = e->h.type == FQ_EV_EXEC;

	/*
	 * After an exec the environment (RANK, WORLD_SIZE, job id) and the maps are new: a
	 * process seen before it (a launcher's child placed in the scope before its exec)
	 * is identified again.
	 */
	if (exec)
		forget_process(t, (int)e->h.pid);
	if (t->verbose)
		tlog("exec or cgroup move: pid %u at %lld", e->h.pid, (long long)clock_ns(CLOCK_MONOTONIC));
	watch_pid(t, (int)e->h.pid, exec ? WATCH_EXEC : WATCH_MOVE);
}

int on_event(void *ctx, void *data, size_t len)
{
	struct tracer *t = ctx;
	const struct fq_ev_hdr *h = data;

	if (len < sizeof(*h))
		return 0;
	if (h->type == FQ_EV_COLL && len >= sizeof(struct fq_ev_call) &&
	    ((const struct fq_ev_call *)data)->kind == FQ_K_CALIB) {
		atomic_fetch_add(&t->calib_hits, 1);
		return 0;
	}
	atomic_fetch_add(&t->events, 1);
	if (h->pid && h->type != FQ_EV_TCP && h->type != FQ_EV_EXEC && h->type != FQ_EV_EXIT &&
	    h->type != FQ_EV_CGMOVE &&
	    !known_process(t, (int)h->pid))
		emit_process(t, (int)h->pid);
	switch (h->type) {
	case FQ_EV_COLL:
		if (len >= sizeof(struct fq_ev_call))
			on_coll(t, data);
		break;
	case FQ_EV_CUDA:
		if (len >= sizeof(struct fq_ev_call))
			on_cuda(t, data);
		break;
	case FQ_EV_COMM:
		if (len >= sizeof(struct fq_ev_comm))
			on_comm(t, data);
		break;
	case FQ_EV_COMM_DESTROY:
		if (len >= sizeof(struct fq_ev_destroy)) {
			const struct fq_ev_destroy *e = data;
			struct rec r = { .kind = REC_COMM_DESTROY };

			r.u.comm_destroy = (struct rec_comm_destroy){
				.ts_ns = (int64_t)e->h.ts - t->clock_off,
				.pid = e->h.pid,
				.comm_ptr = (int64_t)e->comm,
			};
			store_put(t->store, &r);
			comm_drop(t, e->h.pid, e->comm);
		}
		break;
	case FQ_EV_OFFCPU:
		if (len >= sizeof(struct fq_ev_offcpu)) {
			const struct fq_ev_offcpu *e = data;
			struct rec r = { .kind = REC_OFFCPU };

			r.u.offcpu = (struct rec_offcpu){
				.ts_ns = (int64_t)e->h.ts - t->clock_off,
				.dur_ns = (int64_t)e->dur,
				.pid = e->h.pid,
				.tid = e->h.tid,
				.reason = e->preempted ? "preempted" : "blocked",
			};
			store_put(t->store, &r);
		}
		break;
	case FQ_EV_TCP:
		if (len >= sizeof(struct fq_ev_tcp))
			on_tcp(t, data);
		break;
	case FQ_EV_GROUP:
		if (len >= sizeof(struct fq_ev_group)) {
			const struct fq_ev_group *e = data;
			struct rec r = { .kind = REC_GROUP };

			r.u.group = (struct rec_group){
				.ts_ns = (int64_t)e->h.ts - t->clock_off,
				.dur_ns = (int64_t)e->dur,
				.end_dur_ns = (int64_t)e->end_dur,
				.pid = e->h.pid,
				.tid = e->h.tid,
				.ncalls = e->ncalls,
				.ret = e->ret,
			};
			store_put(t->store, &r);
		}
		break;
	case FQ_EV_KERNEL:
		if (len >= sizeof(struct fq_ev_kernel))
			on_kernel(t, data);
		break;
	case FQ_EV_BUSY:
		if (len >= sizeof(struct fq_ev_busy))
			on_busy(t, data);
		break;
	case FQ_EV_EXEC:
	case FQ_EV_CGMOVE:
		if (len >= sizeof(struct fq_ev_proc))
			on_exec(t, data);
		break;
	case FQ_EV_EXIT:
		if (len >= sizeof(struct fq_ev_proc))
			on_exit_ev(t, data);
		break;
	}
	return 0;
}
