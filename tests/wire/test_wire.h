/* SPDX-License-Identifier: MIT */
/*
 * What the sources of test_wire share: the checks that count failures, and the helpers that
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

extern int failures;
extern int checks;

#define CHECK(c)                                                                   \
	do {                                                                       \
		checks++;                                                          \
		if (!(c)) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			failures++;                                                \
		}                                                                  \
	} while (0)

#define CHECK_EQ(a, b)                                                             \
	do {                                                                       \
		long long a_ = (long long)(a), b_ = (long long)(b);                \
		checks++;                                                          \
		if (a_ != b_) {                                                    \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, \
				__LINE__, #a, a_, #b, b_);                         \
			failures++;                                                \
		}                                                                  \
	} while (0)

#define CHECK_STR(a, b) CHECK((a) && (b) && strcmp((a), (b)) == 0)

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
