-- SPDX-License-Identifier: MIT
-- fleetq trace schema, version 5. Table and column names are the contract
-- users' queries rely on; docs/schema.md documents every column.
-- Times are nanoseconds: *_ts_ns / ts_ns on the node's CLOCK_REALTIME scale
-- (see meta.clock_source), durations dur_ns.
--
-- Version 2: the high-rate event tables (collectives, cuda_calls, offcpu,
-- tcp_retransmits) key their rows by time: ts_ns is the INTEGER PRIMARY KEY
-- (the rowid), so a time window is a range of the table's own b-tree and no
-- (ts_ns) index is written per row. ts_ns is unique there: the writer moves a
-- row that would collide forward by 1 ns at a time (meta 'ts_nudged' counts them).

CREATE TABLE IF NOT EXISTS meta (
	key   TEXT PRIMARY KEY,
	value
) WITHOUT ROWID;

-- One row per traced process (exec or first sighting), updated on exit.
CREATE TABLE IF NOT EXISTS processes (
	pid        INTEGER NOT NULL,
	start_ns   INTEGER NOT NULL,
	exit_ns    INTEGER,
	exit_code  INTEGER,
	ppid       INTEGER,
	comm       TEXT,
	cmdline    TEXT,
	cgroup     TEXT,
	cgroup_id  INTEGER,
	rank       INTEGER,      -- RANK from the environment, if set
	local_rank INTEGER,
	world_size INTEGER,
	job_id     TEXT,         -- SLURM_JOB_ID (or similar), if set
	PRIMARY KEY (pid, start_ns)
);

-- Communicator lifecycle: one row per ncclCommInit*/ncclCommSplit call.
CREATE TABLE IF NOT EXISTS comms (
	ts_ns       INTEGER NOT NULL,
	dur_ns      INTEGER,
	pid         INTEGER NOT NULL,
	tid         INTEGER NOT NULL,
	comm_ptr    INTEGER,     -- ncclComm_t value in the process
	comm_hash   TEXT,        -- 16 hex digits over the full 128-byte ncclUniqueId
	rank        INTEGER,
	nranks      INTEGER,
	fn          TEXT,        -- ncclCommInitRank, ncclCommInitRankConfig, ...
	ret         INTEGER,
	destroyed_ns INTEGER,
	nccl_hash   TEXT         -- v4: NCCL's own hash of it (16 hex), as its profiler plugin sees it
);

-- One row per NCCL collective or p2p call (enqueue: see docs/schema.md).
CREATE TABLE IF NOT EXISTS collectives (
	ts_ns     INTEGER PRIMARY KEY NOT NULL, -- entry time, unique (nudged)
	dur_ns    INTEGER NOT NULL, -- entry to return
	pid       INTEGER NOT NULL,
	tid       INTEGER NOT NULL,
	comm_ptr  INTEGER,
	comm_hash TEXT,
	rank      INTEGER,
	nranks    INTEGER,
	seq       INTEGER,          -- per-communicator sequence number, from 0
	op        TEXT,             -- AllReduce, AllGather, ..., Send, Recv
	count     INTEGER,
	bytes     INTEGER,
	datatype  TEXT,
	redop     TEXT,
	peer      INTEGER,          -- Send/Recv/Broadcast root/Reduce root, else NULL
	stream    INTEGER,
	busy_ns   INTEGER,          -- issuing thread's on-CPU time since its previous collective on this comm
	ret       INTEGER,
	sync_ns   INTEGER,          -- v3: process's top-level sync wait since its previous collective on this comm
	gap_ns    INTEGER,          -- v3: ns from that collective's enqueue to this one's
	cpu_ns    INTEGER           -- v4: process's CPU work (its threads but NCCL's, outside waits) since then
);
CREATE INDEX IF NOT EXISTS collectives_comm_seq ON collectives (comm_hash, seq);
-- Every (process, communicator, rank) by a few index probes instead of a scan of every
-- collective (the 'last' rows of sql/analysis/stragglers.node.sql): one row in 64, so that
-- ingest barely pays for it.
CREATE INDEX IF NOT EXISTS collectives_key ON collectives (pid, comm_hash, rank, seq)
	WHERE seq % 64 = 0;

