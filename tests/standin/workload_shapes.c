/* SPDX-License-Identifier: MIT */
/*
 * fq-workload: the job shapes other than the default loop (--shape ddp, fsdp, pipeline; see
 * README.md), and the planted fault every shape starts its step with.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "workload.h"

static void sleep_us(long us)
{
	fqsi_sleep_until(fqsi_now_ns() + (uint64_t)us * 1000);
}

/* A step's nominal length: its host side (CPU work, data wait) or its device work. */
static long nominal_us(const struct opts *o)
{
	long host = o->step_us + o->data_us;

	return host > o->kernel_us ? host : o->kernel_us;
}

static bool slowed(const struct worker *w, int step)
{
	return w->rank == w->o->slow_rank && step >= w->o->slow_from && w->o->slow_pct > 0;
}

/*
 * --slow-of measured: the step the fault is a share of is the rank's own, as it ran: its mean
 * wall time a step from step slow_from / 2 to slow_from (a job on a small shared machine runs
 * well over its nominal step, so P% of the nominal one costs it far less than P%). train.py
 * sizes its faults on the measured step the same way.
 */
static long basis_us(struct worker *w, int step)
{
	const struct opts *o = w->o;
	int half = o->slow_from / 2;

	if (!o->slow_measured || w->rank != o->slow_rank || o->slow_from < 2)
		return nominal_us(o);
	if (step == half)
		w->basis_t0 = fqsi_now_ns();
	if (step == o->slow_from && w->basis_t0) {
		w->basis_us = (long)((fqsi_now_ns() - w->basis_t0) / 1000 /
				     (uint64_t)(o->slow_from - half));
		fprintf(stderr, "fq-workload: rank %d: measured step %ld us, nominal %ld us\n",
			w->rank, w->basis_us, nominal_us(o));
	}
	return w->basis_us > 0 ? w->basis_us : nominal_us(o);
}

/*
 * The start of the main thread's step: the wait for its batch (--data-us), then the planted
 * fault: stall sleeps P% of a step (off-CPU), busy spins P% of a step more; gpu leaves the CPU
 * alone and returns the percentage the step's compute kernels take of their normal device
 * time (P% more; --slow-of measured: their normal time plus P% of the measured step).
 */
int plant(struct worker *w, int step)
{
	long base = basis_us(w, step), extra = base * w->o->slow_pct / 100;

	/* --data-us: waiting for the next batch (data loader, I/O), off-CPU */
	if (w->o->data_us > 0)
		sleep_us(w->o->data_us);
	if (!slowed(w, step))
		return 100;
	switch (w->o->slow_kind) {
	case SLOW_STALL:
		sleep_us(extra);
		break;
	case SLOW_BUSY:
		spin_us(extra);
		break;
	case SLOW_GPU:
		/* nominal: P% more device time, as it always was */
		if (w->basis_us <= 0 || w->o->kernel_us <= 0)
			return 100 + w->o->slow_pct;
		return 100 + (int)((extra * 100 + w->o->kernel_us / 2) / w->o->kernel_us);
	}
	return 100;
}

/* A timed compute kernel: the device is busy for ns, the host not at all. */
static int launch(struct worker *w, const struct fqsi_kernel *k, uint64_t ns, cudaStream_t st)
{
	void *args[1] = { &ns };
	dim3 one = { 1, 1, 1 };
	int r = cudaLaunchKernel(k, one, one, args, 0, st);

	if (r)
		fprintf(stderr, "fq-workload: rank %d: cudaLaunchKernel failed: %s\n", w->rank,
			cudaGetErrorString(r));
	return r ? -EIO : 0;
}

static int wait_event(struct worker *w, cudaStream_t st, cudaEvent_t ev, cudaStream_t from)
{
	int r = cudaEventRecord(ev, from);

	if (!r)
		r = cudaStreamWaitEvent(st, ev, 0);
	if (r)
		fprintf(stderr, "fq-workload: rank %d: event record/wait failed: %s\n", w->rank,
			cudaGetErrorString(r));
	return r ? -EIO : 0;
}

static int sync_step(struct worker *w, cudaStream_t st, int step)
{
	uint64_t t0 = fqsi_now_ns(), dt;
	int r = cudaStreamSynchronize(st);

	dt = fqsi_now_ns() - t0;
	if (r) {
		fprintf(stderr,
			"fq-workload: rank %d: cudaStreamSynchronize failed at step %d "
			"(after collective seq %ld): %s\n",
			w->rank, step, w->seq - 1, cudaGetErrorString(r));
		return -EIO;
	}
	row(w, "cudaStreamSynchronize", step, 0, dt, NULL);
	atomic_fetch_add(&w->stat->syncs, 1);
	atomic_fetch_add(&w->stat->sync_wait_ns, dt);
	return 0;
}

