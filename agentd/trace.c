/* SPDX-License-Identifier: MIT */
/*
 * The tracer: loads bpf/fqtrace.bpf.c, attaches uprobes to the NCCL / CUDA
 * libraries discovery finds, decodes the ring buffer into records for the
 * store, and polls InfiniBand counters.
 *
 * Threads: the caller's (start/stop), `poll` (ring buffer -> records; owns the
 * communicator table), `disc` (process/library discovery, attaching, IB).
 *
 * Clock: BPF stamps events with bpf_ktime_get_tai_ns() when the kernel has it
 * (CLOCK_TAI follows clock steps and slews like CLOCK_REALTIME and differs from
 * it by the integral TAI-UTC offset), else bpf_ktime_get_ns() (CLOCK_MONOTONIC,
 * offset to CLOCK_REALTIME measured at start: drifts by whatever NTP does later).
 * Either way ts_ns = bpf_ts - clock_off; meta clock_source says which.
 *
 * The tracer's files: see trace_int.h.
 */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "clock.h"
#include "discover.h"
#include "fqtrace.h"
#include "fqtrace.skel.h"
#include "ib.h"
#include "nvml.h"
#include "probe.h"
#include "records.h"
#include "store.h"
#include "syncwait.h"
#include "trace_int.h"

/* a - b, read back to back; the tightest of a few tries */
static int64_t clock_diff(clockid_t a, clockid_t b)
{
	int64_t best = 0, best_win = INT64_MAX;
	int i;

	for (i = 0; i < 16; i++) {
		int64_t b0 = clock_ns(b), x = clock_ns(a), b1 = clock_ns(b);

		if (b1 - b0 < best_win) {
			best_win = b1 - b0;
			best = x - (b0 + (b1 - b0) / 2);
		}
	}
	return best;
}

/* ---- threads ---- */

static void *poll_main(void *arg)
{
	struct tracer *t = arg;
	int ms = t->wakeup_bytes ? POLL_MS : IDLE_POLL_MS;

	while (!atomic_load(&t->stop)) {
		int n = ring_buffer__poll(t->rb, ms);

		/*
		 * Records submitted without a wakeup do not make the ring ready for epoll:
		 * a poll that timed out found nothing, so take what is there now.
		 */
		if (n == 0 && t->wakeup_bytes)
			n = ring_buffer__consume(t->rb);
		if (n < 0 && n != -EINTR) {
			tlog("ring buffer poll failed: %s", strerror(-n));
			break;
		}
		if (t->wakeup_bytes)
			ms = n > 0 ? POLL_MS : (ms * 2 < IDLE_POLL_MS ? ms * 2 : IDLE_POLL_MS);
	}
	return NULL;
}

/* ---- start / stop ---- */

static int parse_env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);

	return v && *v ? (int)strtoull(v, NULL, 0) : (int)def;
}

struct tracer *tracer_start(const struct trace_opts *o, char **cause)
{
	struct store_opts so = { 0 };
	struct tracer *t = calloc(1, sizeof(*t));
	char clock_src[160], *scope_dir = NULL;
	int64_t cost_push = -1, cost_endbr = -1;
	const char *cpu_work = "not measured (no sched probe)";
	int err;

	*cause = NULL;
	if (!t || !(t->sync = syncwait_new())) {
		free(t);
		*cause = strdup("out of memory");
		return NULL;
	}
	t->cg_fd = -1;
	pthread_mutex_init(&t->link_mu, NULL);
	pthread_mutex_init(&t->proc_mu, NULL);
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	t->db_path = o->db_path ? strdup(o->db_path) : NULL;
	t->node = o->node ? strdup(o->node) : NULL;
	t->cgroup = o->cgroup ? strdup(o->cgroup) : NULL;
	t->probes = o->probes ? strdup(o->probes) : NULL;
	t->sysfs_root = o->sysfs_root ? strdup(o->sysfs_root) : NULL;
	t->ib_interval_s = o->ib_interval_s;
	t->gpu_interval_ms = o->gpu_interval_ms;
	t->nvml_lib = o->nvml_lib ? strdup(o->nvml_lib) : NULL;
	t->verbose = o->verbose;
	t->ring_bytes = (uint32_t)parse_env_u64("FQ_RING_BYTES", DEFAULT_RING_BYTES);
	t->wakeup_bytes = (uint32_t)parse_env_u64("FQ_RING_WAKEUP", t->ring_bytes / WAKEUP_DIV);
	t->min_offcpu_ns = (uint64_t)parse_env_u64("FQ_MIN_OFFCPU_NS", DEFAULT_MIN_OFFCPU_NS);

