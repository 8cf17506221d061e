/* SPDX-License-Identifier: MIT */
/* Unit tests for wire/: round trips of every frame type and value, and ROWS batching. */
#include "test_wire.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- round trips ---- */

/* HELLO's optional "gpu" key: the agent's GPU sampling status, absent from older agents */
void test_hello_gpu(void)
{
	struct wire_hello h = {
		.agent_version = "0.1.0", .schema_version = 3, .proto_min = 1, .proto_max = 1,
		.gpu_status = "off: cannot load 'libnvidia-ml.so.1'",
	};
	struct wire_buf b;
	struct wire_msg m;

	wire_buf_init(&b);
	CHECK_EQ(wire_put_hello(&b, &h), 0);
	if (!decode_ok(&m, &b, NULL)) {
		CHECK_STR(m.u.hello.gpu_status, "off: cannot load 'libnvidia-ml.so.1'");
		wire_msg_release(&m);
	}
	wire_buf_reset(&b);
	h.gpu_status = NULL;
	CHECK_EQ(wire_put_hello(&b, &h), 0);
	if (!decode_ok(&m, &b, NULL)) {
		CHECK(m.u.hello.gpu_status == NULL);
		CHECK_STR(m.u.hello.agent_version, "0.1.0");
		wire_msg_release(&m);
	}
	wire_buf_release(&b);
}

void test_hello(void)
{
	struct wire_hello h = {
		.agent_version = "0.1.0", .schema_version = 1, .node = "gpu-node-017",
		.realtime_ns = 1700000000123456789LL, .monotonic_ns = 987654321,
		.clock_source = "tai", .ring_drops = 0, .store_lag_ns = -5,
		.proto_min = 1, .proto_max = 1, .peer_identity = "CN=fleetq-client",
	};
	struct wire_buf b;
	struct wire_msg m;

	wire_buf_init(&b);
	CHECK_EQ(wire_put_hello(&b, &h), 0);
	if (!decode_ok(&m, &b, NULL)) {
		CHECK_EQ(m.version, 1);
		CHECK_EQ(m.type, WIRE_HELLO);
		CHECK_STR(m.u.hello.agent_version, "0.1.0");
		CHECK_EQ(m.u.hello.schema_version, 1);
		CHECK_STR(m.u.hello.node, "gpu-node-017");
		CHECK_EQ(m.u.hello.realtime_ns, 1700000000123456789LL);
		CHECK_EQ(m.u.hello.monotonic_ns, 987654321);
		CHECK_STR(m.u.hello.clock_source, "tai");
		CHECK_EQ(m.u.hello.store_lag_ns, -5);
		CHECK_EQ(m.u.hello.proto_min, 1);
		CHECK_EQ(m.u.hello.proto_max, 1);
		CHECK_STR(m.u.hello.peer_identity, "CN=fleetq-client");
		wire_msg_release(&m);
		CHECK(m.priv == NULL);
	}
	/* absent strings come back NULL */
	wire_buf_reset(&b);
	h.peer_identity = NULL;
	h.node = NULL;
	CHECK_EQ(wire_put_hello(&b, &h), 0);
	if (!decode_ok(&m, &b, NULL)) {
		CHECK(m.u.hello.peer_identity == NULL);
		CHECK(m.u.hello.node == NULL);
		CHECK_STR(m.u.hello.agent_version, "0.1.0");
		wire_msg_release(&m);
	}
	wire_buf_release(&b);
}

