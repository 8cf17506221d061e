/* SPDX-License-Identifier: MIT */
/*
 * The NVML sampler against the fake libnvidia-ml (tests/nvml/fakenvml.c):
 * every GPU sampled, a throttled GPU's clock and reasons, a failing call that
 * costs one column and not the row, XIDs counted; processes mapped to GPUs by
 * the driver's list, by LOCAL_RANK and by CUDA_VISIBLE_DEVICES; no library at
 * all; the sampling thread writing through the store at its interval; a trace
 * file made before the GPU tables gaining them in place; retention.
 *
 * argv[1]: the fake library's path.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fqsql.h"
#include "nvml.h"
#include "store.h"
#include "store_test.h"

#define MAX_ROWS 256

static const char *fake_lib;
static char config[512];

static void write_config(const char *text)
{
	char tmp[600];
	FILE *f;

	/* rename: the fake never reads half a file */
	snprintf(tmp, sizeof(tmp), "%s.tmp", config);
	f = fopen(tmp, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) || rename(tmp, config))
		DIE("cannot write %s", config);
}

struct got {
	int n;
	struct rec_gpu r[MAX_ROWS];
	char uuid[MAX_ROWS][100];
	int m;
	struct rec_process_gpu p[MAX_ROWS];
	char puuid[MAX_ROWS][100], src[MAX_ROWS][32];
};

static int collect(void *arg, const struct rec_gpu *r)
{
	struct got *g = arg;

	if (g->n >= MAX_ROWS)
		return -ENOBUFS;
	g->r[g->n] = *r;
	snprintf(g->uuid[g->n], sizeof(g->uuid[0]), "%s", r->uuid ? r->uuid : "");
	g->r[g->n].uuid = g->uuid[g->n];
	g->r[g->n].pci_bus_id = NULL;
	g->n++;
	return 0;
}

static int collect_map(void *arg, const struct rec_process_gpu *r)
{
	struct got *g = arg;

	if (g->m >= MAX_ROWS)
		return -ENOBUFS;
	g->p[g->m] = *r;
	snprintf(g->puuid[g->m], sizeof(g->puuid[0]), "%s", r->gpu_uuid);
	snprintf(g->src[g->m], sizeof(g->src[0]), "%s", r->source);
	g->m++;
	return 0;
}

/* 1 when (pid, gpu, source) was emitted */
static int mapped(const struct got *g, int pid, int gpu, const char *src)
{
	for (int i = 0; i < g->m; i++)
		if (g->p[i].pid == pid && g->p[i].gpu_index == gpu && !strcmp(g->src[i], src))
			return 1;
	return 0;
}

/* Whether pid's command name comes to start with name within 2 s (it has exec'ed). */
static int wait_comm(pid_t pid, const char *name)
{
	for (int i = 0; i < 200; i++) {
		char path[64], buf[64] = "";
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
		f = fopen(path, "r");
		if (f) {
			if (!fgets(buf, sizeof(buf), f))
				buf[0] = '\0';
			fclose(f);
		}
		if (!strncmp(buf, name, strlen(name)))
			return 1;
		usleep(10000);
	}
	return 0;
}

/* A child that sleeps with this environment (exec'ed: /proc/PID/environ is it). */
static pid_t sleeper(char *const env[])
{
	char *const argv[] = { "sleep", "30", NULL };
	pid_t pid = fork();

	if (pid == 0) {
		execve("/bin/sleep", argv, env);
		_exit(127);
	}
	if (pid < 0)
		DIE("fork: %s", strerror(errno));
	/* until the exec is done, environ is still ours */
	wait_comm(pid, "sleep");
	return pid;
}

static void test_no_library(void)
{
	char *cause = NULL;
	struct gpu_sampler *g = gpu_sampler_new("/nonexistent/libnvidia-ml.so.1", &cause);

	CHECK(!g);
	CHECK(errno == ENOENT);
	CHECK(cause && strstr(cause, "cannot load '/nonexistent/libnvidia-ml.so.1'"));
	free(cause);
	cause = NULL;
	/* the library is there, the driver is not */
	write_config("gpus 2\ninit_fail 9\n");
	g = gpu_sampler_new(fake_lib, &cause);
	CHECK(!g);
	CHECK_STR(cause, "nvmlInit failed: Driver Not Loaded (is the NVIDIA driver loaded?)");
	free(cause);
	cause = NULL;
	write_config("gpus 0\n");
	g = gpu_sampler_new(fake_lib, &cause);
	CHECK(!g);
	CHECK_STR(cause, "NVML sees no GPU");
	free(cause);
}

