/* SPDX-License-Identifier: MIT */
/*
 * The stand-in libnccl's TCP transport (a test double, not NCCL's socket transport): with
 * FQ_STANDIN_TRANSPORT=tcp, a communicator made by ncclCommInitRank (not a split one) connects
 * its ranks in a ring at FQ_STANDIN_TCP_ADDRS ("ip:port,ip:port,...", one per rank), and
 * its all-reduces move the buffer's real bytes over those sockets (ring reduce-scatter then
 * all-gather, float32 summed), so a collective completes only when the network delivered.
 */
#ifndef FQSI_NCCL_TCP_H
#define FQSI_NCCL_TCP_H

#include <stddef.h>
#include <stdint.h>

struct fqsi_tcp;

/*
 * Connects rank to its ring neighbours when the transport is TCP for this communicator; *out
 * stays NULL when it is not. 0, or -errno with *cause (malloc'd, one line) on failure.
 */
int fqsi_tcp_open(int rank, int nranks, uint64_t deadline_ns, struct fqsi_tcp **out,
		  char **cause);

/* Ring all-reduce of count elements of esize bytes (float32 when sum is set), in place on
 * recv after copying send. seq tags every message so a ring that lost its step says so. */
int fqsi_tcp_allreduce(struct fqsi_tcp *t, const void *send, void *recv, size_t count,
		       size_t esize, int sum, uint64_t seq, uint64_t deadline_ns, char **cause);

void fqsi_tcp_close(struct fqsi_tcp *t);

#endif
