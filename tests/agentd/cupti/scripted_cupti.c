/* SPDX-License-Identifier: MIT */
/*
 * A scripted CUPTI for test_cupti.c: the Activity API functions fleetq's CUDA injection
 * library calls, with CUPTI's C signatures, whose records come from the test (script_buffer)
 * rather than a GPU. Records are laid out as CUpti_ActivityKernel4..9 begin (kind at 0,
 * start 16, end 24, deviceId 40, name 104), 144 bytes each.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define REC 144

typedef int CUptiResult;
typedef void (*req_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*done_fn)(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);

static req_fn req;
static done_fn done;
static uint64_t (*ts_fn)(void);
static atomic_int flushes, enabled;
static size_t dropped;

EXPORT CUptiResult cuptiActivityRegisterCallbacks(req_fn r, done_fn d)
{
	req = r;
	done = d;
	return 0;
}

EXPORT CUptiResult cuptiActivityEnable(uint32_t kind)
{
	if (kind == 10)
		atomic_store(&enabled, 1);
	return 0;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **rec)
{
	size_t off = *rec ? (size_t)((uint8_t *)*rec - buf) + REC : 0;

	if (off + REC > valid)
		return 12; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
	*rec = buf + off;
	return 0;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	(void)flag;
	atomic_fetch_add(&flushes, 1);
	return 0;
}

EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(uint64_t (*fn)(void))
{
	ts_fn = fn;
	return 0;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *ts)
{
	*ts = ts_fn ? ts_fn() : 0;
	return 0;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *n)
{
	(void)ctx;
	(void)stream;
	*n = dropped;
	dropped = 0;
	return 0;
}

/* What the test sees of the library's use of the API. */
EXPORT int script_flushes(void)
{
	return atomic_load(&flushes);
}

EXPORT int script_enabled(void)
{
	return atomic_load(&enabled) && req && done && ts_fn;
}

/* One kernel record of a buffer: [start, end) on device dev, named name. */
struct script_kern {
	uint64_t start, end;
	uint32_t dev;
	const char *name;
};

/*
 * Hands the library one buffer of n kernel records, as CUPTI's completion callback does,
 * and `drop` records CUPTI dropped before it; returns 0, or -1 where it lent no buffer.
 */
EXPORT int script_buffer(const struct script_kern *k, size_t n, size_t drop)
{
	uint8_t *buf = NULL;
	size_t size = 0, max = 0;

	req(&buf, &size, &max);
	if (!buf || size < n * REC)
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint8_t *p = buf + i * REC;
		uint32_t kind = 10;

		memset(p, 0, REC);
		memcpy(p, &kind, 4);
		memcpy(p + 16, &k[i].start, 8);
		memcpy(p + 24, &k[i].end, 8);
		memcpy(p + 32, &k[i].end, 8);
		memcpy(p + 40, &k[i].dev, 4);
		memcpy(p + 104, &k[i].name, sizeof(k[i].name));
	}
	dropped += drop;
	done(NULL, 0, buf, size, n * REC);
	return 0;
}
