/* SPDX-License-Identifier: MIT */
/*
 * fq-workload: an N-rank "training job" over the stand-in CUDA and NCCL libraries, for CI.
 *
 * The parent makes the NCCL unique id, then fork+execs one process per rank with the rank's
 * identity in its environment (as torchrun does), optionally inside per-"node" cgroups. In the
 * default shape ("loop") each rank spins on the CPU for its step's work, enqueues collectives
 * and waits in cudaStreamSynchronize, so the planted straggler shows exactly as DESIGN.md §2
 * describes. --shape ddp, fsdp and pipeline issue their collectives the way those training
 * jobs do (see README.md). --report writes what every rank really called and what its device
 * really ran, to compare a trace against.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <limits.h>
#include <mntent.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "workload.h"

/* ---------------------------------------------------------------- job parent */

struct job {
	const struct opts *o;
	char v2[PATH_MAX];  /* cgroup v2 mount point */
	char dir[PATH_MAX]; /* --cgroup-parent, resolved */
	char *made[64];	    /* directories this run created, to remove afterwards */
	int nmade;
	pid_t *pids;
	int *status;
	struct rank_stat *stat;
	char idhex[257];
	char shm[64];
};

/* The cgroup2 mount, wherever the host put it (/sys/fs/cgroup, or .../unified on hybrid). */
static int find_cgroup2(char *out, size_t len)
{
	FILE *f = setmntent("/proc/self/mounts", "r");
	struct mntent *m;
	int err = -ENOENT;

	if (!f)
		return -errno;
	while ((m = getmntent(f))) {
		if (!strcmp(m->mnt_type, "cgroup2")) {
			snprintf(out, len, "%s", m->mnt_dir);
			err = 0;
			break;
		}
	}
	endmntent(f);
	return err;
}

static int mkdir_tracked(struct job *j, const char *path)
{
	if (mkdir(path, 0755)) {
		if (errno == EEXIST)
			return 0;
		fprintf(stderr, "fq-workload: cannot create cgroup '%s': %s\n", path,
			strerror(errno));
		return -errno;
	}
	if (j->nmade < (int)(sizeof(j->made) / sizeof(j->made[0])))
		j->made[j->nmade++] = strdup(path);
	return 0;
}

static int setup_cgroups(struct job *j)
{
	const struct opts *o = j->o;
	char path[PATH_MAX + 32];
	size_t n;
	int err;

	err = find_cgroup2(j->v2, sizeof(j->v2));
	if (err) {
		fprintf(stderr, "fq-workload: no cgroup2 mount in /proc/self/mounts; "
				"mount one or drop --cgroups\n");
		return err;
	}
	n = strlen(j->v2);
	if (!strncmp(o->cgroup_parent, j->v2, n) &&
	    (o->cgroup_parent[n] == '/' || !o->cgroup_parent[n]))
		err = snprintf(j->dir, sizeof(j->dir), "%s", o->cgroup_parent);
	else
		err = snprintf(j->dir, sizeof(j->dir), "%s/%s", j->v2,
			       o->cgroup_parent + strspn(o->cgroup_parent, "/"));
	if (err >= (int)sizeof(j->dir) - 16) {
		fprintf(stderr, "fq-workload: --cgroup-parent '%s' is too long\n", o->cgroup_parent);
		return -ENAMETOOLONG;
	}
	/* mkdir -p below the mount point */
	for (char *p = j->dir + n + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		err = mkdir_tracked(j, j->dir);
		*p = '/';
		if (err)
			return err;
	}
	err = mkdir_tracked(j, j->dir);
	for (int k = 0; !err && k < o->cgroups; k++) {
		snprintf(path, sizeof(path), "%s/node%d", j->dir, k);
		err = mkdir_tracked(j, path);
	}
	return err;
}

static void cleanup_cgroups(struct job *j)
{
	/* children first: they were made after their parents */
	for (int i = j->nmade - 1; i >= 0; i--) {
		if (rmdir(j->made[i]) && errno != ENOENT)
			fprintf(stderr, "fq-workload: cannot remove cgroup '%s': %s\n", j->made[i],
				strerror(errno));
		free(j->made[i]);
	}
	j->nmade = 0;
}

