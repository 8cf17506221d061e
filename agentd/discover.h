/* SPDX-License-Identifier: MIT */
/*
 * Finds the processes and library files to trace: cgroup v2 scope, /proc/PID/maps
 * scans for libnccl / libcudart / libcuda / libtorch_cuda, and a process's identity
 * (comm, cmdline, cgroup, RANK & co. from its environment).
 */
#ifndef FLEETQ_AGENTD_DISCOVER_H
#define FLEETQ_AGENTD_DISCOVER_H

#include <stddef.h>
#include <stdint.h>

struct discover;

/* A library file not seen before; path goes through /proc/PID/root so containers work. */
typedef void (*discover_lib_fn)(void *arg, const char *path, uint64_t dev, uint64_t ino);
/* A process in scope that maps a traced library, reported once. */
typedef void (*discover_proc_fn)(void *arg, int pid);

/*
 * scope: NULL for the whole host, else a cgroup v2 path (absolute, under the cgroup2
 * mount, or relative to it). On success *scope_dir is the directory's absolute path
 * (caller frees) for the BPF cgroup array.
 */
struct discover *discover_new(const char *scope, char **scope_dir, char **cause);
void discover_free(struct discover *d);

/* Looks at every process in scope not yet matched; 0 or -errno. */
int discover_scan(struct discover *d, discover_lib_fn lib, discover_proc_fn proc, void *arg);
/* The same for one pid (after an exec event). */
int discover_scan_pid(struct discover *d, int pid, discover_lib_fn lib, discover_proc_fn proc,
		      void *arg);

/*
 * Reports the traced libraries pid maps that were not reported before (NCCL's profiler
 * plugin, loaded at a communicator's init), whatever state pid is in; 0 or -ESRCH.
 */
int discover_scan_libs(struct discover *d, int pid, discover_lib_fn lib, void *arg);
/* Looks at pid afresh at the next scan (it exec'ed: new maps, new identity). */
void discover_forget(struct discover *d, int pid);
/* Marks a file identity as handled (attached at start from an explicit path). */
void discover_add_file(struct discover *d, uint64_t dev, uint64_t ino);
/* 1 if the library file (dev, ino) was reported or added already. */
int discover_has_file(struct discover *d, uint64_t dev, uint64_t ino);
/* True if the file is a library fleetq probes (by name). */
int discover_is_traced_lib(const char *path);

struct proc_ident {
	int pid, ppid;
	int64_t start_boot_ns; /* since boot (CLOCK_BOOTTIME), clock-tick resolution */
	char comm[32];
	char cmdline[1024];
	char cgroup[512]; /* v2 path relative to the cgroup2 root */
	int64_t rank, local_rank, world_size; /* REC_NULL when unset */
	char job_id[128];                     /* "" when unset */
};

/* Reads /proc/PID/{stat,comm,cmdline,cgroup,environ}; 0 or -errno (e.g. the process left). */
int discover_ident(int pid, struct proc_ident *id);

/* Finds the cgroup2 mount point in /proc/self/mounts; 0 or -ENOENT. */
int discover_cgroup2_mount(char *buf, size_t n);

#endif
