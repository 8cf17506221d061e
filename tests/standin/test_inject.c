/* SPDX-License-Identifier: MIT */
/*
 * A CUDA injection library for test-cupti.sh, as a CUPTI-based collector is built: the stand-in
 * libcuda loads it from CUDA_INJECTION64_PATH at cuInit and calls InitializeInjection, which
 * dlopens CUPTI ($FQ_TEST_CUPTI, the stand-in libcupti.so.13), registers buffer callbacks
 * (buffers of $FQ_TEST_INJECT_BUF bytes, default 4096, so that many fill; 0: none given),
 * enables CONCURRENT_KERNEL records and a 50 ms flush period. $FQ_TEST_INJECT_CLOCK=shift
 * registers a timestamp callback of CLOCK_MONOTONIC + 10^15 ns.
 *
 * At exit it flushes and writes $FQ_TEST_INJECT_OUT.<RANK>, one "key value" a line: records,
 * compute_ns and nccl_ns (the sums of end - start of kernels whose name does not / does start
 * with "nccl"), their record counts, dev_min/dev_max (deviceId), dropped, buffers (completion
 * calls), worker_buffers (those not on the exiting thread), and the contract's breaches: bad
 * (a record of the wrong kind, without a name, ending before it starts, completed != end, or
 * outside [init, exit] on the expected clock, 1 ms of slack), unknown_buffers (a completion for a buffer not
 * handed out, or handed back twice), bad_valid (validSize past size).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define SHIFT_NS 1000000000000000ull
/* a clock offset sampled once is good to the sampling's duration: allow 1 ms, not a clock */
#define SLACK_NS 1000000ull
#define MAX_OUT 4096

typedef int CUptiResult;
typedef void (*req_fn)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*done_fn)(void *ctx, uint32_t streamId, uint8_t *buffer, size_t size,
			size_t validSize);

static struct {
	CUptiResult (*register_callbacks)(req_fn, done_fn);
	CUptiResult (*enable)(uint32_t kind);
	CUptiResult (*next_record)(uint8_t *buffer, size_t valid, void **record);
	CUptiResult (*flush_all)(uint32_t flag);
	CUptiResult (*flush_period)(uint32_t ms);
	CUptiResult (*register_ts)(uint64_t (*fn)(void));
	CUptiResult (*get_ts)(uint64_t *ts);
	CUptiResult (*dropped)(void *ctx, uint32_t streamId, size_t *dropped);
} cupti;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t main_thread;
static size_t buf_bytes = 4096;
static bool shifted;
static uint64_t t_init;
static uint8_t *out[MAX_OUT]; /* buffers handed out and not yet back */
static unsigned long long records, ncompute, nnccl, compute_ns, nccl_ns, bad, buffers,
	worker_buffers, unknown, bad_valid;
static long long dev_min = -1, dev_max = -1;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t shifted_ns(void)
{
	return mono_ns() + SHIFT_NS;
}

/* the clock the records must be in */
static uint64_t expected_now(void)
{
	return shifted ? shifted_ns() : mono_ns();
}

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max)
{
	*buffer = NULL;
	*size = 0;
	*max = 0;
	if (!buf_bytes)
		return;
	*buffer = malloc(buf_bytes);
	if (!*buffer)
		return;
	*size = buf_bytes;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_OUT; i++) {
		if (!out[i]) {
			out[i] = *buffer;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
}

static void buffer_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size,
			     size_t valid)
{
	uint64_t now = expected_now();
	void *rec = NULL;
	bool known = false;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_OUT; i++) {
		if (out[i] && out[i] == buffer) {
			out[i] = NULL;
			known = true;
			break;
		}
	}
	unknown += !known;
	bad_valid += valid > size;
	buffers++;
	worker_buffers += !pthread_equal(pthread_self(), main_thread);
	while (known && valid <= size && !cupti.next_record(buffer, valid, &rec)) {
		const uint8_t *r = rec;
		uint64_t start, end, completed;
		uint32_t kind, dev;
		const char *name;

		memcpy(&kind, r, 4);
		memcpy(&start, r + 16, 8);
		memcpy(&end, r + 24, 8);
		memcpy(&completed, r + 32, 8);
		memcpy(&dev, r + 40, 4);
		memcpy(&name, r + 104, sizeof(name));
		records++;
		if (kind != 10 || !name || end < start || completed != end ||
		    start + SLACK_NS < t_init || end > now + SLACK_NS) {
			bad++;
			continue;
		}
		if (dev_min < 0 || dev < dev_min)
			dev_min = dev;
		if (dev > dev_max)
			dev_max = dev;
		if (!strncmp(name, "nccl", 4)) {
			nnccl++;
			nccl_ns += end - start;
		} else {
			ncompute++;
			compute_ns += end - start;
		}
	}
	pthread_mutex_unlock(&lock);
	free(buffer);
}

