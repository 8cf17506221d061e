/* SPDX-License-Identifier: MIT */
/*
 * The tracer: loads bpf/fqtrace.bpf.c, attaches uprobes to the NCCL / CUDA
 * libraries discovery finds, decodes the ring buffer into records for the
 * store, and polls InfiniBand counters.
 *
 * Threads: the caller's (start/stop), `poll` (ring buffer -> records; owns the
 * communicator table), `disc` (process/library discovery, attaching, IB).
 *
 * Clock: BPF stamps events with bpf_ktime_get_tai_ns() when the kernel has it
 * (CLOCK_TAI follows clock steps and slews like CLOCK_REALTIME and differs from
 * it by the integral TAI-UTC offset), else bpf_ktime_get_ns() (CLOCK_MONOTONIC,
 * offset to CLOCK_REALTIME measured at start: drifts by whatever NTP does later).
 * Either way ts_ns = bpf_ts - clock_off; meta clock_source says which.
 *
 * Sequence numbers: counted here, per (pid, comm_ptr), from 0 at the
 * communicator's init event; collectives and p2p (Send/Recv) have separate
 * counters (the N-th collective on a communicator is seq N-1 on every rank; p2p
 * seq is per process only). A communicator whose init we did not see (agentd
 * started mid-job) gets seq and comm_hash NULL.
 */
#include "trace.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "clock.h"
#include "discover.h"
#include "fqtrace.h"
#include "fqtrace.skel.h"
#include "ib.h"
#include "log.h"
#include "ncclprof/nccl_profiler.h"
#include "nvml.h"
#include "probe.h"
#include "records.h"
#include "store.h"
#include "syncwait.h"

/*
 * The ring buffer's data pages are mapped twice into agentd (so records can wrap) and the
 * kernel maps them all at mmap time: it costs 2x this in RSS from the start. 1 MiB holds
 * ~10k call events, ~50 ms of 200k events/s: the reader is woken at 1/8 full, so drops
 * need it kept off a CPU for ~45 ms at that rate. Events beyond that show up in meta
 * ring_drops (FQ_RING_BYTES raises it; a power of two, at least a page).
 */
#define DEFAULT_RING_BYTES (1u << 20)
#define DEFAULT_MIN_OFFCPU_NS 10000
/*
 * Records go into the ring without waking the reader, which drains it every POLL_MS (backing
 * off to IDLE_POLL_MS while nothing comes); a record that takes the unread data past a
 * multiple of 1/WAKEUP_DIV of the ring wakes it early, and exec/exit/cgroup-move records
 * always do. Waking the reader per
 * record cost the traced thread an irq_work (a self-IPI: a VM exit here) and a context
 * switch on nearly every call. FQ_RING_WAKEUP=0 brings that back.
 */
#define POLL_MS 10
#define IDLE_POLL_MS 100
#define WAKEUP_DIV 8
#define COMM_BUCKETS 1024
#define PROC_BUCKETS 1024
#define EXEC_PENDING 256
#define EXEC_WATCH_NS (1000 * 1000000LL) /* rescan an exec'ed process this long */
#define EXEC_FAST_NS (50 * 1000000LL)    /* ... every 2 ms at first, then every 20 ms */
#define CALIB_CALLS 20000

struct comm_ent {
	uint32_t pid;
	uint64_t ptr;
	char hash[17]; /* "" if unknown */
	uint64_t hash_v;
	int64_t rank, nranks;
	int64_t seq, p2p_seq; /* next numbers; -1: init not seen */
	uint32_t last_tid;
	uint64_t last_oncpu;
	int64_t sync_mark, p2p_sync_mark; /* process's sync total at the last one; -1: none */
	int64_t last_ts, p2p_last_ts;     /* enqueue of the last one; REC_NULL: none */
	uint32_t nsplits; /* children split off so far, part of the child's hash */
	uint64_t nccl_hash; /* NCCL's hash of it (nccl_profiler.h), 0: unknown */
	int32_t nccl_splits; /* ncclCommSplit calls on it so far: NCCL's splitCount */
	uint64_t last_proc_cpu; /* process's CPU work at the last collective, 0: none */
	struct comm_ent *next;
};

struct proc_ent {
	int pid;
	int64_t start_ns;
	struct proc_ent *next;
};

struct exec_watch {
	int pid;
	int exec;     /* an exec, not a cgroup move: the process's identity is new */
	int libs;     /* only new libraries to look for (a communicator init loaded one) */
	int64_t since_ns, until_ns, next_ns;
};

struct tracer {
	char *db_path, *node, *cgroup, *probes, *sysfs_root;
	int ib_interval_s, verbose;
	unsigned int sets;
	uint32_t ring_bytes;
	uint32_t wakeup_bytes; /* 0: a wakeup per record (the ring buffer's default) */
	uint64_t min_offcpu_ns;

	struct store *store;
	struct fqtrace_bpf *skel;
	struct ring_buffer *rb;
	struct discover *disc;
	struct ib_poller *ib;
	struct gpu_thread *gpu;
	int gpu_interval_ms;
	char *nvml_lib;
	int cg_fd;

	pthread_mutex_t link_mu;
	struct bpf_link **links;
	size_t nlinks, caplinks;