/* In the forked child, before exec: join the node's cgroup, set the torchrun-like env. */
static void exec_rank(struct job *j, int rank, char **argv, int argc, const char *report_path,
		      int statfd)
{
	const struct opts *o = j->o;
	int nodes = o->cgroups ? o->cgroups : 1;
	int per = (o->ranks + nodes - 1) / nodes;
	int node = rank / per;
	int local_size = o->ranks - node * per < per ? o->ranks - node * per : per;
	char buf[PATH_MAX + 64], **args;

	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (o->cgroups) {
		FILE *f;

		snprintf(buf, sizeof(buf), "%s/node%d/cgroup.procs", j->dir, node);
		f = fopen(buf, "w");
		if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f)) {
			fprintf(stderr, "fq-workload: rank %d: cannot join cgroup '%s': %s\n", rank,
				buf, strerror(errno));
			_exit(126);
		}
	}
	if (o->netns) {
		int fd;

		/* a rank per network namespace, as a rank per host: its traffic crosses a link */
		snprintf(buf, sizeof(buf), "/run/netns/%s%d", o->netns, rank);
		fd = open(buf, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET)) {
			fprintf(stderr, "fq-workload: rank %d: cannot join network namespace '%s': "
				"%s\n", rank, buf, strerror(errno));
			_exit(126);
		}
		close(fd);
	}
#define SETENV_INT(name, v) (snprintf(buf, sizeof(buf), "%d", (int)(v)), setenv(name, buf, 1))
	SETENV_INT("RANK", rank);
	SETENV_INT("WORLD_SIZE", o->ranks);
	SETENV_INT("LOCAL_RANK", rank - node * per);
	SETENV_INT("LOCAL_WORLD_SIZE", local_size);
	SETENV_INT("GROUP_RANK", node);
	SETENV_INT("FQ_WORKLOAD_STATS_FD", statfd);
	setenv("SLURM_JOB_ID", o->job_id, 1);
	setenv("FQ_JOB_ID", o->job_id, 1);
	setenv("FQ_NCCL_UNIQUE_ID", j->idhex, 1);
	if (report_path)
		setenv("FQ_WORKLOAD_REPORT", report_path, 1);
	else
		unsetenv("FQ_WORKLOAD_REPORT");
	args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args)
		_exit(126);
	args[0] = argv[0];
	args[1] = "--rank-worker";
	for (int i = 1; i < argc; i++)
		args[i + 1] = argv[i];
	execv("/proc/self/exe", args);
	fprintf(stderr, "fq-workload: rank %d: cannot exec /proc/self/exe: %s\n", rank,
		strerror(errno));
	_exit(127);
}

static int merge_report(const struct job *j)
{
	const struct opts *o = j->o;
	char part[PATH_MAX + 32], buf[65536];
	FILE *out = fopen(o->report, "w");
	int err = 0;

	if (!out) {
		fprintf(stderr, "fq-workload: cannot write report '%s': %s\n", o->report,
			strerror(errno));
		return -errno;
	}
	fprintf(out, "rank\tpid\ttid\top\tseq\tcount\tdur_ns\tnote\n");
	for (int r = 0; r < o->ranks; r++) {
		FILE *in;
		size_t n;

		snprintf(part, sizeof(part), "%s.rank%d", o->report, r);
		in = fopen(part, "r");
		if (!in)
			continue;
		while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
			fwrite(buf, 1, n, out);
		fclose(in);
		unlink(part);
	}
	if (fclose(out))
		err = -errno;
	return err;
}

static void summarize(const struct job *j, int rank)
{
	const struct rank_stat *s = &j->stat[rank];
	int st = j->status[rank];
	char how[64];

	if (st == -1)
		snprintf(how, sizeof(how), "not reaped");
	else if (WIFEXITED(st))
		snprintf(how, sizeof(how), "exit %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(how, sizeof(how), "killed by signal %d%s", WTERMSIG(st),
			 atomic_load(&s->hung) ? " while hung" : "");
	else
		snprintf(how, sizeof(how), "not started");
	fprintf(stderr,
		"fq-workload: rank %d pid %d: %llu collectives issued, %llu syncs, "
		"sync wait %.3f ms, %s\n",
		rank, (int)j->pids[rank], (unsigned long long)atomic_load(&s->issued),
		(unsigned long long)atomic_load(&s->syncs),
		(double)atomic_load(&s->sync_wait_ns) / 1e6, how);
}

static volatile sig_atomic_t stop_signal, grace_over;

static void on_stop(int sig)
{
	if (sig == SIGALRM)
		grace_over = 1;
	else
		stop_signal = sig;
}

/* Seconds the other ranks get, after one fails, to fail on their own and say why. */
static unsigned int grace_s(void)
{
	const char *s = getenv("FQ_WORKLOAD_GRACE_S");
	long v;

	return s && !parse_long(s, 0, 3600, &v) ? (unsigned int)v : 3;
}

