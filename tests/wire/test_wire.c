/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for wire/: round trips of every frame type and value, ROWS
 * batching, stream framing, hostile frames, and interoperability with
 * msgpack-c in both directions (so "plain msgpack" is checked, not assumed).
 */
#include "wire.h"
#include "check.h"

#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

static uint64_t dbits(double d)
{
	uint64_t u;

	memcpy(&u, &d, 8);
	return u;
}

static double bitsd(uint64_t u)
{
	double d;

	memcpy(&d, &u, 8);
	return d;
}

/* Decodes the first frame of b, asserting success. */
static int decode_ok(struct wire_msg *m, const struct wire_buf *b, size_t *used)
{
	size_t len = 0;
	char *cause = NULL;
	int rc;

	rc = wire_frame_check(b->data, b->len, 0, &len);
	CHECK_EQ(rc, 1);
	if (rc != 1)
		return -1;
	rc = wire_decode(m, b->data, len, &cause);
	if (rc)
		fprintf(stderr, "decode failed: %d %s\n", rc, cause ? cause : "(no cause)");
	CHECK_EQ(rc, 0);
	free(cause);
	if (used)
		*used = len;
	return rc;
}

/* Wraps a raw msgpack payload in a length header. */
static void frame_of(struct wire_buf *b, const void *payload, size_t n)
{
	uint32_t be = __builtin_bswap32((uint32_t)n);

	wire_buf_reset(b);
	CHECK_EQ(wire_buf_reserve(b, n + 4), 0);
	memcpy(b->data, &be, 4);
	memcpy(b->data + 4, payload, n);
	b->len = n + 4;
}

/* Decodes a hand-made payload, expecting err; returns the cause (caller frees). */
static char *decode_raw(const void *payload, size_t n, int err, struct wire_msg *m)
{
	struct wire_buf b;
	char *cause = NULL;
	int rc;

	wire_buf_init(&b);
	frame_of(&b, payload, n);
	rc = wire_decode(m, b.data, b.len, &cause);
	if (rc != err)
		fprintf(stderr, "expected %d got %d (%s)\n", err, rc, cause ? cause : "");
	CHECK_EQ(rc, err);
	if (err)
		CHECK(cause != NULL);
	if (!rc)
		wire_msg_release(m);
	wire_buf_release(&b);
	return cause;
}

static char *decode_sbuf(const msgpack_sbuffer *sb, int err, struct wire_msg *m)
{
	return decode_raw(sb->data, sb->size, err, m);
}

static void pk_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

/* ---- round trips ---- */

/* HELLO's optional "gpu" key: the agent's GPU sampling status, absent from older agents */
static void test_hello_gpu(void)
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

static void test_hello(void)
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

static void test_query(void)
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

static void test_columns(void)
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

static void test_end_error_ping(void)
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

/* ---- values ---- */

static const uint64_t nan_payload = 0x7ff8000000c0ffeeULL;

