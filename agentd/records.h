/* SPDX-License-Identifier: MIT */
/*
 * Decoded trace records, one struct per table of sql/schema.sql. The tracer
 * (agentd/trace_decode.c) fills them from BPF events; the store writes them.
 * Each field's column is named in one place, agentd/store_sql.c's rec_tables[]
 * (the store builds its INSERTs and binds records from it, and checks it
 * against the file's tables at open): a field added here needs its column
 * there and in sql/schema.sql, or the store tests fail. Strings are copied by
 * the store before store_put() returns. An int64 field set to REC_NULL, an
 * int32 one set to REC_NULL32, a NULL string and an empty hash are stored as
 * SQL NULL.
 */
#ifndef FLEETQ_AGENTD_RECORDS_H
#define FLEETQ_AGENTD_RECORDS_H

#include <stdint.h>

#define REC_NULL INT64_MIN
#define REC_NULL32 INT32_MIN

enum rec_kind {
	REC_PROCESS = 1, /* insert, or update exit_ns/exit_code of (pid, start_ns) */
	REC_COMM,
	REC_COMM_DESTROY, /* sets destroyed_ns of the newest comms row of (pid, comm_ptr) */
	REC_COLLECTIVE,
	REC_CUDA,
	REC_OFFCPU,
	REC_TCP,
	REC_IB,
	REC_GROUP,
	REC_KERNEL,
	REC_GPU,         /* one GPU's NVML sample (agentd/nvml.c) */
	REC_PROCESS_GPU, /* a process uses a GPU; first sighting per (pid, start_ns, GPU, source) */
	REC_BUSY,        /* a slice of one GPU's time (fleetq's CUDA injection library) */
	REC_GPU_ACT,     /* what one GPU's SMs did since its previous sample (NVML GPM) */
	REC_KIND_MAX = REC_GPU_ACT,
};

struct rec_process {
	int64_t pid, start_ns, exit_ns, exit_code, ppid;
	const char *comm, *cmdline, *cgroup;
	int64_t cgroup_id, rank, local_rank, world_size;
	const char *job_id;
};

struct rec_comm {
	int64_t ts_ns, dur_ns, pid, tid, comm_ptr;
	char comm_hash[17];
	int64_t rank, nranks;
	const char *fn;
	int64_t ret;
	char nccl_hash[17]; /* "" if unknown */
};

struct rec_comm_destroy {
	int64_t ts_ns, pid, comm_ptr;
};

struct rec_collective {
	int64_t ts_ns, dur_ns, pid, tid, comm_ptr;
	char comm_hash[17];
	int32_t ret; /* ncclResult_t; here it fills the hash's padding (a ring slot is 256 bytes) */
	int64_t rank, nranks, seq;
	const char *op;
	int64_t count, bytes;
	const char *datatype, *redop;
	int64_t peer, stream, busy_ns;
	/* since this process's previous collective (Send/Recv: Send/Recv) on the
	 * communicator; REC_NULL for the first one seen */
	int64_t sync_ns, gap_ns;
	int64_t cpu_ns; /* the process's CPU work (every thread, outside wait calls) since then */
};

struct rec_cuda {
	int64_t ts_ns, dur_ns, pid, tid;
	const char *api, *kind;
	int64_t bytes, stream, ret;
};

struct rec_offcpu {
	int64_t ts_ns, dur_ns, pid, tid;
	const char *reason;
};

struct rec_tcp {
	int64_t ts_ns, pid;
	const char *saddr;
	int64_t sport;
	const char *daddr;
	int64_t dport;
	const char *state;
};

struct rec_ib {
	int64_t ts_ns;
	const char *device;
	int64_t port;
	const char *counter;
	int64_t value, delta;
};

struct rec_group {
	int64_t ts_ns, dur_ns, end_dur_ns, pid, tid, ncalls, ret;
};

/* nccl_kernels: one collective or Send/Recv from fleetq's NCCL profiler plugin */
struct rec_kernel {
	int64_t ts_ns, host_dur_ns, pid, rank, nranks;
	char nccl_comm[17];
	char comm_hash[17]; /* "" if not joined */
	const char *op;
	int64_t seq, count, nchannels, gpu_start_ns, gpu_dur_ns, gpu_ch_ns, partial;
	int64_t peer; /* Send/Recv: the other side's rank; else REC_NULL */
};

struct rec_busy {
	int64_t ts_ns, dur_ns, pid, device, busy_ns, nccl_ns, kernels, nccl_kernels, dropped;
	int64_t late_ns;
};

/*
 * NVML's values are 32-bit or fit in 32 bits (MHz, degrees C, mW, %, PCIe gen/width and
 * replay counter, remapped rows): int32 keeps the record inside a 256-byte ring slot.
 * REC_NULL32 in an int32 field is stored as SQL NULL (here: the NVML call failed or the
 * GPU does not offer it).
 */

struct rec_gpu {
	int64_t ts_ns;
	const char *uuid, *pci_bus_id;
	int64_t clock_reasons;                  /* clocks event (throttle) reasons bitmask */
	int64_t ecc_uncorrected, ecc_corrected; /* volatile: since the driver loaded */
	int64_t xid_count;                      /* XID events seen since the sampler started */
	int64_t nvlink_replay, nvlink_recovery, nvlink_crc; /* sums over the active links */
	int32_t gpu_index;
	int32_t sm_clock_mhz, mem_clock_mhz, sm_clock_max_mhz, mem_clock_max_mhz;
	int32_t temp_c, power_mw, power_limit_mw, util_gpu_pct, util_mem_pct;
	int32_t remap_corrected, remap_uncorrected, remap_pending, remap_failed;
	int32_t xid_last;
	int32_t pcie_gen, pcie_width, pcie_gen_max, pcie_width_max, pcie_replays;
};

/* gpu_activity: GPM's metrics over [ts_ns - dur_ns, ts_ns], in per mille */
struct rec_gpu_act {
	int64_t ts_ns, dur_ns;
	const char *uuid;
	int32_t gpu_index, sm_active_pm, sm_occupancy_pm, tensor_pm, dram_bw_pm;
};

struct rec_process_gpu {
	int64_t ts_ns, pid, start_ns, gpu_index;
	const char *gpu_uuid, *source;
};

struct rec {
	int kind; /* enum rec_kind */
	union {
		struct rec_process process;
		struct rec_comm comm;
		struct rec_comm_destroy comm_destroy;
		struct rec_collective collective;
		struct rec_cuda cuda;
		struct rec_offcpu offcpu;
		struct rec_tcp tcp;
		struct rec_ib ib;
		struct rec_group group;
		struct rec_kernel kernel;
		struct rec_gpu gpu;
		struct rec_process_gpu process_gpu;
		struct rec_busy busy;
		struct rec_gpu_act gpu_act;
	} u;
};

#endif