static void test_sample(void)
{
	struct got *got = calloc(1, sizeof(*got));
	struct gpu_sampler_stats st;
	char *cause = NULL;
	struct gpu_sampler *g;

	write_config("gpus 4\n"
		     "gpu 2 sm_clock 1410\n"
		     "gpu 2 reasons 0x20\n"
		     "gpu 2 temp 91\n"
		     "gpu 1 fail power\n"
		     "gpu 3 unsupported nvlink\n"
		     "gpu 0 ecc_cor 7\n"
		     "gpu 0 pcie_width 8\n"
		     "xid 3 79\n");
	g = gpu_sampler_new(fake_lib, &cause);
	if (!g)
		DIE("fake NVML did not start: %s", cause ? cause : "?");
	CHECK_EQ(gpu_sampler_count(g), 4);
	CHECK_STR(gpu_sampler_describe(g), "4 GPUs (driver fake-999.1, NVML fake-13.999)");
	CHECK_EQ(gpu_sampler_sample(g, 1000, collect, got), 4);
	CHECK_EQ(got->n, 4);
	for (int i = 0; i < got->n && i < 4; i++) {
		struct rec_gpu *r = &got->r[i];
		char want[64];

		CHECK_EQ(r->ts_ns, 1000);
		CHECK_EQ(r->gpu_index, i);
		snprintf(want, sizeof(want), "GPU-fa4e0000-0000-4000-8000-%012d", i);
		CHECK_STR(got->uuid[i], want);
		CHECK_EQ(r->sm_clock_max_mhz, 1980);
		CHECK_EQ(r->mem_clock_mhz, 2619);
		CHECK_EQ(r->power_limit_mw, 700000);
		CHECK_EQ(r->util_gpu_pct, 90);
		CHECK_EQ(r->util_mem_pct, 40);
		CHECK_EQ(r->pcie_gen, 5);
		CHECK_EQ(r->pcie_gen_max, 5);
		CHECK_EQ(r->pcie_width_max, 16);
		CHECK_EQ(r->ecc_uncorrected, 0);
		CHECK_EQ(r->remap_pending, 0);
	}
	/* the healthy ones, the throttled one */
	CHECK_EQ(got->r[0].sm_clock_mhz, 1980);
	CHECK_EQ(got->r[0].clock_reasons, 0);
	CHECK_EQ(got->r[0].ecc_corrected, 7);
	CHECK_EQ(got->r[0].pcie_width, 8);
	CHECK_EQ(got->r[2].sm_clock_mhz, 1410);
	CHECK_EQ(got->r[2].clock_reasons, 0x20);
	CHECK_EQ(got->r[2].temp_c, 91);
	/* a failing call: that column only */
	CHECK_EQ(got->r[1].power_mw, REC_NULL32);
	CHECK_EQ(got->r[1].sm_clock_mhz, 1980);
	CHECK_EQ(got->r[1].temp_c, 45);
	CHECK_EQ(got->r[0].power_mw, 300000);
	/* 18 links, one replay each; GPU 3 has no NVLink; slow to read: one GPU per sample */
	CHECK_EQ(got->r[0].nvlink_replay, 18);
	CHECK_EQ(got->r[0].nvlink_crc, 0);
	CHECK_EQ(got->r[1].nvlink_replay, REC_NULL);
	CHECK_EQ(got->r[3].nvlink_replay, REC_NULL);
	CHECK_EQ(got->r[3].nvlink_recovery, REC_NULL);
	/* XID 79 on GPU 3 */
	CHECK_EQ(got->r[3].xid_count, 1);
	CHECK_EQ(got->r[3].xid_last, 79);
	CHECK_EQ(got->r[0].xid_count, 0);
	CHECK_EQ(got->r[0].xid_last, REC_NULL32);
	gpu_sampler_get_stats(g, &st);
	CHECK_EQ(st.failed_calls, 1);

	/* the failing call is tried again (it may recover), the unsupported one is not */
	write_config("gpus 4\ngpu 3 unsupported nvlink\n");
	got->n = 0;
	CHECK_EQ(gpu_sampler_sample(g, 2000, collect, got), 4);
	CHECK_EQ(got->r[1].power_mw, 300000);
	CHECK_EQ(got->r[2].sm_clock_mhz, 1980);
	CHECK_EQ(got->r[3].xid_count, 1);
	CHECK_EQ(got->r[0].nvlink_replay, 18); /* the last value, not read again */
	CHECK_EQ(got->r[1].nvlink_replay, 18);
	CHECK_EQ(got->r[2].nvlink_replay, REC_NULL);

	/* the cost of one sample of 4 fake GPUs: our side of it (bench/gpu/nvml.sh: real GPUs) */
	for (int i = 0; i < 1000; i++) {
		got->n = 0;
		gpu_sampler_sample(g, 3000 + i, collect, got);
	}
	gpu_sampler_get_stats(g, &st);
	printf("one sample of 4 fake GPUs: mean %lld ns, min %lld ns, max %lld ns (%lld samples)\n",
	       (long long)(st.total_ns / st.samples), (long long)st.min_ns, (long long)st.max_ns,
	       (long long)st.samples);
	gpu_sampler_free(g);
	free(got);
}