	if (!t->db_path) {
		*cause = strdup("no trace file given: pass a path for the trace database");
		goto fail;
	}
	err = probe_parse_sets(o->probes, &t->sets, cause);
	if (err)
		goto fail;
	if (!t->sets) /* only lib:PATH items: the default sets for them */
		probe_parse_sets(NULL, &t->sets, cause);
	t->disc = discover_new(o->cgroup, &scope_dir, cause);
	if (!t->disc)
		goto fail;
	if (scope_dir) {
		t->cg_fd = open(scope_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (t->cg_fd < 0) {
			if (asprintf(cause, "cannot open cgroup '%s': %s", scope_dir,
				     strerror(errno)) < 0)
				*cause = NULL;
			goto fail;
		}
	}
	if (geteuid() != 0)
		tlog("not running as root: loading BPF programs will likely fail");

	t->skel = fqtrace_bpf__open();
	if (!t->skel) {
		if (asprintf(cause, "cannot open the BPF object: %s", strerror(errno)) < 0)
			*cause = NULL;
		goto fail;
	}
	t->use_tai = libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_ktime_get_tai_ns,
					     NULL) > 0;
	t->skel->rodata->use_tai = t->use_tai;
	t->skel->rodata->scoped = t->cg_fd >= 0;
	t->skel->rodata->min_offcpu_ns = t->min_offcpu_ns;
	t->skel->rodata->trace_sched = !!(t->sets & PROBE_SCHED);
	t->skel->rodata->wakeup_bytes = t->wakeup_bytes;
	bpf_map__set_max_entries(t->skel->maps.events, t->ring_bytes);
	bpf_program__set_autoload(t->skel->progs.sched_switch, !!(t->sets & PROBE_SCHED));
	bpf_program__set_autoload(t->skel->progs.proc_fork, !!(t->sets & PROBE_SCHED));
	bpf_program__set_autoload(t->skel->progs.tcp_retransmit, !!(t->sets & PROBE_TCP));
	/* a missing tracepoint must not cost the agent its other probes */
	bpf_program__set_autoload(t->skel->progs.tcp_send, (t->sets & PROBE_TCP) &&
				  libbpf_find_vmlinux_btf_id("sock_send_length",
							     BPF_TRACE_RAW_TP) > 0);
	bpf_program__set_autoload(t->skel->progs.tcp_connect, (t->sets & PROBE_TCP) &&
				  libbpf_find_vmlinux_btf_id("inet_sock_set_state",
							     BPF_TRACE_RAW_TP) > 0);
	bpf_program__set_autoload(t->skel->progs.proc_exec, !!(t->sets & PROBE_PROC));
	bpf_program__set_autoload(t->skel->progs.cgroup_attach, !!(t->sets & PROBE_PROC));
	err = fqtrace_bpf__load(t->skel);
	if (err) {
		if (asprintf(cause,
			     "cannot load the BPF programs: %s (needs root and a kernel with BTF)",
			     strerror(-err)) < 0)
			*cause = NULL;
		goto fail;
	}
	if (t->cg_fd >= 0) {
		uint32_t key = 0;

		err = bpf_map__update_elem(t->skel->maps.scope_cg, &key, sizeof(key), &t->cg_fd,
					   sizeof(t->cg_fd), BPF_ANY);
		if (err) {
			if (asprintf(cause, "cannot scope to cgroup '%s': %s", scope_dir,
				     strerror(-err)) < 0)
				*cause = NULL;
			goto fail;
		}
	}
	if (t->use_tai) {
		/* TAI - UTC is a whole number of seconds */
		int64_t d = clock_diff(CLOCK_TAI, CLOCK_REALTIME);

		t->clock_off = (d >= 0 ? d + 500000000LL : d - 500000000LL) / 1000000000LL *
			       1000000000LL;
		snprintf(clock_src, sizeof(clock_src),
			 "realtime (bpf_ktime_get_tai_ns - tai offset %" PRId64 " s)",
			 (int64_t)(t->clock_off / 1000000000LL));
	} else {
		t->clock_off = clock_diff(CLOCK_MONOTONIC, CLOCK_REALTIME);
		snprintf(clock_src, sizeof(clock_src),
			 "realtime (bpf_ktime_get_ns + monotonic offset measured at start)");
	}
	t->boot_off = clock_diff(CLOCK_REALTIME, CLOCK_BOOTTIME);
	t->mono_off = clock_diff(CLOCK_REALTIME, CLOCK_MONOTONIC);

