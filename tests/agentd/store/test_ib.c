/* SPDX-License-Identifier: MIT */
/*
 * InfiniBand poller against a fake sysfs tree: two devices, counters and
 * hw_counters, exact deltas between polls, a counter reset, files that are
 * not numbers; and a host without InfiniBand.
 */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ib.h"
#include "store_test.h"

#define MAX_ROWS 64

struct got {
	int n;
	struct {
		char device[32], counter[64];
		int64_t ts_ns, port, value, delta;
	} r[MAX_ROWS];
};

static int collect(void *arg, const struct rec_ib *r)
{
	struct got *g = arg;

	if (g->n >= MAX_ROWS)
		return -ENOBUFS;
	snprintf(g->r[g->n].device, sizeof(g->r[0].device), "%s", r->device);
	snprintf(g->r[g->n].counter, sizeof(g->r[0].counter), "%s", r->counter);
	g->r[g->n].ts_ns = r->ts_ns;
	g->r[g->n].port = r->port;
	g->r[g->n].value = r->value;
	g->r[g->n].delta = r->delta;
	g->n++;
	return 0;
}

/* The row for (device, port, counter), or NULL. */
static const void *find(const struct got *g, const char *dev, int64_t port, const char *ctr,
			int64_t *value, int64_t *delta)
{
	for (int i = 0; i < g->n; i++)
		if (!strcmp(g->r[i].device, dev) && g->r[i].port == port &&
		    !strcmp(g->r[i].counter, ctr)) {
			*value = g->r[i].value;
			*delta = g->r[i].delta;
			return &g->r[i];
		}
	return NULL;
}

#define CHECK_ROW(g, dev, port, ctr, v, d)                                                \
	do {                                                                              \
		int64_t v_, d_;                                                           \
		if (!find(g, dev, port, ctr, &v_, &d_)) {                                 \
			fprintf(stderr, "%s:%d: no row for %s/%d/%s\n", __FILE__,         \
				__LINE__, dev, port, ctr);                                \
			check_failures++;                                                  \
		} else {                                                                  \
			CHECK_EQ(v_, v);                                                 \
			CHECK_EQ(d_, d);                                                 \
		}                                                                         \
	} while (0)

static void mkdirs(const char *path)
{
	char *cmd;

	if (asprintf(&cmd, "mkdir -p '%s'", path) < 0 || system(cmd) != 0)
		DIE("cannot create %s", path);
	free(cmd);
}

static void put(const char *root, const char *dev, int port, const char *dir, const char *name,
		const char *text)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/sys/class/infiniband/%s/ports/%d/%s", root, dev, port,
		 dir);
	mkdirs(path);
	snprintf(path, sizeof(path), "%s/sys/class/infiniband/%s/ports/%d/%s/%s", root, dev, port,
		 dir, name);
	f = fopen(path, "w");
	if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f))
		DIE("cannot write %s", path);
}

static void set(const char *root, const char *dev, int port, const char *dir, const char *name,
		unsigned long long v)
{
	char text[32];

	snprintf(text, sizeof(text), "%llu", v);
	put(root, dev, port, dir, name, text);
}

