/* SPDX-License-Identifier: MIT */
/*
 * Events fqtrace.bpf.c puts in its one ring buffer and agentd/trace_decode.c reads.
 * Fixed-width types only: this header is compiled for the BPF target and the host.
 *
 * Uprobes carry a 64-bit attach cookie that tells the shared entry/return
 * programs which function they sit on and where its arguments are:
 *   bits  0..7   function id (enum fq_fn, or an index into trace.c's cuda table)
 *   bits  8..11  kind (enum fq_kind)
 *   bits 12..15  argument position of the communicator (1-based, 0: none)
 *   bits 16..19  ... count / bytes
 *   bits 20..23  ... datatype
 *   bits 24..27  ... reduction op
 *   bits 28..31  ... root / peer
 *   bits 32..35  ... stream
 * Positions 1..6 are rdi rsi rdx rcx r8 r9; 7 and 8 are read from the stack.
 */
#ifndef FLEETQ_BPF_FQTRACE_H
#define FLEETQ_BPF_FQTRACE_H

#define FQ_UNIQUE_ID_BYTES 128
#define FQ_INITALL_MAX 8

enum fq_ev_type {
	FQ_EV_COLL = 1,
	FQ_EV_COMM,
	FQ_EV_COMM_DESTROY,
	FQ_EV_CUDA,
	FQ_EV_OFFCPU,
	FQ_EV_TCP,
	FQ_EV_EXEC,
	FQ_EV_EXIT,
	FQ_EV_CGMOVE, /* a process moved to another cgroup (fq_ev_proc) */
	FQ_EV_GROUP,  /* an NCCL group ended (fq_ev_group) */
	FQ_EV_KERNEL, /* fleetq's NCCL profiler plugin: a collective's kernel ended (fq_ev_kernel) */
	FQ_EV_BUSY,   /* fleetq's CUDA injection library: a slice of one GPU's time (fq_ev_busy) */
};

enum fq_kind {
	FQ_K_COLL = 1, /* NCCL collective */
	FQ_K_P2P,      /* ncclSend / ncclRecv */
	FQ_K_INIT,     /* ncclCommInitRank(Config): comm out-pointer, nranks, id on the stack, rank */
	FQ_K_INIT_SCALABLE, /* ncclCommInitRankScalable: id through a pointer (5th arg) */
	FQ_K_INIT_ALL, /* ncclCommInitAll(comms, ndev, devlist) */
	FQ_K_SPLIT,    /* ncclCommSplit(comm, color, key, newcomm, config) */
	FQ_K_DESTROY,  /* ncclCommDestroy / ncclCommAbort */
	FQ_K_SYNC,
	FQ_K_LAUNCH,
	FQ_K_MEMCPY,
	FQ_K_MALLOC,
	FQ_K_FREE,
	FQ_K_CALIB, /* start-up cost measurement: full work, event discarded */
	FQ_K_GROUP_START, /* ncclGroupStart */
	FQ_K_GROUP_END,   /* ncclGroupEnd: 15, the last kind the cookie's 4 bits hold */
	FQ_K_PROF,        /* fleetq's NCCL profiler plugin hand-over: not in cookies */
	FQ_K_BUSY,        /* fleetq's CUDA injection library hand-over: not in cookies */
};

#define FQ_CK_FN(c) ((unsigned)((c) & 0xff))
#define FQ_CK_KIND(c) ((unsigned)(((c) >> 8) & 0xf))
#define FQ_CK_POS(c, shift) ((unsigned)(((c) >> (shift)) & 0xf))
#define FQ_CK_COMM 12
#define FQ_CK_COUNT 16
#define FQ_CK_DTYPE 20
#define FQ_CK_REDOP 24
#define FQ_CK_PEER 28
#define FQ_CK_STREAM 32

struct fq_ev_hdr {
	uint32_t type; /* enum fq_ev_type */
	uint32_t pid;  /* tgid */
	uint32_t tid;
	uint32_t fn;   /* function id from the cookie, 0 if none */
	uint64_t ts;   /* clock of fq_cfg.use_tai: TAI or monotonic ns */
};

/* One NCCL collective / p2p call or one cuda call, emitted at return. */
struct fq_ev_call {
	struct fq_ev_hdr h;
	uint64_t dur;
	uint64_t comm;   /* ncclComm_t (collectives) */
	uint64_t count;  /* elements (NCCL) or bytes (cuda) */
	uint64_t stream;
	uint64_t oncpu;  /* issuing thread's cumulative on-CPU ns at entry, 0 if unknown */
	uint64_t proc_cpu; /* collectives: the process's CPU work at entry (every thread's
			    * on-CPU ns less what they spent in probed wait calls), 0 if unknown */
	int64_t ret;
	int32_t dtype;
	int32_t redop;
	int32_t peer;    /* root / peer, -1 if none */
	uint32_t kind;
};

/* Communicator creation: ncclCommInit* / ncclCommSplit return. */
struct fq_ev_comm {
	struct fq_ev_hdr h;
	uint64_t dur;
	uint64_t comm;    /* the new ncclComm_t (read from the out pointer at return) */
	uint64_t parent;  /* ncclCommSplit: parent comm */
	int64_t ret;
	int32_t rank;     /* -1: unknown */
	int32_t nranks;   /* -1: unknown */
	int32_t color;    /* ncclCommSplit */
	uint32_t kind;
	uint32_t has_id;  /* id[] holds the ncclUniqueId */
	uint32_t pad;
	uint8_t id[FQ_UNIQUE_ID_BYTES];
};