static void make_values(struct wire_value *v)
{
	static const char utf8[] = "r\xc3\xa4nk \xe2\x9c\x93";
	static const char nul_text[] = { 'a', 0, 'b' };
	static const char nul_blob[] = { 0, 0, (char)0xff, 0 };
	int k = 0;

	memset(v, 0, 20 * sizeof(*v));
	v[k++] = (struct wire_value){ .type = WIRE_NULL };
	v[k++] = (struct wire_value){ .type = WIRE_INT, .i = INT64_MIN };
	v[k++] = (struct wire_value){ .type = WIRE_INT, .i = INT64_MAX };
	v[k++] = (struct wire_value){ .type = WIRE_INT, .i = (1LL << 53) + 1 };
	v[k++] = (struct wire_value){ .type = WIRE_INT, .i = -1 };
	v[k++] = (struct wire_value){ .type = WIRE_INT, .i = 0 };
	v[k++] = (struct wire_value){ .type = WIRE_REAL, .d = bitsd(nan_payload) };
	v[k++] = (struct wire_value){ .type = WIRE_REAL, .d = INFINITY };
	v[k++] = (struct wire_value){ .type = WIRE_REAL, .d = -INFINITY };
	v[k++] = (struct wire_value){ .type = WIRE_REAL, .d = -0.0 };
	v[k++] = (struct wire_value){ .type = WIRE_REAL, .d = 1e308 };
	v[k++] = (struct wire_value){ .type = WIRE_TEXT, .p = utf8, .n = sizeof(utf8) - 1 };
	v[k++] = (struct wire_value){ .type = WIRE_TEXT, .p = "", .n = 0 };
	v[k++] = (struct wire_value){ .type = WIRE_TEXT, .p = nul_text, .n = 3 };
	v[k++] = (struct wire_value){ .type = WIRE_BLOB, .p = nul_blob, .n = 4 };
	v[k++] = (struct wire_value){ .type = WIRE_BLOB, .p = NULL, .n = 0 };
	v[k++] = (struct wire_value){ .type = WIRE_INT, .i = -33 };
	v[k++] = (struct wire_value){ .type = WIRE_INT, .i = 4294967296LL };
	v[k++] = (struct wire_value){ .type = WIRE_INT, .i = -2147483649LL };
	v[k++] = (struct wire_value){ .type = WIRE_INT, .i = 65535 };
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

static void test_values(void)
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

static void test_rows_batching(void)
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
static void test_rows_oversize(void)
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

/* ---- framing ---- */

static void test_frame_check(void)
{
	uint8_t buf[64] = { 0, 0, 0, 10 };
	size_t len = 0;

	for (size_t k = 0; k < 4; k++)
		CHECK_EQ(wire_frame_check(buf, k, 0, &len), 0);
	CHECK_EQ(wire_frame_check(buf, 4, 0, &len), 0);
	CHECK_EQ(wire_frame_check(buf, 13, 0, &len), 0);
	CHECK_EQ(wire_frame_check(buf, 14, 0, &len), 1);
	CHECK_EQ(len, 14);
	len = 0;
	CHECK_EQ(wire_frame_check(buf, 64, 0, &len), 1); /* next frame's bytes behind it */
	CHECK_EQ(len, 14);
	CHECK_EQ(wire_frame_check(buf, 64, 9, &len), -EMSGSIZE);
	CHECK_EQ(wire_frame_check(buf, 64, 10, &len), 1);
	/* an oversized announcement is refused before its bytes arrive */
	memcpy(buf, "\x01\x00\x00\x01", 4);
	CHECK_EQ(wire_frame_check(buf, 4, 0, &len), -EMSGSIZE);
	memcpy(buf, "\xff\xff\xff\xff", 4);
	CHECK_EQ(wire_frame_check(buf, 4, 0, &len), -EMSGSIZE);
	CHECK_EQ(wire_frame_check(buf, 4, SIZE_MAX, &len), -EMSGSIZE);
	memcpy(buf, "\x01\x00\x00\x00", 4); /* exactly WIRE_FRAME_MAX: allowed, need more */
	CHECK_EQ(wire_frame_check(buf, 4, 0, &len), 0);
}

/* Every prefix of every valid frame must fail cleanly (ASan build checks reads). */
static void test_truncation(void)
{
	struct wire_value v[20];
	struct wire_rows w;
	struct wire_buf b;
	const char *names[] = { "rank", "dur_ns" };
	size_t off = 0, len, k;
	int nframes = 0;

	make_values(v);
	wire_buf_init(&b);
	wire_put_hello(&b, &(struct wire_hello){ .node = "n1", .agent_version = "x",
						 .proto_min = 1, .proto_max = 1 });
	wire_put_query(&b, &(struct wire_query){ .id = 1, .sql = "SELECT 1", .nparams = 3,
						 .params = v + 11, .npeers = 1,
						 .peers = (const char *[]){ "p:1" } });
	wire_put_columns(&b, 2, names);
	wire_rows_begin(&w, &b, 20);
	wire_rows_add(&w, v);
	wire_rows_add(&w, v);
	wire_rows_finish(&w);
	wire_put_end(&b, &(struct wire_end){ .id = 1, .message = "m", .node = "n" });
	wire_put_error(&b, 4, "bad");
	wire_put_ping(&b, WIRE_PONG, &(struct wire_ping){ 1, 2 });

	while (wire_frame_check(b.data + off, b.len - off, 0, &len) == 1) {
		nframes++;
		for (k = 0; k < len; k++) {
			struct wire_msg m;
			char *cause = NULL;
			uint8_t *cut = malloc(k ? k : 1);
			uint32_t be;
			int rc;

			memcpy(cut, b.data + off, k);
			/* as delivered: header intact, bytes missing */
			rc = wire_decode(&m, cut, k, &cause);
			CHECK(rc < 0);
			CHECK(cause != NULL);
			CHECK(m.priv == NULL);
			free(cause);
			cause = NULL;
			/* length patched to match: the msgpack itself is cut */
			if (k >= 4) {
				be = __builtin_bswap32((uint32_t)(k - 4));
				memcpy(cut, &be, 4);
				rc = wire_decode(&m, cut, k, &cause);
				CHECK(rc < 0);
				CHECK(cause != NULL);
				free(cause);
			}
			free(cut);
		}
		off += len;
	}
	CHECK_EQ(nframes, 7);
	CHECK_EQ(off, b.len);
	wire_buf_release(&b);
}

/* ---- hostile frames ---- */

static bool has(const char *cause, const char *what)
{
	bool ok = cause && strstr(cause, what);

	if (!ok)
		fprintf(stderr, "cause \"%s\" lacks \"%s\"\n", cause ? cause : "(null)", what);
	return ok;
}

/* Huge counts with a handful of bytes behind them. */
static void hostile_counts(void)
{
	static const uint8_t rows_arr[] = {
		0x93, 1, 0xcc, 202, 0xdd, 0xff, 0xff, 0xff, 0xff, 0x91, 1,
	};
	static const uint8_t outer[] = { 0xdd, 0xff, 0xff, 0xff, 0xff, 1, 0xcc, 202, 0x90 };
	static const uint8_t map32[] = { 0x93, 1, 100, 0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a', 1 };
	static const uint8_t str32[] = {
		0x93, 1, 0xcc, 201, 0x91, 0xdb, 0xff, 0xff, 0xff, 0xff, 'x',
	};
	static const uint8_t row32[] = {
		0x93, 1, 0xcc, 202, 0x91, 0xdd, 0xff, 0xff, 0xff, 0xff, 1,
	};
	static const uint8_t bin32[] = {
		0x93, 1, 0xcc, 202, 0x91, 0x91, 0xc6, 0x7f, 0xff, 0xff, 0xff,
	};
	struct wire_msg m;
	char *c;

	c = decode_raw(rows_arr, sizeof(rows_arr), -EPROTO, &m);
	CHECK(has(c, "array of 4294967295 elements"));
	CHECK(has(c, "claims more than"));
	free(c);
	/* the outer array: version and type are read first, then refused */
	c = decode_raw(outer, sizeof(outer), -EPROTO, &m);
	CHECK(has(c, "claims more than"));
	free(c);
	c = decode_raw(map32, sizeof(map32), -EPROTO, &m);
	CHECK(has(c, "map of 4294967295 elements"));
	free(c);
	c = decode_raw(str32, sizeof(str32), -EPROTO, &m);
	CHECK(has(c, "string of 4294967295 bytes"));
	free(c);
	c = decode_raw(row32, sizeof(row32), -EPROTO, &m);
	CHECK(has(c, "claims more than"));
	free(c);
	c = decode_raw(bin32, sizeof(bin32), -EPROTO, &m);
	CHECK(has(c, "claims more than"));
	free(c);
	c = NULL;
	CHECK_EQ(wire_validate(rows_arr + 4, sizeof(rows_arr) - 4, &c), -EPROTO);
	free(c);
}

static void test_hostile_counts(void)
{
	pid_t pid;
	int status;

	hostile_counts();
#ifndef UNDER_ASAN
	/*
	 * Again in a child with 64 MiB of address space: an unpacker that
	 * allocated count*24 bytes (96 GiB) would fail with ENOMEM rather than
	 * the "claims more than" refusal the checks expect.
	 */
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct rlimit rl = { 64 << 20, 64 << 20 };

		if (setrlimit(RLIMIT_AS, &rl))
			_exit(3);
		check_failures = 0;
		hostile_counts();
		_exit(check_failures ? 1 : 0);
	}
	CHECK(pid > 0);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
#else
	(void)pid;
	(void)status;
#endif
}

static void test_depth(void)
{
	uint8_t buf[256];
	struct wire_msg m;
	size_t n = 0, i;
	char *c;

	/* HELLO with an unknown key holding nested arrays */
	buf[n++] = 0x93;
	buf[n++] = 1;
	buf[n++] = 100;
	buf[n++] = 0x83;
	buf[n++] = 0xa4, memcpy(buf + n, "pmin", 4), n += 4, buf[n++] = 1;
	buf[n++] = 0xa4, memcpy(buf + n, "pmax", 4), n += 4, buf[n++] = 1;
	buf[n++] = 0xa6, memcpy(buf + n, "future", 6), n += 6;
	for (i = 0; i < 100; i++)
		buf[n++] = 0x91;
	buf[n++] = 0xc0;
	c = decode_raw(buf, n, -EPROTO, &m);
	CHECK(has(c, "nested deeper"));
	free(c);
	/* the same at depth 10 decodes: unknown keys are skipped */
	n -= 91;
	buf[n - 1] = 0xc0;
	c = decode_raw(buf, n, 0, &m);
	free(c);
}

static void test_versions_and_types(void)
{
	static const uint8_t v2[] = { 0x93, 2, 100, 0x80 };
	static const uint8_t v2odd[] = { 0x95, 2, 0xcd, 0x01, 0x2c, 0xc1, 0xc1, 0xc1 };
	static const uint8_t v0[] = { 0x92, 0, 0xcc, 200 };
	static const uint8_t unk[] = { 0x93, 1, 0xcc, 150, 0x80 };
	static const uint8_t four[] = { 0x94, 1, 100, 0x80, 0xc0 };
	static const uint8_t stray[] = { 0x93, 1, 0xcc, 201, 0x90, 0xc0 };
	static const uint8_t c1[] = { 0x93, 1, 0xcc, 201, 0x91, 0xc1 };
	static const uint8_t notarr[] = { 0x81, 1, 100 };
	static const uint8_t strver[] = { 0x93, 0xa1, '1', 100, 0x80 };
	struct wire_msg m;
	char *c;

	c = decode_raw(v2, sizeof(v2), -EPROTONOSUPPORT, &m);
	CHECK_EQ(m.version, 2);
	CHECK_EQ(m.type, WIRE_HELLO);
	CHECK(has(c, "version 2"));
	free(c);
	/* another version's frame need not make sense beyond version and type */
	c = decode_raw(v2odd, sizeof(v2odd), -EPROTONOSUPPORT, &m);
	CHECK_EQ(m.version, 2);
	CHECK_EQ(m.type, 300);
	free(c);
	c = decode_raw(v0, sizeof(v0), -EPROTONOSUPPORT, &m);
	CHECK_EQ(m.version, 0);
	CHECK_EQ(m.type, WIRE_QUERY);
	free(c);
	c = decode_raw(unk, sizeof(unk), -EPROTO, &m);
	CHECK_EQ(m.type, 150);
	CHECK(has(c, "unknown frame type 150"));
	free(c);
	free(decode_raw(four, sizeof(four), -EPROTO, &m));
	c = decode_raw(stray, sizeof(stray), -EPROTO, &m);
	CHECK(has(c, "stray"));
	free(c);
	free(decode_raw(c1, sizeof(c1), -EPROTO, &m));
	free(decode_raw(notarr, sizeof(notarr), -EPROTO, &m));
	free(decode_raw(strver, sizeof(strver), -EPROTO, &m));
	free(decode_raw("", 0, -EPROTO, &m));
	CHECK_EQ(wire_decode(&m, "\0\0\0", 3, NULL), -EPROTO);
	CHECK_EQ(wire_decode(&m, "\0\0\0\5\x93\1\x64\x80", 8, NULL), -EPROTO); /* length lies */

	CHECK_STR(wire_type_name(WIRE_ROWS), "ROWS");
	CHECK_STR(wire_type_name(7), "?");
	CHECK_STR(wire_status_name(WIRE_OK), "ok");
	CHECK_STR(wire_status_name(WIRE_E_SQL), "sql error");
	CHECK_STR(wire_status_name(-1), "?");
	CHECK_STR(wire_status_name(99), "?");
}

/* Builds [1, type, body] with msgpack-c; body written by the callback. */
typedef void (*body_fn)(msgpack_packer *pk);

static char *shape(int type, body_fn body, int err)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct wire_msg m;
	char *c;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint8(&pk, 1);
	msgpack_pack_uint16(&pk, (uint16_t)type);
	body(&pk);
	c = decode_sbuf(&sb, err, &m);
	msgpack_sbuffer_destroy(&sb);
	return c;
}