static void test_fake_tree(void)
{
	char *root = test_tmpdir(), path[1024];
	struct ib_poller_stats st;
	struct ib_poller *p;
	char *cause = NULL;
	struct got g;

	/* mlx5_0: the error counters of DESIGN.md §4, plus data counters */
	set(root, "mlx5_0", 1, "counters", "port_rcv_errors", 5);
	set(root, "mlx5_0", 1, "counters", "symbol_error", 0);
	set(root, "mlx5_0", 1, "counters", "link_downed", 0);
	set(root, "mlx5_0", 1, "counters", "port_xmit_discards", 2);
	set(root, "mlx5_0", 1, "counters", "local_link_integrity_errors", 0);
	set(root, "mlx5_0", 1, "counters", "port_xmit_data", 18446744073709551615ULL);
	set(root, "mlx5_0", 1, "hw_counters", "local_ack_timeout_err", 10);
	set(root, "mlx5_0", 1, "hw_counters", "packet_seq_err", 0);
	put(root, "mlx5_0", 1, "hw_counters", "not_a_number", "N/A");
	set(root, "mlx5_0", 1, "hw_counters", "lifespan", 10); /* a setting: skipped */
	snprintf(path, sizeof(path), "%s/sys/class/infiniband/mlx5_0/ports/1/counters/subdir",
		 root);
	mkdirs(path);
	/* mlx5_1: two ports */
	set(root, "mlx5_1", 1, "counters", "symbol_error", 100);
	set(root, "mlx5_1", 2, "counters", "port_rcv_errors", 7);
	set(root, "mlx5_1", 2, "hw_counters", "packet_seq_err", 1);
	/* not a port */
	snprintf(path, sizeof(path), "%s/sys/class/infiniband/mlx5_1/ports/lag", root);
	mkdirs(path);

	p = ib_poller_new(root, &cause);
	if (!p)
		DIE("ib_poller_new: %s", cause);

	/* first poll: everything, delta NULL */
	memset(&g, 0, sizeof(g));
	CHECK_EQ(ib_poller_poll(p, 111, collect, &g), 11);
	CHECK_EQ(g.n, 11);
	CHECK_ROW(&g, "mlx5_0", 1, "port_rcv_errors", 5, REC_NULL);
	CHECK_ROW(&g, "mlx5_0", 1, "symbol_error", 0, REC_NULL);
	CHECK_ROW(&g, "mlx5_0", 1, "link_downed", 0, REC_NULL);
	CHECK_ROW(&g, "mlx5_0", 1, "port_xmit_discards", 2, REC_NULL);
	CHECK_ROW(&g, "mlx5_0", 1, "local_link_integrity_errors", 0, REC_NULL);
	CHECK_ROW(&g, "mlx5_0", 1, "port_xmit_data", INT64_MAX, REC_NULL);
	CHECK_ROW(&g, "mlx5_0", 1, "local_ack_timeout_err", 10, REC_NULL);
	CHECK_ROW(&g, "mlx5_0", 1, "packet_seq_err", 0, REC_NULL);
	CHECK_ROW(&g, "mlx5_1", 1, "symbol_error", 100, REC_NULL);
	CHECK_ROW(&g, "mlx5_1", 2, "port_rcv_errors", 7, REC_NULL);
	CHECK_ROW(&g, "mlx5_1", 2, "packet_seq_err", 1, REC_NULL);
	CHECK_EQ(g.r[0].ts_ns, 111);

	/* second poll: only what changed, with exact deltas; a reset gives delta = value */
	set(root, "mlx5_0", 1, "counters", "port_rcv_errors", 8);
	set(root, "mlx5_0", 1, "hw_counters", "local_ack_timeout_err", 11);
	set(root, "mlx5_1", 1, "counters", "symbol_error", 3);
	set(root, "mlx5_1", 2, "hw_counters", "packet_seq_err", 1001);
	memset(&g, 0, sizeof(g));
	CHECK_EQ(ib_poller_poll(p, 222, collect, &g), 4);
	CHECK_EQ(g.n, 4);
	CHECK_ROW(&g, "mlx5_0", 1, "port_rcv_errors", 8, 3);
	CHECK_ROW(&g, "mlx5_0", 1, "local_ack_timeout_err", 11, 1);
	CHECK_ROW(&g, "mlx5_1", 1, "symbol_error", 3, 3);
	CHECK_ROW(&g, "mlx5_1", 2, "packet_seq_err", 1001, 1000);
	ib_poller_get_stats(p, &st);
	CHECK_EQ(st.resets, 1);
	CHECK_EQ(st.counters, 11);
	CHECK(st.unreadable >= 2);

	/* a new counter appears: its first row has delta NULL */
	set(root, "mlx5_1", 2, "hw_counters", "rnr_nak_retry_err", 4);
	set(root, "mlx5_1", 1, "counters", "symbol_error", 5);
	memset(&g, 0, sizeof(g));
	CHECK_EQ(ib_poller_poll(p, 333, collect, &g), 2);
	CHECK_ROW(&g, "mlx5_1", 2, "rnr_nak_retry_err", 4, REC_NULL);
	CHECK_ROW(&g, "mlx5_1", 1, "symbol_error", 5, 2);

	/* nothing changed: nothing emitted */
	memset(&g, 0, sizeof(g));
	CHECK_EQ(ib_poller_poll(p, 444, collect, &g), 0);
	CHECK_EQ(g.n, 0);

	/* every IB_FULL_EVERY polls, a full snapshot (delta 0 when unchanged) */
	for (int i = 4; i < IB_FULL_EVERY - 1; i++)
		CHECK_EQ(ib_poller_poll(p, 500, collect, &g), 0);
	memset(&g, 0, sizeof(g));
	CHECK_EQ(ib_poller_poll(p, 555, collect, &g), 12);
	CHECK_ROW(&g, "mlx5_0", 1, "port_rcv_errors", 8, 0);

	ib_poller_free(p);
	test_rmrf(root);
	free(root);
}

static void test_absent(void)
{
	char *root = test_tmpdir(), *cause = NULL;
	struct ib_poller *p;
	struct got g = { 0 };

	/* a host without InfiniBand: no error, no rows */
	p = ib_poller_new(root, &cause);
	CHECK(p != NULL);
	if (p) {
		CHECK_EQ(ib_poller_poll(p, 1, collect, &g), 0);
		CHECK_EQ(ib_poller_poll(p, 2, collect, &g), 0);
		CHECK_EQ(g.n, 0);
		ib_poller_free(p);
	}
	test_rmrf(root);

	/* a root that does not exist is a configuration error */
	p = ib_poller_new(root, &cause);
	CHECK(p == NULL);
	CHECK(cause && strstr(cause, root));
	free(cause);
	ib_poller_free(NULL);
	free(root);
}

int main(void)
{
	test_fake_tree();
	test_absent();
	if (check_failures) {
		fprintf(stderr, "test_ib: %d failure(s)\n", check_failures);
		return 1;
	}
	printf("test_ib: ok\n");
	return 0;
}
