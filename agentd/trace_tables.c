/* SPDX-License-Identifier: MIT */
/*
 * The tracer's tables: the processes it has described (start time by pid, for
 * exits and the GPU sampler) and the communicators it has seen initialised
 * (hash, rank, sequence counters by (pid, comm_ptr), for the poll thread).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "discover.h"
#include "store.h"
#include "trace_int.h"

/* ---- process table ---- */

void emit_process(struct tracer *t, int pid)
{
	struct proc_ident *id = malloc(sizeof(*id));
	struct proc_ent **pp, *e;
	struct rec r = { .kind = REC_PROCESS };
	char path[PATH_MAX];
	struct stat st;

	if (!id)
		return;
	pthread_mutex_lock(&t->proc_mu);
	for (e = t->procs[(unsigned int)pid % PROC_BUCKETS]; e; e = e->next)
		if (e->pid == pid)
			break;
	pthread_mutex_unlock(&t->proc_mu);
	if (e || discover_ident(pid, id))
		goto cleanup;
	e = calloc(1, sizeof(*e));
	if (!e)
		goto cleanup;
	e->pid = pid;
	e->start_ns = id->start_boot_ns + t->boot_off;
	pthread_mutex_lock(&t->proc_mu);
	pp = &t->procs[(unsigned int)pid % PROC_BUCKETS];
	e->gen = ++t->proc_gen;
	e->next = *pp;
	*pp = e;
	pthread_mutex_unlock(&t->proc_mu);

	r.u.process = (struct rec_process){
		.pid = pid,
		.start_ns = e->start_ns,
		.exit_ns = REC_NULL,
		.exit_code = REC_NULL,
		.ppid = id->ppid,
		.comm = id->comm,
		.cmdline = id->cmdline,
		.cgroup = id->cgroup[0] ? id->cgroup : NULL,
		.cgroup_id = REC_NULL,
		.rank = id->rank,
		.local_rank = id->local_rank,
		.world_size = id->world_size,
		.job_id = id->job_id[0] ? id->job_id : NULL,
	};
	if (id->cgroup[0]) {
		char mnt[PATH_MAX];

		if (!discover_cgroup2_mount(mnt, sizeof(mnt)) &&
		    snprintf(path, sizeof(path), "%s%s", mnt, id->cgroup) < (int)sizeof(path) &&
		    !stat(path, &st))
			r.u.process.cgroup_id = (int64_t)st.st_ino;
	}
	store_put(t->store, &r);
	if (t->verbose)
		tlog("process %d (%s) rank %s", pid, id->comm,
		     id->rank == REC_NULL ? "unset" : "set");
cleanup:
	free(id);
}

/* Takes the process out of the table; its start_ns, or REC_NULL if never seen. */
int64_t forget_process(struct tracer *t, int pid)
{
	struct proc_ent **pp, *e;
	int64_t start = REC_NULL;

	pthread_mutex_lock(&t->proc_mu);
	for (pp = &t->procs[(unsigned int)pid % PROC_BUCKETS]; (e = *pp); pp = &e->next) {
		if (e->pid == pid) {
			*pp = e->next;
			start = e->start_ns;
			free(e);
			break;
		}
	}
	pthread_mutex_unlock(&t->proc_mu);
	return start;
}

int known_process(struct tracer *t, int pid)
{
	struct proc_ent *e;

	pthread_mutex_lock(&t->proc_mu);
	for (e = t->procs[(unsigned int)pid % PROC_BUCKETS]; e; e = e->next)
		if (e->pid == pid)
			break;
	pthread_mutex_unlock(&t->proc_mu);
	return e != NULL;
}

/* ---- communicator table (poll thread) ---- */

struct comm_ent *comm_find(struct tracer *t, uint32_t pid, uint64_t ptr, int create)
{
	struct comm_ent **pp = &t->comms[(ptr ^ pid) % COMM_BUCKETS], *e;

	for (e = *pp; e; e = e->next)
		if (e->pid == pid && e->ptr == ptr)
			return e;
	if (!create || !(e = calloc(1, sizeof(*e))))
		return NULL;
	e->pid = pid;
	e->ptr = ptr;
	e->rank = e->nranks = REC_NULL;
	e->seq = e->p2p_seq = -1;
	e->sync_mark = e->p2p_sync_mark = -1;
	e->last_ts = e->p2p_last_ts = REC_NULL;
	e->next = *pp;
	*pp = e;
	return e;
}

void comm_drop(struct tracer *t, uint32_t pid, uint64_t ptr)
{
	struct comm_ent **pp = &t->comms[(ptr ^ pid) % COMM_BUCKETS], *e;

	for (; (e = *pp); pp = &e->next) {
		if (e->pid == pid && e->ptr == ptr) {
			*pp = e->next;
			if (t->kcache == e)
				t->kcache = NULL;
			adopt_forget(t, e);
			free(e);
			return;
		}
	}
}

void comm_drop_pid(struct tracer *t, uint32_t pid)
{
	size_t i;

	for (i = 0; i < COMM_BUCKETS; i++) {
		struct comm_ent **pp = &t->comms[i], *e;

		while ((e = *pp)) {
			if (e->pid == pid) {
				*pp = e->next;
				if (t->kcache == e)
					t->kcache = NULL;
				adopt_forget(t, e);
				free(e);
			} else {
				pp = &e->next;
			}
		}
	}
}

/* fleetq's communicator of pid whose NCCL hash is nh, or NULL. */
const struct comm_ent *comm_by_nccl(struct tracer *t, uint32_t pid, uint64_t nh)
{
	if (t->kcache && t->kcache->pid == pid && t->kcache->nccl_hash == nh)
		return t->kcache;
	for (size_t i = 0; i < COMM_BUCKETS; i++)
		for (struct comm_ent *e = t->comms[i]; e; e = e->next)
			if (e->pid == pid && e->nccl_hash == nh)
				return t->kcache = e;
	return NULL;
}

/* The traced processes, for the GPU sampler's process -> GPU map (its own thread). */
int gpu_list_procs(void *arg, struct gpu_proc *out, int max)
{
	struct tracer *t = arg;
	int n = 0;

	pthread_mutex_lock(&t->proc_mu);
	for (int b = 0; b < PROC_BUCKETS && n < max; b++)
		for (struct proc_ent *e = t->procs[b]; e && n < max; e = e->next)
			out[n++] = (struct gpu_proc){ .pid = e->pid,
						       .start_ns = e->start_ns,
						       .gen = e->gen };
	pthread_mutex_unlock(&t->proc_mu);
	return n;
}