static void b_array(msgpack_packer *pk) { msgpack_pack_array(pk, 0); }
static void b_query_nosql(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 1);
	pk_str(pk, "id");
	msgpack_pack_int(pk, 1);
}
static void b_query_intsql(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 2);
	pk_str(pk, "id");
	msgpack_pack_int(pk, 1);
	pk_str(pk, "sql");
	msgpack_pack_int(pk, 1);
}
static void b_query_nulsql(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 2);
	pk_str(pk, "id");
	msgpack_pack_int(pk, 1);
	pk_str(pk, "sql");
	msgpack_pack_str(pk, 10);
	msgpack_pack_str_body(pk, "SELECT 1\0x", 10);
}
static void b_query_dup(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 3);
	pk_str(pk, "id");
	msgpack_pack_int(pk, 1);
	pk_str(pk, "sql");
	pk_str(pk, "SELECT 1");
	pk_str(pk, "id");
	msgpack_pack_int(pk, 2);
}
static void b_query_negid(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 2);
	pk_str(pk, "id");
	msgpack_pack_int(pk, -1);
	pk_str(pk, "sql");
	pk_str(pk, "SELECT 1");
}
static void b_end_bigint(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 3);
	pk_str(pk, "id");
	msgpack_pack_int(pk, 1);
	pk_str(pk, "rows");
	msgpack_pack_uint64(pk, (uint64_t)INT64_MAX + 1);
	pk_str(pk, "status");
	msgpack_pack_int(pk, 0);
}
static void b_hello_intkey(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 1);
	msgpack_pack_int(pk, 1);
	msgpack_pack_int(pk, 1);
}
static void b_rows_map(msgpack_packer *pk) { msgpack_pack_map(pk, 0); }
static void b_rows_mismatch(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 2);
	msgpack_pack_array(pk, 2);
	msgpack_pack_int(pk, 1);
	msgpack_pack_int(pk, 2);
	msgpack_pack_array(pk, 3);
	msgpack_pack_int(pk, 1);
	msgpack_pack_int(pk, 2);
	msgpack_pack_int(pk, 3);
}
static void b_rows_empty_row(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_array(pk, 0);
}
static void b_rows_nested(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_array(pk, 2);
	msgpack_pack_int(pk, 1);
	msgpack_pack_map(pk, 0);
}
static void b_rows_bool(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_array(pk, 1);
	msgpack_pack_true(pk);
}
static void b_rows_uint64(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_array(pk, 1);
	msgpack_pack_uint64(pk, UINT64_MAX);
}
static void b_rows_notrow(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 1);
	msgpack_pack_int(pk, 5);
}
static void b_columns_int(msgpack_packer *pk)
{
	msgpack_pack_array(pk, 2);
	pk_str(pk, "a");
	msgpack_pack_int(pk, 5);
}
static void b_ping_missing(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 1);
	pk_str(pk, "t1");
	msgpack_pack_int(pk, 5);
}
static void b_hello_future(msgpack_packer *pk)
{
	msgpack_pack_map(pk, 4);
	pk_str(pk, "future");
	msgpack_pack_map(pk, 1);
	pk_str(pk, "x");
	msgpack_pack_ext(pk, 3, 7);
	msgpack_pack_ext_body(pk, "abc", 3);
	pk_str(pk, "pmin");
	msgpack_pack_int(pk, 1);
	pk_str(pk, "pmax");
	msgpack_pack_int(pk, 2);
	pk_str(pk, "node");
	msgpack_pack_nil(pk);
}