/*
 * GPM: nothing from a GPU's first sample (no interval yet), then each interval's share in
 * per mille; a GPU without GPM (pre-Hopper) is never asked again, a failed sample loses
 * that interval only.
 */
/* the fake's count of GPU i's GPM samples (not NVML's: fakenvml.c) */
static int gets(int i)
{
	void *h = dlopen(fake_lib, RTLD_NOW | RTLD_NOLOAD);
	int (*f)(int) = h ? (int (*)(int))dlsym(h, "fake_gpm_gets") : NULL;
	int n = f ? f(i) : -2;

	if (h)
		dlclose(h);
	return n;
}

static void test_gpm(void)
{
	struct got *got = calloc(1, sizeof(*got));
	struct rec_gpu_act a[3];
	char *cause = NULL;
	struct gpu_sampler *g;
	bool has[3];
	int gets0 = gets(0), gets1 = gets(1); /* (the fake counts across tests) */

#define ACT()                                                                             \
	do {                                                                              \
		got->n = 0;                                                               \
		for (int i_ = 0; i_ < 3; i_++) {                                          \
			memset(&a[i_], 0, sizeof(a[i_]));                                 \
			has[i_] = gpu_sampler_activity(g, i_, &a[i_]);                    \
		}                                                                         \
	} while (0)
	write_config("gpus 3\n"
		     "gpu 0 sm_active 975\n"
		     "gpu 0 tensor 612\n"
		     "gpu 1 unsupported gpm\n"
		     "gpu 2 sm_active 241\n");
	g = gpu_sampler_new(fake_lib, &cause);
	if (!g)
		DIE("fake NVML did not start: %s", cause ? cause : "?");
	CHECK(!gpu_sampler_activity(g, 0, &a[0])); /* before any sample */
	CHECK_EQ(gpu_sampler_sample(g, 1000, collect, got), 3);
	ACT();
	CHECK(!has[0] && !has[1] && !has[2]);
	/* a sample right after: GPM's counters need 100 ms, so none is taken (the fake reads 0
	 * under 100 ms, as the driver does) */
	CHECK_EQ(gpu_sampler_sample(g, 1500, collect, got), 3);
	ACT();
	CHECK(!has[0] && !has[2]);
	CHECK_EQ(gets(0) - gets0, 1);
	usleep(110000);
	CHECK_EQ(gpu_sampler_sample(g, 2000, collect, got), 3);
	ACT();
	/* the interval on agentd's clock: from the first sample, the 110 ms slept */
	CHECK(has[0] && a[0].dur_ns >= 110000000 && a[0].dur_ns < 2000000000);
	CHECK_EQ(a[0].ts_ns, 2000);
	CHECK_EQ(a[0].gpu_index, 0);
	CHECK_STR(a[0].uuid, "GPU-fa4e0000-0000-4000-8000-000000000000");
	CHECK_EQ(a[0].sm_active_pm, 975);
	CHECK_EQ(a[0].tensor_pm, 612);
	CHECK_EQ(a[0].sm_occupancy_pm, 500);
	CHECK_EQ(a[0].dram_bw_pm, 300);
	CHECK(!has[1]);
	CHECK(has[2] && a[2].sm_active_pm == 241);
	/* GPU 1 said it has no GPM: never asked for a sample */
	CHECK_EQ(gets(1) - gets1, 0);
	CHECK(!gpu_sampler_activity(g, 3, &a[0]) && !gpu_sampler_activity(g, -1, &a[0]));
	/* a failing sample on GPU 2: that interval and the next are lost, not GPU 0's */
	write_config("gpus 3\ngpu 1 unsupported gpm\ngpu 2 fail gpm\n");
	usleep(110000);
	gpu_sampler_sample(g, 3000, collect, got);
	ACT();
	CHECK(has[0] && a[0].sm_active_pm == 900);
	CHECK(!has[2]);
	write_config("gpus 3\ngpu 1 unsupported gpm\n");
	usleep(110000);
	gpu_sampler_sample(g, 4000, collect, got);
	ACT();
	CHECK(!has[2]); /* a new first sample */
	usleep(110000);
	gpu_sampler_sample(g, 5000, collect, got);
	ACT();
	CHECK(has[2] && a[2].sm_active_pm == 900 && a[2].ts_ns == 5000);
#undef ACT
	gpu_sampler_free(g);
	free(got);
}

