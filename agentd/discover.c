/* SPDX-License-Identifier: MIT */
#include "discover.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records.h"

#define PID_BUCKETS 4096

enum pid_state {
	PID_PENDING,  /* in scope or not yet: look again next scan */
	PID_MATCHED,  /* maps a traced library: reported; rescanned until it maps NCCL */
	PID_DONE,     /* maps a library that carries NCCL: nothing left to find */
	PID_KERNEL,   /* no maps: kernel thread, never again */
};

struct pid_ent {
	int pid;
	int state;
	unsigned long long start; /* /proc/PID/stat starttime, tells pid reuse apart */
	unsigned int gen;
	struct pid_ent *next;
};

struct file_id {
	uint64_t dev, ino;
};

struct discover {
	char *scope_rel; /* "/a/b" relative to the cgroup2 root; NULL: host */
	struct pid_ent *pids[PID_BUCKETS];
	struct file_id *files;
	size_t nfiles, capfiles;
	unsigned int gen;
};

int discover_cgroup2_mount(char *buf, size_t n)
{
	char dev[256], dir[PATH_MAX], type[64];
	FILE *f = fopen("/proc/self/mounts", "re");
	int err = -ENOENT;

	if (!f)
		return -errno;
	while (fscanf(f, "%255s %4095s %63s %*[^\n]", dev, dir, type) == 3) {
		if (!strcmp(type, "cgroup2")) {
			snprintf(buf, n, "%s", dir);
			err = 0;
			break;
		}
	}
	fclose(f);
	return err;
}

static int is_dir(const char *p)
{
	struct stat st;

	return !stat(p, &st) && S_ISDIR(st.st_mode);
}

struct discover *discover_new(const char *scope, char **scope_dir, char **cause)
{
	struct discover *d = calloc(1, sizeof(*d));
	char mnt[PATH_MAX], full[PATH_MAX * 2];
	const char *rel;
	size_t ml;

	*scope_dir = NULL;
	if (!d)
		return NULL;
	if (!scope)
		return d;
	if (discover_cgroup2_mount(mnt, sizeof(mnt))) {
		if (asprintf(cause, "no cgroup2 mount in /proc/self/mounts: cannot scope to '%s'",
			     scope) < 0)
			*cause = NULL;
		goto fail;
	}
	ml = strlen(mnt);
	while (ml > 1 && mnt[ml - 1] == '/')
		mnt[--ml] = 0;
	if (!strncmp(scope, mnt, ml) && (scope[ml] == '/' || !scope[ml]))
		rel = scope + ml; /* absolute under the mount */
	else
		rel = scope; /* relative to the cgroup2 root, with or without a leading '/' */
	while (*rel == '/')
		rel++;
	snprintf(full, sizeof(full), "%s/%s", mnt, rel);
	while (strlen(full) > 1 && full[strlen(full) - 1] == '/')
		full[strlen(full) - 1] = 0;
	if (!is_dir(full)) {
		if (asprintf(cause,
			     "cgroup '%s' not found (looked for '%s' under the cgroup2 mount)",
			     scope, full) < 0)
			*cause = NULL;
		goto fail;
	}
	if (asprintf(&d->scope_rel, "/%s", rel) < 0 || !(*scope_dir = strdup(full)))
		goto fail;
	while (strlen(d->scope_rel) > 1 && d->scope_rel[strlen(d->scope_rel) - 1] == '/')
		d->scope_rel[strlen(d->scope_rel) - 1] = 0;
	return d;
fail:
	free(*scope_dir);
	*scope_dir = NULL;
	discover_free(d);
	return NULL;
}

void discover_free(struct discover *d)
{
	size_t i;

	if (!d)
		return;
	for (i = 0; i < PID_BUCKETS; i++) {
		while (d->pids[i]) {
			struct pid_ent *e = d->pids[i];

			d->pids[i] = e->next;
			free(e);
		}
	}
	free(d->files);
	free(d->scope_rel);
	free(d);
}

void discover_add_file(struct discover *d, uint64_t dev, uint64_t ino)
{
	size_t i;

	for (i = 0; i < d->nfiles; i++)
		if (d->files[i].dev == dev && d->files[i].ino == ino)
			return;
	if (d->nfiles == d->capfiles) {
		size_t cap = d->capfiles ? 2 * d->capfiles : 16;
		struct file_id *f = realloc(d->files, cap * sizeof(*f));

		if (!f)
			return;
		d->files = f;
		d->capfiles = cap;
	}
	d->files[d->nfiles].dev = dev;
	d->files[d->nfiles].ino = ino;
	d->nfiles++;
}

int discover_has_file(struct discover *d, uint64_t dev, uint64_t ino)
{
	size_t i;

	for (i = 0; i < d->nfiles; i++)
		if (d->files[i].dev == dev && d->files[i].ino == ino)
			return 1;
	return 0;
}