/* --sync-every K: like loss.item() every K steps; the last step always ends with one */
static int maybe_sync(struct worker *w, cudaStream_t st, int step)
{
	const struct opts *o = w->o;

	if ((o->sync_every > 0 && (step + 1) % o->sync_every == 0) || step == o->steps - 1)
		return sync_step(w, st, step);
	return 0;
}

static void step_row(struct worker *w, int step, long ncoll, uint64_t t0)
{
	row(w, "step", step, ncoll, fqsi_now_ns() - t0, slowed(w, step) ? "slow" : NULL);
}

/* DDP: the backward pass on a thread of its own, as PyTorch's autograd engine runs it. */
struct ddp {
	struct worker *w;
	ncclComm_t comm;
	cudaStream_t st;
	void *sb, *rb;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int go_step, done_step, gpu_pct, err;
	bool quit;
};

static void *ddp_backward(void *arg)
{
	struct ddp *d = arg;
	struct worker *w = d->w;
	const struct opts *o = w->o;
	int next = 0;

	for (;;) {
		uint64_t ns;
		int step, err = 0;

		pthread_mutex_lock(&d->lock);
		while (d->go_step < next && !d->quit)
			pthread_cond_wait(&d->cond, &d->lock);
		step = d->go_step;
		ns = (uint64_t)o->kernel_us * 1000 * 2 / 3 / (uint64_t)o->buckets *
		     (uint64_t)d->gpu_pct / 100;
		pthread_mutex_unlock(&d->lock);
		if (step < next)
			break;
		/* buckets become ready from the last layer back; each is reduced at once */
		for (int b = o->buckets - 1; b >= 0 && !err; b--) {
			spin_us(o->step_us / 2 / o->buckets);
			err = launch(w, &bwd_kernel, ns, d->st);
			if (!err && OP(w, "ncclAllReduce", COUNT,
				       ncclAllReduce(d->sb, d->rb, COUNT, ncclFloat32, ncclSum,
						     d->comm, d->st)))
				err = -EIO;
		}
		pthread_mutex_lock(&d->lock);
		d->done_step = step;
		d->err = err;
		pthread_cond_broadcast(&d->cond);
		pthread_mutex_unlock(&d->lock);
		next = step + 1;
	}
	return NULL;
}

/*
 * --split-every: a communicator split off the job's (every rank, one color), an all-reduce on
 * it, then destroyed, as a job that makes sub-groups while it runs does. Called between steps
 * (the backward thread idle), on every rank after the same collective of the job's.
 */
static int split_once(struct worker *w, ncclComm_t comm, cudaStream_t st, void *sb, void *rb)
{
	struct wcomm c = { .c = NULL };
	int err = 0;

	snprintf(c.tag, sizeof(c.tag), "split");
	if (ncclCommSplit(comm, 0, w->rank, &c.c, NULL)) {
		fprintf(stderr, "fq-workload: rank %d: ncclCommSplit failed\n", w->rank);
		return -EIO;
	}
	if (OPC(w, &c, "ncclAllReduce", COUNT,
		ncclAllReduce(sb, rb, COUNT, ncclFloat32, ncclSum, c.c, st)))
		err = -EIO;
	else if (cudaStreamSynchronize(st))
		err = -EIO;
	ncclCommDestroy(c.c);
	return err;
}

