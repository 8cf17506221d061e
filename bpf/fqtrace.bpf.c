// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * fleetq kernel side: NCCL / CUDA uprobes, sched_switch off-CPU and on-CPU
 * accounting, tcp retransmits, process exec/exit. Everything goes to user
 * space through one ring buffer; a failed reserve is counted in `drops`.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "fqtrace.h"

#define TASK_RUNNING 0
#define SIGNAL_GROUP_EXIT 0x00000004

/* kernels before 5.14 name it `state` */
struct task_struct___old {
	long state;
} __attribute__((preserve_access_index));

const volatile bool scoped = false;       /* only tasks under scope_cg[0] */
const volatile bool use_tai = false;      /* bpf_ktime_get_tai_ns() exists */
const volatile uint64_t min_offcpu_ns = 10000;
const volatile bool trace_sched = true;
/*
 * Reader wakeups. 0: the ring buffer's own policy (wake the reader whenever it may have
 * emptied the ring: nearly every record when the reader keeps up). Else records are
 * submitted without a wakeup and the reader drains on a timer; a record that takes the
 * unread data past a multiple of this many bytes forces one, and events that start
 * discovery always do.
 */
const volatile uint64_t wakeup_bytes = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by the loader */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, uint32_t);
	__type(value, uint64_t);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, uint32_t);
	__type(value, uint32_t);
} scope_cg SEC(".maps");

/* tgids whose threads sched_switch follows; user space adds discovered ones */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, uint32_t);
	__type(value, uint8_t);
} traced SEC(".maps");

struct inflight {
	uint64_t ts; /* entry time; 0: not in a call */
	uint64_t cookie;
	uint64_t comm;
	uint64_t count;
	uint64_t stream;
	uint64_t oncpu;    /* thread's on-CPU ns at entry (collectives, synchronize) */
	uint64_t proc_cpu; /* collectives: the process's CPU work at entry */
	int32_t dtype;
	int32_t redop;
	int32_t peer;
	uint32_t depth; /* nested probed calls on the same thread: only the outermost counts */
};

/*
 * Per-thread state of the probed calls, kept with the task (freed when it exits): no hash
 * lookup, insert or delete on the hot path. A thread has it once one of its calls passed
 * want_current(). NCCL and CUDA calls nest (a collective launches a kernel): one slot each.
 */
struct thread_state {
	struct inflight call[2]; /* CALL_NCCL, CALL_CUDA */
	uint64_t group_ts;       /* outermost ncclGroupStart entry */
	uint64_t group_end_ts;   /* outermost ncclGroupEnd entry, 0: not in it */
	uint32_t group_depth;    /* ncclGroupStart calls not yet ended */
	uint32_t group_ncalls;   /* collectives and p2p calls issued in the open group */
};

#define CALL_NCCL 0
#define CALL_CUDA 1

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct thread_state);
} threads SEC(".maps");

struct init_args {
	uint64_t ts;
	uint64_t cookie;
	uint64_t outp;
	uint64_t parent;
	int32_t rank;
	int32_t nranks;
	int32_t color;
	uint32_t has_id;
	uint32_t depth;
	uint32_t pad;
	uint8_t id[FQ_UNIQUE_ID_BYTES];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, uint64_t);
	__type(value, struct init_args);
} inits SEC(".maps");

struct cpu_acct {
	uint64_t on_ts; /* switched in at, 0 while off CPU */
	uint64_t total; /* cumulative on-CPU ns seen */
	uint32_t lib;	/* 1: a thread NCCL started (proc_fork): not the job's CPU work */
	uint32_t pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, uint32_t); /* tid */
	__type(value, struct cpu_acct);
} oncpu SEC(".maps");

/*
 * Per traced process: on-CPU ns of its threads' finished slices (every thread but those NCCL
 * started: proc_fork), and the part of it spent inside probed wait calls (synchronize,
 * collectives), which a CUDA runtime may spend spinning. Their difference is the process's
 * CPU work (collectives.cpu_ns).
 */
struct proc_acct {
	uint64_t cpu;
	uint64_t wait_cpu;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, uint32_t); /* tgid */
	__type(value, struct proc_acct);
} proccpu SEC(".maps");

struct off_start {
	uint64_t ts;
	uint32_t preempted;
	uint32_t pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, uint32_t);
	__type(value, struct off_start);
} offstart SEC(".maps");