	int use_tai;
	int64_t clock_off; /* bpf ts - clock_off = CLOCK_REALTIME ns */
	int64_t boot_off;  /* CLOCK_REALTIME - CLOCK_BOOTTIME */
	int64_t mono_off;  /* CLOCK_REALTIME - CLOCK_MONOTONIC: the NCCL plugin's clock */

	struct comm_ent *comms[COMM_BUCKETS]; /* poll thread only */
	struct syncwait *sync; /* poll thread only */
	const struct comm_ent *kcache; /* poll thread only: comm_by_nccl()'s last answer */

	pthread_mutex_t proc_mu;
	struct proc_ent *procs[PROC_BUCKETS];

	pthread_mutex_t mu; /* exec watch list, wakeups of disc */
	pthread_cond_t cv;
	struct exec_watch watch[EXEC_PENDING];
	int nwatch;
	int woken; /* an exec arrived since disc last looked */

	pthread_t poll_th, disc_th;
	int poll_started, disc_started;
	atomic_int stop;
	atomic_llong events, calib_hits;
};

/* The tracer's lines in agentd's log (--log, reopened on SIGHUP). */
#define tlog(fmt, ...) log_line("trace: " fmt, ##__VA_ARGS__)

/* a - b, read back to back; the tightest of a few tries */
static int64_t clock_diff(clockid_t a, clockid_t b)
{
	int64_t best = 0, best_win = INT64_MAX;
	int i;

	for (i = 0; i < 16; i++) {
		int64_t b0 = clock_ns(b), x = clock_ns(a), b1 = clock_ns(b);

		if (b1 - b0 < best_win) {
			best_win = b1 - b0;
			best = x - (b0 + (b1 - b0) / 2);
		}
	}
	return best;
}

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

/* ---- process table ---- */

static void emit_process(struct tracer *t, int pid)
{
	struct proc_ident *id = malloc(sizeof(*id));
	struct proc_ent **pp, *e;
	struct rec r = { .kind = REC_PROCESS };
	char path[PATH_MAX];
	struct stat st;

	if (!id)
		return;
	pthread_mutex_lock(&t->proc_mu);
	for (e = t->procs[(unsigned int)pid % PROC_BUCKETS]; e; e = e->next)
		if (e->pid == pid)
			break;
	pthread_mutex_unlock(&t->proc_mu);
	if (e || discover_ident(pid, id))
		goto cleanup;
	e = calloc(1, sizeof(*e));
	if (!e)
		goto cleanup;
	e->pid = pid;
	e->start_ns = id->start_boot_ns + t->boot_off;
	pthread_mutex_lock(&t->proc_mu);
	pp = &t->procs[(unsigned int)pid % PROC_BUCKETS];
	e->next = *pp;
	*pp = e;
	pthread_mutex_unlock(&t->proc_mu);

	r.u.process = (struct rec_process){
		.pid = pid,
		.start_ns = e->start_ns,
		.exit_ns = REC_NULL,
		.exit_code = REC_NULL,
		.ppid = id->ppid,
		.comm = id->comm,
		.cmdline = id->cmdline,
		.cgroup = id->cgroup[0] ? id->cgroup : NULL,
		.cgroup_id = REC_NULL,
		.rank = id->rank,
		.local_rank = id->local_rank,
		.world_size = id->world_size,
		.job_id = id->job_id[0] ? id->job_id : NULL,
	};
	if (id->cgroup[0]) {
		char mnt[PATH_MAX];

		if (!discover_cgroup2_mount(mnt, sizeof(mnt)) &&
		    snprintf(path, sizeof(path), "%s%s", mnt, id->cgroup) < (int)sizeof(path) &&
		    !stat(path, &st))
			r.u.process.cgroup_id = (int64_t)st.st_ino;
	}
	store_put(t->store, &r);
	if (t->verbose)
		tlog("process %d (%s) rank %s", pid, id->comm,
		     id->rank == REC_NULL ? "unset" : "set");
cleanup:
	free(id);
}

/* Takes the process out of the table; its start_ns, or REC_NULL if never seen. */
static int64_t forget_process(struct tracer *t, int pid)
{
	struct proc_ent **pp, *e;
	int64_t start = REC_NULL;

	pthread_mutex_lock(&t->proc_mu);
	for (pp = &t->procs[(unsigned int)pid % PROC_BUCKETS]; (e = *pp); pp = &e->next) {
		if (e->pid == pid) {
			*pp = e->next;
			start = e->start_ns;
			free(e);
			break;
		}
	}
	pthread_mutex_unlock(&t->proc_mu);
	return start;
}

static int known_process(struct tracer *t, int pid)
{
	struct proc_ent *e;

	pthread_mutex_lock(&t->proc_mu);
	for (e = t->procs[(unsigned int)pid % PROC_BUCKETS]; e; e = e->next)
		if (e->pid == pid)
			break;
	pthread_mutex_unlock(&t->proc_mu);
	return e != NULL;
}

/* ---- communicator table (poll thread) ---- */

static struct comm_ent *comm_find(struct tracer *t, uint32_t pid, uint64_t ptr, int create)
{
	struct comm_ent **pp = &t->comms[(ptr ^ pid) % COMM_BUCKETS], *e;