static void test_env_rule(void)
{
	struct gpu_sampler *g;
	const char *src;
	char *cause = NULL;
	int idx[8], n;

	write_config("gpus 4\n");
	g = gpu_sampler_new(fake_lib, &cause);
	if (!g)
		DIE("fake NVML did not start: %s", cause ? cause : "?");
	/* torchrun: every GPU visible, cuda:LOCAL_RANK */
	n = gpu_sampler_env_map(g, NULL, "2", idx, 8, &src);
	CHECK(n == 1 && idx[0] == 2 && !strcmp(src, "local_rank"));
	n = gpu_sampler_env_map(g, "3,1", "1", idx, 8, &src);
	CHECK(n == 1 && idx[0] == 1 && !strcmp(src, "local_rank"));
	/* Slurm binds one GPU per task: LOCAL_RANK beyond the list */
	n = gpu_sampler_env_map(g, "2", "3", idx, 8, &src);
	CHECK(n == 1 && idx[0] == 2 && !strcmp(src, "cuda_visible_devices"));
	/* no LOCAL_RANK: every GPU listed */
	n = gpu_sampler_env_map(g, " 0, 3 ", NULL, idx, 8, &src);
	CHECK(n == 2 && idx[0] == 0 && idx[1] == 3 && !strcmp(src, "cuda_visible_devices"));
	/* UUIDs and unique prefixes, with or without GPU- */
	n = gpu_sampler_env_map(g, "GPU-fa4e0000-0000-4000-8000-000000000001", NULL, idx, 8, &src);
	CHECK(n == 1 && idx[0] == 1);
	n = gpu_sampler_env_map(g, "fa4e0000-0000-4000-8000-000000000003", NULL, idx, 8, &src);
	CHECK(n == 1 && idx[0] == 3);
	/* CUDA stops at the first entry it cannot use: unknown, ambiguous, out of range, MIG */
	n = gpu_sampler_env_map(g, "1,GPU-fa4e,2", NULL, idx, 8, &src);
	CHECK(n == 1 && idx[0] == 1);
	n = gpu_sampler_env_map(g, "7,1", NULL, idx, 8, &src);
	CHECK(n == 0 && !src);
	n = gpu_sampler_env_map(g, "MIG-0a1b2c3d", "0", idx, 8, &src);
	CHECK(n == 0 && !src);
	/* hidden from every GPU, or neither variable set: nothing */
	n = gpu_sampler_env_map(g, "", "0", idx, 8, &src);
	CHECK(n == 0);
	n = gpu_sampler_env_map(g, NULL, NULL, idx, 8, &src);
	CHECK(n == 0);
	n = gpu_sampler_env_map(g, NULL, "x", idx, 8, &src);
	CHECK(n == 0);
	gpu_sampler_free(g);
}