void test_query(void)
{
	static const char blob[] = { 0, 1, 0, 2 };
	struct wire_value params[] = {
		{ .type = WIRE_NULL },
		{ .type = WIRE_INT, .i = INT64_MIN },
		{ .type = WIRE_REAL, .d = -0.0 },
		{ .type = WIRE_TEXT, .p = "ncclAllReduce", .n = 13 },
		{ .type = WIRE_BLOB, .p = blob, .n = sizeof(blob) },
	};
	const char *peers[] = { "node-a:7411", "node-b:7411" };
	struct wire_query q = {
		.id = UINT64_MAX, .sql = "SELECT rank, p99(dur_ns) FROM collectives WHERE x > ?",
		.nparams = 5, .params = params, .max_rows = 1000000, .max_bytes = 1 << 30,
		.timeout_ms = 30000, .npeers = 2, .peers = peers, .on_behalf = "ops-alice",
	};
	struct wire_buf b;
	struct wire_msg m;

	wire_buf_init(&b);
	CHECK_EQ(wire_put_query(&b, &q), 0);
	if (!decode_ok(&m, &b, NULL)) {
		const struct wire_query *d = &m.u.query;

		CHECK_EQ(m.type, WIRE_QUERY);
		CHECK(d->id == UINT64_MAX);
		CHECK_STR(d->sql, q.sql);
		CHECK_EQ(d->nparams, 5);
		CHECK_EQ(d->params[0].type, WIRE_NULL);
		CHECK_EQ(d->params[1].type, WIRE_INT);
		CHECK(d->params[1].i == INT64_MIN);
		CHECK_EQ(d->params[2].type, WIRE_REAL);
		CHECK(dbits(d->params[2].d) == dbits(-0.0));
		CHECK_EQ(d->params[3].type, WIRE_TEXT);
		CHECK(d->params[3].n == 13 && !memcmp(d->params[3].p, "ncclAllReduce", 13));
		CHECK_EQ(d->params[4].type, WIRE_BLOB);
		CHECK(d->params[4].n == 4 && !memcmp(d->params[4].p, blob, 4));
		CHECK_EQ(d->max_rows, 1000000);
		CHECK_EQ(d->max_bytes, 1 << 30);
		CHECK_EQ(d->timeout_ms, 30000);
		CHECK_EQ(d->npeers, 2);
		CHECK_STR(d->peers[0], "node-a:7411");
		CHECK_STR(d->peers[1], "node-b:7411");
		CHECK_STR(d->on_behalf, "ops-alice");
		wire_msg_release(&m);
	}
	/* minimal query: optional keys default to 0 / NULL */
	wire_buf_reset(&b);
	CHECK_EQ(wire_put_query(&b, &(struct wire_query){ .id = 7, .sql = "" }), 0);
	if (!decode_ok(&m, &b, NULL)) {
		CHECK_EQ(m.u.query.id, 7);
		CHECK_STR(m.u.query.sql, "");
		CHECK_EQ(m.u.query.nparams, 0);
		CHECK_EQ(m.u.query.npeers, 0);
		CHECK_EQ(m.u.query.max_rows, 0);
		CHECK(m.u.query.peers == NULL);
		CHECK(m.u.query.on_behalf == NULL);
		wire_msg_release(&m);
	}
	CHECK_EQ(wire_put_query(&b, &(struct wire_query){ .id = 7 }), -EINVAL);
	wire_buf_release(&b);
}

void test_columns(void)
{
	const char *names[20];
	char store[20][8];
	struct wire_buf b;
	struct wire_msg m;
	size_t used;
	int i;

	for (i = 0; i < 20; i++) {
		snprintf(store[i], sizeof(store[i]), "c%d", i);
		names[i] = store[i];
	}
	wire_buf_init(&b);
	CHECK_EQ(wire_put_columns(&b, 20, names), 0);
	CHECK_EQ(wire_put_columns(&b, 0, NULL), 0);
	if (!decode_ok(&m, &b, &used)) {
		CHECK_EQ(m.type, WIRE_COLUMNS);
		CHECK_EQ(m.u.columns.ncols, 20);
		CHECK_STR(m.u.columns.names[0], "c0");
		CHECK_STR(m.u.columns.names[19], "c19");
		CHECK(m.u.columns.names[20] == NULL);
		wire_msg_release(&m);
	}
	/* the second frame follows the first in the same buffer */
	{
		struct wire_buf rest = { b.data + used, b.len - used, b.len - used };

		if (!decode_ok(&m, &rest, NULL)) {
			CHECK_EQ(m.u.columns.ncols, 0);
			wire_msg_release(&m);
		}
	}
	wire_buf_release(&b);
}