	for (e = *pp; e; e = e->next)
		if (e->pid == pid && e->ptr == ptr)
			return e;
	if (!create || !(e = calloc(1, sizeof(*e))))
		return NULL;
	e->pid = pid;
	e->ptr = ptr;
	e->rank = e->nranks = REC_NULL;
	e->seq = e->p2p_seq = -1;
	e->sync_mark = e->p2p_sync_mark = -1;
	e->last_ts = e->p2p_last_ts = REC_NULL;
	e->next = *pp;
	*pp = e;
	return e;
}

static void comm_drop(struct tracer *t, uint32_t pid, uint64_t ptr)
{
	struct comm_ent **pp = &t->comms[(ptr ^ pid) % COMM_BUCKETS], *e;

	for (; (e = *pp); pp = &e->next) {
		if (e->pid == pid && e->ptr == ptr) {
			*pp = e->next;
			if (t->kcache == e)
				t->kcache = NULL;
			free(e);
			return;
		}
	}
}

static void comm_drop_pid(struct tracer *t, uint32_t pid)
{
	size_t i;

	for (i = 0; i < COMM_BUCKETS; i++) {
		struct comm_ent **pp = &t->comms[i], *e;

		while ((e = *pp)) {
			if (e->pid == pid) {
				*pp = e->next;
				if (t->kcache == e)
					t->kcache = NULL;
				free(e);
			} else {
				pp = &e->next;
			}
		}
	}
}

/* ---- event decoding ---- */