static int run_ddp(struct worker *w, ncclComm_t comm, cudaStream_t st, void *sb, void *rb)
{
	const struct opts *o = w->o;
	struct ddp d = { .w = w, .comm = comm, .st = st, .sb = sb, .rb = rb, .go_step = -1,
			 .done_step = -1 };
	pthread_t bt;
	int err = 0;

	pthread_mutex_init(&d.lock, NULL);
	pthread_cond_init(&d.cond, NULL);
	if (pthread_create(&bt, NULL, ddp_backward, &d)) {
		fprintf(stderr, "fq-workload: rank %d: cannot start the backward thread\n",
			w->rank);
		return -EAGAIN;
	}
	for (int step = 0; step < o->steps && !err; step++) {
		uint64_t t0 = fqsi_now_ns(), ns;
		int pct = plant(w, step);

		ns = (uint64_t)o->kernel_us * 1000 / 3 / (uint64_t)o->buckets * (uint64_t)pct / 100;
		for (int b = 0; b < o->buckets && !err; b++) {
			spin_us(o->step_us / 2 / o->buckets);
			err = launch(w, &fwd_kernel, ns, st);
		}
		if (err)
			break;
		/* loss.backward(): the main thread waits, off-CPU, while autograd launches */
		pthread_mutex_lock(&d.lock);
		d.go_step = step;
		d.gpu_pct = pct;
		pthread_cond_broadcast(&d.cond);
		while (d.done_step < step)
			pthread_cond_wait(&d.cond, &d.lock);
		err = d.err;
		pthread_mutex_unlock(&d.lock);
		if (!err)
			err = maybe_sync(w, st, step);
		if (!err && o->split_every && (step + 1) % o->split_every == 0)
			err = split_once(w, comm, st, sb, rb);
		step_row(w, step, o->buckets, t0);
	}
	pthread_mutex_lock(&d.lock);
	d.quit = true;
	pthread_cond_broadcast(&d.cond);
	pthread_mutex_unlock(&d.lock);
	pthread_join(bt, NULL);
	return err;
}

/*
 * FSDP: per layer an all-gather of its parameters, prefetched one layer ahead on a second
 * stream that the compute stream waits on through an event; in backward an all-gather again
 * and a reduce-scatter of the layer's gradients once its kernel is done. All of one
 * communicator's work is on the second stream, as ProcessGroupNCCL keeps it.
 */
static int run_fsdp(struct worker *w, ncclComm_t comm, cudaStream_t st, void *sb, void *rb)
{
	const struct opts *o = w->o;
	int L = o->layers, err = 0, r;
	long n = COUNT / w->nranks;
	cudaStream_t cs = NULL;
	cudaEvent_t *ev = calloc((size_t)L + 1, sizeof(*ev));

	if (!ev)
		return -ENOMEM;
	r = cudaStreamCreate(&cs);
	for (int l = 0; !r && l <= L; l++)
		r = cudaEventCreate(&ev[l]);
	if (r) {
		fprintf(stderr, "fq-workload: rank %d: cuda setup failed: %s\n", w->rank,
			cudaGetErrorString(r));
		err = -EIO;
	}
#define AG(l)                                                                              \
	(OP(w, "ncclAllGather", n, ncclAllGather(sb, rb, (size_t)n, ncclFloat32, comm, cs)) || \
	 cudaEventRecord(ev[l], cs))
	for (int step = 0; step < o->steps && !err; step++) {
		uint64_t t0 = fqsi_now_ns(), fns, bns;
		int pct = plant(w, step);

		fns = (uint64_t)o->kernel_us * 1000 / 3 / (uint64_t)L * (uint64_t)pct / 100;
		bns = 2 * fns;
		err = AG(0) ? -EIO : 0;
		for (int l = 0; l < L && !err; l++) {
			if (l + 1 < L && AG(l + 1))
				err = -EIO;
			else if (cudaStreamWaitEvent(st, ev[l], 0))
				err = -EIO;
			spin_us(o->step_us / 2 / L);
			if (!err)
				err = launch(w, &fwd_kernel, fns, st);
		}
		if (!err && AG(L - 1))
			err = -EIO;
		for (int l = L - 1; l >= 0 && !err; l--) {
			if (l > 0 && AG(l - 1))
				err = -EIO;
			else if (cudaStreamWaitEvent(st, ev[l], 0))
				err = -EIO;
			spin_us(o->step_us / 2 / L);
			if (!err)
				err = launch(w, &bwd_kernel, bns, st);
			if (!err)
				err = wait_event(w, cs, ev[L], st);
			if (!err && OP(w, "ncclReduceScatter", n,
				       ncclReduceScatter(sb, rb, (size_t)n, ncclFloat32, ncclSum,
							 comm, cs)))
				err = -EIO;
		}
		/* the optimizer step runs after the last gradient shard arrived */
		if (!err)
			err = wait_event(w, st, ev[L], cs);
		if (!err)
			err = maybe_sync(w, st, step);
		step_row(w, step, 3L * L, t0);
	}
#undef AG
	if (cs)
		cudaStreamDestroy(cs);
	free(ev);
	return err;
}

/*
 * Pipeline: --stages stages of ranks/stages data-parallel ranks each (rank = stage * dp + d).
 * Per micro-batch, activations go forward and gradients back between neighbouring stages by
 * ncclSend/ncclRecv in a group, on a 2-rank communicator per neighbouring pair (PyTorch makes
 * one for p2p); per step an all-reduce among the ranks of a stage.
 */
