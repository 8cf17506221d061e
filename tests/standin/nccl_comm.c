/* SPDX-License-Identifier: MIT */
/*
 * The stand-in libnccl's communicators: one shared-memory segment per communicator that every
 * rank's process maps, where ranks join, leave, publish their arrivals and wait (futex,
 * off-CPU) for one another.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nccl_int.h"
#include "nccl_tcp.h"

void bump(struct shm *sh)
{
	atomic_fetch_add(&sh->gen, 1);
	/* not FUTEX_PRIVATE: the waiters are other processes mapping the same segment */
	syscall(SYS_futex, &sh->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static bool ready(const struct ncclComm *c, enum cond cond, uint64_t v, int peer)
{
	struct shm *sh = c->shm;

	switch (cond) {
	case COND_JOINED:
		return atomic_load(&sh->joined) >= (uint32_t)c->nranks;
	case COND_PEER:
		return atomic_load(&sh->arrived[peer]) > v;
	case COND_ALL:
		for (int r = 0; r < c->nranks; r++)
			if (atomic_load(&sh->arrived[r]) <= v)
				return false;
		return true;
	case COND_BARRIER:
		for (int r = 0; r < c->nranks; r++)
			if (atomic_load(&sh->barrier[r]) <= v)
				return false;
		return true;
	}
	return false;
}

/* 0 when cond holds, -EAGAIN if it does not and !block, -ETIMEDOUT after FQ_STANDIN_TIMEOUT_S. */
int comm_wait(const struct ncclComm *c, enum cond cond, uint64_t v, int peer, int block)
{
	uint64_t deadline = fqsi_now_ns() + fqsi_timeout_ns();

	for (;;) {
		uint32_t g = atomic_load(&c->shm->gen);
		uint64_t now, rel;
		struct timespec ts;

		if (ready(c, cond, v, peer))
			return 0;
		if (!block)
			return -EAGAIN;
		now = fqsi_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		rel = deadline - now;
		ts.tv_sec = (time_t)(rel / 1000000000ull);
		ts.tv_nsec = (long)(rel % 1000000000ull);
		syscall(SYS_futex, &c->shm->gen, FUTEX_WAIT, g, &ts, NULL, 0);
	}
}

/* Names the ranks that have not reached v, for a timeout message a person can act on. */
void missing_ranks(const struct ncclComm *c, enum cond cond, uint64_t v, int peer, char *buf,
		   size_t len)
{
	size_t n = 0;
	int shown = 0;

	buf[0] = '\0';
	for (int r = 0; r < c->nranks && n + 16 < len; r++) {
		uint64_t a = cond == COND_BARRIER ? atomic_load(&c->shm->barrier[r])
						  : atomic_load(&c->shm->arrived[r]);

		if ((cond == COND_PEER && r != peer) || a > v)
			continue;
		if (shown++ == 16) {
			n += (size_t)snprintf(buf + n, len - n, ",...");
			break;
		}
		n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? "," : "", r);
	}
	if (cond == COND_JOINED)
		snprintf(buf, len, "%u of %d joined", atomic_load(&c->shm->joined), c->nranks);
}

void publish_arrival(struct ncclComm *c, uint64_t seq)
{
	uint64_t cur = atomic_load(&c->shm->arrived[c->rank]);

	/* monotonic even if two streams run one communicator's kernels out of order */
	while (cur < seq + 1 &&
	       !atomic_compare_exchange_weak(&c->shm->arrived[c->rank], &cur, seq + 1))
		;
	bump(c->shm);
}

static void uid_name(struct ncclComm *c, const unsigned char uid[NCCL_UNIQUE_ID_BYTES])
{
	memcpy(c->uid, uid, NCCL_UNIQUE_ID_BYTES);
	fqsi_shm_name(uid, c->name, sizeof(c->name));
}

/* Registers this rank with the communicator's segment; does not wait for the others. */
ncclResult_t comm_join(ncclComm_t *out, int nranks, const unsigned char *uid, int rank, int cudev)
{
	struct ncclComm *c = NULL;
	ncclResult_t res = ncclSystemError;
	uint32_t expect = 0;
	int fd = -1;

	if (!out || nranks < 1 || nranks > FQSI_MAX_RANKS || rank < 0 || rank >= nranks) {
		fail("invalid rank %d of %d (the stand-in holds at most %d ranks)", rank, nranks,
		     FQSI_MAX_RANKS);
		return ncclInvalidArgument;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		goto cleanup;
	uid_name(c, uid);
	c->nranks = nranks;
	c->rank = rank;
	c->cudev = cudev;
	fd = shm_open(c->name, O_RDWR | O_CREAT, 0600);
	if (fd < 0) {
		fail("cannot open shared memory '%s': %s", c->name, strerror(errno));
		goto cleanup;
	}
	/* every rank sizes it; the same size twice is harmless and new pages read as zero */
	if (ftruncate(fd, sizeof(struct shm))) {
		fail("cannot size shared memory '%s': %s", c->name, strerror(errno));
		goto cleanup;
	}
	c->shm = mmap(NULL, sizeof(struct shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c->shm == MAP_FAILED) {
		c->shm = NULL;
		fail("cannot map shared memory '%s': %s", c->name, strerror(errno));
		goto cleanup;
	}
	if (!atomic_compare_exchange_strong(&c->shm->nranks, &expect, (uint32_t)nranks) &&
	    expect != (uint32_t)nranks) {
		fail("rank %d says the communicator has %d ranks, another rank said %u", rank,
		     nranks, expect);
		res = ncclInvalidUsage;
		goto cleanup;
	}
	if (atomic_exchange(&c->shm->present[rank], 1)) {
		fail("rank %d joined the communicator twice", rank);
		res = ncclInvalidUsage;
		goto cleanup;
	}
	atomic_fetch_add(&c->shm->joined, 1);
	bump(c->shm);
	*out = c;
	c = NULL;
	res = ncclSuccess;
cleanup:
	if (fd >= 0)
		close(fd);
	if (c) {
		if (c->shm)
			munmap(c->shm, sizeof(struct shm));
		free(c);
	}
	return res;
}

void comm_leave(struct ncclComm *c)
{
	proxy_stop(c);
	if (atomic_fetch_add(&c->shm->left, 1) + 1 == (uint32_t)c->nranks)
		shm_unlink(c->name);
	/* a queued item still points at c: keep it mapped rather than fault in a later sync */
	if (atomic_load(&c->pending))
		return;
	fqsi_tcp_close(c->tcp);
	munmap(c->shm, sizeof(struct shm));
	free(c);
}

ncclResult_t comm_wait_joined(struct ncclComm *c)
{
	char who[160];

	if (!comm_wait(c, COND_JOINED, 0, -1, 1))
		return ncclSuccess;
	missing_ranks(c, COND_JOINED, 0, -1, who, sizeof(who));
	fail("rank %d: ncclCommInitRank timed out after %.0f s, %s (FQ_STANDIN_TIMEOUT_S)",
	     c->rank, (double)fqsi_timeout_ns() / 1e9, who);
	return ncclRemoteError;
}