static void test_map(void)
{
	char *const env_lr[] = { "CUDA_VISIBLE_DEVICES=2,3", "LOCAL_RANK=1", NULL };
	char *const env_uuid[] = { "CUDA_VISIBLE_DEVICES=GPU-fa4e0000-0000-4000-8000-000000000001",
				   NULL };
	char *const env_none[] = { "PATH=/bin", NULL };
	struct got *got = calloc(1, sizeof(*got));
	struct gpu_proc procs[3];
	struct gpu_sampler *g;
	char *cause = NULL, cf[256];
	pid_t a, b, c;

	a = sleeper(env_none);  /* the driver lists it on GPU 0 */
	b = sleeper(env_lr);    /* LOCAL_RANK 1 of CUDA_VISIBLE_DEVICES=2,3: GPU 3 */
	c = sleeper(env_uuid);  /* CUDA_VISIBLE_DEVICES by UUID: GPU 1 */
	snprintf(cf, sizeof(cf), "gpus 4\nproc %d 0\nproc %d 3\nproc 1 2\n", (int)a, (int)b);
	write_config(cf);
	g = gpu_sampler_new(fake_lib, &cause);
	if (!g)
		DIE("fake NVML did not start: %s", cause ? cause : "?");
	procs[0] = (struct gpu_proc){ .pid = a, .start_ns = 11 };
	procs[1] = (struct gpu_proc){ .pid = b, .start_ns = 22 };
	procs[2] = (struct gpu_proc){ .pid = c, .start_ns = 33 };
	CHECK_EQ(gpu_sampler_map(g, 500, procs, 3, collect_map, got), 4);
	CHECK(mapped(got, a, 0, "nvml"));
	CHECK(mapped(got, b, 3, "nvml"));
	CHECK(mapped(got, b, 3, "local_rank"));
	CHECK(mapped(got, c, 1, "cuda_visible_devices"));
	CHECK_EQ(got->m, 4);
	for (int i = 0; i < got->m; i++) {
		CHECK_EQ(got->p[i].ts_ns, 500);
		if (got->p[i].pid == b)
			CHECK_EQ(got->p[i].start_ns, 22);
	}
	for (int i = 0; i < got->m; i++)
		if (got->p[i].pid == c)
			CHECK_STR(got->puuid[i], "GPU-fa4e0000-0000-4000-8000-000000000001");
	/* pid 1 is listed on GPU 2 but not traced: left out */
	for (int i = 0; i < got->m; i++)
		CHECK(got->p[i].pid != 1);
	/* once per (process, GPU, source) */
	got->m = 0;
	CHECK_EQ(gpu_sampler_map(g, 600, procs, 3, collect_map, got), 0);
	/* a process that takes a second GPU later */
	snprintf(cf, sizeof(cf), "gpus 4\nproc %d 0\nproc %d 2\nproc %d 3\n", (int)a, (int)a,
		 (int)b);
	write_config(cf);
	CHECK_EQ(gpu_sampler_map(g, 700, procs, 3, collect_map, got), 1);
	CHECK(mapped(got, a, 2, "nvml"));
	gpu_sampler_free(g);
	kill(a, SIGKILL);
	kill(b, SIGKILL);
	kill(c, SIGKILL);
	waitpid(a, NULL, 0);
	waitpid(b, NULL, 0);
	waitpid(c, NULL, 0);
	free(got);
}

static int list_one(void *arg, struct gpu_proc *out, int max)
{
	if (max < 1)
		return 0;
	out[0] = *(struct gpu_proc *)arg;
	return 1;
}

static struct store *open_store(const char *path)
{
	struct store_opts o = { .path = path, .node = "n", .batch_ms = 20 };
	char *cause = NULL;
	struct store *s = store_open(&o, &cause);

	if (!s)
		DIE("store_open %s: %s", path, cause ? cause : "?");
	return s;
}

/*
 * A launcher's child seen between its fork and its exec: its environment is still the
 * launcher's (CUDA_VISIBLE_DEVICES=0,1 here). Once it execs with its own (LOCAL_RANK 1 of
 * 2,3: GPU 3), the tracer gives it a new gen and the map reads it again.
 */
