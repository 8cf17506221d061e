/* SPDX-License-Identifier: MIT */
/*
 * Encodes and decodes 1M rows of (int, int, double, text ~12 bytes) as ROWS
 * frames of WIRE_ROWS_TARGET bytes, and prints rows/s next to baselines run
 * over the same bytes in the same process:
 *   encode vs msgpack-c's packer writing the same msgpack into an sbuffer;
 *   decode vs msgpack-c's msgpack_unpack over the same frame payloads
 *   (it builds msgpack_objects in a zone; no validation pre-pass), and vs a
 *   plain memcpy of the stream (the floor any decoder pays to touch the bytes).
 * Usage: bench_wire [rows] [repeats]; best of the repeats is printed.
 */
#include "wire.h"

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char names[1024][16];

static void make_row(struct wire_value *row, long i)
{
	const char *t = names[i & 1023];

	row[0] = (struct wire_value){ .type = WIRE_INT, .i = i & 7 };
	row[1] = (struct wire_value){ .type = WIRE_INT, .i = 1700000000000000000LL + i * 1000 };
	row[2] = (struct wire_value){ .type = WIRE_REAL, .d = i * 0.25 + 0.1 };
	row[3] = (struct wire_value){ .type = WIRE_TEXT, .p = t, .n = strlen(t) };
}

static int encode(struct wire_buf *out, long nrows)
{
	struct wire_value row[4];
	struct wire_rows w;
	long i;

	wire_buf_reset(out);
	if (wire_rows_begin(&w, out, 4))
		return -1;
	for (i = 0; i < nrows; i++) {
		make_row(row, i);
		if (wire_rows_add(&w, row))
			return -1;
		if (wire_rows_bytes(&w) >= WIRE_ROWS_TARGET) {
			if (wire_rows_finish(&w) || wire_rows_begin(&w, out, 4))
				return -1;
		}
	}
	return wire_rows_finish(&w);
}

/* The same msgpack through msgpack-c's packer (one big buffer, no framing). */
static void encode_msgpack_c(msgpack_sbuffer *sb, long nrows)
{
	struct wire_value row[4];
	msgpack_packer pk;
	long i;

	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	for (i = 0; i < nrows; i++) {
		make_row(row, i);
		msgpack_pack_array(&pk, 4);
		msgpack_pack_int64(&pk, row[0].i);
		msgpack_pack_int64(&pk, row[1].i);
		msgpack_pack_double(&pk, row[2].d);
		msgpack_pack_str(&pk, row[3].n);
		msgpack_pack_str_body(&pk, row[3].p, row[3].n);
	}
}

static long decode(const struct wire_buf *in, double *check)
{
	struct wire_value v[4];
	struct wire_msg m;
	size_t off = 0, len;
	long rows = 0;
	double sum = 0;

	while (wire_frame_check(in->data + off, in->len - off, 0, &len) == 1) {
		if (wire_decode(&m, in->data + off, len, NULL))
			return -1;
		while (wire_rows_next(&m, v) == 1) {
			sum += v[2].d + (double)v[3].n + (double)v[0].i;
			rows++;
		}
		wire_msg_release(&m);
		off += len;
	}
	*check = sum;
	return rows;
}

static long decode_msgpack_c(const struct wire_buf *in, double *check)
{
	msgpack_zone zone;
	msgpack_object o;
	size_t off = 0, len, i;
	long rows = 0;
	double sum = 0;

	msgpack_zone_init(&zone, 1 << 16);
	while (wire_frame_check(in->data + off, in->len - off, 0, &len) == 1) {
		msgpack_object body;

		if (msgpack_unpack(in->data + off + 4, len - 4, NULL, &zone, &o) !=
		    MSGPACK_UNPACK_SUCCESS)
			return -1;
		body = o.via.array.ptr[2];
		for (i = 0; i < body.via.array.size; i++) {
			msgpack_object *r = body.via.array.ptr[i].via.array.ptr;

			sum += r[2].via.f64 + (double)r[3].via.str.size + (double)r[0].via.i64;
			rows++;
		}
		msgpack_zone_clear(&zone);
		off += len;
	}
	msgpack_zone_destroy(&zone);
	*check = sum;
	return rows;
}

int main(int argc, char **argv)
{
	long nrows = argc > 1 ? atol(argv[1]) : 1000000;
	int reps = argc > 2 ? atoi(argv[2]) : 5, r;
	double t, enc = 1e9, enc_c = 1e9, dec = 1e9, dec_c = 1e9, cpy = 1e9, s1 = 0, s2 = 0;
	struct wire_buf buf;
	msgpack_sbuffer sb;
	char *copy;
	long got = 0, got_c = 0;
	int i;

	for (i = 0; i < 1024; i++)
		snprintf(names[i], sizeof(names[i]), "kernel_%05d", i * 37);
	wire_buf_init(&buf);
	msgpack_sbuffer_init(&sb);
	if (encode(&buf, nrows)) {
		fprintf(stderr, "bench_wire: encode failed\n");
		return 1;
	}
	copy = malloc(buf.len);
	if (!copy)
		return 1;
	for (r = 0; r < reps; r++) {
		t = now();
		encode(&buf, nrows);
		t = now() - t;
		enc = t < enc ? t : enc;
		t = now();
		encode_msgpack_c(&sb, nrows);
		t = now() - t;
		enc_c = t < enc_c ? t : enc_c;
		t = now();
		got = decode(&buf, &s1);
		t = now() - t;
		dec = t < dec ? t : dec;
		t = now();
		got_c = decode_msgpack_c(&buf, &s2);
		t = now() - t;
		dec_c = t < dec_c ? t : dec_c;
		t = now();
		memcpy(copy, buf.data, buf.len);
		__asm__ volatile("" : : "r"(copy) : "memory");
		t = now() - t;
		cpy = t < cpy ? t : cpy;
	}
	if (got != nrows || got_c != nrows || s1 != s2) {
		fprintf(stderr, "bench_wire: decoders disagree (%ld/%ld rows)\n", got, got_c);
		return 1;
	}
	printf("rows %ld, %.1f bytes/row, %zu bytes in frames of <= %u payload bytes, best of %d\n",
	       nrows, (double)buf.len / nrows, buf.len, WIRE_ROWS_TARGET, reps);
	printf("encode  wire      %8.2f Mrows/s  %6.0f MB/s\n", nrows / enc / 1e6,
	       buf.len / enc / 1e6);
	printf("encode  msgpack-c %8.2f Mrows/s  (wire is %.2fx)\n", nrows / enc_c / 1e6,
	       enc_c / enc);
	printf("decode  wire      %8.2f Mrows/s  %6.0f MB/s (row check + rows_next)\n",
	       nrows / dec / 1e6, buf.len / dec / 1e6);
	printf("decode  msgpack-c %8.2f Mrows/s  (wire is %.2fx; msgpack_unpack, no validation)\n",
	       nrows / dec_c / 1e6, dec_c / dec);
	printf("memcpy            %8.2f Mrows/s  (wire decode costs %.1fx a memcpy)\n",
	       nrows / cpy / 1e6, dec / cpy);
	free(copy);
	msgpack_sbuffer_destroy(&sb);
	wire_buf_release(&buf);
	return 0;
}
