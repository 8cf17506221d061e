/* SPDX-License-Identifier: MIT */
/*
 * Memory budgets for SQLite, per thread (docs/security.md "Limits").
 *
 * sqlite3_hard_heap_limit64() is process-wide: a query that reached it would
 * make the trace writer's next batch fail too, and it needs SQLite's memory
 * statistics, whose global mutex agentd turns off. Instead SQLite's allocator
 * is replaced by one that puts a 16-byte header before each block: its size
 * and the budget it was charged to (NULL for threads that have none: the
 * writer, the checkpointer, the event loop). A thread that runs a query
 * opens a budget; while it is open every allocation SQLite makes on that
 * thread is charged to it, and one that would pass the budget's limit, or
 * the limit of all budgets together, fails, which SQLite turns into
 * SQLITE_NOMEM for that statement only. The same check enforces the query's
 * deadline where SQLite has no progress callback (preparing a statement that
 * expands to millions of nodes): allocations fail once it has passed.
 *
 * A block is uncharged from the budget it was charged to whichever thread
 * frees it (a pooled connection's page cache outlives the query that filled
 * it); a budget is freed with its last block.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "fqsql.h"

#define HDR 16 /* keeps malloc's 16-byte alignment */
/* What a block costs beyond its size: our header and malloc's, charged too
 * (a statement that expands into millions of small nodes pays for them). */
#define OVERHEAD (HDR + 8)
#define CLOCK_EVERY 64 /* small allocations between deadline checks */
#define BIG 4096       /* an allocation at least this large always checks the deadline */

struct fqsql_budget {
	int64_t limit;
	int64_t used;  /* bytes charged and not freed: __atomic */
	int64_t refs;  /* blocks charged + 1 while open: __atomic */
	int64_t peak;
	int64_t deadline_ns; /* __atomic: fqsql_mem_stop() sets it from another thread */
	int stopped;	     /* __atomic */
	unsigned tick;
	int hit; /* enum fqsql_mem_hit */
};

struct hdr {
	int64_t size;
	struct fqsql_budget *b;
};

static _Thread_local struct fqsql_budget *cur;
static int64_t total_used; /* charged to any budget: __atomic */
static int64_t total_limit;
static int installed;

