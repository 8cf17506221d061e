/* SPDX-License-Identifier: MIT */
/*
 * The slice of NCCL's profiler plugin ABI (NCCL >= 2.26: interface v4; >= 2.27: v5) that
 * fleetq's plugin uses, written from the layouts in NCCL's src/include/plugin/profiler/
 * profiler_v4.h and profiler_v5.h (2.28.9). Only what the plugin reads is named; the union
 * keeps its full size so that every member sits at NCCL's offset.
 *
 * v4 and v5 descriptors agree at every offset read here: v4's `type` is a uint8_t where v5
 * has a uint64_t, so only its low byte is read (x86-64 is little-endian), and the union
 * starts at offset 24 in both. tests/standin/nccl_prof.c calls a plugin through this header the
 * way NCCL does; the real path is checked on NCCL 2.28.9 (BENCHMARKS.md, "Real GPUs").
 */
#ifndef FLEETQ_NCCL_PROFILER_H
#define FLEETQ_NCCL_PROFILER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int ncclResult_t; /* ncclSuccess = 0, ncclInternalError = 3 */

typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char *file, int line,
				  const char *fmt, ...);

enum {
	ncclProfileGroup = 1 << 0,
	ncclProfileColl = 1 << 1,
	ncclProfileP2p = 1 << 2,
	ncclProfileProxyOp = 1 << 3,
	ncclProfileProxyStep = 1 << 4,
	ncclProfileProxyCtrl = 1 << 5,
	ncclProfileKernelCh = 1 << 6,
	ncclProfileNetPlugin = 1 << 7,
};

/* ncclProfilerEventState_t: the one state fleetq acts on */
#define ncclProfilerKernelChStop 22

typedef struct {
	uint64_t type;   /* v4: uint8_t (read the low byte only) */
	void *parentObj; /* Coll, P2p: its API event; KernelCh: the Coll or P2p event's handle */
	int rank;
	union {
		struct {
			uint64_t seqNumber; /* per communicator and function, the same on every rank */
			const char *func;
			const void *sendBuff;
			void *recvBuff;
			size_t count;
			int root;
			const char *datatype;
			uint8_t nChannels;
			uint8_t nWarps;
			const char *algo;
			const char *proto;
			void *parentGroup; /* v5 only */
		} coll;
		struct {
			const char *func; /* "Send", "Recv" */
			void *buff;
			const char *datatype;
			size_t count;
			int peer; /* the other side's rank in the communicator */
			uint8_t nChannels;
			void *parentGroup; /* v5 only */
		} p2p;
		struct {
			uint8_t channelId;
			uint64_t pTimer; /* GPU globaltimer at the channel's start, ns */
		} kernelCh;
		struct {
			pid_t pid;
			uint8_t channelId;
			int peer, nSteps, chunkSize, isSend;
		} proxyOp;
		struct {
			int64_t id;
			void *data;
		} netPlugin;
	};
} fq_nccl_descr_t;

typedef union {
	struct {
		size_t transSize;
	} proxyStep;
	struct {
		uint64_t pTimer; /* GPU globaltimer at the channel's stop, ns */
	} kernelCh;
	struct {
		void *data;
	} netPlugin;
} fq_nccl_state_args_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask,
			     const char *commName, int nNodes, int nranks, int rank,
			     ncclDebugLogger_t logfn);
	ncclResult_t (*startEvent)(void *context, void **eHandle, fq_nccl_descr_t *eDescr);
	ncclResult_t (*stopEvent)(void *eHandle);
	ncclResult_t (*recordEventState)(void *eHandle, int eState,
					 fq_nccl_state_args_t *eStateArgs);
	ncclResult_t (*finalize)(void *context);
} fq_nccl_profiler_v5_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName,
			     uint64_t commHash, int nNodes, int nranks, int rank,
			     ncclDebugLogger_t logfn);
	ncclResult_t (*startEvent)(void *context, void **eHandle, fq_nccl_descr_t *eDescr);
	ncclResult_t (*stopEvent)(void *eHandle);
	ncclResult_t (*recordEventState)(void *eHandle, int eState,
					 fq_nccl_state_args_t *eStateArgs);
	ncclResult_t (*finalize)(void *context);
} fq_nccl_profiler_v4_t;

/*
 * NCCL's communicator hash, as the plugin's init receives it (src/include/bitops.h:
 * eatHash/digestHash). A communicator made by ncclCommInitRank* hashes its 128-byte
 * ncclUniqueId in one piece; one made by ncclCommSplit hashes (parent hash, the parent's
 * split count after this split, color) in three. agentd computes it from what it reads at
 * init to join the plugin's records to its own communicator (comms.nccl_hash).
 */
struct fq_nccl_hacc {
	uint64_t acc[2];
};

#define FQ_NCCL_HACC_INIT { { 1, 1 } }

static inline void fq_nccl_hash_eat(struct fq_nccl_hacc *h, const void *p, size_t size)
{
	const unsigned char *bytes = p;

	h->acc[0] ^= size;
	while (size) {
		size_t n = size < 8 ? size : 8;
		uint64_t x = 0;

		h->acc[0] += h->acc[1];
		h->acc[1] ^= h->acc[0];
		h->acc[0] ^= h->acc[0] >> 31;
		h->acc[0] *= 0x9de62bbc8cef3ce3ull;
		h->acc[1] ^= h->acc[1] >> 32;
		h->acc[1] *= 0x485cd6311b599e79ull;
		for (size_t i = 0; i < n; i++)
			x |= (uint64_t)bytes[i] << (8 * i);
		bytes += n;
		size -= n;
		h->acc[0] += x;
	}
}

static inline uint64_t fq_nccl_hash_digest(const struct fq_nccl_hacc *h)
{
	uint64_t v = h->acc[0];

	v ^= v >> 31;
	v *= 0xbac3bd562846de6bull;
	v += h->acc[1];
	v ^= v >> 32;
	v *= 0x995a187a14e7b445ull;
	return v;
}

/* The hash of a communicator made from a unique id (bytes, size = 128). */
static inline uint64_t fq_nccl_hash(const void *bytes, size_t size)
{
	struct fq_nccl_hacc h = FQ_NCCL_HACC_INIT;

	fq_nccl_hash_eat(&h, bytes, size);
	return fq_nccl_hash_digest(&h);
}

/* The hash of the split_count-th child (from 1) of parent with color. */
static inline uint64_t fq_nccl_hash_split(uint64_t parent, int32_t split_count, int32_t color)
{
	struct fq_nccl_hacc h = FQ_NCCL_HACC_INIT;

	fq_nccl_hash_eat(&h, &parent, sizeof(parent));
	fq_nccl_hash_eat(&h, &split_count, sizeof(split_count));
	fq_nccl_hash_eat(&h, &color, sizeof(color));
	return fq_nccl_hash_digest(&h);
}

#endif
