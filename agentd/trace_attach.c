/* SPDX-License-Identifier: MIT */
/*
 * The tracer's attaching: uprobes on the functions probe.c finds in a library,
 * the links they make, and the libraries named at start (lib:PATH, the NCCL
 * profiler plugin installed beside agentd).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "clock.h"
#include "discover.h"
#include "fqtrace.h"
#include "fqtrace.skel.h"
#include "probe.h"
#include "trace_int.h"

/* ---- attaching ---- */

/*
 * Detaching a uprobe costs the kernel RCU grace periods under its global event_mutex
 * (~80 ms a link here), so agentd takes seconds to exit after SIGTERM; the trace is
 * drained and flushed before that. Handing the links to a child that outlives us made
 * the exit prompt, but the detaches then overlapped the next agent's attaches on the same
 * files (a restart, or several agents on one host), which lost that agent's events: the
 * detach stays here, where whoever waits for our exit waits for it too.
 */

int add_link(struct tracer *t, struct bpf_link *l)
{
	int err = 0;

	pthread_mutex_lock(&t->link_mu);
	if (t->nlinks == t->caplinks) {
		size_t cap = t->caplinks ? 2 * t->caplinks : 64;
		struct bpf_link **n = realloc(t->links, cap * sizeof(*n));

		if (!n) {
			err = -ENOMEM;
			goto cleanup;
		}
		t->links = n;
		t->caplinks = cap;
	}
	t->links[t->nlinks++] = l;
cleanup:
	pthread_mutex_unlock(&t->link_mu);
	if (err)
		bpf_link__destroy(l);
	return err;
}

int attach_one(struct tracer *t, struct bpf_program *prog, int ret, pid_t pid,
	       const char *path, uint64_t off, uint64_t cookie)
{
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = cookie, .retprobe = ret);
	struct bpf_link *l = bpf_program__attach_uprobe_opts(prog, pid, path, off, &uo);

	if (!l)
		return -errno;
	return add_link(t, l);
}

/* Attaches every probed function path defines; one uprobe covers all processes mapping it. */
int attach_file(struct tracer *t, const char *path)
{
	struct probe_sym *syms = NULL;
	char *cause = NULL;
	int n, i, ok = 0, err;

	n = probe_resolve(path, t->sets, &syms, &cause);
	if (n < 0) {
		tlog("%s", cause ? cause : "cannot read a library");
		free(cause);
		return n;
	}
	for (i = 0; i < n; i++) {
		const struct probe_fn *f = &probe_fns[syms[i].fn];
		struct bpf_program *in, *out;
		uint64_t ck = probe_cookie(syms[i].fn);

		switch (f->kind) {
		case FQ_K_COLL:
		case FQ_K_P2P:
			in = t->skel->progs.nccl_entry;
			out = t->skel->progs.nccl_return;
			break;
		case FQ_K_INIT:
		case FQ_K_INIT_SCALABLE:
		case FQ_K_INIT_ALL:
		case FQ_K_SPLIT:
			in = t->skel->progs.init_entry;
			out = t->skel->progs.init_return;
			break;
		case FQ_K_DESTROY:
			in = t->skel->progs.destroy_entry;
			out = NULL;
			break;
		case FQ_K_GROUP_START:
			in = t->skel->progs.group_start;
			out = NULL;
			break;
		case FQ_K_GROUP_END:
			in = t->skel->progs.group_end_entry;
			out = t->skel->progs.group_end_return;
			break;
		case FQ_K_PROF:
			in = t->skel->progs.prof_kernel;
			out = NULL;
			break;
		case FQ_K_BUSY:
			in = t->skel->progs.prof_busy;
			out = NULL;
			break;
		default:
			in = t->skel->progs.cuda_entry;
			out = t->skel->progs.cuda_return;
			break;
		}
		err = attach_one(t, in, 0, -1, path, syms[i].offset, ck);
		if (!err && out)
			err = attach_one(t, out, 1, -1, path, syms[i].offset, ck);
		if (err)
			tlog("cannot attach to %s in '%s': %s", f->name, path, strerror(-err));
		else
			ok++;
	}
	if (n > 0 || t->verbose)
		tlog("attached %d of %d functions in '%s'", ok, n, path);
	/* every probe of the library is in place: a call pending from before is stale
	 * (fqtrace.bpf.c, settled_ns; the BPF programs' clock) */
	if (ok > 0)
		t->skel->bss->settled_ns = (uint64_t)clock_ns(t->use_tai ? CLOCK_TAI : CLOCK_MONOTONIC);
	free(syms);
	return ok;
}

void lib_found(void *arg, const char *path, uint64_t dev, uint64_t ino)
{
	attach_file(arg, path);
}

void proc_found(void *arg, int pid)
{
	struct tracer *t = arg;
	uint32_t key = (uint32_t)pid;
	uint8_t one = 1;

	bpf_map__update_elem(t->skel->maps.traced, &key, sizeof(key), &one, sizeof(one),
			     BPF_NOEXIST);
	emit_process(t, pid);
}

int attach_listed_libs(struct tracer *t)
{
	char *copy, *save = NULL, *w;

	if (!t->probes)
		return 0;
	copy = strdup(t->probes);
	if (!copy)
		return -ENOMEM;
	for (w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		char real[PATH_MAX];
		struct stat st;

		if (strncmp(w, "lib:", 4))
			continue;
		if (!realpath(w + 4, real) || stat(real, &st)) {
			tlog("cannot find library '%s': %s", w + 4, strerror(errno));
			continue;
		}
		if (attach_file(t, real) > 0)
			discover_add_file(t->disc, st.st_dev, st.st_ino);
	}
	free(copy);
	return 0;
}

/*
 * fleetq's NCCL profiler plugin where it is installed beside agentd: attached at start, so
 * that a job's first collectives are seen too (found in a process's maps only after NCCL
 * loaded it at the communicator's init, the attach would miss what ran meanwhile).
 */
#ifndef FLEETQ_NCCL_PLUGIN_PATH
#define FLEETQ_NCCL_PLUGIN_PATH "/usr/local/lib/libfleetq-nccl-profiler.so"
#endif
#ifndef FLEETQ_CUPTI_PATH
#define FLEETQ_CUPTI_PATH "/usr/local/lib/libfleetq-cupti.so"
#endif
static void attach_installed(struct tracer *t, const char *path)
{
	char real[PATH_MAX];
	struct stat st;

	if (!(t->sets & PROBE_NCCL) || !realpath(path, real) || stat(real, &st) ||
	    discover_has_file(t->disc, st.st_dev, st.st_ino))
		return;
	if (attach_file(t, real) > 0)
		discover_add_file(t->disc, st.st_dev, st.st_ino);
}

/* and fleetq's CUDA injection library, for the same reason */
void attach_installed_plugin(struct tracer *t)
{
	attach_installed(t, FLEETQ_NCCL_PLUGIN_PATH);
	attach_installed(t, FLEETQ_CUPTI_PATH);
}
