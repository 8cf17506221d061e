/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the wire decoder: the input is a byte stream as a
 * peer would send it. Every frame wire_frame_check() delimits goes through
 * wire_decode(); ROWS frames are walked with wire_rows_next() and each row is
 * re-encoded and decoded again, which must give the same values bit for bit.
 * Built as a fuzzer with -DFLEETQ_FUZZ=ON (clang), and always as a replay
 * tool that runs the committed corpus under ctest.
 */
#include "wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Touches every byte a value points at, so ASan sees any bad pointer. */
static unsigned touch(const struct wire_value *v)
{
	const unsigned char *p = v->p;
	unsigned h = 0;
	size_t i;

	if (v->type == WIRE_TEXT || v->type == WIRE_BLOB)
		for (i = 0; i < v->n; i++)
			h += p[i];
	return h;
}

static int same(const struct wire_value *a, const struct wire_value *b)
{
	if (a->type != b->type)
		return 0;
	switch (a->type) {
	case WIRE_INT:
		return a->i == b->i;
	case WIRE_REAL:
		return !memcmp(&a->d, &b->d, sizeof(a->d)); /* bit-exact, NaN included */
	case WIRE_TEXT:
	case WIRE_BLOB:
		return a->n == b->n && (!a->n || !memcmp(a->p, b->p, a->n));
	}
	return 1;
}

/* Re-encodes one decoded row and checks it decodes to the same values. */
static void reencode(const struct wire_value *row, size_t ncols, struct wire_value *back)
{
	struct wire_rows w;
	struct wire_buf b;
	struct wire_msg m;
	size_t i;

	wire_buf_init(&b);
	if (wire_rows_begin(&w, &b, ncols) || wire_rows_add(&w, row) || wire_rows_finish(&w))
		goto out;
	if (wire_decode(&m, b.data, b.len, NULL))
		abort(); /* our own encoding must decode */
	if (wire_rows_next(&m, back) != 1)
		abort();
	for (i = 0; i < ncols; i++)
		if (!same(&row[i], &back[i]))
			abort();
	wire_msg_release(&m);
out:
	wire_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Where touched bytes go, so the reads cannot be optimised away. */
volatile unsigned fuzz_wire_sink;
#define sink fuzz_wire_sink

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0, len;
	char *cause = NULL;

	/* the pre-pass on its own, over the raw input */
	wire_validate(data, size, &cause);
	free(cause);

	while (wire_frame_check(data + off, size - off, 1u << 20, &len) == 1) {
		struct wire_msg m;
		/* an exact-size copy, so reading past the frame is an ASan error */
		uint8_t *frame = malloc(len ? len : 1);

		if (!frame)
			return 0;
		memcpy(frame, data + off, len);
		cause = NULL;
		if (wire_decode(&m, frame, len, &cause) == 0) {
			if (m.type == WIRE_ROWS) {
				size_t n = m.u.rows.ncols ? m.u.rows.ncols : 1;
				struct wire_value *row = calloc(n, sizeof(*row));
				struct wire_value *back = calloc(n, sizeof(*back));
				size_t i, got = 0;
				int rc;

				while (row && back && (rc = wire_rows_next(&m, row)) == 1) {
					for (i = 0; i < m.u.rows.ncols; i++)
						sink += touch(&row[i]);
					reencode(row, m.u.rows.ncols, back);
					got++;
				}
				/* decode checked every row: the walk cannot fail midway */
				if (row && back && (rc != 0 || got != m.u.rows.nrows))
					abort();
				free(row);
				free(back);
			} else if (m.type == WIRE_COLUMNS) {
				for (size_t i = 0; i < m.u.columns.ncols; i++)
					sink += (unsigned)strlen(m.u.columns.names[i]);
			} else if (m.type == WIRE_QUERY) {
				sink += (unsigned)strlen(m.u.query.sql);
				for (size_t i = 0; i < m.u.query.nparams; i++)
					sink += touch(&m.u.query.params[i]);
				for (size_t i = 0; i < m.u.query.npeers; i++)
					sink += (unsigned)strlen(m.u.query.peers[i]);
			}
			wire_msg_release(&m);
		} else if (!cause) {
			abort(); /* every refusal explains itself */
		}
		free(cause);
		free(frame);
		off += len;
	}
	return 0;
}
