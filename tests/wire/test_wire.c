/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for wire/: round trips of every frame type and value, ROWS
 * batching, stream framing, hostile frames, and interoperability with
 * msgpack-c in both directions (so "plain msgpack" is checked, not assumed).
 */
#define CHECK_SHARED_HERE
#include "test_wire.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


uint64_t dbits(double d)
{
	uint64_t u;

	memcpy(&u, &d, 8);
	return u;
}

double bitsd(uint64_t u)
{
	double d;

	memcpy(&d, &u, 8);
	return d;
}

/* Decodes the first frame of b, asserting success. */
int decode_ok(struct wire_msg *m, const struct wire_buf *b, size_t *used)
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
void frame_of(struct wire_buf *b, const void *payload, size_t n)
{
	uint32_t be = __builtin_bswap32((uint32_t)n);

	wire_buf_reset(b);
	CHECK_EQ(wire_buf_reserve(b, n + 4), 0);
	memcpy(b->data, &be, 4);
	memcpy(b->data + 4, payload, n);
	b->len = n + 4;
}

/* Decodes a hand-made payload, expecting err; returns the cause (caller frees). */
char *decode_raw(const void *payload, size_t n, int err, struct wire_msg *m)
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

char *decode_sbuf(const msgpack_sbuffer *sb, int err, struct wire_msg *m)
{
	return decode_raw(sb->data, sb->size, err, m);
}

void pk_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

/* ---- values ---- */

const uint64_t nan_payload = 0x7ff8000000c0ffeeULL;

void make_values(struct wire_value *v)
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