-- v4: one row per collective as fleetq's NCCL profiler plugin saw it (GPU-side timing):
-- NCCL's own keys (nccl_comm, op, seq: seq counts per communicator AND op), joined to the
-- communicator agentd saw initialised where it could be (comm_hash). v5: Send/Recv too,
-- with their peer (seq counts per communicator, op AND peer).
CREATE TABLE IF NOT EXISTS nccl_kernels (
	ts_ns        INTEGER PRIMARY KEY NOT NULL, -- host: the plugin's start of the collective (enqueue)
	host_dur_ns  INTEGER,    -- host: to the end of its launch
	pid          INTEGER NOT NULL,
	rank         INTEGER,
	nranks       INTEGER,
	nccl_comm    TEXT NOT NULL, -- NCCL's communicator hash (16 hex; comms.nccl_hash)
	comm_hash    TEXT,       -- fleetq's, when agentd saw the communicator's init
	op           TEXT,       -- AllReduce, AllGather, ReduceScatter, ..., Send, Recv
	seq          INTEGER NOT NULL, -- NCCL's seqNumber per (communicator, op) from 0; Send/Recv: above
	count        INTEGER,
	nchannels    INTEGER,    -- kernel channels that reported start and stop
	gpu_start_ns INTEGER,    -- this GPU's globaltimer at the earliest channel start (own clock)
	gpu_dur_ns   INTEGER,    -- earliest channel start to latest channel stop, on the GPU
	gpu_ch_ns    INTEGER,    -- sum over channels of their durations
	partial      INTEGER,    -- 1: handed over before every channel reported
	peer         INTEGER     -- v5: Send/Recv: the other side's rank in the communicator, else NULL
);

-- libcudart / libcuda calls: launch, memcpy*, *Synchronize, malloc/free.
CREATE TABLE IF NOT EXISTS cuda_calls (
	ts_ns  INTEGER PRIMARY KEY NOT NULL,
	dur_ns INTEGER NOT NULL,
	pid    INTEGER NOT NULL,
	tid    INTEGER NOT NULL,
	api    TEXT NOT NULL,   -- cudaStreamSynchronize, cuLaunchKernel, ...
	kind   TEXT NOT NULL,   -- launch | memcpy | sync | malloc | free
	bytes  INTEGER,
	stream INTEGER,
	ret    INTEGER
);

-- Off-CPU intervals of threads of traced processes.
CREATE TABLE IF NOT EXISTS offcpu (
	ts_ns  INTEGER PRIMARY KEY NOT NULL, -- switched out
	dur_ns INTEGER NOT NULL, -- until switched back in
	pid    INTEGER NOT NULL,
	tid    INTEGER NOT NULL,
	reason TEXT NOT NULL     -- preempted | blocked
);

CREATE TABLE IF NOT EXISTS tcp_retransmits (
	ts_ns INTEGER PRIMARY KEY NOT NULL,
	pid   INTEGER,           -- NULL when not attributable
	saddr TEXT,
	sport INTEGER,
	daddr TEXT,
	dport INTEGER,
	state TEXT
);

-- InfiniBand port counters, one row per counter per poll.
CREATE TABLE IF NOT EXISTS ib_counters (
	ts_ns   INTEGER NOT NULL,
	device  TEXT NOT NULL,
	port    INTEGER NOT NULL,
	counter TEXT NOT NULL,
	value   INTEGER NOT NULL,
	delta   INTEGER           -- since the previous poll, NULL on the first
);
CREATE INDEX IF NOT EXISTS ib_counters_ts ON ib_counters (ts_ns);

-- NCCL groups: one row per outermost ncclGroupStart ... ncclGroupEnd on a thread. Grouped
-- calls (p2p, coalesced collectives) are only enqueued inside; ncclGroupEnd launches them.
CREATE TABLE IF NOT EXISTS nccl_groups (
	ts_ns      INTEGER NOT NULL, -- outermost ncclGroupStart entry
	dur_ns     INTEGER NOT NULL, -- until the closing ncclGroupEnd returned
	end_dur_ns INTEGER NOT NULL, -- the closing ncclGroupEnd call alone (the launch)
	pid        INTEGER NOT NULL,
	tid        INTEGER NOT NULL,
	ncalls     INTEGER NOT NULL, -- collectives and p2p calls issued inside the group
	ret        INTEGER           -- ncclGroupEnd's ncclResult_t
);
CREATE INDEX IF NOT EXISTS nccl_groups_ts ON nccl_groups (ts_ns);

-- GPU health from NVML (agentd --gpu-interval) and which GPUs each traced process uses. Both
-- tables are new: a file made before them gains them when agentd opens it (no column of
-- another table changes, so the schema version does not either).