	so.path = t->db_path;
	so.node = t->node;
	so.clock_source = clock_src;
	so.retain_bytes = o->retain_bytes;
	so.retain_age_s = o->retain_age_s;
	t->store = store_open(&so, cause);
	if (!t->store)
		goto fail;

	t->rb = ring_buffer__new(bpf_map__fd(t->skel->maps.events), on_event, t, NULL);
	if (!t->rb) {
		if (asprintf(cause, "cannot set up the BPF ring buffer: %s", strerror(errno)) < 0)
			*cause = NULL;
		goto fail;
	}
	/* tracepoints and the per-thread exit cleanup; uprobes are attached per library */
	if (t->sets & PROBE_SCHED) {
		struct bpf_link *l = bpf_program__attach(t->skel->progs.sched_switch);

		if (!l || add_link(t, l)) {
			if (asprintf(cause, "cannot attach sched_switch: %s", strerror(errno)) < 0)
				*cause = NULL;
			goto fail;
		}
		/* without it, NCCL's threads count as the job's CPU work (collectives.cpu_ns) */
		cpu_work = "every thread, outside probed waits";
		l = bpf_program__attach(t->skel->progs.proc_fork);
		if (!l || add_link(t, l))
			tlog("cannot attach sched_process_fork: %s", strerror(errno));
		else
			cpu_work = "every thread but those NCCL started, outside probed waits";
	}
	if (t->sets & PROBE_TCP) {
		struct bpf_link *l = bpf_program__attach(t->skel->progs.tcp_retransmit);

		if (!l || add_link(t, l))
			tlog("cannot attach tcp_retransmit_skb: %s", strerror(errno));
		/* without them every retransmit is the host's (pid NULL): netcheck says less */
		if (bpf_program__autoload(t->skel->progs.tcp_send)) {
			l = bpf_program__attach(t->skel->progs.tcp_send);
			if (!l || add_link(t, l))
				tlog("cannot attach sock_send_length: %s", strerror(errno));
		}
		if (bpf_program__autoload(t->skel->progs.tcp_connect)) {
			l = bpf_program__attach(t->skel->progs.tcp_connect);
			if (!l || add_link(t, l))
				tlog("cannot attach inet_sock_set_state: %s", strerror(errno));
		}
	}
	if (t->sets & PROBE_PROC) {
		struct bpf_link *l = bpf_program__attach(t->skel->progs.proc_exec);

		if (!l || add_link(t, l))
			tlog("cannot attach sched_process_exec: %s", strerror(errno));
		l = bpf_program__attach(t->skel->progs.cgroup_attach);
		if (!l || add_link(t, l))
			tlog("cannot attach cgroup_attach_task: %s", strerror(errno));
	}
	{
		struct bpf_link *l = bpf_program__attach(t->skel->progs.proc_exit);

		if (!l || add_link(t, l))
			tlog("cannot attach sched_process_exit: %s", strerror(errno));
	}

	cost_push = calibrate(t, probe_calib_push, CALIB_CALLS);
	cost_endbr = calibrate(t, probe_calib_endbr, CALIB_CALLS / 10);
	tlog("probe cost per hit (uprobe+uretprobe): %" PRId64 " ns on a push prologue, %" PRId64
	     " ns on endbr64", cost_push, cost_endbr);

	if (t->ib_interval_s > 0) {
		char *ibc = NULL;

		t->ib = ib_poller_new(t->sysfs_root, &ibc);
		if (!t->ib) {
			tlog("infiniband counters off: %s", ibc ? ibc : "cannot start the poller");
			free(ibc);
		}
	}

	store_set_meta_text(t->store, "probes", t->probes ? t->probes : PROBE_DEFAULT);
	store_set_meta_int(t->store, "probe_cost_ns", cost_push >= 0 ? cost_push : REC_NULL);
	store_set_meta_int(t->store, "probe_cost_endbr64_ns",
			   cost_endbr >= 0 ? cost_endbr : REC_NULL);
	store_set_meta_int(t->store, "ring_buffer_bytes", t->ring_bytes);
	store_set_meta_int(t->store, "ring_wakeup_bytes", t->wakeup_bytes);
	store_set_meta_int(t->store, "min_offcpu_ns", (int64_t)t->min_offcpu_ns);
	store_set_meta_text(t->store, "trace_scope", scope_dir ? scope_dir : "host");
	/* what collectives.cpu_ns counts: agents before this key counted NCCL's threads too */
	store_set_meta_text(t->store, "cpu_work", cpu_work);
	store_set_meta_text(t->store, "seq_semantics",
			    "per (pid, comm_ptr) from 0 at comm init; collectives and p2p counted "
			    "separately; NULL when the init was not seen");