enum watch_why { WATCH_EXEC, WATCH_MOVE, WATCH_LIBS };
static void watch_pid(struct tracer *t, int pid, enum watch_why why);

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

		/* NCCL counts every split of the parent, a color-less one too */
		if (p && p->nccl_hash)
			nh = fq_nccl_hash_split(p->nccl_hash, ++p->nccl_splits, e->color);
		if (p && p->hash[0]) {
			uint32_t k = p->nsplits++;
			int32_t color = e->color;

			h = fnv1a(FNV_BASIS, &p->hash_v, sizeof(p->hash_v));
			h = fnv1a(h, &color, sizeof(color));
			h = fnv1a(h, &k, sizeof(k));
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

/* fleetq's communicator of pid whose NCCL hash is nh, or NULL. */
static const struct comm_ent *comm_by_nccl(struct tracer *t, uint32_t pid, uint64_t nh)
{
	if (t->kcache && t->kcache->pid == pid && t->kcache->nccl_hash == nh)
		return t->kcache;
	for (size_t i = 0; i < COMM_BUCKETS; i++)
		for (struct comm_ent *e = t->comms[i]; e; e = e->next)
			if (e->pid == pid && e->nccl_hash == nh)
				return t->kcache = e;
	return NULL;
}

/* A collective from fleetq's NCCL profiler plugin (bpf/fqtrace.h, struct fq_prof_rec). */
static void on_kernel(struct tracer *t, const struct fq_ev_kernel *e)
{
	const struct fq_prof_rec *p = &e->r;
	struct rec r = { .kind = REC_KERNEL };
	struct rec_kernel *k = &r.u.kernel;
	const struct comm_ent *ce;
	char op[FQ_PROF_FUNC_LEN];

	if (p->magic != FQ_PROF_MAGIC || p->size < sizeof(*p))
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
	};
	if (k->seq == REC_NULL)
		return;
	snprintf(k->nccl_comm, sizeof(k->nccl_comm), "%016" PRIx64, p->nccl_comm);
	ce = comm_by_nccl(t, e->h.pid, p->nccl_comm);
	if (ce)
		memcpy(k->comm_hash, ce->hash, sizeof(k->comm_hash));
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

/* Has the discovery thread look at pid again soon, and for a while (EXEC_WATCH_NS). */
static void watch_pid(struct tracer *t, int pid, enum watch_why why)
{
	pthread_mutex_lock(&t->mu);
	if (t->nwatch < EXEC_PENDING) {
		int64_t now = clock_ns(CLOCK_MONOTONIC);
		struct exec_watch *w = &t->watch[t->nwatch++];

		w->pid = pid;
		w->exec = why == WATCH_EXEC;
		w->libs = why == WATCH_LIBS;
		w->since_ns = now;
		w->next_ns = now;
		w->until_ns = now + EXEC_WATCH_NS;
	}
	t->woken = 1;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
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

static int on_event(void *ctx, void *data, size_t len)
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

/* ---- attaching ---- */

/*
 * Detaching a uprobe costs the kernel RCU grace periods under its global event_mutex
 * (~80 ms a link here), so agentd takes seconds to exit after SIGTERM; the trace is
 * drained and flushed before that. Handing the links to a child that outlives us made
 * the exit prompt, but the detaches then overlapped the next agent's attaches on the same
 * files (a restart, or several agents on one host), which lost that agent's events: the
 * detach stays here, where whoever waits for our exit waits for it too.
 */

static int add_link(struct tracer *t, struct bpf_link *l)
{
	int err = 0;

	pthread_mutex_lock(&t->link_mu);
	if (t->nlinks == t->caplinks) {
		size_t cap = t->caplinks ? 2 * t->caplinks : 64;
		struct bpf_link **n = realloc(t->links, cap * sizeof(*n));

		if (!n) {
			err = -ENOMEM;
			goto cleanup;
		}
		t->links = n;
		t->caplinks = cap;
	}
	t->links[t->nlinks++] = l;
cleanup:
	pthread_mutex_unlock(&t->link_mu);
	if (err)
		bpf_link__destroy(l);
	return err;
}

static int attach_one(struct tracer *t, struct bpf_program *prog, int ret, pid_t pid,
		      const char *path, uint64_t off, uint64_t cookie)
{
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = cookie, .retprobe = ret);
	struct bpf_link *l = bpf_program__attach_uprobe_opts(prog, pid, path, off, &uo);

	if (!l)
		return -errno;
	return add_link(t, l);
}

/* Attaches every probed function path defines; one uprobe covers all processes mapping it. */
static int attach_file(struct tracer *t, const char *path)
{
	struct probe_sym *syms = NULL;
	char *cause = NULL;
	int n, i, ok = 0, err;

	n = probe_resolve(path, t->sets, &syms, &cause);
	if (n < 0) {
		tlog("%s", cause ? cause : "cannot read a library");
		free(cause);
		return n;
	}
	for (i = 0; i < n; i++) {
		const struct probe_fn *f = &probe_fns[syms[i].fn];
		struct bpf_program *in, *out;
		uint64_t ck = probe_cookie(syms[i].fn);

		switch (f->kind) {
		case FQ_K_COLL:
		case FQ_K_P2P:
			in = t->skel->progs.nccl_entry;
			out = t->skel->progs.nccl_return;
			break;
		case FQ_K_INIT:
		case FQ_K_INIT_SCALABLE:
		case FQ_K_INIT_ALL:
		case FQ_K_SPLIT:
			in = t->skel->progs.init_entry;
			out = t->skel->progs.init_return;
			break;
		case FQ_K_DESTROY:
			in = t->skel->progs.destroy_entry;
			out = NULL;
			break;
		case FQ_K_GROUP_START:
			in = t->skel->progs.group_start;
			out = NULL;
			break;
		case FQ_K_GROUP_END:
			in = t->skel->progs.group_end_entry;
			out = t->skel->progs.group_end_return;
			break;
		case FQ_K_PROF:
			in = t->skel->progs.prof_kernel;
			out = NULL;
			break;
		default:
			in = t->skel->progs.cuda_entry;
			out = t->skel->progs.cuda_return;
			break;
		}
		err = attach_one(t, in, 0, -1, path, syms[i].offset, ck);
		if (!err && out)
			err = attach_one(t, out, 1, -1, path, syms[i].offset, ck);
		if (err)
			tlog("cannot attach to %s in '%s': %s", f->name, path, strerror(-err));
		else
			ok++;
	}
	if (n > 0 || t->verbose)
		tlog("attached %d of %d functions in '%s'", ok, n, path);
	free(syms);
	return ok;
}

static void lib_found(void *arg, const char *path, uint64_t dev, uint64_t ino)
{
	attach_file(arg, path);
}

static void proc_found(void *arg, int pid)
{
	struct tracer *t = arg;
	uint32_t key = (uint32_t)pid;
	uint8_t one = 1;

	bpf_map__update_elem(t->skel->maps.traced, &key, sizeof(key), &one, sizeof(one),
			     BPF_NOEXIST);
	emit_process(t, pid);
}

/* ---- threads ---- */

static void *poll_main(void *arg)
{
	struct tracer *t = arg;
	int ms = t->wakeup_bytes ? POLL_MS : IDLE_POLL_MS;

	while (!atomic_load(&t->stop)) {
		int n = ring_buffer__poll(t->rb, ms);

		/*
		 * Records submitted without a wakeup do not make the ring ready for epoll:
		 * a poll that timed out found nothing, so take what is there now.
		 */
		if (n == 0 && t->wakeup_bytes)
			n = ring_buffer__consume(t->rb);
		if (n < 0 && n != -EINTR) {
			tlog("ring buffer poll failed: %s", strerror(-n));
			break;
		}
		if (t->wakeup_bytes)
			ms = n > 0 ? POLL_MS : (ms * 2 < IDLE_POLL_MS ? ms * 2 : IDLE_POLL_MS);
	}
	return NULL;
}

/* The traced processes, for the GPU sampler's process -> GPU map (its own thread). */
static int gpu_list_procs(void *arg, struct gpu_proc *out, int max)
{
	struct tracer *t = arg;
	int n = 0;

	pthread_mutex_lock(&t->proc_mu);
	for (int b = 0; b < PROC_BUCKETS && n < max; b++)
		for (struct proc_ent *e = t->procs[b]; e && n < max; e = e->next)
			out[n++] = (struct gpu_proc){ .pid = e->pid, .start_ns = e->start_ns };
	pthread_mutex_unlock(&t->proc_mu);
	return n;
}

static int ib_emit(void *arg, const struct rec_ib *r)
{
	struct rec rec = { .kind = REC_IB };

	rec.u.ib = *r;
	return store_put(arg, &rec);
}

static void *disc_main(void *arg)
{
	struct tracer *t = arg;
	int64_t next_scan = 0, next_ib = 0;

	while (!atomic_load(&t->stop)) {
		int64_t now = clock_ns(CLOCK_MONOTONIC), wake = next_scan;
		struct exec_watch w[EXEC_PENDING];
		struct timespec ts;
		int n, i;

		if (now >= next_scan) {
			discover_scan(t->disc, lib_found, proc_found, t);
			next_scan = now + 1000000000LL;
		}
		if (t->ib && now >= next_ib) {
			ib_poller_poll(t->ib, clock_ns(CLOCK_REALTIME), ib_emit, t->store);
			next_ib = now + (int64_t)t->ib_interval_s * 1000000000LL;
		}
		/* exec'ed processes: libraries map after exec (ld.so, dlopen), look again soon */
		pthread_mutex_lock(&t->mu);
		n = 0;
		for (i = 0; i < t->nwatch; i++) {
			struct exec_watch *x = &t->watch[i];

			if (x->next_ns > now)
				continue;
			w[n++] = *x;
			x->exec = 0; /* forget once */
			x->next_ns = now + (now - x->since_ns < EXEC_FAST_NS ? 2000000LL
									     : 20000000LL);
		}
		pthread_mutex_unlock(&t->mu);
		for (i = 0; i < n; i++) {
			if (w[i].libs) {
				discover_scan_libs(t->disc, w[i].pid, lib_found, t);
				continue;
			}
			if (w[i].exec)
				discover_forget(t->disc, w[i].pid);
			discover_scan_pid(t->disc, w[i].pid, lib_found, proc_found, t);
		}
		pthread_mutex_lock(&t->mu);
		now = clock_ns(CLOCK_MONOTONIC);
		for (i = 0; i < t->nwatch;) {
			if (t->watch[i].until_ns < now) {
				t->watch[i] = t->watch[--t->nwatch];
				continue;
			}
			if (t->watch[i].next_ns < wake)
				wake = t->watch[i].next_ns;
			i++;
		}
		if (t->ib && next_ib < wake)
			wake = next_ib;
		if (!atomic_load(&t->stop) && wake > now && !t->woken) {
			int64_t rt = clock_ns(CLOCK_REALTIME) + (wake - now);

			ts.tv_sec = rt / 1000000000LL;
			ts.tv_nsec = rt % 1000000000LL;
			pthread_cond_timedwait(&t->cv, &t->mu, &ts);
		}
		t->woken = 0;
		pthread_mutex_unlock(&t->mu);
	}
	return NULL;
}

/* ---- start-up probe cost ---- */

static int64_t time_calls(int (*volatile fn)(int), int n)
{
	int64_t t0 = clock_ns(CLOCK_MONOTONIC);
	int i, acc = 0;

	for (i = 0; i < n; i++)
		acc += fn(i);
	__asm__ volatile("" : : "r"(acc));
	return clock_ns(CLOCK_MONOTONIC) - t0;
}

/*
 * ns added per call of fn by the collective entry+return programs, measured on this
 * process only; events go through the ring buffer and are discarded. -1 on failure.
 */
static int64_t calibrate(struct tracer *t, int (*fn)(int), int calls)
{
	uint64_t ck = (uint64_t)FQ_K_CALIB << 8, off;
	int64_t base = INT64_MAX, traced = INT64_MAX;
	char path[PATH_MAX];
	size_t first = t->nlinks, i;
	int rep, err;

	if (probe_self_offset((const void *)fn, path, sizeof(path), &off))
		return -1;
	for (rep = 0; rep < 3; rep++) {
		int64_t d = time_calls(fn, calls);

		base = d < base ? d : base;
	}
	err = attach_one(t, t->skel->progs.nccl_entry, 0, getpid(), path, off, ck);
	if (!err)
		err = attach_one(t, t->skel->progs.nccl_return, 1, getpid(), path, off, ck);
	if (!err) {
		atomic_store(&t->calib_hits, 0);
		for (rep = 0; rep < 3; rep++) {
			int64_t d = 0;
			int done;

			for (done = 0; done < calls; done += 1000) {
				d += time_calls(fn, 1000);
				ring_buffer__consume(t->rb);
			}
			traced = d < traced ? d : traced;
		}
	}
	pthread_mutex_lock(&t->link_mu);
	for (i = first; i < t->nlinks; i++)
		bpf_link__destroy(t->links[i]);
	t->nlinks = first;
	pthread_mutex_unlock(&t->link_mu);
	if (err) {
		tlog("cannot attach the calibration probe: %s", strerror(-err));
		return -1;
	}
	if (atomic_load(&t->calib_hits) < 3LL * calls) {
		tlog("calibration probe fired %lld times for %d calls",
		     (long long)atomic_load(&t->calib_hits), 3 * calls);
		return -1;
	}
	return traced > base ? (traced - base) / calls : 0;
}

/* ---- start / stop ---- */

static int parse_env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);

	return v && *v ? (int)strtoull(v, NULL, 0) : (int)def;
}

