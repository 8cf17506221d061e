/* SPDX-License-Identifier: MIT */
/*
 * What fleetq probes in libnccl / libcudart / libcuda, and how: the function
 * table (names, probe set, argument positions packed into the BPF attach
 * cookie of bpf/fqtrace.h), ELF symbol resolution (libelf, .dynsym and
 * .symtab, file offsets), and the start-up probe cost measurement.
 */
#ifndef FLEETQ_AGENTD_PROBE_H
#define FLEETQ_AGENTD_PROBE_H

#include <stddef.h>
#include <stdint.h>

enum probe_set {
	PROBE_NCCL = 1 << 0,
	PROBE_SYNC = 1 << 1,
	PROBE_LAUNCH = 1 << 2,
	PROBE_MEMCPY = 1 << 3,
	PROBE_MALLOC = 1 << 4,
	PROBE_SCHED = 1 << 5,
	PROBE_TCP = 1 << 6,
	PROBE_PROC = 1 << 7,
};

#define PROBE_DEFAULT "nccl,sync,malloc,sched,tcp,proc"

struct probe_fn {
	const char *name;  /* exported symbol */
	const char *label; /* collectives.op or cuda_calls.api */
	unsigned int set;  /* enum probe_set */
	unsigned int kind; /* enum fq_kind */
	uint8_t comm, count, dtype, redop, peer, stream; /* 1-based argument positions, 0: none */
};

/* The table; a function's index is its id in events (FQ_CK_FN). */
extern const struct probe_fn probe_fns[];
extern const size_t probe_nfns;

/* The cookie for probe_fns[i]. */
uint64_t probe_cookie(size_t i);

/* Parses "nccl,sync,..." into *mask; 0, or -EINVAL with *cause naming the bad word. */
int probe_parse_sets(const char *list, unsigned int *mask, char **cause);

struct probe_sym {
	size_t fn;      /* index into probe_fns */
	uint64_t offset; /* file offset to attach at */
};

/*
 * Resolves the probe_fns of the sets in mask that path defines (a function and its
 * pnccl alias share an address: one entry per address). *out is malloc'ed; caller frees.
 * Returns the count, or -errno with *cause.
 */
int probe_resolve(const char *path, unsigned int mask, struct probe_sym **out, char **cause);

/* NCCL datatype / reduction names and element size; NULL / 0 if unknown. */
const char *probe_nccl_dtype(int dt);
int probe_nccl_dtype_size(int dt);
const char *probe_nccl_redop(int op);

/* Calibration targets with a known first instruction (push %rbp / endbr64). */
int probe_calib_push(int x);
int probe_calib_endbr(int x);
/* File offset of fn in the file mapped at it in this process, and that file's path. */
int probe_self_offset(const void *fn, char *path, size_t n, uint64_t *offset);

#endif