static void test_map_exec(void)
{
	char *const argv[] = { "sh", "-c",
			       "read x; exec /usr/bin/env -i CUDA_VISIBLE_DEVICES=2,3 LOCAL_RANK=1 "
			       "/bin/sleep 30",
			       NULL };
	char *const env[] = { "CUDA_VISIBLE_DEVICES=0,1", "PATH=/bin:/usr/bin", NULL };
	struct got *got = calloc(1, sizeof(*got));
	struct gpu_proc p;
	struct gpu_sampler *g;
	char *cause = NULL;
	int fds[2];
	pid_t pid;

	if (!got || pipe(fds))
		DIE("pipe: %s", strerror(errno));
	pid = fork();
	if (pid == 0) {
		dup2(fds[0], 0);
		close(fds[0]);
		close(fds[1]);
		execve("/bin/sh", argv, env);
		_exit(127);
	}
	if (pid < 0)
		DIE("fork: %s", strerror(errno));
	close(fds[0]);
	CHECK(wait_comm(pid, "sh")); /* the shell has exec'ed: its environ is env[] */
	write_config("gpus 4\n");
	g = gpu_sampler_new(fake_lib, &cause);
	if (!g)
		DIE("fake NVML did not start: %s", cause ? cause : "?");
	p = (struct gpu_proc){ .pid = pid, .start_ns = 44, .gen = 7 };
	CHECK_EQ(gpu_sampler_map(g, 100, &p, 1, collect_map, got), 2);
	CHECK(mapped(got, pid, 0, "cuda_visible_devices"));
	CHECK(mapped(got, pid, 1, "cuda_visible_devices"));
	/* the same identity: read once */
	CHECK_EQ(gpu_sampler_map(g, 200, &p, 1, collect_map, got), 0);
	if (write(fds[1], "\n", 1) != 1)
		DIE("write: %s", strerror(errno));
	close(fds[1]);
	CHECK(wait_comm(pid, "sleep"));
	/* the tracer saw its exec: a new identity, the same pid and start time */
	got->m = 0;
	p.gen = 8;
	CHECK_EQ(gpu_sampler_map(g, 300, &p, 1, collect_map, got), 1);
	CHECK(mapped(got, pid, 3, "local_rank"));
	CHECK_EQ(got->p[0].start_ns, 44);
	CHECK_EQ(got->p[0].ts_ns, 300);
	gpu_sampler_free(g);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	free(got);
}