static int attach_listed_libs(struct tracer *t)
{
	char *copy, *save = NULL, *w;

	if (!t->probes)
		return 0;
	copy = strdup(t->probes);
	if (!copy)
		return -ENOMEM;
	for (w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		char real[PATH_MAX];
		struct stat st;

		if (strncmp(w, "lib:", 4))
			continue;
		if (!realpath(w + 4, real) || stat(real, &st)) {
			tlog("cannot find library '%s': %s", w + 4, strerror(errno));
			continue;
		}
		if (attach_file(t, real) > 0)
			discover_add_file(t->disc, st.st_dev, st.st_ino);
	}
	free(copy);
	return 0;
}

/*
 * fleetq's NCCL profiler plugin where it is installed beside agentd: attached at start, so
 * that a job's first collectives are seen too (found in a process's maps only after NCCL
 * loaded it at the communicator's init, the attach would miss what ran meanwhile).
 */
#ifndef FLEETQ_NCCL_PLUGIN_PATH
#define FLEETQ_NCCL_PLUGIN_PATH "/usr/local/lib/libfleetq-nccl-profiler.so"
#endif
static void attach_installed_plugin(struct tracer *t)
{
	char real[PATH_MAX];
	struct stat st;

	if (!(t->sets & PROBE_NCCL) || !realpath(FLEETQ_NCCL_PLUGIN_PATH, real) ||
	    stat(real, &st) || discover_has_file(t->disc, st.st_dev, st.st_ino))
		return;
	if (attach_file(t, real) > 0)
		discover_add_file(t->disc, st.st_dev, st.st_ino);
}

