/* SPDX-License-Identifier: MIT */
/*
 * A rank that enters the traced cgroup after its exec, with libnccl already mapped
 * (as a launcher that places ranks after starting them does):
 *   migrate LIBNCCL CGROUP_DIR CALLS
 * dlopens LIBNCCL, sleeps, writes its pid to CGROUP_DIR/cgroup.procs, waits 100 ms,
 * then makes a 1-rank communicator and issues CALLS all-reduces, each followed by
 * cudaStreamSynchronize. The tracer must see the comm init and every call.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
	char internal[128];
} ncclUniqueId;

int main(int argc, char **argv)
{
	int (*get_id)(ncclUniqueId *);
	int (*init)(void **, int, ncclUniqueId, int);
	int (*allreduce)(const void *, void *, size_t, int, int, void *, void *);
	int (*destroy)(void *);
	int (*stream_create)(void **);
	int (*stream_sync)(void *);
	ncclUniqueId id;
	void *h, *rt, *comm = NULL, *stream = NULL;
	float buf[16] = { 0 };
	char path[4096];
	FILE *f;
	int i, n;

	if (argc != 4) {
		fprintf(stderr, "usage: migrate LIBNCCL CGROUP_DIR CALLS\n");
		return 2;
	}
	n = atoi(argv[3]);
	h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
	rt = h ? dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD) : NULL;
	if (!h || !rt) {
		fprintf(stderr, "migrate: cannot load '%s': %s\n", argv[1], dlerror());
		return 1;
	}
	get_id = (int (*)(ncclUniqueId *))dlsym(h, "ncclGetUniqueId");
	init = (int (*)(void **, int, ncclUniqueId, int))dlsym(h, "ncclCommInitRank");
	allreduce = (int (*)(const void *, void *, size_t, int, int, void *, void *))dlsym(
		h, "ncclAllReduce");
	destroy = (int (*)(void *))dlsym(h, "ncclCommDestroy");
	stream_create = (int (*)(void **))dlsym(rt, "cudaStreamCreate");
	stream_sync = (int (*)(void *))dlsym(rt, "cudaStreamSynchronize");
	if (!get_id || !init || !allreduce || !destroy || !stream_create || !stream_sync) {
		fprintf(stderr, "migrate: missing symbols in '%s'\n", argv[1]);
		return 1;
	}
	usleep(300 * 1000);
	snprintf(path, sizeof(path), "%s/cgroup.procs", argv[2]);
	f = fopen(path, "w");
	if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f)) {
		perror("migrate: cannot enter the cgroup");
		return 1;
	}
	usleep(100 * 1000);
	if (get_id(&id) || init(&comm, 1, id, 0) || stream_create(&stream)) {
		fprintf(stderr, "migrate: communicator init failed\n");
		return 1;
	}
	for (i = 0; i < n; i++)
		if (allreduce(buf, buf, 16, 7, 0, comm, stream) || stream_sync(stream)) {
			fprintf(stderr, "migrate: all-reduce %d failed\n", i);
			return 1;
		}
	destroy(comm);
	printf("pid=%d calls=%d\n", (int)getpid(), n);
	return 0;
}