static int run_job(const struct opts *o, int argc, char **argv)
{
	/* no SA_RESTART: waitpid must return so the ranks can be stopped and cleaned up */
	struct sigaction sa = { .sa_handler = on_stop };
	bool forwarded = false;
	struct job j = { .o = o };
	ncclUniqueId id;
	size_t statsz = sizeof(struct rank_stat) * (size_t)o->ranks;
	int statfd = -1, running = 0, failed = 0, first_bad = -1, ret = 1;
	char part[PATH_MAX + 32], jobid[32];
	struct opts oo = *o;

	if (!oo.job_id) {
		snprintf(jobid, sizeof(jobid), "%d", (int)getpid());
		oo.job_id = jobid;
	}
	j.o = o = &oo;
	j.pids = calloc((size_t)o->ranks, sizeof(*j.pids));
	j.status = calloc((size_t)o->ranks, sizeof(*j.status));
	if (!j.pids || !j.status)
		goto cleanup;
	if (ncclGetUniqueId(&id)) {
		fprintf(stderr, "fq-workload: ncclGetUniqueId failed\n");
		goto cleanup;
	}
	for (size_t i = 0; i < sizeof(id.internal); i++)
		snprintf(j.idhex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
	fqsi_shm_name((const unsigned char *)id.internal, j.shm, sizeof(j.shm));
	/* no MFD_CLOEXEC: the ranks inherit it through exec */
	statfd = memfd_create("fq-workload-stats", 0);
	if (statfd < 0 || ftruncate(statfd, (off_t)statsz)) {
		fprintf(stderr, "fq-workload: cannot create stats memfd: %s\n", strerror(errno));
		goto cleanup;
	}
	j.stat = mmap(NULL, statsz, PROT_READ | PROT_WRITE, MAP_SHARED, statfd, 0);
	if (j.stat == MAP_FAILED) {
		j.stat = NULL;
		fprintf(stderr, "fq-workload: cannot map stats: %s\n", strerror(errno));
		goto cleanup;
	}
	if (o->cgroups && setup_cgroups(&j))
		goto cleanup;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);

	for (int r = 0; r < o->ranks; r++) {
		pid_t pid;

		snprintf(part, sizeof(part), "%s.rank%d", o->report ? o->report : "", r);
		fflush(stderr);
		pid = fork();
		if (pid < 0) {
			fprintf(stderr, "fq-workload: cannot fork rank %d: %s\n", r, strerror(errno));
			failed++;
			for (int k = 0; k < r; k++)
				kill(j.pids[k], SIGTERM);
			break;
		}
		if (!pid)
			exec_rank(&j, r, argv, argc, o->report ? part : NULL, statfd);
		j.pids[r] = pid;
		j.status[r] = -1; /* running: never signal a pid that was already reaped */
		running++;
	}
	while (running > 0) {
		int st, r;
		pid_t pid;

		if ((stop_signal || grace_over) && !forwarded) {
			if (stop_signal)
				fprintf(stderr, "fq-workload: stopped by signal %d; stopping the "
						"ranks\n", (int)stop_signal);
			for (int k = 0; k < o->ranks; k++)
				if (j.pids[k] > 0 && j.status[k] == -1)
					kill(j.pids[k], SIGTERM);
			forwarded = true;
			failed++;
		}
		pid = waitpid(-1, &st, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (r = 0; r < o->ranks && j.pids[r] != pid; r++)
			;
		if (r == o->ranks)
			continue;
		running--;
		j.status[r] = st;
		if (WIFEXITED(st) && !WEXITSTATUS(st))
			continue;
		/* like torchrun: one failed rank ends the job, or a hung peer holds it forever */
		if (!failed++) {
			first_bad = r;
			fprintf(stderr, "fq-workload: rank %d (pid %d) failed; stopping the other "
					"ranks in %u s\n", r, (int)pid, grace_s());
			if (grace_s())
				alarm(grace_s());
			else
				grace_over = 1;
		}
	}
	alarm(0);
	for (int r = 0; r < o->ranks; r++)
		if (j.pids[r])
			summarize(&j, r);
	if (o->report && merge_report(&j))
		failed++;
	if (failed) {
		if (first_bad >= 0)
			fprintf(stderr, "fq-workload: job %s failed: rank %d failed first "
					"(see its message above)\n", o->job_id, first_bad);
		else
			fprintf(stderr, "fq-workload: job %s did not complete\n", o->job_id);
		goto cleanup;
	}
	ret = 0;
cleanup:
	/* ranks that died or were killed never left the communicator: drop its segment */
	if (j.shm[0])
		shm_unlink(j.shm);
	cleanup_cgroups(&j);
	if (j.stat)
		munmap(j.stat, statsz);
	if (statfd >= 0)
		close(statfd);
	free(j.pids);
	free(j.status);
	return ret;
}

int main(int argc, char **argv)
{
	struct opts o;

	if (parse_opts(argc, argv, &o))
		return 2;
	if (o.worker)
		return run_rank(&o);
	/* the worker re-reads argv: drop nothing, the parent's own flags mean the same there */
	return run_job(&o, argc, argv);
}