static void at_exit(void)
{
	const char *prefix = getenv("FQ_TEST_INJECT_OUT"), *rank = getenv("RANK");
	size_t dropped = 0;
	char path[4096], text[1024];
	int fd, n;

	cupti.flush_all(1);
	cupti.dropped(NULL, 0, &dropped);
	if (!prefix)
		return;
	snprintf(path, sizeof(path), "%s.%s", prefix, rank ? rank : "none");
	pthread_mutex_lock(&lock);
	n = snprintf(text, sizeof(text),
		     "records %llu\ncompute_records %llu\nnccl_records %llu\ncompute_ns %llu\n"
		     "nccl_ns %llu\ndev_min %lld\ndev_max %lld\ndropped %zu\nbuffers %llu\n"
		     "worker_buffers %llu\nbad %llu\nunknown_buffers %llu\nbad_valid %llu\n",
		     records, ncompute, nnccl, compute_ns, nccl_ns, dev_min, dev_max, dropped,
		     buffers, worker_buffers, bad, unknown, bad_valid);
	pthread_mutex_unlock(&lock);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, text, (size_t)n) != n)
		fprintf(stderr, "test_inject: cannot write '%s'\n", path);
	if (fd >= 0)
		close(fd);
}

#define SYM(field, name)                                                              \
	do {                                                                          \
		*(void **)&cupti.field = dlsym(h, name);                              \
		if (!cupti.field) {                                                   \
			fprintf(stderr, "test_inject: '%s' has no %s\n", path, name); \
			return 0;                                                     \
		}                                                                     \
	} while (0)

EXPORT int InitializeInjection(void)
{
	const char *path = getenv("FQ_TEST_CUPTI"), *b = getenv("FQ_TEST_INJECT_BUF");
	const char *clk = getenv("FQ_TEST_INJECT_CLOCK");
	void *h;

	if (!path || !(h = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "test_inject: cannot load FQ_TEST_CUPTI '%s': %s\n",
			path ? path : "(unset)", path ? dlerror() : "set it");
		return 0;
	}
	SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
	SYM(enable, "cuptiActivityEnable");
	SYM(next_record, "cuptiActivityGetNextRecord");
	SYM(flush_all, "cuptiActivityFlushAll");
	SYM(flush_period, "cuptiActivityFlushPeriod");
	SYM(register_ts, "cuptiActivityRegisterTimestampCallback");
	SYM(get_ts, "cuptiGetTimestamp");
	SYM(dropped, "cuptiActivityGetNumDroppedRecords");
	if (b)
		buf_bytes = (size_t)strtoul(b, NULL, 10);
	shifted = clk && !strcmp(clk, "shift");
	main_thread = pthread_self();
	if ((shifted && cupti.register_ts(shifted_ns)) ||
	    cupti.register_callbacks(buffer_requested, buffer_completed) || cupti.enable(10) ||
	    cupti.flush_period(50)) {
		fprintf(stderr, "test_inject: a CUPTI call failed\n");
		return 0;
	}
	/* cuptiGetTimestamp is on the records' clock: the lower bound of every record */
	if (cupti.get_ts(&t_init))
		t_init = 0;
	if (t_init > expected_now() + SLACK_NS || expected_now() - t_init > 1000000000ull) {
		fprintf(stderr, "test_inject: cuptiGetTimestamp is %lld ns off the records' clock\n",
			(long long)(t_init - expected_now()));
		t_init = UINT64_MAX; /* every record then counts as bad */
	}
	atexit(at_exit);
	return 1;
}