static __always_inline uint64_t now_ns(void)
{
	if (use_tai)
		return bpf_ktime_get_tai_ns();
	return bpf_ktime_get_ns();
}

/*
 * When agentd last finished attaching a library's probes (now_ns()'s clock; user space
 * writes it). A call entered before then may have had its entry probe without its return
 * probe (agentd attached them one after the other while the process ran): its return is
 * never seen, and taking the thread's next calls for calls nested in it would swallow them
 * all. A pending entry older than this is stale; a nested call is never entered before its
 * outer call, so at worst one outer call spanning an attach goes unrecorded.
 */
uint64_t settled_ns = 0;

static __always_inline bool stale(uint64_t entered_ns)
{
	return entered_ns < *(volatile uint64_t *)&settled_ns;
}

static __always_inline void *reserve(uint64_t size)
{
	void *e = bpf_ringbuf_reserve(&events, size, 0);

	if (!e) {
		uint32_t zero = 0;
		uint64_t *d = bpf_map_lookup_elem(&drops, &zero);

		if (d)
			*d += 1;
	}
	return e;
}

/* Bytes a record of size n takes in the ring: an 8-byte header, rounded up to 8. */
#define RB_SPACE(n) (((n) + 8 + 7) & ~7ULL)

/*
 * Hands a record of the hot paths (calls, off-CPU, tcp) to the reader: see wakeup_bytes.
 * The reader is woken when this record takes the unread data past a multiple of
 * wakeup_bytes, not on every record above it: a reader that lags (no CPU free for it)
 * would otherwise cost every traced call an irq_work and its self-IPI until it caught up.
 * space is the record's RB_SPACE().
 */
static __always_inline void submit(void *e, uint64_t space)
{
	uint64_t flags = 0, avail;

	if (wakeup_bytes) {
		avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
		flags = avail >= space && avail / wakeup_bytes != (avail - space) / wakeup_bytes ?
				BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	}
	bpf_ringbuf_submit(e, flags);
}

/* A record user space acts on at once (exec, exit, cgroup move: discovery). */
static __always_inline void submit_now(void *e)
{
	bpf_ringbuf_submit(e, wakeup_bytes ? BPF_RB_FORCE_WAKEUP : 0);
}

static __always_inline void fill_hdr(struct fq_ev_hdr *h, uint32_t type, uint64_t pid_tgid,
				     uint32_t fn, uint64_t ts)
{
	h->type = type;
	h->pid = pid_tgid >> 32;
	h->tid = (uint32_t)pid_tgid;
	h->fn = fn;
	h->ts = ts;
}

/*
 * True if the calling process is one we trace. A process that passes the
 * cgroup test once is remembered in `traced` so sched_switch follows it and
 * later hits skip the cgroup walk.
 */
static __always_inline bool want_current(uint32_t tgid)
{
	uint8_t one = 1;

	if (bpf_map_lookup_elem(&traced, &tgid))
		return true;
	if (scoped && bpf_current_task_under_cgroup(&scope_cg, 0) != 1)
		return false;
	bpf_map_update_elem(&traced, &tgid, &one, BPF_NOEXIST);
	return true;
}

static __always_inline uint64_t arg_at(struct pt_regs *ctx, unsigned int n)
{
	uint64_t v = 0;

	switch (n) {
	case 1: return PT_REGS_PARM1(ctx);
	case 2: return PT_REGS_PARM2(ctx);
	case 3: return PT_REGS_PARM3(ctx);
	case 4: return PT_REGS_PARM4(ctx);
	case 5: return PT_REGS_PARM5(ctx);
	case 6: return ctx->r9;
	case 7:
	case 8:
	case 9:
	case 10:
		/* at function entry [sp] is the return address, then args 7, 8, ... */
		bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8 * (n - 6)));
		return v;
	}
	return 0;
}

/* The thread's on-CPU ns so far; it is running now, so count the current slice. */
static __always_inline uint64_t oncpu_now(uint32_t tid, uint64_t ts)
{
	struct cpu_acct *a = bpf_map_lookup_elem(&oncpu, &tid);
	struct cpu_acct n = { .on_ts = ts };

	if (!a) {
		bpf_map_update_elem(&oncpu, &tid, &n, BPF_NOEXIST);
		return 0;
	}
	if (a->on_ts && ts > a->on_ts)
		return a->total + (ts - a->on_ts);
	return a->total;
}