struct tracer *tracer_start(const struct trace_opts *o, char **cause)
{
	struct store_opts so = { 0 };
	struct tracer *t = calloc(1, sizeof(*t));
	char clock_src[160], *scope_dir = NULL;
	int64_t cost_push = -1, cost_endbr = -1;
	int err;

	*cause = NULL;
	if (!t || !(t->sync = syncwait_new())) {
		free(t);
		*cause = strdup("out of memory");
		return NULL;
	}
	t->cg_fd = -1;
	pthread_mutex_init(&t->link_mu, NULL);
	pthread_mutex_init(&t->proc_mu, NULL);
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	t->db_path = o->db_path ? strdup(o->db_path) : NULL;
	t->node = o->node ? strdup(o->node) : NULL;
	t->cgroup = o->cgroup ? strdup(o->cgroup) : NULL;
	t->probes = o->probes ? strdup(o->probes) : NULL;
	t->sysfs_root = o->sysfs_root ? strdup(o->sysfs_root) : NULL;
	t->ib_interval_s = o->ib_interval_s;
	t->gpu_interval_ms = o->gpu_interval_ms;
	t->nvml_lib = o->nvml_lib ? strdup(o->nvml_lib) : NULL;
	t->verbose = o->verbose;
	t->ring_bytes = (uint32_t)parse_env_u64("FQ_RING_BYTES", DEFAULT_RING_BYTES);
	t->wakeup_bytes = (uint32_t)parse_env_u64("FQ_RING_WAKEUP", t->ring_bytes / WAKEUP_DIV);
	t->min_offcpu_ns = (uint64_t)parse_env_u64("FQ_MIN_OFFCPU_NS", DEFAULT_MIN_OFFCPU_NS);

	if (!t->db_path) {
		*cause = strdup("no trace file given: pass a path for the trace database");
		goto fail;
	}
	err = probe_parse_sets(o->probes, &t->sets, cause);
	if (err)
		goto fail;
	if (!t->sets) /* only lib:PATH items: the default sets for them */
		probe_parse_sets(NULL, &t->sets, cause);
	t->disc = discover_new(o->cgroup, &scope_dir, cause);
	if (!t->disc)
		goto fail;
	if (scope_dir) {
		t->cg_fd = open(scope_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (t->cg_fd < 0) {
			if (asprintf(cause, "cannot open cgroup '%s': %s", scope_dir,
				     strerror(errno)) < 0)
				*cause = NULL;
			goto fail;
		}
	}
	if (geteuid() != 0)
		tlog("not running as root: loading BPF programs will likely fail");

	t->skel = fqtrace_bpf__open();
	if (!t->skel) {
		if (asprintf(cause, "cannot open the BPF object: %s", strerror(errno)) < 0)
			*cause = NULL;
		goto fail;
	}
	t->use_tai = libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_ktime_get_tai_ns,
					     NULL) > 0;
	t->skel->rodata->use_tai = t->use_tai;
	t->skel->rodata->scoped = t->cg_fd >= 0;
	t->skel->rodata->min_offcpu_ns = t->min_offcpu_ns;
	t->skel->rodata->trace_sched = !!(t->sets & PROBE_SCHED);
	t->skel->rodata->wakeup_bytes = t->wakeup_bytes;
	bpf_map__set_max_entries(t->skel->maps.events, t->ring_bytes);
	bpf_program__set_autoload(t->skel->progs.sched_switch, !!(t->sets & PROBE_SCHED));
	bpf_program__set_autoload(t->skel->progs.tcp_retransmit, !!(t->sets & PROBE_TCP));
	/* a missing tracepoint must not cost the agent its other probes */
	bpf_program__set_autoload(t->skel->progs.tcp_send, (t->sets & PROBE_TCP) &&
				  libbpf_find_vmlinux_btf_id("sock_send_length",
							     BPF_TRACE_RAW_TP) > 0);
	bpf_program__set_autoload(t->skel->progs.tcp_connect, (t->sets & PROBE_TCP) &&
				  libbpf_find_vmlinux_btf_id("inet_sock_set_state",
							     BPF_TRACE_RAW_TP) > 0);
	bpf_program__set_autoload(t->skel->progs.proc_exec, !!(t->sets & PROBE_PROC));
	bpf_program__set_autoload(t->skel->progs.cgroup_attach, !!(t->sets & PROBE_PROC));
	err = fqtrace_bpf__load(t->skel);
	if (err) {
		if (asprintf(cause,
			     "cannot load the BPF programs: %s (needs root and a kernel with BTF)",
			     strerror(-err)) < 0)
			*cause = NULL;
		goto fail;
	}
	if (t->cg_fd >= 0) {
		uint32_t key = 0;

		err = bpf_map__update_elem(t->skel->maps.scope_cg, &key, sizeof(key), &t->cg_fd,
					   sizeof(t->cg_fd), BPF_ANY);
		if (err) {
			if (asprintf(cause, "cannot scope to cgroup '%s': %s", scope_dir,
				     strerror(-err)) < 0)
				*cause = NULL;
			goto fail;
		}
	}
	if (t->use_tai) {
		/* TAI - UTC is a whole number of seconds */
		int64_t d = clock_diff(CLOCK_TAI, CLOCK_REALTIME);

		t->clock_off = (d >= 0 ? d + 500000000LL : d - 500000000LL) / 1000000000LL *
			       1000000000LL;
		snprintf(clock_src, sizeof(clock_src),
			 "realtime (bpf_ktime_get_tai_ns - tai offset %" PRId64 " s)",
			 (int64_t)(t->clock_off / 1000000000LL));
	} else {
		t->clock_off = clock_diff(CLOCK_MONOTONIC, CLOCK_REALTIME);
		snprintf(clock_src, sizeof(clock_src),
			 "realtime (bpf_ktime_get_ns + monotonic offset measured at start)");
	}
	t->boot_off = clock_diff(CLOCK_REALTIME, CLOCK_BOOTTIME);
	t->mono_off = clock_diff(CLOCK_REALTIME, CLOCK_MONOTONIC);