static void test_shapes(void)
{
	char *c;

	c = shape(WIRE_HELLO, b_array, -EBADMSG);
	CHECK(has(c, "HELLO frame: body is not a map"));
	free(c);
	c = shape(WIRE_QUERY, b_query_nosql, -EBADMSG);
	CHECK(has(c, "required key \"sql\""));
	free(c);
	free(shape(WIRE_QUERY, b_query_intsql, -EBADMSG));
	c = shape(WIRE_QUERY, b_query_nulsql, -EBADMSG);
	CHECK(has(c, "NUL"));
	free(c);
	c = shape(WIRE_QUERY, b_query_dup, -EBADMSG);
	CHECK(has(c, "twice"));
	free(c);
	free(shape(WIRE_QUERY, b_query_negid, -EBADMSG));
	c = shape(WIRE_END, b_end_bigint, -EBADMSG);
	CHECK(has(c, "INT64_MAX"));
	free(c);
	free(shape(WIRE_HELLO, b_hello_intkey, -EBADMSG));
	free(shape(WIRE_ROWS, b_rows_map, -EBADMSG));
	c = shape(WIRE_ROWS, b_rows_mismatch, -EBADMSG);
	CHECK(has(c, "row 2 has 3 values, expected 2"));
	free(c);
	free(shape(WIRE_ROWS, b_rows_empty_row, -EBADMSG));
	free(shape(WIRE_ROWS, b_rows_nested, -EBADMSG));
	free(shape(WIRE_ROWS, b_rows_bool, -EBADMSG));
	c = shape(WIRE_ROWS, b_rows_uint64, -EBADMSG);
	CHECK(has(c, "INT64_MAX"));
	free(c);
	free(shape(WIRE_ROWS, b_rows_notrow, -EBADMSG));
	free(shape(WIRE_COLUMNS, b_columns_int, -EBADMSG));
	c = shape(WIRE_PONG, b_ping_missing, -EBADMSG);
	CHECK(has(c, "\"t2\""));
	free(c);
	free(shape(WIRE_PING, b_ping_missing, 0));
	/* unknown keys (any msgpack inside) are ignored; nil string = absent */
	free(shape(WIRE_HELLO, b_hello_future, 0));
}