static __always_inline struct proc_acct *proc_acct_get(uint32_t tgid)
{
	struct proc_acct *p = bpf_map_lookup_elem(&proccpu, &tgid), n = {};

	if (p)
		return p;
	bpf_map_update_elem(&proccpu, &tgid, &n, BPF_NOEXIST);
	return bpf_map_lookup_elem(&proccpu, &tgid);
}

/*
 * The process's CPU work so far: its threads' finished slices, plus the calling thread's
 * current one, less what was spent inside wait calls. Other threads' running slices are not
 * in it yet: a span's total is short by at most the slices running at its two ends.
 */
static __always_inline uint64_t proc_cpu_now(uint32_t tgid, uint32_t tid, uint64_t ts)
{
	struct proc_acct *p = proc_acct_get(tgid);
	struct cpu_acct *a = bpf_map_lookup_elem(&oncpu, &tid);
	uint64_t v;

	if (!p)
		return 0;
	v = p->cpu;
	if (a && a->on_ts && ts > a->on_ts)
		v += ts - a->on_ts;
	return v > p->wait_cpu ? v - p->wait_cpu : 0;
}

/* The calling thread's state if its process is traced (created on its first call), or NULL. */
static __always_inline struct thread_state *thread_get(uint64_t ck, uint64_t id)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct thread_state *s = bpf_task_storage_get(&threads, task, 0, 0);

	if (s)
		return s;
	if (FQ_CK_KIND(ck) != FQ_K_CALIB && !want_current(id >> 32))
		return NULL;
	return bpf_task_storage_get(&threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

static __always_inline int call_entry(struct pt_regs *ctx, unsigned int slot)
{
	uint64_t ck = bpf_get_attach_cookie(ctx);
	uint64_t id = bpf_get_current_pid_tgid();
	struct thread_state *s = thread_get(ck, id);
	struct inflight *f;
	unsigned int p;

	if (!s)
		return 0;
	f = &s->call[slot];
	/* a call entered while one is pending nests in it, unless that one is stale */
	if (f->ts && !stale(f->ts)) {
		f->depth++;
		return 0;
	}
	f->cookie = ck;
	f->depth = 0;
	f->comm = (p = FQ_CK_POS(ck, FQ_CK_COMM)) ? arg_at(ctx, p) : 0;
	f->count = (p = FQ_CK_POS(ck, FQ_CK_COUNT)) ? arg_at(ctx, p) : 0;
	f->dtype = (p = FQ_CK_POS(ck, FQ_CK_DTYPE)) ? (int32_t)arg_at(ctx, p) : -1;
	f->redop = (p = FQ_CK_POS(ck, FQ_CK_REDOP)) ? (int32_t)arg_at(ctx, p) : -1;
	f->peer = (p = FQ_CK_POS(ck, FQ_CK_PEER)) ? (int32_t)arg_at(ctx, p) : -1;
	f->stream = (p = FQ_CK_POS(ck, FQ_CK_STREAM)) ? arg_at(ctx, p) : 0;
	f->ts = now_ns();
	f->oncpu = 0;
	f->proc_cpu = 0;
	if (trace_sched && (slot == CALL_NCCL || FQ_CK_KIND(ck) == FQ_K_SYNC))
		f->oncpu = oncpu_now((uint32_t)id, f->ts);
	if (trace_sched && slot == CALL_NCCL)
		f->proc_cpu = proc_cpu_now(id >> 32, (uint32_t)id, f->ts);
	return 0;
}

static __always_inline int call_return(struct pt_regs *ctx, unsigned int slot, uint32_t type)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct thread_state *s = bpf_task_storage_get(&threads, task, 0, 0);
	struct fq_ev_call *e;
	struct inflight *f;
	uint64_t ts;

	if (!s)
		return 0;
	f = &s->call[slot];
	if (!f->ts)
		return 0;
	if (f->depth) {
		f->depth--;
		return 0;
	}
	ts = now_ns();
	if (slot == CALL_NCCL && s->group_depth)
		s->group_ncalls++;
	if (trace_sched && (slot == CALL_NCCL || FQ_CK_KIND(f->cookie) == FQ_K_SYNC)) {
		uint64_t id = bpf_get_current_pid_tgid(), in = oncpu_now((uint32_t)id, ts);
		struct proc_acct *p = proc_acct_get(id >> 32);

		if (p && in > f->oncpu)
			__sync_fetch_and_add(&p->wait_cpu, in - f->oncpu);
	}
	e = reserve(sizeof(*e));
	if (e) {
		fill_hdr(&e->h, type, bpf_get_current_pid_tgid(), FQ_CK_FN(f->cookie), f->ts);
		e->dur = ts - f->ts;
		e->comm = f->comm;
		e->count = f->count;
		e->stream = f->stream;
		e->oncpu = f->oncpu;
		e->proc_cpu = f->proc_cpu;
		e->ret = (int32_t)PT_REGS_RC(ctx);
		e->dtype = f->dtype;
		e->redop = f->redop;
		e->peer = f->peer;
		e->kind = FQ_CK_KIND(f->cookie);
		submit(e, RB_SPACE(sizeof(*e)));
	}
	f->ts = 0;
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(nccl_entry)
{
	return call_entry(ctx, CALL_NCCL);
}

SEC("uretprobe")
int BPF_KRETPROBE(nccl_return)
{
	return call_return(ctx, CALL_NCCL, FQ_EV_COLL);
}

SEC("uprobe")
int BPF_KPROBE(cuda_entry)
{
	return call_entry(ctx, CALL_CUDA);
}

SEC("uretprobe")
int BPF_KRETPROBE(cuda_return)
{
	return call_return(ctx, CALL_CUDA, FQ_EV_CUDA);
}

SEC("uprobe")
int BPF_KPROBE(init_entry)
{
	uint64_t ck = bpf_get_attach_cookie(ctx);
	uint64_t id = bpf_get_current_pid_tgid();
	struct init_args *f, n = {};
	unsigned int kind = FQ_CK_KIND(ck);
	void *idp = NULL;

	if (!want_current(id >> 32))
		return 0;
	f = bpf_map_lookup_elem(&inits, &id);
	if (f && !stale(f->ts)) {
		f->depth++;
		return 0;
	}
	n.cookie = ck;
	n.rank = -1;
	n.nranks = -1;
	switch (kind) {
	case FQ_K_INIT:
		n.outp = PT_REGS_PARM1(ctx);
		n.nranks = (int32_t)PT_REGS_PARM2(ctx);
		n.rank = (int32_t)PT_REGS_PARM3(ctx);
		/* ncclUniqueId (128 bytes) is passed by value in memory, above the return address */
		idp = (void *)(PT_REGS_SP(ctx) + 8);
		break;
	case FQ_K_INIT_SCALABLE:
		n.outp = PT_REGS_PARM1(ctx);
		n.nranks = (int32_t)PT_REGS_PARM2(ctx);
		n.rank = (int32_t)PT_REGS_PARM3(ctx);
		idp = (void *)PT_REGS_PARM5(ctx); /* commIds[0] */
		break;
	case FQ_K_INIT_ALL:
		n.outp = PT_REGS_PARM1(ctx);
		n.nranks = (int32_t)PT_REGS_PARM2(ctx);
		break;
	case FQ_K_SPLIT:
		n.parent = PT_REGS_PARM1(ctx);
		n.color = (int32_t)PT_REGS_PARM2(ctx);
		n.outp = PT_REGS_PARM4(ctx);
		break;
	default:
		return 0;
	}
	if (idp && bpf_probe_read_user(n.id, sizeof(n.id), idp) == 0)
		n.has_id = 1;
	n.ts = now_ns();
	bpf_map_update_elem(&inits, &id, &n, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(init_return)
{
	uint64_t id = bpf_get_current_pid_tgid();
	struct init_args *f = bpf_map_lookup_elem(&inits, &id);
	unsigned int kind, n = 1, i;
	uint64_t ts;

	if (!f)
		return 0;
	if (f->depth) {
		f->depth--;
		return 0;
	}
	ts = now_ns();
	kind = FQ_CK_KIND(f->cookie);
	if (kind == FQ_K_INIT_ALL && f->nranks > 0)
		n = f->nranks < FQ_INITALL_MAX ? f->nranks : FQ_INITALL_MAX;
	for (i = 0; i < FQ_INITALL_MAX && i < n; i++) {
		struct fq_ev_comm *e = reserve(sizeof(*e));
		uint64_t comm = 0;

		if (!e)
			break;
		fill_hdr(&e->h, FQ_EV_COMM, id, FQ_CK_FN(f->cookie), f->ts);
		e->dur = ts - f->ts;
		if (f->outp)
			bpf_probe_read_user(&comm, sizeof(comm), (void *)(f->outp + 8 * i));
		e->comm = comm;
		e->parent = f->parent;
		e->ret = (int32_t)PT_REGS_RC(ctx);
		e->rank = kind == FQ_K_INIT_ALL ? (int32_t)i : f->rank;
		e->nranks = f->nranks;
		e->color = f->color;
		e->kind = kind;
		e->has_id = f->has_id;
		e->pad = 0;
		__builtin_memcpy(e->id, f->id, sizeof(e->id));
		submit(e, RB_SPACE(sizeof(*e)));
	}
	bpf_map_delete_elem(&inits, &id);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(destroy_entry, uint64_t comm)
{
	uint64_t id = bpf_get_current_pid_tgid();
	uint64_t ck = bpf_get_attach_cookie(ctx);
	struct fq_ev_destroy *e;

	if (!want_current(id >> 32))
		return 0;
	e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_hdr(&e->h, FQ_EV_COMM_DESTROY, id, FQ_CK_FN(ck), now_ns());
	e->comm = comm;
	submit(e, RB_SPACE(sizeof(*e)));
	return 0;
}

/*
 * NCCL groups: per thread, like NCCL's own group depth. Nested groups are one group; the
 * calls issued inside are counted in call_return and launched by the last ncclGroupEnd.
 * A group whose start was missed (tracing began inside it) is not reported.
 */
SEC("uprobe")
int BPF_KPROBE(group_start)
{
	struct thread_state *s = thread_get(bpf_get_attach_cookie(ctx), bpf_get_current_pid_tgid());

	if (!s)
		return 0;
	/* an open group that is stale (as in call_entry) ended unseen */
	if (s->group_depth && stale(s->group_ts))
		s->group_depth = 0;
	if (!s->group_depth++) {
		s->group_ts = now_ns();
		s->group_end_ts = 0;
		s->group_ncalls = 0;
	}
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(group_end_entry)
{
	struct thread_state *s = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);

	if (s && s->group_depth == 1)
		s->group_end_ts = now_ns();
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(group_end_return)
{
	struct thread_state *s = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	struct fq_ev_group *e;
	uint64_t ts;

	if (!s || !s->group_depth || --s->group_depth || !s->group_end_ts)
		return 0;
	ts = now_ns();
	e = reserve(sizeof(*e));
	if (e) {
		fill_hdr(&e->h, FQ_EV_GROUP, bpf_get_current_pid_tgid(),
			 FQ_CK_FN(bpf_get_attach_cookie(ctx)), s->group_ts);
		e->dur = ts - s->group_ts;
		e->end_dur = ts - s->group_end_ts;
		e->ret = (int32_t)PT_REGS_RC(ctx);
		e->ncalls = s->group_ncalls;
		e->pad = 0;
		submit(e, RB_SPACE(sizeof(*e)));
	}
	s->group_end_ts = 0;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	uint32_t ptgid = BPF_CORE_READ(prev, tgid), ntgid = BPF_CORE_READ(next, tgid);
	uint32_t ppid = BPF_CORE_READ(prev, pid), npid = BPF_CORE_READ(next, pid);
	uint64_t ts = 0;

	if (bpf_map_lookup_elem(&traced, &ptgid)) {
		struct cpu_acct *a = bpf_map_lookup_elem(&oncpu, &ppid);
		struct off_start s = {};
		long state;

		ts = now_ns();
		if (a) {
			if (a->on_ts && ts > a->on_ts) {
				struct proc_acct *p = a->lib ? NULL : proc_acct_get(ptgid);

				a->total += ts - a->on_ts;
				if (p)
					__sync_fetch_and_add(&p->cpu, ts - a->on_ts);
			}
			a->on_ts = 0;
		}
		if (bpf_core_field_exists(prev->__state))
			state = BPF_CORE_READ(prev, __state);
		else
			state = BPF_CORE_READ((struct task_struct___old *)prev, state);
		s.ts = ts;
		s.preempted = preempt || state == TASK_RUNNING;
		bpf_map_update_elem(&offstart, &ppid, &s, BPF_ANY);
	}
	if (bpf_map_lookup_elem(&traced, &ntgid)) {
		struct off_start *s = bpf_map_lookup_elem(&offstart, &npid);
		struct cpu_acct *a = bpf_map_lookup_elem(&oncpu, &npid);

		if (!ts)
			ts = now_ns();
		if (a) {
			a->on_ts = ts;
		} else {
			struct cpu_acct n = { .on_ts = ts };

			bpf_map_update_elem(&oncpu, &npid, &n, BPF_ANY);
		}
		if (s) {
			uint64_t dur = ts - s->ts;

			if (ts > s->ts && dur >= min_offcpu_ns) {
				struct fq_ev_offcpu *e = reserve(sizeof(*e));

				if (e) {
					fill_hdr(&e->h, FQ_EV_OFFCPU,
						 ((uint64_t)ntgid << 32) | npid, 0, s->ts);
					e->dur = dur;
					e->preempted = s->preempted;
					e->pad = 0;
					submit(e, RB_SPACE(sizeof(*e)));
				}
			}
			bpf_map_delete_elem(&offstart, &npid);
		}
	}
	return 0;
}

/* An exec or a cgroup move of task (pid_tgid id): user space looks at the process. */
static __always_inline void emit_proc(uint32_t type, uint64_t id, struct task_struct *task)
{
	struct fq_ev_proc *e = reserve(sizeof(*e));

	if (!e)
		return;
	fill_hdr(&e->h, type, id, 0, now_ns());
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	e->exit_code = 0;
	submit_now(e);
}

/*
 * A thread started by a thread of a traced process while that one is inside an NCCL call
 * (NCCL starts its proxy threads from ncclCommInitRank*, from its init job's thread, and may
 * start more from a collective), or by a thread so marked (the proxy service thread starts the
 * progress thread), is NCCL's own. Its CPU time is not the job's work: NCCL's progress thread
 * spins beside the step's threads (0.5-1.0 of a CPU per rank on a 4-GPU DDP job), which
 * collectives.cpu_ns counted as CPU work before. Its own rows (off-CPU) stay. A thread that
 * was running before agentd traced the process is not marked, nor one whose entry the LRU
 * map dropped (65,536 threads seen since).
 */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(proc_fork, struct task_struct *parent, struct task_struct *child)
{
	uint64_t id = bpf_get_current_pid_tgid();
	uint32_t tgid = BPF_CORE_READ(child, tgid), tid = BPF_CORE_READ(child, pid);
	uint32_t ptid = (uint32_t)id;
	struct thread_state *s;
	struct cpu_acct *a, n = { .lib = 1 };

	/* a thread (not a process) of a traced process, started by the current thread */
	if (tgid != (uint32_t)(id >> 32) || tid == tgid || !bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	a = bpf_map_lookup_elem(&oncpu, &ptid);
	if (!(a && a->lib) && !bpf_map_lookup_elem(&inits, &id)) {
		s = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
		if (!s || (!s->call[CALL_NCCL].ts && !s->group_end_ts))
			return 0;
	}
	bpf_map_update_elem(&oncpu, &tid, &n, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(proc_exec, struct task_struct *p)
{
	if (scoped && bpf_current_task_under_cgroup(&scope_cg, 0) != 1)
		return 0;
	emit_proc(FQ_EV_EXEC, bpf_get_current_pid_tgid(), p);
	return 0;
}

/*
 * A process moved into another cgroup after its exec (a launcher that places each
 * rank after starting it): with a scope, user space must look at it now, not at the
 * next full rescan, or it misses the communicator init. Rare, so every move is sent
 * and user space checks the scope.
 */
SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(cgroup_attach, struct cgroup *dst, const char *path, struct task_struct *task,
	     bool threadgroup)
{
	if (!scoped)
		return 0;
	emit_proc(FQ_EV_CGMOVE,
		  ((uint64_t)BPF_CORE_READ(task, tgid) << 32) | (uint32_t)BPF_CORE_READ(task, pid),
		  task);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *p)
{
	uint32_t tgid = BPF_CORE_READ(p, tgid), pid = BPF_CORE_READ(p, pid);
	uint64_t id = ((uint64_t)tgid << 32) | pid;
	struct fq_ev_proc *e;
	int32_t code;

	bpf_map_delete_elem(&oncpu, &pid);
	bpf_map_delete_elem(&offstart, &pid);
	bpf_map_delete_elem(&inits, &id);
	if (!bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	/* the last thread out reports the process */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	if (BPF_CORE_READ(p, signal, flags) & SIGNAL_GROUP_EXIT)
		code = BPF_CORE_READ(p, signal, group_exit_code);
	else
		code = BPF_CORE_READ(p, exit_code);
	bpf_map_delete_elem(&traced, &tgid);
	bpf_map_delete_elem(&proccpu, &tgid);
	e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_hdr(&e->h, FQ_EV_EXIT, id, 0, now_ns());
	e->ppid = BPF_CORE_READ(p, real_parent, tgid);
	e->exit_code = code;
	submit_now(e);
	return 0;
}

/*
 * fleetq's NCCL profiler plugin hands over one collective's record
 * (fq_nccl_kernel_done(const struct fq_prof_rec *)): copy it as it is.
 */
SEC("uprobe")
int BPF_KPROBE(prof_kernel, const void *rec)
{
	uint64_t id = bpf_get_current_pid_tgid();
	struct fq_ev_kernel *e;

	if (!want_current(id >> 32))
		return 0;
	e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_hdr(&e->h, FQ_EV_KERNEL, id, 0, now_ns());
	if (bpf_probe_read_user(&e->r, sizeof(e->r), rec) || e->r.magic != FQ_PROF_MAGIC) {
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	submit(e, RB_SPACE(sizeof(*e)));
	return 0;
}

/* fleetq's CUDA injection library hands over one GPU-busy slice (fq_gpu_busy_done) */
SEC("uprobe")
int BPF_KPROBE(prof_busy, const void *rec)
{
	uint64_t id = bpf_get_current_pid_tgid();
	struct fq_ev_busy *e;

	if (!want_current(id >> 32))
		return 0;
	e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_hdr(&e->h, FQ_EV_BUSY, id, 0, now_ns());
	if (bpf_probe_read_user(&e->r, sizeof(e->r), rec) || e->r.magic != FQ_BUSY_MAGIC) {
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	submit(e, RB_SPACE(sizeof(*e)));
	return 0;
}

/*
 * The traced process that sent on a TCP socket, or connected it, kept with the socket (freed
 * with it): a retransmit mostly fires from a timer or from the ACK path in softirq, where
 * current is a bystander, often the peer process whose ACK it is processing.
 */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, uint32_t);
} sk_owner SEC(".maps");

/* Called in the process's own context: it owns sk if it is traced (a send never makes it so). */
static __always_inline void own_sock(struct sock *sk)
{
	uint32_t tgid = bpf_get_current_pid_tgid() >> 32, *o;
	uint16_t family;

	if (!sk || !bpf_map_lookup_elem(&traced, &tgid))
		return;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if ((family != 2 && family != 10) || BPF_CORE_READ(sk, sk_protocol) != 6) /* TCP */
		return;
	o = bpf_sk_storage_get(&sk_owner, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (o && *o != tgid)
		*o = tgid;
}

/* every sendmsg (kernels from 6.3; loaded only where the tracepoint exists) */
SEC("tp_btf/sock_send_length")
int BPF_PROG(tcp_send, struct sock *sk, int ret, int flags)
{
	own_sock(sk);
	return 0;
}

/* connect(): CLOSE -> SYN_SENT runs in the caller's context */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tcp_connect, struct sock *sk, int oldstate, int newstate)
{
	if (newstate == 2) /* TCP_SYN_SENT */
		own_sock(sk);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit, const struct sock *sk)
{
	uint32_t *o;
	uint64_t id;
	struct fq_ev_tcp *e;
	uint16_t family;

	if (!sk)
		return 0;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != 2 && family != 10) /* AF_INET, AF_INET6 */
		return 0;
	e = reserve(sizeof(*e));
	if (!e)
		return 0;
	/* the traced process that sent on the socket, never current (see sk_owner) */
	o = bpf_sk_storage_get(&sk_owner, (struct sock *)sk, 0, 0);
	id = o ? (uint64_t)*o << 32 | *o : 0;
	fill_hdr(&e->h, FQ_EV_TCP, id, 0, now_ns());
	e->family = family;
	e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->dport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	e->state = BPF_CORE_READ(sk, __sk_common.skc_state);
	__builtin_memset(e->saddr, 0, sizeof(e->saddr));
	__builtin_memset(e->daddr, 0, sizeof(e->daddr));
	if (family == 2) {
		bpf_core_read(e->saddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(e->daddr, 4, &sk->__sk_common.skc_daddr);
	} else {
		bpf_core_read(e->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(e->daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
	submit(e, RB_SPACE(sizeof(*e)));
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