void test_end_error_ping(void)
{
	struct wire_buf b;
	struct wire_msg m;
	size_t off = 0, used;
	struct wire_buf view;

	wire_buf_init(&b);
	CHECK_EQ(wire_put_end(&b, &(struct wire_end){ .id = 42, .rows = 1000000, .status = WIRE_OK,
						       .elapsed_ns = 123456789 }), 0);
	CHECK_EQ(wire_put_end(&b, &(struct wire_end){ .id = 43, .rows = 500, .status = WIRE_E_ROWS,
						       .truncated = 1, .message = "row limit 500",
						       .node = "leaf-3" }), 0);
	CHECK_EQ(wire_put_error(&b, WIRE_E_VERSION, "speak version 1"), 0);
	CHECK_EQ(wire_put_error(&b, WIRE_E_AUTH, NULL), 0);
	CHECK_EQ(wire_put_ping(&b, WIRE_PING, &(struct wire_ping){ .t1_ns = 111 }), 0);
	CHECK_EQ(wire_put_ping(&b, WIRE_PONG, &(struct wire_ping){ .t1_ns = 111, .t2_ns = -222 }),
		 0);
	CHECK_EQ(wire_put_ping(&b, WIRE_END, &(struct wire_ping){ 0 }), -EINVAL);

#define NEXT()                                                                  \
	(view = (struct wire_buf){ b.data + off, b.len - off, b.len - off },       \
	 decode_ok(&m, &view, &used) ? -1 : (off += used, 0))

	if (!NEXT()) {
		CHECK_EQ(m.type, WIRE_END);
		CHECK_EQ(m.u.end.id, 42);
		CHECK_EQ(m.u.end.rows, 1000000);
		CHECK_EQ(m.u.end.status, 0);
		CHECK_EQ(m.u.end.elapsed_ns, 123456789);
		CHECK_EQ(m.u.end.truncated, 0);
		CHECK(m.u.end.message == NULL);
		CHECK(m.u.end.node == NULL);
		wire_msg_release(&m);
	}
	if (!NEXT()) {
		CHECK_EQ(m.u.end.status, WIRE_E_ROWS);
		CHECK_EQ(m.u.end.truncated, 1);
		CHECK_STR(m.u.end.message, "row limit 500");
		CHECK_STR(m.u.end.node, "leaf-3");
		wire_msg_release(&m);
	}
	if (!NEXT()) {
		CHECK_EQ(m.type, WIRE_ERROR);
		CHECK_EQ(m.u.error.code, WIRE_E_VERSION);
		CHECK_STR(m.u.error.message, "speak version 1");
		wire_msg_release(&m);
	}
	if (!NEXT()) {
		CHECK_EQ(m.u.error.code, WIRE_E_AUTH);
		CHECK(m.u.error.message == NULL);
		wire_msg_release(&m);
	}
	if (!NEXT()) {
		CHECK_EQ(m.type, WIRE_PING);
		CHECK_EQ(m.u.ping.t1_ns, 111);
		wire_msg_release(&m);
	}
	if (!NEXT()) {
		CHECK_EQ(m.type, WIRE_PONG);
		CHECK_EQ(m.u.ping.t1_ns, 111);
		CHECK_EQ(m.u.ping.t2_ns, -222);
		wire_msg_release(&m);
	}
	CHECK_EQ(off, b.len);
#undef NEXT
	wire_buf_release(&b);
}