	so.path = t->db_path;
	so.node = t->node;
	so.clock_source = clock_src;
	so.retain_bytes = o->retain_bytes;
	so.retain_age_s = o->retain_age_s;
	t->store = store_open(&so, cause);
	if (!t->store)
		goto fail;

	t->rb = ring_buffer__new(bpf_map__fd(t->skel->maps.events), on_event, t, NULL);
	if (!t->rb) {
		if (asprintf(cause, "cannot set up the BPF ring buffer: %s", strerror(errno)) < 0)
			*cause = NULL;
		goto fail;
	}
	/* tracepoints and the per-thread exit cleanup; uprobes are attached per library */
	if (t->sets & PROBE_SCHED) {
		struct bpf_link *l = bpf_program__attach(t->skel->progs.sched_switch);

		if (!l || add_link(t, l)) {
			if (asprintf(cause, "cannot attach sched_switch: %s", strerror(errno)) < 0)
				*cause = NULL;
			goto fail;
		}
	}
	if (t->sets & PROBE_TCP) {
		struct bpf_link *l = bpf_program__attach(t->skel->progs.tcp_retransmit);

		if (!l || add_link(t, l))
			tlog("cannot attach tcp_retransmit_skb: %s", strerror(errno));
		/* without them every retransmit is the host's (pid NULL): netcheck says less */
		if (bpf_program__autoload(t->skel->progs.tcp_send)) {
			l = bpf_program__attach(t->skel->progs.tcp_send);
			if (!l || add_link(t, l))
				tlog("cannot attach sock_send_length: %s", strerror(errno));
		}
		if (bpf_program__autoload(t->skel->progs.tcp_connect)) {
			l = bpf_program__attach(t->skel->progs.tcp_connect);
			if (!l || add_link(t, l))
				tlog("cannot attach inet_sock_set_state: %s", strerror(errno));
		}
	}
	if (t->sets & PROBE_PROC) {
		struct bpf_link *l = bpf_program__attach(t->skel->progs.proc_exec);

		if (!l || add_link(t, l))
			tlog("cannot attach sched_process_exec: %s", strerror(errno));
		l = bpf_program__attach(t->skel->progs.cgroup_attach);
		if (!l || add_link(t, l))
			tlog("cannot attach cgroup_attach_task: %s", strerror(errno));
	}
	{
		struct bpf_link *l = bpf_program__attach(t->skel->progs.proc_exit);

		if (!l || add_link(t, l))
			tlog("cannot attach sched_process_exit: %s", strerror(errno));
	}

	cost_push = calibrate(t, probe_calib_push, CALIB_CALLS);
	cost_endbr = calibrate(t, probe_calib_endbr, CALIB_CALLS / 10);
	tlog("probe cost per hit (uprobe+uretprobe): %" PRId64 " ns on a push prologue, %" PRId64
	     " ns on endbr64", cost_push, cost_endbr);

	if (t->ib_interval_s > 0) {
		char *ibc = NULL;

		t->ib = ib_poller_new(t->sysfs_root, &ibc);
		if (!t->ib) {
			tlog("infiniband counters off: %s", ibc ? ibc : "cannot start the poller");
			free(ibc);
		}
	}