/* ---- interoperability with msgpack-c ---- */

/* Our ROWS frame, read back by msgpack-c's unpacker. */
static void test_interop_out(void)
{
	struct wire_value v[20];
	struct wire_rows w;
	struct wire_buf b;
	msgpack_zone zone;
	msgpack_object o, row;
	char *c = NULL;

	make_values(v);
	wire_buf_init(&b);
	wire_rows_begin(&w, &b, 20);
	wire_rows_add(&w, v);
	wire_rows_finish(&w);
	CHECK_EQ(wire_validate(b.data + 4, b.len - 4, &c), 0);
	free(c);
	msgpack_zone_init(&zone, 2048);
	CHECK_EQ(msgpack_unpack(b.data + 4, b.len - 4, NULL, &zone, &o), MSGPACK_UNPACK_SUCCESS);
	CHECK_EQ(o.type, MSGPACK_OBJECT_ARRAY);
	if (o.type == MSGPACK_OBJECT_ARRAY && o.via.array.size == 3) {
		CHECK_EQ(o.via.array.ptr[0].via.u64, 1);
		CHECK_EQ(o.via.array.ptr[1].via.u64, WIRE_ROWS);
		CHECK_EQ(o.via.array.ptr[2].via.array.size, 1);
		row = o.via.array.ptr[2].via.array.ptr[0];
		CHECK_EQ(row.via.array.size, 20);
		if (row.via.array.size == 20) {
			CHECK_EQ(row.via.array.ptr[0].type, MSGPACK_OBJECT_NIL);
			CHECK(row.via.array.ptr[1].via.i64 == INT64_MIN);
			CHECK(row.via.array.ptr[2].via.u64 == (uint64_t)INT64_MAX);
			CHECK_EQ(row.via.array.ptr[6].type, MSGPACK_OBJECT_FLOAT64);
			CHECK(dbits(row.via.array.ptr[6].via.f64) == nan_payload);
			CHECK_EQ(row.via.array.ptr[13].type, MSGPACK_OBJECT_STR);
			CHECK_EQ(row.via.array.ptr[13].via.str.size, 3);
			CHECK_EQ(row.via.array.ptr[14].type, MSGPACK_OBJECT_BIN);
			CHECK_EQ(row.via.array.ptr[17].via.u64, 4294967296LL);
		}
	}
	msgpack_zone_destroy(&zone);
	wire_buf_release(&b);
}