/*
 * One NCCL group on a thread: from its outermost ncclGroupStart to the return of the
 * ncclGroupEnd that closed it, where NCCL launches what was issued inside.
 */
struct fq_ev_group {
	struct fq_ev_hdr h; /* ts: outermost ncclGroupStart entry; fn: ncclGroupEnd */
	uint64_t dur;       /* to the closing ncclGroupEnd's return */
	uint64_t end_dur;   /* the closing ncclGroupEnd call alone */
	int64_t ret;        /* its ncclResult_t */
	uint32_t ncalls;    /* collectives and p2p calls issued inside */
	uint32_t pad;
};

struct fq_ev_destroy {
	struct fq_ev_hdr h;
	uint64_t comm;
};

struct fq_ev_offcpu {
	struct fq_ev_hdr h;
	uint64_t dur;
	uint32_t preempted;
	uint32_t pad;
};

struct fq_ev_tcp {
	struct fq_ev_hdr h; /* pid 0: not attributable */
	uint16_t family;
	uint16_t sport;
	uint16_t dport;
	uint16_t state;
	uint8_t saddr[16];
	uint8_t daddr[16];
};

struct fq_ev_proc {
	struct fq_ev_hdr h;
	uint32_t ppid;
	int32_t exit_code; /* wait(2) status for FQ_EV_EXIT */
};

/*
 * One collective or Send/Recv as fleetq's NCCL profiler plugin (agentd/ncclprof/) saw it,
 * handed to fq_nccl_kernel_done(const struct fq_prof_rec *) once its host call and every
 * kernel channel it started have stopped; a uprobe on that function copies it into an
 * fq_ev_kernel. NCCL's own keys: nccl_comm is the communicator hash its init received, seq
 * a collective's seqNumber, counted per communicator AND function (the same on every rank).
 * NCCL numbers no Send/Recv: the plugin counts them per communicator, function and peer, so
 * that the n-th Send to a peer and that peer's n-th Recv from this rank share seq n. A
 * plugin older than the peer field writes size = offsetof(struct fq_prof_rec, peer), one
 * older than coll_idx offsetof(struct fq_prof_rec, coll_idx). coll_idx lets an agentd that
 * started after the communicator's init place the CPU side's calls (agentd/trace_adopt.c).
 */
#define FQ_PROF_MAGIC 0x66717072u /* "fqpr" */
#define FQ_PROF_FUNC_LEN 16

#define FQ_PROF_PARTIAL 1u /* recycled before every channel reported: gpu_* may be short */

struct fq_prof_rec {
	uint32_t magic;
	uint32_t size;          /* sizeof(struct fq_prof_rec) of the plugin that wrote it */
	uint64_t nccl_comm;
	uint64_t seq;
	uint64_t count;         /* elements */
	uint64_t host_start_ns; /* CLOCK_MONOTONIC: the plugin's Coll startEvent (enqueue) */
	uint64_t host_stop_ns;  /* ... its stopEvent (the launch returned) */
	uint64_t gpu_start_ns;  /* GPU globaltimer: earliest channel start (0: none reported) */
	uint64_t gpu_stop_ns;   /* latest channel stop */
	uint64_t gpu_ch_ns;     /* sum over channels of stop - start */
	int32_t rank;
	int32_t nranks;
	uint32_t nchannels;     /* channels that reported start and stop */
	uint32_t flags;         /* FQ_PROF_* */
	char func[FQ_PROF_FUNC_LEN]; /* "AllReduce", ..., "Send", "Recv": NUL-terminated */
	int32_t peer;           /* Send/Recv: the other side's rank in the communicator; else -1 */
	uint32_t pad;
	uint64_t coll_idx;      /* a collective: the Coll events on this communicator before it,
				 * since its init (agentd's seq for it); Send/Recv: UINT64_MAX */
};

struct fq_ev_kernel {
	struct fq_ev_hdr h; /* ts: when the record was handed over */
	struct fq_prof_rec r;
};

/*
 * A slice of one GPU's time as fleetq's CUDA injection library (agentd/cupti/) saw it through
 * CUPTI's kernel activity records, handed to fq_gpu_busy_done(const struct fq_busy_rec *)
 * (uprobed, as fq_nccl_kernel_done). Clock: CLOCK_MONOTONIC. busy_ns is the time in
 * [t0_ns, t0_ns + dur_ns) when at least one kernel not NCCL's ran (the union over streams),
 * nccl_ns the same for NCCL's kernels (the name starts with "nccl").
 */
#define FQ_BUSY_MAGIC 0x66716275u /* "fqbu" */


struct fq_busy_rec {
	uint32_t magic;
	uint32_t size;     /* sizeof(struct fq_busy_rec) of the library that wrote it */
	uint64_t t0_ns;    /* slice start, CLOCK_MONOTONIC */
	uint64_t dur_ns;   /* slice length */
	uint64_t busy_ns;  /* compute kernels' union */
	uint64_t nccl_ns;  /* NCCL kernels' union */
	uint64_t dropped;  /* records CUPTI dropped so far in the process (no buffer) */
	uint32_t kernels;  /* compute kernels that started in the slice */
	uint32_t nccl_kernels;
	int32_t device;    /* CUPTI's device id (the CUDA ordinal in the process) */
	uint32_t flags;    /* none yet */
	uint64_t late_ns;  /* compute kernels whose own earlier slice was handed over before
			    * their records came: counted here, whole (not in busy_ns) */
};

struct fq_ev_busy {
	struct fq_ev_hdr h; /* ts: when the record was handed over */
	struct fq_busy_rec r;
};

#endif