int discover_is_traced_lib(const char *path)
{
	const char *b = strrchr(path, '/');

	b = b ? b + 1 : path;
	return !strncmp(b, "libnccl.so", 10) || !strncmp(b, "libcudart.so", 12) ||
	       !strncmp(b, "libcuda.so", 10) || !strncmp(b, "libtorch_cuda.so", 16) ||
	       !strncmp(b, "libfleetq-nccl-profiler.so", 26) ||
	       !strncmp(b, "libfleetq-cupti.so", 18);
}

static int read_small(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r, got = 0;

	if (fd < 0)
		return -errno;
	while ((size_t)got < n - 1 && (r = read(fd, buf + got, n - 1 - (size_t)got)) > 0)
		got += r;
	close(fd);
	buf[got] = 0;
	return (int)got;
}

/* The v2 line "0::/path" of /proc/PID/cgroup. */
static int pid_cgroup(int pid, char *out, size_t n)
{
	char p[64], buf[4096], *l;

	snprintf(p, sizeof(p), "/proc/%d/cgroup", pid);
	if (read_small(p, buf, sizeof(buf)) < 0)
		return -ENOENT;
	for (l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, "0::", 3)) {
			size_t k = strcspn(l + 3, "\n");

			snprintf(out, n, "%.*s", (int)k, l + 3);
			return 0;
		}
	}
	return -ENOENT;
}

static int in_scope(struct discover *d, int pid)
{
	char cg[1024];
	size_t l;

	if (!d->scope_rel)
		return 1;
	if (pid_cgroup(pid, cg, sizeof(cg)))
		return 0;
	if (!strcmp(d->scope_rel, "/"))
		return 1;
	l = strlen(d->scope_rel);
	return !strncmp(cg, d->scope_rel, l) && (cg[l] == '/' || !cg[l]);
}

static unsigned long long pid_starttime(int pid)
{
	char p[64], buf[1024], *s;
	unsigned long long st = 0;
	int i;

	snprintf(p, sizeof(p), "/proc/%d/stat", pid);
	if (read_small(p, buf, sizeof(buf)) <= 0 || !(s = strrchr(buf, ')')))
		return 0;
	/* field 22 is starttime; s points at the end of field 2 */
	for (i = 2; i < 21 && s; i++)
		s = strchr(s + 1, ' ');
	if (s)
		st = strtoull(s + 1, NULL, 10);
	return st;
}

static struct pid_ent *pid_get(struct discover *d, int pid, unsigned long long start)
{
	struct pid_ent **pp = &d->pids[(unsigned int)pid % PID_BUCKETS], *e;

	for (e = *pp; e; e = e->next)
		if (e->pid == pid)
			break;
	if (e && e->start != start) {
		e->state = PID_PENDING; /* pid reused */
		e->start = start;
	}
	if (!e && (e = calloc(1, sizeof(*e)))) {
		e->pid = pid;
		e->start = start;
		e->state = PID_PENDING;
		e->next = *pp;
		*pp = e;
	}
	return e;
}

/* Reads the maps of pid; reports new library files; 1 if it maps one, 0 if not, -1 if none. */
static int carries_nccl(const char *path)
{
	const char *b = strrchr(path, '/');

	b = b ? b + 1 : path;
	return !strncmp(b, "libnccl.so", 10) || !strncmp(b, "libtorch_cuda.so", 16);
}

/*
 * Returns -1 for a process without maps (kernel thread), 0 when it maps no traced
 * library, 1 when it maps one, 2 when one of them carries NCCL.
 */
static int scan_maps(struct discover *d, int pid, discover_lib_fn lib, void *arg)
{
	char p[64], line[4096 + 128];
	int found = 0, any = 0;
	FILE *f;

	snprintf(p, sizeof(p), "/proc/%d/maps", pid);
	f = fopen(p, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/'), full[PATH_MAX + 64];
		struct stat st;

		any = 1;
		if (!path)
			continue;
		path[strcspn(path, "\n")] = 0;
		if (!discover_is_traced_lib(path) || strstr(path, " (deleted)"))
			continue;
		if (found < 2)
			found = carries_nccl(path) ? 2 : 1;
		snprintf(full, sizeof(full), "/proc/%d/root%s", pid, path);
		if (stat(full, &st) || discover_has_file(d, st.st_dev, st.st_ino))
			continue;
		discover_add_file(d, st.st_dev, st.st_ino);
		lib(arg, full, st.st_dev, st.st_ino);
	}
	fclose(f);
	return any ? found : -1;
}

static void look_at(struct discover *d, int pid, discover_lib_fn lib, discover_proc_fn proc,
		    void *arg)
{
	unsigned long long start = pid_starttime(pid);
	struct pid_ent *e = pid_get(d, pid, start);
	int r;

	if (!e)
		return;
	e->gen = d->gen;
	/*
	 * A matched process is looked at again until it maps NCCL: PyTorch maps
	 * libcudart at import but may load libnccl (or libtorch_cuda) later.
	 */
	if (e->state == PID_KERNEL || e->state == PID_DONE)
		return;
	if (e->state == PID_PENDING && !in_scope(d, pid))
		return;
	r = scan_maps(d, pid, lib, arg);
	if (r < 0) {
		e->state = PID_KERNEL;
	} else if (r > 0) {
		if (e->state == PID_PENDING)
			proc(arg, pid);
		e->state = r == 2 ? PID_DONE : PID_MATCHED;
	}
}