	attach_listed_libs(t);
	attach_installed_plugin(t);
	discover_scan(t->disc, lib_found, proc_found, t);

	err = pthread_create(&t->poll_th, NULL, poll_main, t);
	if (err) {
		*cause = strdup("cannot start the ring buffer thread");
		goto fail;
	}
	t->poll_started = 1;
	err = pthread_create(&t->disc_th, NULL, disc_main, t);
	if (err) {
		*cause = strdup("cannot start the discovery thread");
		goto fail;
	}
	t->disc_started = 1;
	{
		struct gpu_thread_opts go = { .lib = t->nvml_lib,
					      .interval_ms = t->gpu_interval_ms,
					      .list_procs = gpu_list_procs,
					      .arg = t };
		char *why = NULL;

		/* no GPU is no error: meta 'gpu_status' (and fleetq ping) says why */
		t->gpu = gpu_thread_start(&go, t->store, &why);
		if (!t->gpu)
			tlog("GPU sampling %s", why ? why : "off");
		free(why);
		/* meta 'gpu_status' committed before the first HELLO can read it */
		store_flush(t->store);
	}
	free(scope_dir);
	/* loading parsed the kernel's BTF (megabytes, freed since): give it back to the OS */
	malloc_trim(0);
	return t;
fail:
	free(scope_dir);
	if (!*cause)
		*cause = strdup("cannot start the tracer");
	tracer_stop(t);
	return NULL;
}

static int64_t ring_drops(struct tracer *t)
{
	int ncpu = libbpf_num_possible_cpus(), i;
	uint32_t key = 0;
	uint64_t *v;
	int64_t sum = 0;

	if (!t->skel || ncpu <= 0 || !(v = calloc((size_t)ncpu, sizeof(*v))))
		return 0;
	if (!bpf_map__lookup_elem(t->skel->maps.drops, &key, sizeof(key), v,
				  sizeof(*v) * (size_t)ncpu, 0))
		for (i = 0; i < ncpu; i++)
			sum += (int64_t)v[i];
	free(v);
	return sum;
}

void tracer_get_stats(struct tracer *t, struct trace_stats *st)
{
	struct store_stats ss = { 0 };

	memset(st, 0, sizeof(*st));
	if (!t)
		return;
	st->events = atomic_load(&t->events);
	st->ring_drops = ring_drops(t);
	if (t->store) {
		store_get_stats(t->store, &ss);
		st->store_drops = ss.drops;
		st->store_lag_ns = ss.lag_ns;
		st->rows = ss.rows;
	}
}

void tracer_stop(struct tracer *t)
{
	size_t i;

	if (!t)
		return;
	atomic_store(&t->stop, 1);
	pthread_mutex_lock(&t->mu);
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	gpu_thread_stop(t->gpu);
	if (t->disc_started)
		pthread_join(t->disc_th, NULL);
	if (t->poll_started)
		pthread_join(t->poll_th, NULL);
	/* take what the ring buffer holds and flush it before detaching (see trace_attach.c) */
	if (t->rb) {
		ring_buffer__consume(t->rb);
		if (t->store) {
			int64_t drops = ring_drops(t);

			store_set_meta_int(t->store, "ring_drops", drops);
			store_set_meta_int(t->store, "trace_events", atomic_load(&t->events));
			if (drops)
				tlog("%" PRId64 " events lost: the ring buffer was full "
				     "(raise FQ_RING_BYTES)", drops);
		}
	}
	store_close(t->store);
	for (i = 0; i < t->nlinks; i++)
		bpf_link__destroy(t->links[i]);
	t->nlinks = 0;
	ring_buffer__free(t->rb);
	fqtrace_bpf__destroy(t->skel);
	ib_poller_free(t->ib);
	discover_free(t->disc);
	if (t->cg_fd >= 0)
		close(t->cg_fd);
	for (i = 0; i < COMM_BUCKETS; i++)
		while (t->comms[i]) {
			struct comm_ent *e = t->comms[i];

			t->comms[i] = e->next;
			adopt_forget(t, e);
			free(e);
		}
	syncwait_free(t->sync);
	for (i = 0; i < PROC_BUCKETS; i++)
		while (t->procs[i]) {
			struct proc_ent *e = t->procs[i];

			t->procs[i] = e->next;
			free(e);
		}
	free(t->links);
	free(t->db_path);
	free(t->node);
	free(t->cgroup);
	free(t->probes);
	free(t->sysfs_root);
	free(t->nvml_lib);
	pthread_mutex_destroy(&t->link_mu);
	pthread_mutex_destroy(&t->proc_mu);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	free(t);
}