static void test_thread(const char *dir)
{
	char path[512], *cause = NULL, cf[128];
	struct gpu_proc me = { .pid = getpid(), .start_ns = 42 };
	struct gpu_thread_opts o = { .lib = fake_lib, .interval_ms = 100, .list_procs = list_one,
				     .arg = &me };
	struct gpu_thread *t;
	struct store *s;
	sqlite3 *db;
	int64_t n, act;

	snprintf(cf, sizeof(cf), "gpus 3\ngpu 1 sm_clock 1200\ngpu 1 reasons 0x40\nproc %d 1\n",
		 (int)getpid());
	write_config(cf);
	snprintf(path, sizeof(path), "%s/gpu.db", dir);
	s = open_store(path);
	t = gpu_thread_start(&o, s, &cause);
	if (!t)
		DIE("gpu_thread_start: %s", cause ? cause : "?");
	usleep(1050 * 1000);
	gpu_thread_stop(t);
	store_close(s);

	db = test_reader(path);
	/* 100 ms over 1.05 s: 11 samples (one at start), give or take a slow machine */
	n = test_i64(db, "SELECT count(*) FROM gpu_samples WHERE gpu_index = 0");
	CHECK(n >= 8 && n <= 12);
	CHECK_EQ(test_i64(db, "SELECT count(DISTINCT gpu_index) FROM gpu_samples"), 3);
	/* every GPU in every sample */
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM (SELECT ts_ns FROM gpu_samples GROUP BY ts_ns "
			       "HAVING count(*) != 3)"), 0);
	CHECK_EQ(test_i64(db, "SELECT max(sm_clock_mhz) FROM gpu_samples WHERE gpu_index = 1"),
		  1200);
	CHECK_EQ(test_i64(db, "SELECT min(clock_reasons) FROM gpu_samples WHERE gpu_index = 1"),
		  0x40);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM gpu_samples WHERE pci_bus_id = "
			       "'00000000:11:00.0' AND gpu_uuid LIKE 'GPU-fa4e%1'"), n);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM gpu_samples WHERE power_mw IS NULL"), 0);
	/* GPM: a gpu_activity row per GPU per sample after its first, at that sample's time */
	/* (every sample 100 ms apart or more: at --gpu-interval 0.1 a late wake-up makes the
	 * next one 99.9 ms after it, which waits a period) */
	act = test_i64(db, "SELECT count(*) FROM gpu_activity WHERE gpu_index = 0");
	CHECK(act >= (n - 1) / 2 && act <= n - 1);
	/* (each GPU's own GPM sample is 100 ms after its last or skipped: on a loaded machine
	 * one GPU of a sample may skip where another did not, so the GPUs' counts may differ
	 * by one) */
	CHECK(llabs(test_i64(db, "SELECT count(*) FROM gpu_activity WHERE gpu_index = 2") - act) <=
	      1);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM gpu_activity a JOIN gpu_samples s USING "
			       "(ts_ns, gpu_index, gpu_uuid) WHERE a.sm_active_pm = 900 AND "
			       "a.dram_bw_pm = 300 AND a.dur_ns BETWEEN 100000000 AND 1000000000"),
		 test_i64(db, "SELECT count(*) FROM gpu_activity"));
	/* this process, listed by the driver on GPU 1 */
	CHECK_EQ(test_i64(db, "SELECT gpu_index FROM process_gpus WHERE source = 'nvml' AND "
			       "start_ns = 42"), 1);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM process_gpus"), 1);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM meta WHERE key = 'gpu_status' AND value = "
			       "'3 GPUs (driver fake-999.1, NVML fake-13.999), every 100 ms'"), 1);
	CHECK(test_i64(db, "SELECT value FROM meta WHERE key = 'gpu_sample_ns'") > 0);
	CHECK(test_i64(db, "SELECT value FROM meta WHERE key = 'gpu_samples'") >= 8);
	sqlite3_close(db);
	unlink(path);

	/* --gpu-interval 0: off, and meta says so */
	o.interval_ms = 0;
	s = open_store(path);
	t = gpu_thread_start(&o, s, &cause);
	CHECK(!t);
	CHECK_STR(cause, "off (--gpu-interval 0)");
	store_flush(s);
	store_close(s);
	db = test_reader(path);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM meta WHERE key = 'gpu_status' AND value = "
			       "'off (--gpu-interval 0)'"), 1);
	sqlite3_close(db);
	unlink(path);
	o.interval_ms = 100;

	/* no library: the thread does not start, meta says why */
	o.lib = "/nonexistent/libnvidia-ml.so.1";
	s = open_store(path);
	free(cause);
	cause = NULL;
	t = gpu_thread_start(&o, s, &cause);
	CHECK(!t);
	CHECK(cause && !strncmp(cause, "off: cannot load '/nonexistent/libnvidia-ml.so.1'", 49));
	store_flush(s);
	store_close(s);
	db = test_reader(path);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM meta WHERE key = 'gpu_status' AND value "
			       "LIKE 'off: cannot load ''/nonexistent/libnvidia-ml.so.1''%'"), 1);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM gpu_samples"), 0);
	sqlite3_close(db);
	unlink(path);
	free(cause);
}