/* msgpack-c's packer (other widths, float32) read by our decoder. */
static void test_interop_in(void)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct wire_buf b;
	struct wire_msg m;
	struct wire_value got[6];

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_fix_uint64(&pk, 1); /* widest encoding of small numbers */
	msgpack_pack_fix_uint32(&pk, WIRE_ROWS);
	msgpack_pack_array(&pk, 1);
	msgpack_pack_array(&pk, 6);
	msgpack_pack_float(&pk, 1.5f);
	msgpack_pack_fix_int64(&pk, -7);
	msgpack_pack_fix_uint16(&pk, 9);
	msgpack_pack_str(&pk, 40);
	msgpack_pack_str_body(&pk, "0123456789012345678901234567890123456789", 40);
	msgpack_pack_bin(&pk, 1);
	msgpack_pack_bin_body(&pk, "\xff", 1);
	msgpack_pack_float(&pk, -0.0f);

	wire_buf_init(&b);
	frame_of(&b, sb.data, sb.size);
	if (!decode_ok(&m, &b, NULL)) {
		CHECK_EQ(m.u.rows.ncols, 6);
		CHECK_EQ(wire_rows_next(&m, got), 1);
		CHECK(got[0].type == WIRE_REAL && got[0].d == 1.5);
		CHECK(got[1].type == WIRE_INT && got[1].i == -7);
		CHECK(got[2].type == WIRE_INT && got[2].i == 9);
		CHECK(got[3].type == WIRE_TEXT && got[3].n == 40);
		CHECK(got[4].type == WIRE_BLOB && got[4].n == 1);
		CHECK(got[5].type == WIRE_REAL && signbit(got[5].d));
		wire_msg_release(&m);
	}
	wire_buf_release(&b);
	msgpack_sbuffer_destroy(&sb);
}