static void check_values(const struct wire_value *got, const struct wire_value *want, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		CHECK_EQ(got[i].type, want[i].type);
		switch (want[i].type) {
		case WIRE_INT:
			CHECK(got[i].i == want[i].i);
			break;
		case WIRE_REAL:
			/* bit-exact: NaN payload and the sign of zero included */
			CHECK(dbits(got[i].d) == dbits(want[i].d));
			break;
		case WIRE_TEXT:
		case WIRE_BLOB:
			CHECK(got[i].n == want[i].n);
			CHECK(got[i].n == 0 || !memcmp(got[i].p, want[i].p, got[i].n));
			break;
		}
	}
}

/* m holds two rows equal to v[0..20), then nothing; releases m. */
static void check_two_rows(struct wire_msg *m, const struct wire_value *v)
{
	struct wire_value got[20];

	CHECK_EQ(m->type, WIRE_ROWS);
	CHECK_EQ(m->u.rows.nrows, 2);
	CHECK_EQ(m->u.rows.ncols, 20);
	for (int i = 0; i < 2; i++) {
		memset(got, 0xa5, sizeof(got));
		CHECK_EQ(wire_rows_next(m, got), 1);
		check_values(got, v, 20);
		CHECK(isnan(got[6].d));
		CHECK(signbit(got[9].d) && got[9].d == 0.0);
	}
	CHECK_EQ(wire_rows_next(m, got), 0);
	CHECK_EQ(wire_rows_next(m, got), 0);
	wire_msg_release(m);
}

void test_values(void)
{
	struct wire_value v[20];
	struct wire_rows w;
	struct wire_buf b;
	struct wire_msg m;
	int i;

	make_values(v);
	wire_buf_init(&b);
	CHECK_EQ(wire_rows_begin(&w, &b, 20), 0);
	CHECK_EQ(wire_rows_add(&w, v), 0);
	for (i = 0; i < 20; i++) /* same row again, value at a time */
		CHECK_EQ(wire_rows_put(&w, &v[i]), 0);
	CHECK_EQ(w.nrows, 2);
	CHECK_EQ(wire_rows_finish(&w), 0);
	if (!decode_ok(&m, &b, NULL))
		check_two_rows(&m, v);
	/* the same frame reopened without the check: the same rows */
	CHECK_EQ(wire_rows_reopen(&m, b.data, b.len), 0);
	check_two_rows(&m, v);
	/* not a ROWS frame: refused */
	{
		struct wire_buf p;
		struct wire_ping ping = { .t1_ns = 1 };

		wire_buf_init(&p);
		CHECK_EQ(wire_put_ping(&p, WIRE_PING, &ping), 0);
		CHECK_EQ(wire_rows_reopen(&m, p.data, p.len), -EPROTO);
		CHECK_EQ(wire_rows_reopen(&m, p.data, 2), -EPROTO);
		wire_buf_release(&p);
	}
	wire_buf_release(&b);
}

/* ---- ROWS batching ---- */