	store_set_meta_text(t->store, "probes", t->probes ? t->probes : PROBE_DEFAULT);
	store_set_meta_int(t->store, "probe_cost_ns", cost_push >= 0 ? cost_push : REC_NULL);
	store_set_meta_int(t->store, "probe_cost_endbr64_ns",
			   cost_endbr >= 0 ? cost_endbr : REC_NULL);
	store_set_meta_int(t->store, "ring_buffer_bytes", t->ring_bytes);
	store_set_meta_int(t->store, "ring_wakeup_bytes", t->wakeup_bytes);
	store_set_meta_int(t->store, "min_offcpu_ns", (int64_t)t->min_offcpu_ns);
	store_set_meta_text(t->store, "trace_scope", scope_dir ? scope_dir : "host");
	store_set_meta_text(t->store, "seq_semantics",
			    "per (pid, comm_ptr) from 0 at comm init; collectives and p2p counted "
			    "separately; NULL when the init was not seen");

	attach_listed_libs(t);
	attach_installed_plugin(t);
	discover_scan(t->disc, lib_found, proc_found, t);

	err = pthread_create(&t->poll_th, NULL, poll_main, t);
	if (err) {
		*cause = strdup("cannot start the ring buffer thread");
		goto fail;
	}
	t->poll_started = 1;
	err = pthread_create(&t->disc_th, NULL, disc_main, t);
	if (err) {
		*cause = strdup("cannot start the discovery thread");
		goto fail;
	}
	t->disc_started = 1;
	{
		struct gpu_thread_opts go = { .lib = t->nvml_lib,
					      .interval_ms = t->gpu_interval_ms,
					      .list_procs = gpu_list_procs,
					      .arg = t };
		char *why = NULL;

		/* no GPU is no error: meta 'gpu_status' (and fleetq ping) says why */
		t->gpu = gpu_thread_start(&go, t->store, &why);
		if (!t->gpu)
			tlog("GPU sampling %s", why ? why : "off");
		free(why);
		/* meta 'gpu_status' committed before the first HELLO can read it */
		store_flush(t->store);
	}
	free(scope_dir);
	/* loading parsed the kernel's BTF (megabytes, freed since): give it back to the OS */
	malloc_trim(0);
	return t;
fail:
	free(scope_dir);
	if (!*cause)
		*cause = strdup("cannot start the tracer");
	tracer_stop(t);
	return NULL;
}

static int64_t ring_drops(struct tracer *t)
{
	int ncpu = libbpf_num_possible_cpus(), i;
	uint32_t key = 0;
	uint64_t *v;
	int64_t sum = 0;

	if (!t->skel || ncpu <= 0 || !(v = calloc((size_t)ncpu, sizeof(*v))))
		return 0;
	if (!bpf_map__lookup_elem(t->skel->maps.drops, &key, sizeof(key), v,
				  sizeof(*v) * (size_t)ncpu, 0))
		for (i = 0; i < ncpu; i++)
			sum += (int64_t)v[i];
	free(v);
	return sum;
}

void tracer_get_stats(struct tracer *t, struct trace_stats *st)
{
	struct store_stats ss = { 0 };

	memset(st, 0, sizeof(*st));
	if (!t)
		return;
	st->events = atomic_load(&t->events);
	st->ring_drops = ring_drops(t);
	if (t->store) {
		store_get_stats(t->store, &ss);
		st->store_drops = ss.drops;
		st->store_lag_ns = ss.lag_ns;
		st->rows = ss.rows;
	}
}

void tracer_stop(struct tracer *t)
{
	size_t i;

	if (!t)
		return;
	atomic_store(&t->stop, 1);
	pthread_mutex_lock(&t->mu);
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	gpu_thread_stop(t->gpu);
	if (t->disc_started)
		pthread_join(t->disc_th, NULL);
	if (t->poll_started)
		pthread_join(t->poll_th, NULL);
	/* take what the ring buffer holds and flush it before detaching (see above) */
	if (t->rb) {
		ring_buffer__consume(t->rb);
		if (t->store) {
			int64_t drops = ring_drops(t);

			store_set_meta_int(t->store, "ring_drops", drops);
			store_set_meta_int(t->store, "trace_events", atomic_load(&t->events));
			if (drops)
				tlog("%" PRId64 " events lost: the ring buffer was full "
				     "(raise FQ_RING_BYTES)", drops);
		}
	}
	store_close(t->store);
	for (i = 0; i < t->nlinks; i++)
		bpf_link__destroy(t->links[i]);
	t->nlinks = 0;
	ring_buffer__free(t->rb);
	fqtrace_bpf__destroy(t->skel);
	ib_poller_free(t->ib);
	discover_free(t->disc);
	if (t->cg_fd >= 0)
		close(t->cg_fd);
	for (i = 0; i < COMM_BUCKETS; i++)
		while (t->comms[i]) {
			struct comm_ent *e = t->comms[i];

			t->comms[i] = e->next;
			free(e);
		}
	syncwait_free(t->sync);
	for (i = 0; i < PROC_BUCKETS; i++)
		while (t->procs[i]) {
			struct proc_ent *e = t->procs[i];

			t->procs[i] = e->next;
			free(e);
		}
	free(t->links);
	free(t->db_path);
	free(t->node);
	free(t->cgroup);
	free(t->probes);
	free(t->sysfs_root);
	free(t->nvml_lib);
	pthread_mutex_destroy(&t->link_mu);
	pthread_mutex_destroy(&t->proc_mu);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	free(t);
}
