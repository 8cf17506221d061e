/* SPDX-License-Identifier: MIT */
/*
 * The stand-in libnccl's collective kernel, as the stream's device runs it (arrival, the wait
 * for the other ranks, the transfer), and its launch from the host (the plugin's Coll and P2p
 * events, cudaLaunchKernel, the wait of a blocking implementation).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_int.h"
#include "nccl_tcp.h"

static int nccl_kernel_run(const uint64_t *argv, struct fqsi_exec *x);

/* One "device kernel" per operation, so a trace of cuLaunchKernel can tell them apart. */
#define KERNEL(n) { FQSI_KERNEL_MAGIC, 10, "ncclDevKernel_" n, nccl_kernel_run }
static const struct fqsi_kernel nccl_kernels[OP_COUNT] = {
	KERNEL("AllReduce"), KERNEL("AllGather"), KERNEL("ReduceScatter"), KERNEL("Broadcast"),
	KERNEL("Reduce"),    KERNEL("SendRecv"),  KERNEL("SendRecv"),
};

/*
 * Device time a collective takes once every rank is there: FQ_STANDIN_XFER_US, default 20
 * (0 inline, as before: a sleep there would cost the synchronizing thread one more wakeup).
 */
static uint64_t xfer_ns(void)
{
	const char *s = getenv("FQ_STANDIN_XFER_US");
	long v = s ? strtol(s, NULL, 10) : -1;

	if (v < 0 || v > 60000000)
		v = fqsi_inline() ? 0 : 20;
	return (uint64_t)v * 1000;
}

/* The latest device-clock arrival at seq among the ranks cond waited for (itself included). */
static uint64_t last_arrival(const struct ncclComm *c, enum cond cond, uint64_t seq, int peer,
			     uint64_t own)
{
	int lo = cond == COND_PEER ? peer : 0, hi = cond == COND_PEER ? peer + 1 : c->nranks;
	uint64_t t = own;

	for (int r = lo; r < hi; r++) {
		uint64_t a = atomic_load(&c->shm->arrived_ns[r][seq % ARRIVAL_RING]);

		if (a > t)
			t = a;
	}
	return t;
}

/* FQ_STANDIN_BLOCKING=1: a collective call returns only once every rank's kernel arrived. */
static bool blocking(void)
{
	const char *s = getenv("FQ_STANDIN_BLOCKING");

	return s && !strcmp(s, "1");
}

static size_t dtype_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
	case ncclFloat8e4m3:
	case ncclFloat8e5m2:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64:
		return 8;
	default:
		return 4;
	}
}

/*
 * The collective's kernel, on the stream's device thread: GPU start, arrival, the wait for the
 * other ranks, the transfer, GPU stop. argv: comm, seq, op, peer, Coll event handle, count, the
 * per-function sequence number, send and receive buffers, data type.
 */
static int nccl_kernel_run(const uint64_t *argv, struct fqsi_exec *x)
{
	struct ncclComm *c = (struct ncclComm *)(uintptr_t)argv[0];
	uint64_t seq = argv[1];
	enum op op = (enum op)argv[2];
	int peer = (int)(int64_t)argv[3];
	void *coll = (void *)(uintptr_t)argv[4];
	enum cond cond = peer >= 0 ? COND_PEER : COND_ALL;
	bool kch = c->prof_ctx && (c->prof_mask & ncclProfileKernelCh) && (op < OP_SEND || coll);
	void *ch[NCHANNELS] = { 0 };
	uint64_t off = fqsi_gpu_offset_ns(), all, end;
	char note[160];
	bool dclock;
	int err = 0;

	if (x->failed) {
		atomic_fetch_sub(&c->pending, 1);
		return -ECANCELED;
	}
	/* the kernel starts when it is reached: a late device thread's wakeup is part of it,
	 * unless the device keeps its own clock (fqsi_device_clock): then it starts when the
	 * stream's previous item ended and ends at the last rank's start plus the transfer.
	 * Shared memory only: over TCP arrivals carry no time */
	dclock = fqsi_device_clock() && !c->tcp;
	if (!dclock && fqsi_now_ns() > x->start_ns)
		x->start_ns = fqsi_now_ns();
	if (dclock)
		atomic_store(&c->shm->arrived_ns[c->rank][seq % ARRIVAL_RING], x->start_ns);
	publish_arrival(c, seq);
	for (int i = 0; kch && i < NCHANNELS; i++) {
		fq_nccl_descr_t d = { 0 };

		/* as NCCL: the parent is the Coll or P2p event's handle; rank is not filled in */
		d.type = ncclProfileKernelCh;
		d.parentObj = coll;
		d.kernelCh.channelId = (uint8_t)i;
		d.kernelCh.pTimer = x->start_ns + off;
		prof_start(c, &ch[i], &d);
	}
	/* the TCP ring waits for every rank as the data goes round: for the network too */
	if (c->tcp && op == OP_ALLREDUCE) {
		ncclDataType_t dt = (ncclDataType_t)argv[9];
		char *cause = NULL;

		err = fqsi_tcp_allreduce(c->tcp, (const void *)(uintptr_t)argv[7],
					 (void *)(uintptr_t)argv[8], (size_t)argv[5],
					 dtype_size(dt), dt == ncclFloat32, seq,
					 fqsi_now_ns() + fqsi_timeout_ns(), &cause);
		if (err)
			fail("rank %d of %d: AllReduce seq %llu over TCP: %s", c->rank, c->nranks,
			     (unsigned long long)seq, cause ? cause : strerror(-err));
		free(cause);
	}
	if (!err)
		err = comm_wait(c, cond, seq, peer, 1);
	if (err == -ETIMEDOUT) {
		char who[160];

		missing_ranks(c, cond, seq, peer, who, sizeof(who));
		fail("rank %d of %d: %s seq %llu timed out after %.0f s waiting for rank(s) %s "
		     "(FQ_STANDIN_TIMEOUT_S)",
		     c->rank, c->nranks, op_names[op], (unsigned long long)seq,
		     (double)fqsi_timeout_ns() / 1e9, who);
	}
	all = dclock && !err ? last_arrival(c, cond, seq, peer, x->start_ns) : fqsi_now_ns();
	if (all < x->start_ns)
		all = x->start_ns;
	end = all + (err ? 0 : xfer_ns());
	fqsi_sleep_until(end);
	x->end_ns = end;
	for (int i = 0; i < NCHANNELS; i++) {
		fq_nccl_state_args_t a = { 0 };

		if (!ch[i])
			continue;
		a.kernelCh.pTimer = end + off;
		prof_record(ch[i], ncclProfilerKernelChStop, &a);
		prof_stop(ch[i]);
	}
	snprintf(note, sizeof(note), "gstart=%llu gstop=%llu wait=%llu fseq=%llu",
		 (unsigned long long)(x->start_ns + off), (unsigned long long)(end + off),
		 (unsigned long long)(all - x->start_ns), (unsigned long long)argv[6]);
	fqsi_device_row(nccl_kernels[op].name, (long long)seq, (long long)argv[5],
			end - x->start_ns, note);
	atomic_fetch_sub(&c->pending, 1);
	return err;
}