-- One row per GPU per sample. Every column but ts_ns and gpu_index is NULL when NVML does not
-- offer the value on this GPU or its call failed (the rest of the sample is kept).
CREATE TABLE IF NOT EXISTS gpu_samples (
	ts_ns             INTEGER NOT NULL, -- when the sample of all GPUs began
	gpu_index         INTEGER NOT NULL, -- NVML index (PCI bus order)
	gpu_uuid          TEXT,             -- GPU-xxxxxxxx-...
	pci_bus_id        TEXT,             -- 00000000:3B:00.0
	sm_clock_mhz      INTEGER,
	mem_clock_mhz     INTEGER,
	sm_clock_max_mhz  INTEGER,
	mem_clock_max_mhz INTEGER,
	clock_reasons     INTEGER,          -- clock event (throttle) reasons bitmask (docs)
	temp_c            INTEGER,
	power_mw          INTEGER,
	power_limit_mw    INTEGER,          -- enforced power limit
	util_gpu_pct      INTEGER,
	util_mem_pct      INTEGER,
	ecc_uncorrected   INTEGER,          -- volatile ECC error counts (since the driver loaded)
	ecc_corrected     INTEGER,
	remap_corrected   INTEGER,          -- rows remapped for correctable errors
	remap_uncorrected INTEGER,
	remap_pending     INTEGER,          -- 1: a remap waits for a GPU reset
	remap_failed      INTEGER,          -- 1: a remap failed
	xid_count         INTEGER,          -- XID events since the sampler started
	xid_last          INTEGER,          -- the last XID number seen
	pcie_gen          INTEGER,          -- current PCIe link generation
	pcie_width        INTEGER,          -- current PCIe link width (lanes)
	pcie_gen_max      INTEGER,
	pcie_width_max    INTEGER,
	pcie_replays      INTEGER,          -- PCIe replay counter
	nvlink_replay     INTEGER,          -- NVLink error counters, summed over active links
	nvlink_recovery   INTEGER,
	nvlink_crc        INTEGER
);
CREATE INDEX IF NOT EXISTS gpu_samples_ts ON gpu_samples (ts_ns);

-- What each GPU's SMs did between two samples, from NVML's GPU performance monitoring (GPM:
-- Hopper and later; none on an older GPU or driver): one row per GPU per sample after its
-- first, averaged over the GPU (every process on it) and over [ts_ns - dur_ns, ts_ns]. A GPU
-- that waits in NCCL keeps a few SMs busy (its channels), one that computes keeps nearly
-- all: docs/analysis.md. A new table, as gpu_samples. Values in per mille (0-1000).
CREATE TABLE IF NOT EXISTS gpu_activity (
	ts_ns           INTEGER NOT NULL, -- the sample that ends the interval (gpu_samples.ts_ns)
	dur_ns          INTEGER NOT NULL, -- since the GPU's previous sample
	gpu_index       INTEGER NOT NULL,
	gpu_uuid        TEXT,
	sm_active_pm    INTEGER,          -- SMs busy, averaged over the interval (GPM SM_UTIL)
	sm_occupancy_pm INTEGER,          -- warps resident against the most the SMs hold
	tensor_pm       INTEGER,          -- tensor pipes busy (any precision)
	dram_bw_pm      INTEGER           -- DRAM bandwidth used against its peak
);
CREATE INDEX IF NOT EXISTS gpu_activity_ts ON gpu_activity (ts_ns);

-- Each GPU's time in slices, from fleetq's CUDA injection library (libfleetq-cupti.so,
-- CUDA_INJECTION64_PATH) over CUPTI's kernel activity: one row per GPU per 200 ms slice in
-- which a kernel ran (a slice with none has no row: idle). A new table, as gpu_samples.
CREATE TABLE IF NOT EXISTS gpu_busy (
	ts_ns        INTEGER PRIMARY KEY NOT NULL, -- the slice's start (trace clock)
	dur_ns       INTEGER NOT NULL, -- its length
	pid          INTEGER NOT NULL,
	device       INTEGER,          -- CUDA device ordinal in the process
	busy_ns      INTEGER NOT NULL, -- time a compute kernel (not NCCL's) ran: union over streams
	nccl_ns      INTEGER NOT NULL, -- time an NCCL kernel ran
	kernels      INTEGER,          -- compute kernels that started in the slice
	nccl_kernels INTEGER,
	dropped      INTEGER,          -- CUPTI records dropped in the process so far (0: none)
	late_ns      INTEGER           -- compute kernels whose own earlier slice was handed over
	                               -- before their records came: counted here, whole
);

-- Which GPUs a traced process uses: one row per (process, GPU, source), written when first
-- seen. Join: collectives.pid -> processes (pid, start_ns) -> process_gpus -> gpu_samples
-- (gpu_uuid). A table, not a column of processes: a process may use several GPUs, and the
-- driver lists it only once it has a CUDA context, after its processes row was written.
CREATE TABLE IF NOT EXISTS process_gpus (
	pid       INTEGER NOT NULL,
	start_ns  INTEGER NOT NULL,         -- processes.start_ns of the same process
	gpu_index INTEGER NOT NULL,
	gpu_uuid  TEXT NOT NULL,
	source    TEXT NOT NULL,            -- nvml | local_rank | cuda_visible_devices
	ts_ns     INTEGER NOT NULL,         -- nvml: first seen; else the latest read naming it
	PRIMARY KEY (pid, start_ns, gpu_uuid, source)
) WITHOUT ROWID;
