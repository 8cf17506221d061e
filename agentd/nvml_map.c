/* SPDX-License-Identifier: MIT */
/*
 * Processes to GPUs: which GPUs a traced process uses, from NVML's compute process
 * lists and from its CUDA_VISIBLE_DEVICES and LOCAL_RANK, each mapping emitted once.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"
#include "cause.h"
#include "clock.h"

#include "nvml_int.h"

static int find_uuid(const struct gpu_sampler *g, const char *tok, size_t len)
{
	int hit = -1;

	/* CUDA takes any unique prefix of a UUID, with or without "GPU-" */
	for (int i = 0; i < g->n; i++) {
		const char *u = g->gpu[i].uuid;

		if (!strncasecmp(u, "GPU-", 4) && strncasecmp(tok, "GPU-", 4))
			u += 4;
		if (strlen(u) >= len && !strncasecmp(u, tok, len)) {
			if (hit >= 0)
				return -1; /* ambiguous: CUDA stops here too */
			hit = i;
		}
	}
	return hit;
}

/*
 * CUDA_VISIBLE_DEVICES as NVML positions in g->gpu[]: decimal indexes or UUID
 * (prefixes); CUDA stops at the first entry it cannot use, and so does this.
 * MIG instances are not resolved (their UUIDs are not GPUs').
 */
static int parse_cvd(const struct gpu_sampler *g, const char *cvd, int *pos, int max)
{
	int n = 0;

	while (*cvd && n < max) {
		size_t len = strcspn(cvd, ",");
		const char *tok = cvd;
		int p = -1;

		while (len && (*tok == ' ' || *tok == '\t'))
			tok++, len--;
		while (len && (tok[len - 1] == ' ' || tok[len - 1] == '\t'))
			len--;
		if (len && strspn(tok, "0123456789") >= len) {
			long idx = strtol(tok, NULL, 10);

			for (int i = 0; i < g->n; i++)
				if (g->gpu[i].index == idx)
					p = i;
		} else if (len && strncasecmp(tok, "MIG-", 4)) {
			p = find_uuid(g, tok, len);
		}
		if (p < 0)
			break;
		pos[n++] = p;
		cvd += strcspn(cvd, ",");
		if (*cvd == ',')
			cvd++;
	}
	return n;
}

int gpu_sampler_env_map(const struct gpu_sampler *g, const char *cvd, const char *local_rank,
			int *idx, int max, const char **src)
{
	int vis[MAX_GPUS], nvis = 0, n = 0;
	long lr = -1;
	char *end;

	*src = NULL;
	if (cvd) {
		nvis = parse_cvd(g, cvd, vis, MAX_GPUS);
	} else {
		for (nvis = 0; nvis < g->n; nvis++)
			vis[nvis] = nvis;
	}
	if (local_rank && *local_rank) {
		errno = 0;
		lr = strtol(local_rank, &end, 10);
		if (errno || *end || lr < 0)
			lr = -1;
	}
	if (lr >= 0 && lr < nvis && max > 0) {
		idx[n++] = g->gpu[vis[lr]].index;
		*src = "local_rank";
	} else if (cvd) {
		for (int i = 0; i < nvis && n < max; i++)
			idx[n++] = g->gpu[vis[i]].index;
		if (n)
			*src = "cuda_visible_devices";
	}
	return n;
}