/* A file made before the GPU tables gains them on open and keeps its rows. */
static void test_old_file(const char *dir)
{
	struct rec r = { .kind = REC_GPU };
	char path[512], *err = NULL;
	struct store *s;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/old.db", dir);
	if (sqlite3_open(path, &db) != SQLITE_OK || fqsql_schema_apply(db, NULL) ||
	    sqlite3_exec(db,
			 "DROP TABLE gpu_samples; DROP TABLE process_gpus;"
			 "INSERT INTO offcpu VALUES (100, 5, 1, 1, 'blocked')",
			 NULL, NULL, &err) != SQLITE_OK)
		DIE("cannot make a file without the GPU tables %s: %s", path,
		    err ? err : sqlite3_errmsg(db));
	sqlite3_close(db);
	s = open_store(path);
	memset(&r.u.gpu, 0, sizeof(r.u.gpu));
	r.u.gpu.ts_ns = 200;
	r.u.gpu.gpu_index = 0;
	r.u.gpu.uuid = "GPU-x";
	r.u.gpu.temp_c = REC_NULL32;
	r.u.gpu.ecc_corrected = REC_NULL;
	CHECK_EQ(store_put(s, &r), 0);
	CHECK_EQ(store_flush(s), 0);
	store_close(s);
	db = test_reader(path);
	CHECK_EQ(test_i64(db, "SELECT value FROM meta WHERE key = 'schema_version'"),
		  FQSQL_SCHEMA_VERSION);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM offcpu WHERE ts_ns = 100"), 1);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM gpu_samples WHERE ts_ns = 200 AND "
			       "gpu_uuid = 'GPU-x' AND temp_c IS NULL AND ecc_corrected IS NULL "
			       "AND sm_clock_mhz = 0"), 1);
	sqlite3_close(db);
	unlink(path);
}

/* Retention: old samples go; a process's GPUs go with its processes row, not before. */
static void test_retain(const char *dir)
{
	struct store_opts o = { .node = "n", .batch_ms = 20, .retain_age_s = 3600 };
	struct rec r = { .kind = REC_PROCESS };
	int64_t now = (int64_t)time(NULL) * 1000000000LL, old = now - 7200 * 1000000000LL;
	char path[512], *cause = NULL;
	struct store *s;
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/retain.db", dir);
	o.path = path;
	s = store_open(&o, &cause);
	if (!s)
		DIE("store_open %s: %s", path, cause ? cause : "?");
	for (int pid = 5; pid <= 6; pid++) {
		r.kind = REC_PROCESS;
		memset(&r.u.process, 0, sizeof(r.u.process));
		r.u.process.pid = pid;
		r.u.process.start_ns = old;
		/* 5 exited two hours ago, 6 runs */
		r.u.process.exit_ns = pid == 5 ? old + 1 : REC_NULL;
		r.u.process.exit_code = r.u.process.ppid = r.u.process.cgroup_id = REC_NULL;
		r.u.process.rank = r.u.process.local_rank = r.u.process.world_size = REC_NULL;
		CHECK_EQ(store_put(s, &r), 0);
		r.kind = REC_PROCESS_GPU;
		r.u.process_gpu = (struct rec_process_gpu){
			.ts_ns = old, .pid = pid, .start_ns = old, .gpu_index = 0,
			.gpu_uuid = "GPU-x", .source = "nvml",
		};
		CHECK_EQ(store_put(s, &r), 0);
	}
	r.kind = REC_GPU;
	memset(&r.u.gpu, 0, sizeof(r.u.gpu));
	r.u.gpu.ts_ns = old;
	CHECK_EQ(store_put(s, &r), 0);
	r.u.gpu.ts_ns = now;
	CHECK_EQ(store_put(s, &r), 0);
	CHECK_EQ(store_flush(s), 0);
	CHECK_EQ(store_retain_now(s), 0);
	store_close(s);
	db = test_reader(path);
	CHECK_EQ(test_i64(db, "SELECT group_concat(pid) FROM process_gpus"), 6);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM gpu_samples"), 1);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM gpu_samples WHERE ts_ns = "
			       "(SELECT max(ts_ns) FROM gpu_samples) AND ts_ns > 0"), 1);
	sqlite3_close(db);
	unlink(path);
}

int main(int argc, char **argv)
{
	char *dir;

	if (argc != 2)
		DIE("usage: test_gpu FAKE_LIBNVIDIA_ML");
	fake_lib = argv[1];
	dir = test_tmpdir();
	snprintf(config, sizeof(config), "%s/fakenvml.conf", dir);
	setenv("FAKE_NVML_CONFIG", config, 1);

	test_no_library();
	test_sample();
	test_gpm();
	test_env_rule();
	test_map();
	test_map_exec();
	test_thread(dir);
	test_old_file(dir);
	test_retain(dir);
	test_rmrf(dir);
	if (check_failures) {
		fprintf(stderr, "%d check(s) failed\n", check_failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