static void test_buf(void)
{
	struct wire_buf b;

	wire_buf_init(&b);
	CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
	CHECK_EQ(wire_buf_reserve(&b, 1000), 0);
	CHECK(b.cap >= 1000);
	b.len = 10;
	wire_buf_reset(&b);
	CHECK_EQ(b.len, 0);
	CHECK(b.cap >= 1000);
	CHECK_EQ(wire_buf_reserve(&b, SIZE_MAX), -ENOMEM);
	wire_buf_release(&b);
	CHECK(b.data == NULL);
	wire_buf_release(&b); /* twice is harmless */
}

/* END's outcome names are PROTOCOL.md's; an older agent's display names still parse. */
static void test_outcomes(void)
{
	static const char *const doc[] = { "ok",      "truncated", "timeout", "unreachable",
					   "tls",     "sql error", "protocol", "columns",
					   "partial", "agent" };

	for (size_t i = 0; i < sizeof(doc) / sizeof(doc[0]); i++) {
		int o = wire_outcome_parse(doc[i]);

		CHECK(o > WIRE_OUT_PENDING);
		CHECK_STR(wire_outcome_name(o), doc[i]);
	}
	CHECK_EQ(wire_outcome_parse("protocol error"), WIRE_OUT_PROTOCOL);
	CHECK_EQ(wire_outcome_parse("columns differ"), WIRE_OUT_COLUMNS);
	CHECK_EQ(wire_outcome_parse("agent error"), WIRE_OUT_AGENT);
	CHECK_EQ(wire_outcome_parse("busy"), WIRE_OUT_BUSY);
	CHECK_EQ(wire_outcome_parse("pending"), -1);
	CHECK_EQ(wire_outcome_parse("bogus"), -1);
	CHECK_STR(wire_outcome_name(WIRE_NOUTCOMES), "?");
	CHECK_STR(wire_outcome_name(-1), "?");
}

int main(void)
{
	test_buf();
	test_outcomes();
	test_hello();
	test_hello_gpu();
	test_query();
	test_columns();
	test_end_error_ping();
	test_values();
	test_rows_batching();
	test_rows_oversize();
	test_frame_check();
	test_truncation();
	test_hostile_counts();
	test_depth();
	test_versions_and_types();
	test_shapes();
	test_interop_out();
	test_interop_in();
	return check_done("test_wire");
}