/* CUDA_VISIBLE_DEVICES and LOCAL_RANK of pid's environment (as it was at exec). */
static int read_env(int pid, char **cvd, char **lrank)
{
	size_t cap = 1 << 16, got = 0;
	char path[64], *env, *s;
	ssize_t r;
	int fd;

	*cvd = *lrank = NULL;
	snprintf(path, sizeof(path), "/proc/%d/environ", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	env = malloc(cap + 1);
	if (!env) {
		close(fd);
		return -ENOMEM;
	}
	while (got < cap && (r = read(fd, env + got, cap - got)) > 0)
		got += (size_t)r;
	close(fd);
	env[got] = '\0';
	for (s = env; s < env + got; s += strlen(s) + 1) {
		if (!strncmp(s, "CUDA_VISIBLE_DEVICES=", 21) && !*cvd)
			*cvd = strdup(s + 21);
		else if (!strncmp(s, "LOCAL_RANK=", 11) && !*lrank)
			*lrank = strdup(s + 11);
	}
	free(env);
	return 0;
}

static struct seen *seen_get(struct gpu_sampler *g, int pid, int64_t start_ns)
{
	struct seen *s;

	for (int i = 0; i < g->nseen; i++)
		if (g->seen[i].pid == pid && g->seen[i].start_ns == start_ns)
			return &g->seen[i];
	if (g->nseen == g->capseen) {
		int cap = g->capseen ? g->capseen * 2 : 64;

		s = realloc(g->seen, (size_t)cap * sizeof(*s));
		if (!s)
			return NULL;
		g->seen = s;
		g->capseen = cap;
	}
	s = &g->seen[g->nseen++];
	memset(s, 0, sizeof(*s));
	s->pid = pid;
	s->start_ns = start_ns;
	return s;
}

static int emit_map(struct gpu_sampler *g, const struct seen *s, int pos, const char *src,
		    int64_t ts_ns, int (*emit)(void *, const struct rec_process_gpu *), void *arg)
{
	struct rec_process_gpu r = {
		.ts_ns = ts_ns,
		.pid = s->pid,
		.start_ns = s->start_ns,
		.gpu_index = g->gpu[pos].index,
		.gpu_uuid = g->gpu[pos].uuid,
		.source = src,
	};

	if (!g->gpu[pos].uuid[0])
		return 0; /* no UUID, nothing to join on */
	emit(arg, &r);
	g->st.mappings++;
	return 1;
}

/* The driver's compute processes of GPU u into g->pinfo; how many, or -1. */
static int list_compute(struct gpu_sampler *g, struct gpu *u)
{
	unsigned int n;
	nvmlReturn_t rc;

	if (!g->f.procs || skip(u, F_PROCS))
		return -1;
	for (int tries = 0; tries < 3; tries++) {
		if (!g->pcap) {
			g->pinfo = calloc(64, sizeof(*g->pinfo));
			if (!g->pinfo)
				return -1;
			g->pcap = 64;
		}
		n = g->pcap;
		rc = g->f.procs(u->dev, &n, g->pinfo);
		if (rc == NVML_SUCCESS)
			return (int)(n < g->pcap ? n : g->pcap);
		if (rc != NVML_ERROR_INSUFFICIENT_SIZE) {
			ok(g, u, F_PROCS, rc);
			return -1;
		}
		/* n is now the count needed; processes may start meanwhile: some room */
		free(g->pinfo);
		g->pcap = 0;
		g->pinfo = calloc(n + 16, sizeof(*g->pinfo));
		if (!g->pinfo)
			return -1;
		g->pcap = n + 16;
	}
	return -1;
}

int gpu_sampler_map(struct gpu_sampler *g, int64_t ts_ns, const struct gpu_proc *procs, int n,
		    int (*emit)(void *arg, const struct rec_process_gpu *r), void *arg)
{
	int rows = 0, i, k, m;

	for (i = 0; i < g->nseen; i++)
		g->seen[i].live = false;
	for (i = 0; i < n; i++) {
		struct seen *s = seen_get(g, procs[i].pid, procs[i].start_ns);
		char *cvd = NULL, *lrank = NULL;
		int idx[MAX_GPUS];
		const char *src;

		if (!s)
			continue;
		s->live = true;
		if (s->gen != procs[i].gen) {
			s->gen = procs[i].gen; /* exec'ed since: its environment is new */
			s->env_done = false;
		}
		if (s->env_done)
			continue;
		s->env_done = true;
		if (read_env(s->pid, &cvd, &lrank))
			continue;
		m = gpu_sampler_env_map(g, cvd, lrank, idx, MAX_GPUS, &src);
		for (k = 0; k < m; k++)
			for (int p = 0; p < g->n; p++)
				if (g->gpu[p].index == idx[k])
					rows += emit_map(g, s, p, src, ts_ns, emit, arg);
		free(cvd);
		free(lrank);
	}
	/* forget processes no longer traced (exited): the list stays the size of the job */
	for (i = 0; i < g->nseen;) {
		if (!g->seen[i].live)
			g->seen[i] = g->seen[--g->nseen];
		else
			i++;
	}
	for (int p = 0; p < g->n; p++) {
		struct gpu *u = &g->gpu[p];
		int np = list_compute(g, u);

		for (k = 0; k < np; k++) {
			for (i = 0; i < g->nseen; i++) {
				struct seen *s = &g->seen[i];

				if ((unsigned int)s->pid != g->pinfo[k].pid ||
				    (s->nvml_gpus & (1ULL << p)))
					continue;
				s->nvml_gpus |= 1ULL << p;
				rows += emit_map(g, s, p, "nvml", ts_ns, emit, arg);
			}
		}
	}
	return rows;
}