static const char *dtype_name(ncclDataType_t t)
{
	static const char *const names[ncclNumTypes] = {
		"ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",
		"ncclInt64",   "ncclUint64",  "ncclFloat16",  "ncclFloat32",
		"ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2",
	};

	return (unsigned int)t < ncclNumTypes ? names[t] : "unknown";
}

ncclResult_t launch_op(const struct pending_op *p)
{
	ncclComm_t comm = p->comm;
	bool is_coll = p->op < OP_SEND;
	uint64_t a0 = (uintptr_t)comm, a1 = comm->seq++, a2 = p->op,
		 a3 = (uint64_t)(int64_t)p->peer, a4 = 0, a5 = p->count,
		 a6 = is_coll ? comm->fseq[p->op]++ : 0, a7 = (uintptr_t)p->sendbuff,
		 a8 = (uintptr_t)p->recvbuff, a9 = (uint64_t)p->dtype;
	void *params[10] = { &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8, &a9 };
	dim3 grid = { 1, 1, 1 }, block = { 1, 1, 1 };
	void *coll = NULL;
	int err;

	/* host side of the collective: its Coll event spans the enqueue, as in NCCL */
	if (is_coll && comm->prof_ctx && (comm->prof_mask & ncclProfileColl)) {
		fq_nccl_descr_t d = { 0 };

		d.type = ncclProfileColl;
		d.parentObj = NULL;
		d.rank = comm->rank;
		d.coll.seqNumber = a6;
		d.coll.func = op_names[p->op];
		d.coll.count = p->count;
		d.coll.root = p->root < 0 ? 0 : p->root;
		d.coll.datatype = dtype_name(p->dtype);
		d.coll.nChannels = NCHANNELS;
		d.coll.nWarps = 16;
		d.coll.algo = "RING";
		d.coll.proto = "SIMPLE";
		prof_start(comm, &coll, &d);
		a4 = (uintptr_t)coll;
	}
	/* a Send/Recv: NCCL starts its P2p event for KernelCh too, and names the peer */
	if (!is_coll && comm->prof_ctx &&
	    (comm->prof_mask & (ncclProfileP2p | ncclProfileKernelCh))) {
		fq_nccl_descr_t d = { 0 };

		d.type = ncclProfileP2p;
		d.parentObj = NULL;
		d.rank = comm->rank;
		d.p2p.func = op_names[p->op];
		d.p2p.buff = p->op == OP_SEND ? (void *)p->sendbuff : p->recvbuff;
		d.p2p.datatype = dtype_name(p->dtype);
		d.p2p.count = p->count;
		d.p2p.peer = p->peer;
		d.p2p.nChannels = NCHANNELS;
		prof_start(comm, &coll, &d);
		a4 = (uintptr_t)coll;
	}
	/* the synchronizing thread runs the kernel later: the host's enqueue is the arrival */
	if (fqsi_inline())
		publish_arrival(comm, a1);
	atomic_fetch_add(&comm->pending, 1);
	err = cudaLaunchKernel(&nccl_kernels[p->op], grid, block, params, 0, p->stream);
	if (coll)
		prof_stop(coll);
	if (err) {
		atomic_fetch_sub(&comm->pending, 1);
		fail("rank %d: launching %s failed: cuda error %d", comm->rank, op_names[p->op],
		     err);
		return ncclUnhandledCudaError;
	}
	if (blocking()) {
		enum cond cond = p->peer >= 0 ? COND_PEER : COND_ALL;

		/* a blocking implementation: the call itself waits for every rank's kernel */
		if (comm_wait(comm, cond, a1, p->peer, 1)) {
			fail("rank %d: %s seq %llu timed out waiting for the other ranks",
			     comm->rank, op_names[p->op], (unsigned long long)a1);
			return ncclRemoteError;
		}
	}
	return ncclSuccess;
}

