/* SPDX-License-Identifier: MIT */
/*
 * The per-process sync wait that agentd records as collectives.sync_ns: calls
 * arrive as they return (inner before outer), top-level calls count once per
 * thread, threads of one process add up, processes apart, a reused thread id
 * starts fresh, an exited process is forgotten.
 */
#include <errno.h>

#include "store_test.h"
#include "syncwait.h"

static void test_sequential(void)
{
	struct syncwait *w = syncwait_new();

	CHECK(w != NULL);
	CHECK_EQ(syncwait_total(w, 10), 0);
	CHECK_EQ(syncwait_call(w, 10, 11, 1000, 100), 0);
	CHECK_EQ(syncwait_call(w, 10, 11, 2000, 300), 0);
	CHECK_EQ(syncwait_total(w, 10), 400);
	/* another thread of the same process adds, even at the same time */
	CHECK_EQ(syncwait_call(w, 10, 12, 2000, 50), 0);
	CHECK_EQ(syncwait_total(w, 10), 450);
	/* another process is apart */
	CHECK_EQ(syncwait_call(w, 20, 21, 2000, 7), 0);
	CHECK_EQ(syncwait_total(w, 20), 7);
	CHECK_EQ(syncwait_total(w, 10), 450);
	/* a negative duration is ignored */
	CHECK_EQ(syncwait_call(w, 10, 11, 5000, -5), 0);
	CHECK_EQ(syncwait_total(w, 10), 450);
	syncwait_free(w);
}

static void test_nested(void)
{
	struct syncwait *w = syncwait_new();

	/* cudaStreamSynchronize [1000, 2000) with cuStreamSynchronize [1100, 1900) inside:
	 * the inner one returns first, the outer one replaces it */
	CHECK_EQ(syncwait_call(w, 1, 1, 1100, 800), 0);
	CHECK_EQ(syncwait_total(w, 1), 800);
	CHECK_EQ(syncwait_call(w, 1, 1, 1000, 1000), 0);
	CHECK_EQ(syncwait_total(w, 1), 1000);
	/* two inner calls in one outer call, and three levels */
	CHECK_EQ(syncwait_call(w, 1, 1, 3100, 100), 0);
	CHECK_EQ(syncwait_call(w, 1, 1, 3300, 100), 0);
	CHECK_EQ(syncwait_call(w, 1, 1, 3050, 500), 0);
	CHECK_EQ(syncwait_call(w, 1, 1, 3000, 1000), 0);
	CHECK_EQ(syncwait_total(w, 1), 2000);
	/* same start, the longer one returns last: it counts, once */
	CHECK_EQ(syncwait_call(w, 1, 1, 5000, 10), 0);
	CHECK_EQ(syncwait_call(w, 1, 1, 5000, 40), 0);
	CHECK_EQ(syncwait_total(w, 1), 2040);
	/* a call starting inside a counted one is nested in it: nothing more */
	CHECK_EQ(syncwait_call(w, 1, 1, 5010, 100), 0);
	CHECK_EQ(syncwait_total(w, 1), 2040);
	/* the outer call of thread 1 does not absorb thread 2's call inside its time */
	CHECK_EQ(syncwait_call(w, 1, 2, 6100, 100), 0);
	CHECK_EQ(syncwait_call(w, 1, 1, 6000, 1000), 0);
	CHECK_EQ(syncwait_total(w, 1), 3140);
	syncwait_free(w);
}

static void test_keep(void)
{
	struct syncwait *w = syncwait_new();
	int64_t want = 0;

	/* SYNCWAIT_KEEP inner calls inside one outer call: all of them replaced */
	for (int i = 0; i < SYNCWAIT_KEEP; i++) {
		CHECK_EQ(syncwait_call(w, 3, 3, 10000 + i * 100, 50), 0);
		want += 50;
	}
	CHECK_EQ(syncwait_total(w, 3), want);
	CHECK_EQ(syncwait_call(w, 3, 3, 9000, 5000), 0);
	CHECK_EQ(syncwait_total(w, 3), 5000);
	/* many sequential calls: each counts, memory stays bounded per thread */
	for (int i = 0; i < 1000; i++)
		CHECK_EQ(syncwait_call(w, 3, 3, 100000 + i * 10, 5), 0);
	CHECK_EQ(syncwait_total(w, 3), 5000 + 5000);
	syncwait_free(w);
}

static void test_reuse_and_drop(void)
{
	struct syncwait *w = syncwait_new();

	CHECK_EQ(syncwait_call(w, 5, 50, 1000, 1000), 0);
	/* thread id 50 again, now in process 6: process 5's call does not nest it */
	CHECK_EQ(syncwait_call(w, 6, 50, 1500, 100), 0);
	CHECK_EQ(syncwait_total(w, 6), 100);
	CHECK_EQ(syncwait_total(w, 5), 1000);
	syncwait_drop_pid(w, 5);
	CHECK_EQ(syncwait_total(w, 5), 0);
	CHECK_EQ(syncwait_total(w, 6), 100);
	/* a new process under the old pid starts from zero */
	CHECK_EQ(syncwait_call(w, 5, 51, 3000, 10), 0);
	CHECK_EQ(syncwait_total(w, 5), 10);
	syncwait_drop_pid(w, 6);
	syncwait_drop_pid(w, 999); /* unknown: nothing */
	CHECK_EQ(syncwait_total(w, 6), 0);
	syncwait_free(w);
	syncwait_free(NULL);
}

int main(void)
{
	test_sequential();
	test_nested();
	test_keep();
	test_reuse_and_drop();
	if (check_failures) {
		fprintf(stderr, "test_syncwait: %d failure(s)\n", check_failures);
		return 1;
	}
	printf("test_syncwait: ok\n");
	return 0;
}
