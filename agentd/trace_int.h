/* SPDX-License-Identifier: MIT */
/*
 * The tracer's insides, shared by its files (agentd/trace.h is what main sees):
 *   trace.c         start, stop, the ring-buffer thread, counters
 *   trace_tables.c  the process table and the communicator table
 *   trace_decode.c  ring-buffer events -> store records (sequence numbers, hashes)
 *   trace_attach.c  uprobes and their links
 *   trace_disc.c    the discovery thread: scans, exec watches, InfiniBand polls
 *   trace_calib.c   the start-up probe cost measurement
 */
#ifndef FLEETQ_AGENTD_TRACE_INT_H
#define FLEETQ_AGENTD_TRACE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <bpf/libbpf.h>

#include "log.h"
#include "nvml.h"
#include "records.h"

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
	bool adopted; /* placed from the plugin's records (trace_adopt.c), its init unseen */
	int64_t split_seq;  /* adopted: the seq of its latest split, -1: none */
	uint32_t splits_at; /* ... and its splits at that seq so far */
	struct adopt *adopt; /* init not seen, not adopted yet: trace_adopt.c's state, else NULL */
	struct comm_ent *next;
};

struct proc_ent {
	int pid;
	int64_t start_ns;
	uint32_t gen; /* which of its identities: new after an exec (tracer.proc_gen) */
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
	struct adopt *adopting; /* poll thread only: trace_adopt.c's communicators, a list */

	pthread_mutex_t proc_mu;
	struct proc_ent *procs[PROC_BUCKETS];
	uint32_t proc_gen; /* entries added so far (under proc_mu) */

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

enum watch_why { WATCH_EXEC, WATCH_MOVE, WATCH_LIBS };

/* trace_tables.c: the process table (any thread, under proc_mu) */
void emit_process(struct tracer *t, int pid);
int64_t forget_process(struct tracer *t, int pid);
int known_process(struct tracer *t, int pid);
int gpu_list_procs(void *arg, struct gpu_proc *out, int max);
/* trace_tables.c: the communicator table (poll thread only) */
struct comm_ent *comm_find(struct tracer *t, uint32_t pid, uint64_t ptr, int create);
void comm_drop(struct tracer *t, uint32_t pid, uint64_t ptr);
void comm_drop_pid(struct tracer *t, uint32_t pid);
const struct comm_ent *comm_by_nccl(struct tracer *t, uint32_t pid, uint64_t nh);

struct fq_prof_rec;

/* trace_adopt.c: communicators whose init agentd did not see (poll thread only) */
void adopt_note_call(struct tracer *t, struct comm_ent *ce, const char *op, int64_t count,
		     int64_t ts_ns, int64_t dur_ns, int64_t tid);
struct comm_ent *adopt_try(struct tracer *t, uint32_t pid, const struct fq_prof_rec *p,
			   int64_t ts_ns);
void adopt_forget(struct tracer *t, struct comm_ent *ce);

/* trace_decode.c: libbpf's ring buffer callback */
int on_event(void *ctx, void *data, size_t len);

/* trace_attach.c */
int add_link(struct tracer *t, struct bpf_link *l);
int attach_one(struct tracer *t, struct bpf_program *prog, int ret, pid_t pid,
	       const char *path, uint64_t off, uint64_t cookie);
int attach_file(struct tracer *t, const char *path);
void lib_found(void *arg, const char *path, uint64_t dev, uint64_t ino);
void proc_found(void *arg, int pid);
int attach_listed_libs(struct tracer *t);
void attach_installed_plugin(struct tracer *t);

/* trace_disc.c */
void watch_pid(struct tracer *t, int pid, enum watch_why why);
void *disc_main(void *arg);

/* trace_calib.c */
int64_t calibrate(struct tracer *t, int (*fn)(int), int calls);

#endif