void test_rows_batching(void)
{
	struct wire_value row[4], got[4];
	struct wire_rows w;
	struct wire_buf b;
	struct wire_msg m;
	char text[32];
	size_t off = 0, used, frames = 0, prev;
	int64_t i, seen = 0;
	const int64_t N = 100000;
	int rc;

	wire_buf_init(&b);
	CHECK_EQ(wire_rows_begin(&w, &b, 4), 0);
	for (i = 0; i < N; i++) {
		snprintf(text, sizeof(text), "kernel_%06lld", (long long)i);
		row[0] = (struct wire_value){ .type = WIRE_INT, .i = i % 8 };
		row[1] = (struct wire_value){ .type = WIRE_INT, .i = 1700000000000000000LL + i };
		row[2] = (struct wire_value){ .type = WIRE_REAL, .d = i * 0.5 };
		row[3] = (struct wire_value){ .type = WIRE_TEXT, .p = text, .n = strlen(text) };
		CHECK_EQ(wire_rows_add(&w, row), 0);
		if (wire_rows_bytes(&w) >= WIRE_ROWS_TARGET) {
			CHECK_EQ(wire_rows_finish(&w), 0);
			CHECK_EQ(wire_rows_begin(&w, &b, 4), 0);
		}
	}
	CHECK_EQ(wire_rows_finish(&w), 0);
	/* finishing an empty batch removes its frame entirely */
	prev = b.len;
	CHECK_EQ(wire_rows_begin(&w, &b, 4), 0);
	CHECK(b.len > prev);
	CHECK_EQ(wire_rows_finish(&w), 0);
	CHECK_EQ(b.len, prev);

	while (off < b.len) {
		struct wire_buf view = { b.data + off, b.len - off, b.len - off };

		if (decode_ok(&m, &view, &used))
			break;
		frames++;
		CHECK(used - 4 <= WIRE_ROWS_TARGET + 64);
		CHECK_EQ(m.u.rows.ncols, 4);
		while ((rc = wire_rows_next(&m, got)) == 1) {
			snprintf(text, sizeof(text), "kernel_%06lld", (long long)seen);
			CHECK_EQ(got[0].i, seen % 8);
			CHECK_EQ(got[1].i, 1700000000000000000LL + seen);
			CHECK(got[2].d == seen * 0.5);
			CHECK(got[3].type == WIRE_TEXT && got[3].n == strlen(text) &&
			      !memcmp(got[3].p, text, got[3].n));
			seen++;
		}
		CHECK_EQ(rc, 0);
		wire_msg_release(&m);
		off += used;
	}
	CHECK_EQ(seen, N);
	CHECK(frames > 10);

	/* misuse: half rows, bad types, mixing add and put */
	wire_buf_reset(&b);
	CHECK_EQ(wire_rows_begin(&w, &b, 0), -EINVAL);
	CHECK_EQ(wire_rows_begin(&w, &b, 2), 0);
	CHECK_EQ(wire_rows_put(&w, &row[0]), 0);
	CHECK_EQ(wire_rows_add(&w, row), -EINVAL);
	CHECK_EQ(wire_rows_put(&w, &(struct wire_value){ .type = 99 }), -EINVAL);
	CHECK_EQ(wire_rows_finish(&w), -EINVAL);
	CHECK_EQ(b.len, 0);
	wire_buf_release(&b);
}

/* A value that cannot fit one frame is refused and the frame stays valid. */
void test_rows_oversize(void)
{
	size_t n = WIRE_FRAME_MAX + 1;
	char *big = calloc(1, n);
	struct wire_value v[2] = {
		{ .type = WIRE_INT, .i = 1 },
		{ .type = WIRE_BLOB, .p = big, .n = 10 },
	};
	struct wire_rows w;
	struct wire_buf b;
	struct wire_msg m;

	CHECK(big != NULL);
	if (!big)
		return;
	wire_buf_init(&b);
	CHECK_EQ(wire_rows_begin(&w, &b, 2), 0);
	CHECK_EQ(wire_rows_add(&w, v), 0);
	v[1].n = n;
	CHECK_EQ(wire_rows_add(&w, v), -EMSGSIZE);
	v[1].n = WIRE_FRAME_MAX - 10; /* fits alone, not after row 1 + headers */
	CHECK_EQ(wire_rows_put(&w, &v[0]), 0);
	CHECK_EQ(wire_rows_put(&w, &v[1]), -EMSGSIZE);
	CHECK_EQ(w.nrows, 1);
	CHECK_EQ(wire_rows_finish(&w), 0);
	if (!decode_ok(&m, &b, NULL)) {
		CHECK_EQ(m.u.rows.nrows, 1);
		wire_msg_release(&m);
	}
	CHECK_EQ(wire_put_columns(&b, 1, (const char *[]){ big }), 0); /* "" name: fine */
	memset(big, 'x', n - 1);
	CHECK_EQ(wire_put_error(&b, 1, big), -EMSGSIZE);
	wire_buf_release(&b);
	free(big);
}