static void budget_put(struct fqsql_budget *b)
{
	if (__atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(b);
}

/* Charges n more bytes to b; 0, or -1 (b->hit says why) when that is refused. */
static int charge(struct fqsql_budget *b, int64_t n)
{
	int64_t used;

	int64_t deadline = __atomic_load_n(&b->deadline_ns, __ATOMIC_RELAXED);

	if (deadline && (n >= BIG || ++b->tick % CLOCK_EVERY == 0) &&
	    clock_ns(CLOCK_MONOTONIC) >= deadline) {
		b->hit = __atomic_load_n(&b->stopped, __ATOMIC_RELAXED) ? FQSQL_MEM_STOPPED
									 : FQSQL_MEM_DEADLINE;
		return -1;
	}
	if (b->hit == FQSQL_MEM_DEADLINE || b->hit == FQSQL_MEM_STOPPED)
		return -1;
	used = __atomic_add_fetch(&b->used, n, __ATOMIC_RELAXED);
	if (used > b->limit) {
		__atomic_sub_fetch(&b->used, n, __ATOMIC_RELAXED);
		b->hit = FQSQL_MEM_QUERY;
		return -1;
	}
	if (total_limit && __atomic_add_fetch(&total_used, n, __ATOMIC_RELAXED) > total_limit) {
		__atomic_sub_fetch(&total_used, n, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&b->used, n, __ATOMIC_RELAXED);
		b->hit = FQSQL_MEM_TOTAL;
		return -1;
	}
	if (used > b->peak)
		b->peak = used;
	return 0;
}

static void uncharge(struct fqsql_budget *b, int64_t n)
{
	__atomic_sub_fetch(&b->used, n, __ATOMIC_RELAXED);
	if (total_limit)
		__atomic_sub_fetch(&total_used, n, __ATOMIC_RELAXED);
}

/* Unchecked: the few bytes malloc gave beyond the request, or a block of an ended query. */
static void charge_more(struct fqsql_budget *b, int64_t n)
{
	__atomic_add_fetch(&b->used, n, __ATOMIC_RELAXED);
	if (total_limit)
		__atomic_add_fetch(&total_used, n, __ATOMIC_RELAXED);
}

/*
 * A block's size is what malloc gave (malloc_usable_size, as SQLite's own
 * allocator reports): SQLite grows a string by what it is told fits, and a
 * size of exactly the request would make it realloc for every character.
 */
static void *mem_malloc(int n)
{
	struct fqsql_budget *b = cur;
	struct hdr *h;

	if (n <= 0)
		return NULL;
	if (b && charge(b, (int64_t)n + OVERHEAD))
		return NULL;
	h = malloc(HDR + (size_t)n);
	if (!h) {
		if (b)
			uncharge(b, (int64_t)n + OVERHEAD);
		return NULL;
	}
	h->size = (int64_t)malloc_usable_size(h) - HDR;
	h->b = b;
	if (b) {
		charge_more(b, h->size - n);
		__atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
	}
	return (char *)h + HDR;
}

static void mem_free(void *p)
{
	struct hdr *h;

	if (!p)
		return;
	h = (struct hdr *)((char *)p - HDR);
	if (h->b) {
		uncharge(h->b, h->size + OVERHEAD);
		budget_put(h->b);
	}
	free(h);
}

/*
 * Growth is charged to the block's own budget and checked only while that
 * budget is the running thread's (a block of an ended query grows unchecked:
 * nothing of a query's own runs then).
 */
static void *mem_realloc(void *p, int n)
{
	struct hdr *h, *nh;
	int64_t old, grow;

	if (!p)
		return mem_malloc(n);
	if (n <= 0)
		return NULL;
	h = (struct hdr *)((char *)p - HDR);
	old = h->size;
	grow = n > old ? n - old : 0;
	if (h->b && grow) {
		if (h->b == cur) {
			if (charge(h->b, grow))
				return NULL;
		} else {
			charge_more(h->b, grow);
		}
	}
	nh = realloc(h, HDR + (size_t)n);
	if (!nh) {
		if (h->b && grow)
			uncharge(h->b, grow);
		return NULL;
	}
	nh->size = (int64_t)malloc_usable_size(nh) - HDR;
	/* charged so far: old + grow; the block now holds nh->size */
	if (nh->b && nh->size > old + grow)
		charge_more(nh->b, nh->size - old - grow);
	else if (nh->b && nh->size < old + grow)
		uncharge(nh->b, old + grow - nh->size);
	return (char *)nh + HDR;
}

static int mem_size(void *p)
{
	return p ? (int)((struct hdr *)((char *)p - HDR))->size : 0;
}

static int mem_roundup(int n)
{
	return (n + 7) & ~7;
}

static int mem_init(void *unused)
{
	(void)unused;
	return SQLITE_OK;
}

static void mem_shutdown(void *unused)
{
	(void)unused;
}

int fqsql_mem_install(int64_t total)
{
	static const sqlite3_mem_methods m = {
		mem_malloc, mem_free, mem_realloc, mem_size, mem_roundup, mem_init, mem_shutdown,
		NULL,
	};

	if (sqlite3_config(SQLITE_CONFIG_MALLOC, &m) != SQLITE_OK)
		return -EBUSY;
	total_limit = total > 0 ? total : 0;
	installed = 1;
	return 0;
}

int fqsql_mem_begin(int64_t limit, int64_t deadline_ns)
{
	struct fqsql_budget *b;

	if (!installed || cur)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->limit = limit > 0 ? limit : INT64_MAX;
	b->refs = 1;
	b->deadline_ns = deadline_ns;
	cur = b;
	return 0;
}

void fqsql_mem_set_deadline(int64_t deadline_ns)
{
	if (cur)
		__atomic_store_n(&cur->deadline_ns, deadline_ns, __ATOMIC_RELAXED);
}

struct fqsql_budget *fqsql_mem_current(void)
{
	return cur;
}

void fqsql_mem_stop(struct fqsql_budget *b)
{
	if (!b)
		return;
	__atomic_store_n(&b->stopped, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&b->deadline_ns, 1, __ATOMIC_RELAXED);
}

int fqsql_mem_expired(void)
{
	struct fqsql_budget *b = cur;
	int64_t deadline;

	if (!b)
		return 0;
	deadline = __atomic_load_n(&b->deadline_ns, __ATOMIC_RELAXED);
	if (!deadline || clock_ns(CLOCK_MONOTONIC) < deadline)
		return 0;
	b->hit = __atomic_load_n(&b->stopped, __ATOMIC_RELAXED) ? FQSQL_MEM_STOPPED
								 : FQSQL_MEM_DEADLINE;
	return 1;
}

int fqsql_mem_hit(void)
{
	return cur ? cur->hit : 0;
}

int64_t fqsql_mem_peak(void)
{
	return cur ? cur->peak : 0;
}

void fqsql_mem_end(void)
{
	struct fqsql_budget *b = cur;

	cur = NULL;
	if (b)
		budget_put(b);
}

int64_t fqsql_mem_total(void)
{
	return __atomic_load_n(&total_used, __ATOMIC_RELAXED);
}