static int p2p(struct worker *w, struct wcomm *wc, int peer, bool send, void *buf,
	       cudaStream_t st)
{
	ncclResult_t r = ncclGroupStart();

	if (r)
		return -EIO;
	if (send)
		r = OPC(w, wc, "ncclSend", COUNT,
			ncclSend(buf, COUNT, ncclFloat32, peer, wc->c, st));
	else
		r = OPC(w, wc, "ncclRecv", COUNT,
			ncclRecv(buf, COUNT, ncclFloat32, peer, wc->c, st));
	if (r)
		return -EIO;
	return ncclGroupEnd() ? -EIO : 0;
}

static int run_pipeline(struct worker *w, ncclComm_t world, cudaStream_t st, void *sb, void *rb)
{
	const struct opts *o = w->o;
	int P = o->stages, dp = w->nranks / P, stage = w->rank / dp, d = w->rank % dp, err = 0;
	/* boundary b joins stages b and b + 1; even boundaries come from one split, odd another */
	struct wcomm pair[2] = { { 0 } }, dpc = { 0 };
	struct wcomm *prev = NULL, *next = NULL;

	for (int parity = 0; parity < 2 && !err; parity++) {
		int b = (stage % 2 == parity) ? stage : stage - 1;
		int color = (b >= 0 && b + 1 < P) ? b * dp + d : -1;

		if (ncclCommSplit(world, color, stage, &pair[parity].c, NULL)) {
			err = -EIO;
			break;
		}
		snprintf(pair[parity].tag, sizeof(pair[parity].tag), "pp%d", b);
		if (color >= 0 && b == stage)
			next = &pair[parity];
		else if (color >= 0)
			prev = &pair[parity];
	}
	if (!err && ncclCommSplit(world, stage, d, &dpc.c, NULL))
		err = -EIO;
	snprintf(dpc.tag, sizeof(dpc.tag), "dp%d", stage);
	if (err)
		fprintf(stderr, "fq-workload: rank %d: ncclCommSplit failed\n", w->rank);
	for (int step = 0; step < o->steps && !err; step++) {
		uint64_t t0 = fqsi_now_ns(), fns;
		int pct = plant(w, step), M = o->micro;
		long ncoll = 0;

		fns = (uint64_t)o->kernel_us * 1000 / 3 / (uint64_t)M * (uint64_t)pct / 100;
		/* all forwards, then all backwards (GPipe): no cycle between neighbours */
		for (int m = 0; m < M && !err; m++) {
			if (prev && (err = p2p(w, prev, 0, false, rb, st)))
				break;
			spin_us(o->step_us / 2 / M);
			if ((err = launch(w, &fwd_kernel, fns, st)))
				break;
			if (next)
				err = p2p(w, next, 1, true, sb, st);
			ncoll += !!prev + !!next;
		}
		for (int m = 0; m < M && !err; m++) {
			if (next && (err = p2p(w, next, 1, false, rb, st)))
				break;
			spin_us(o->step_us / 2 / M);
			if ((err = launch(w, &bwd_kernel, 2 * fns, st)))
				break;
			if (prev)
				err = p2p(w, prev, 0, true, sb, st);
			ncoll += !!prev + !!next;
		}
		if (!err && dp > 1 &&
		    OPC(w, &dpc, "ncclAllReduce", COUNT,
			ncclAllReduce(sb, rb, COUNT, ncclFloat32, ncclSum, dpc.c, st)))
			err = -EIO;
		ncoll += dp > 1;
		if (!err)
			err = maybe_sync(w, st, step);
		step_row(w, step, ncoll, t0);
	}
	/* the last step synchronized: nothing queued still points at these communicators */
	for (int i = 0; i < 2; i++)
		if (pair[i].c)
			ncclCommDestroy(pair[i].c);
	if (dpc.c)
		ncclCommDestroy(dpc.c);
	return err;
}

int run_shape(struct worker *w, ncclComm_t comm, cudaStream_t st, void *sb, void *rb)
{
	switch (w->o->shape) {
	case SHAPE_DDP:
		return run_ddp(w, comm, st, sb, rb);
	case SHAPE_FSDP:
		return run_fsdp(w, comm, st, sb, rb);
	case SHAPE_PIPELINE:
		return run_pipeline(w, comm, st, sb, rb);
	case SHAPE_LOOP:
		break;
	}
	return -EINVAL;
}