void discover_forget(struct discover *d, int pid)
{
	struct pid_ent *e;

	for (e = d->pids[(unsigned int)pid % PID_BUCKETS]; e; e = e->next)
		if (e->pid == pid)
			e->state = PID_PENDING;
}

int discover_scan_pid(struct discover *d, int pid, discover_lib_fn lib, discover_proc_fn proc,
		      void *arg)
{
	look_at(d, pid, lib, proc, arg);
	return 0;
}

int discover_scan_libs(struct discover *d, int pid, discover_lib_fn lib, void *arg)
{
	return scan_maps(d, pid, lib, arg) < 0 ? -ESRCH : 0;
}

int discover_scan(struct discover *d, discover_lib_fn lib, discover_proc_fn proc, void *arg)
{
	DIR *dir = opendir("/proc");
	struct dirent *de;
	size_t i;

	if (!dir)
		return -errno;
	d->gen++;
	while ((de = readdir(dir))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		look_at(d, atoi(de->d_name), lib, proc, arg);
	}
	closedir(dir);
	/* forget processes that left */
	for (i = 0; i < PID_BUCKETS; i++) {
		struct pid_ent **pp = &d->pids[i];

		while (*pp) {
			struct pid_ent *e = *pp;

			if (e->gen != d->gen) {
				*pp = e->next;
				free(e);
			} else {
				pp = &e->next;
			}
		}
	}
	return 0;
}

static int64_t env_int(const char *v)
{
	char *end;
	long long x;

	if (!v || !*v)
		return REC_NULL;
	errno = 0;
	x = strtoll(v, &end, 10);
	return errno || *end ? REC_NULL : (int64_t)x;
}

int discover_ident(int pid, struct proc_ident *id)
{
	char p[64], buf[1024], *s, *env = NULL;
	const char *rank = NULL, *lrank = NULL, *ws = NULL, *job = NULL, *job2 = NULL,
		   *job3 = NULL;
	size_t cap = 1 << 16, got = 0;
	int fd, n, i;
	ssize_t r;

	memset(id, 0, sizeof(*id));
	id->pid = pid;
	id->rank = id->local_rank = id->world_size = REC_NULL;
	snprintf(p, sizeof(p), "/proc/%d/stat", pid);
	if (read_small(p, buf, sizeof(buf)) <= 0 || !(s = strrchr(buf, ')')))
		return -ESRCH;
	{
		char *f = s + 2; /* field 3: state */
		unsigned long long st = 0;

		for (i = 3; i < 22 && f; i++) {
			if (i == 4)
				id->ppid = atoi(f);
			f = strchr(f, ' ');
			if (f)
				f++;
		}
		if (f)
			st = strtoull(f, NULL, 10);
		id->start_boot_ns =
			(int64_t)(st * (1000000000ull / (unsigned long long)sysconf(_SC_CLK_TCK)));
	}
	snprintf(p, sizeof(p), "/proc/%d/comm", pid);
	if (read_small(p, id->comm, sizeof(id->comm)) > 0)
		id->comm[strcspn(id->comm, "\n")] = 0;
	snprintf(p, sizeof(p), "/proc/%d/cmdline", pid);
	n = read_small(p, id->cmdline, sizeof(id->cmdline));
	for (i = 0; i < n - 1; i++)
		if (!id->cmdline[i])
			id->cmdline[i] = ' ';
	pid_cgroup(pid, id->cgroup, sizeof(id->cgroup));

	snprintf(p, sizeof(p), "/proc/%d/environ", pid);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && (env = malloc(cap + 1))) {
		while (got < cap && (r = read(fd, env + got, cap - got)) > 0)
			got += (size_t)r;
		env[got] = 0;
		for (s = env; s < env + got; s += strlen(s) + 1) {
			if (!strncmp(s, "RANK=", 5))
				rank = s + 5;
			else if (!strncmp(s, "LOCAL_RANK=", 11))
				lrank = s + 11;
			else if (!strncmp(s, "WORLD_SIZE=", 11))
				ws = s + 11;
			else if (!strncmp(s, "SLURM_JOB_ID=", 13))
				job = s + 13;
			else if (!strncmp(s, "FQ_JOB_ID=", 10))
				job2 = s + 10;
			else if (!strncmp(s, "TORCHELASTIC_RUN_ID=", 20))
				job3 = s + 20;
		}
		id->rank = env_int(rank);
		id->local_rank = env_int(lrank);
		id->world_size = env_int(ws);
		job = job ? job : job2 ? job2 : job3;
		if (job)
			snprintf(id->job_id, sizeof(id->job_id), "%s", job);
	}
	if (fd >= 0)
		close(fd);
	free(env);
	return 0;
}
