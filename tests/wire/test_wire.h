/* SPDX-License-Identifier: MIT */
/*
 * What the sources of test_wire share: tests/check.h's checks, counted across them, and the helpers that
 * build and decode frames by hand. test_wire.c holds them and main(); the frame round trips
 * are in test_wire_frames.c, framing and hostile frames in test_wire_hostile.c.
 */
#ifndef FQ_TEST_WIRE_H
#define FQ_TEST_WIRE_H

#include "wire.h"

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* the checks of tests/check.h, counted across test_wire's sources */
#define CHECK_SHARED
#include "check.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* test_wire.c: helpers */
uint64_t dbits(double d);
double bitsd(uint64_t u);
int decode_ok(struct wire_msg *m, const struct wire_buf *b, size_t *used);
void frame_of(struct wire_buf *b, const void *payload, size_t n);
char *decode_raw(const void *payload, size_t n, int err, struct wire_msg *m);
char *decode_sbuf(const msgpack_sbuffer *sb, int err, struct wire_msg *m);
void pk_str(msgpack_packer *pk, const char *s);
extern const uint64_t nan_payload;
void make_values(struct wire_value *v);

/* test_wire_frames.c */
void test_hello_gpu(void);
void test_hello(void);
void test_query(void);
void test_columns(void);
void test_end_error_ping(void);
void test_values(void);
void test_rows_batching(void);
void test_rows_oversize(void);

/* test_wire_hostile.c */
void test_frame_check(void);
void test_truncation(void);
void test_hostile_counts(void);
void test_depth(void);
void test_versions_and_types(void);
void test_shapes(void);

#endif /* FQ_TEST_WIRE_H */
