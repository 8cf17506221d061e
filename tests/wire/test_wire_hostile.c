/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for wire/: stream framing, and hostile frames (container counts, depth,
 * versions, types, shapes) refused whole with a cause.
 */
#include "test_wire.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- framing ---- */

void test_frame_check(void)
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
void test_truncation(void)
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

void test_hostile_counts(void)
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

void test_depth(void)
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

void test_versions_and_types(void)
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

void test_shapes(void)
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
