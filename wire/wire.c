/* SPDX-License-Identifier: MIT */
/*
 * fleetq wire protocol v1: encoder and validating decoder.
 *
 * Frames are written with direct byte stores (the msgpack encoding of our few
 * types is trivial and this is the hot path of every result stream). Decoding
 * never hands untrusted bytes to an allocating unpacker: wire_validate() first
 * walks the payload and checks every container and string length against the
 * bytes left (DESIGN.md section 7), then a typed pass reads the body. The
 * encoding is plain msgpack; tests cross-check it against msgpack-c.
 *
 * One file on purpose, though long: it is one concern, the bytes of the protocol, and each
 * frame's encoder, validator and decoder sit together so that a field changes in one place,
 * with the always-inline per-value helpers of the ROWS hot paths in the same unit.
 */
#include "wire.h"
#include "cause.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
/* The per-value helpers of the ROWS hot paths; -O2 alone leaves them out of line. */
#define hot_inline inline __attribute__((always_inline))

const char *wire_type_name(int type)
{
	switch (type) {
	case WIRE_HELLO:
		return "HELLO";
	case WIRE_ERROR:
		return "ERROR";
	case WIRE_PING:
		return "PING";
	case WIRE_PONG:
		return "PONG";
	case WIRE_QUERY:
		return "QUERY";
	case WIRE_COLUMNS:
		return "COLUMNS";
	case WIRE_ROWS:
		return "ROWS";
	case WIRE_END:
		return "END";
	}
	return "?";
}

const char *wire_status_name(int status)
{
	static const char *const names[] = {
		[WIRE_OK] = "ok",
		[WIRE_E_PROTO] = "protocol error",
		[WIRE_E_VERSION] = "protocol version mismatch",
		[WIRE_E_AUTH] = "client certificate refused",
		[WIRE_E_SQL] = "sql error",
		[WIRE_E_DENIED] = "query denied",
		[WIRE_E_TIMEOUT] = "query timed out",
		[WIRE_E_ROWS] = "row limit reached",
		[WIRE_E_BYTES] = "byte limit reached",
		[WIRE_E_MEMORY] = "memory limit reached",
		[WIRE_E_BUSY] = "agent busy",
		[WIRE_E_SHUTDOWN] = "agent shutting down",
		[WIRE_E_INTERNAL] = "internal error",
		[WIRE_E_PEER] = "relay peer failed",
	};

	if (status < 0 || (size_t)status >= sizeof(names) / sizeof(names[0]) || !names[status])
		return "?";
	return names[status];
}

static const char *const outcome_names[WIRE_NOUTCOMES] = {
	[WIRE_OUT_PENDING] = "pending",	      [WIRE_OUT_OK] = "ok",
	[WIRE_OUT_TRUNCATED] = "truncated",     [WIRE_OUT_TIMEOUT] = "timeout",
	[WIRE_OUT_UNREACHABLE] = "unreachable", [WIRE_OUT_TLS] = "tls",
	[WIRE_OUT_SQL] = "sql error",	      [WIRE_OUT_PROTOCOL] = "protocol",
	[WIRE_OUT_COLUMNS] = "columns",	      [WIRE_OUT_PARTIAL] = "partial",
	[WIRE_OUT_AGENT] = "agent",	      [WIRE_OUT_INTERRUPTED] = "interrupted",
	[WIRE_OUT_BUSY] = "busy",
};

const char *wire_outcome_name(int outcome)
{
	return outcome >= 0 && outcome < WIRE_NOUTCOMES ? outcome_names[outcome] : "?";
}

int wire_outcome_parse(const char *name)
{
	/* What agents sent before the names above were fixed (fleetq's display names). */
	static const struct {
		const char *name;
		int outcome;
	} old[] = {
		{ "protocol error", WIRE_OUT_PROTOCOL },
		{ "columns differ", WIRE_OUT_COLUMNS },
		{ "agent error", WIRE_OUT_AGENT },
	};

	for (int o = WIRE_OUT_OK; o < WIRE_NOUTCOMES; o++)
		if (!strcmp(outcome_names[o], name))
			return o;
	for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++)
		if (!strcmp(old[i].name, name))
			return old[i].outcome;
	return -1;
}

/* ---- buffers ---- */

void wire_buf_init(struct wire_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void wire_buf_release(struct wire_buf *b)
{
	free(b->data);
	wire_buf_init(b);
}

void wire_buf_reset(struct wire_buf *b)
{
	b->len = 0;
}

static int buf_grow(struct wire_buf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 256;
	char *p;

	if (more > SIZE_MAX - b->len)
		return -ENOMEM;
	while (cap - b->len < more) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int wire_buf_reserve(struct wire_buf *b, size_t more)
{
	if (likely(b->cap - b->len >= more))
		return 0;
	return buf_grow(b, more);
}

/* ---- msgpack writers: the caller has reserved the bytes ---- */

static inline uint8_t *put_be16(uint8_t *p, uint16_t v)
{
	v = __builtin_bswap16(v);
	memcpy(p, &v, 2);
	return p + 2;
}

static inline uint8_t *put_be32(uint8_t *p, uint32_t v)
{
	v = __builtin_bswap32(v);
	memcpy(p, &v, 4);
	return p + 4;
}

static inline uint8_t *put_be64(uint8_t *p, uint64_t v)
{
	v = __builtin_bswap64(v);
	memcpy(p, &v, 8);
	return p + 8;
}

static hot_inline uint8_t *mp_uint(uint8_t *p, uint64_t v)
{
	if (v < 128) {
		*p++ = (uint8_t)v;
	} else if (v < 256) {
		*p++ = 0xcc;
		*p++ = (uint8_t)v;
	} else if (v < 65536) {
		*p++ = 0xcd;
		p = put_be16(p, (uint16_t)v);
	} else if (v <= UINT32_MAX) {
		*p++ = 0xce;
		p = put_be32(p, (uint32_t)v);
	} else {
		*p++ = 0xcf;
		p = put_be64(p, v);
	}
	return p;
}

/* Smallest encoding, as msgpack-c's packer does: non-negative values as uint. */
static hot_inline uint8_t *mp_int(uint8_t *p, int64_t v)
{
	if (v >= 0)
		return mp_uint(p, (uint64_t)v);
	if (v >= -32) {
		*p++ = (uint8_t)v;
	} else if (v >= INT8_MIN) {
		*p++ = 0xd0;
		*p++ = (uint8_t)v;
	} else if (v >= INT16_MIN) {
		*p++ = 0xd1;
		p = put_be16(p, (uint16_t)v);
	} else if (v >= INT32_MIN) {
		*p++ = 0xd2;
		p = put_be32(p, (uint32_t)v);
	} else {
		*p++ = 0xd3;
		p = put_be64(p, (uint64_t)v);
	}
	return p;
}

/* Always float64, so NaN payloads, infinities and -0.0 survive bit for bit. */
static inline uint8_t *mp_double(uint8_t *p, double d)
{
	uint64_t bits;

	memcpy(&bits, &d, 8);
	*p++ = 0xcb;
	return put_be64(p, bits);
}

static inline uint8_t *mp_str_hdr(uint8_t *p, uint32_t n)
{
	if (n < 32) {
		*p++ = (uint8_t)(0xa0 | n);
	} else if (n < 256) {
		*p++ = 0xd9;
		*p++ = (uint8_t)n;
	} else if (n < 65536) {
		*p++ = 0xda;
		p = put_be16(p, (uint16_t)n);
	} else {
		*p++ = 0xdb;
		p = put_be32(p, n);
	}
	return p;
}

static inline uint8_t *mp_bin_hdr(uint8_t *p, uint32_t n)
{
	if (n < 256) {
		*p++ = 0xc4;
		*p++ = (uint8_t)n;
	} else if (n < 65536) {
		*p++ = 0xc5;
		p = put_be16(p, (uint16_t)n);
	} else {
		*p++ = 0xc6;
		p = put_be32(p, n);
	}
	return p;
}

static inline uint8_t *mp_array_hdr(uint8_t *p, uint32_t n)
{
	if (n < 16) {
		*p++ = (uint8_t)(0x90 | n);
	} else if (n < 65536) {
		*p++ = 0xdc;
		p = put_be16(p, (uint16_t)n);
	} else {
		*p++ = 0xdd;
		p = put_be32(p, n);
	}
	return p;
}

/* Upper bound of the bytes mp_value() writes, or SIZE_MAX for a bad value. */
static hot_inline size_t value_room(const struct wire_value *v)
{
	switch (v->type) {
	case WIRE_NULL:
		return 1;
	case WIRE_INT:
	case WIRE_REAL:
		return 9;
	case WIRE_TEXT:
	case WIRE_BLOB:
		if (v->n > WIRE_FRAME_MAX || (v->n && !v->p))
			return SIZE_MAX;
		return 5 + v->n;
	}
	return SIZE_MAX;
}

static hot_inline uint8_t *mp_value(uint8_t *p, const struct wire_value *v)
{
	switch (v->type) {
	case WIRE_INT:
		return mp_int(p, v->i);
	case WIRE_REAL:
		return mp_double(p, v->d);
	case WIRE_TEXT:
		p = mp_str_hdr(p, (uint32_t)v->n);
		break;
	case WIRE_BLOB:
		p = mp_bin_hdr(p, (uint32_t)v->n);
		break;
	default:
		*p++ = 0xc0;
		return p;
	}
	if (v->n)
		memcpy(p, v->p, v->n);
	return p + v->n;
}

/* ---- frame encoder for the small map-bodied frames ---- */

struct enc {
	struct wire_buf *b;
	size_t start; /* frame offset in b */
	size_t map;   /* offset of the fixmap byte, patched with the key count */
	unsigned nkeys;
	int err;
};

static uint8_t *enc_room(struct enc *e, size_t n)
{
	int err;

	if (e->err)
		return NULL;
	if (n > WIRE_FRAME_MAX + 16) {
		e->err = -EMSGSIZE;
		return NULL;
	}
	err = wire_buf_reserve(e->b, n);
	if (err) {
		e->err = err;
		return NULL;
	}
	return (uint8_t *)e->b->data + e->b->len;
}

static void enc_done(struct enc *e, uint8_t *p)
{
	if (p)
		e->b->len = (size_t)((char *)p - e->b->data);
}

/* Starts a frame [1, type, body]: 4 length bytes, 0x93, version, type. */
static void enc_begin(struct enc *e, struct wire_buf *b, int type)
{
	uint8_t *p;

	e->b = b;
	e->start = b->len;
	e->nkeys = 0;
	e->err = 0;
	p = enc_room(e, 4 + 1 + 1 + 3);
	if (!p)
		return;
	p += 4;
	*p++ = 0x93;
	p = mp_uint(p, WIRE_VERSION);
	p = mp_uint(p, (uint64_t)type);
	enc_done(e, p);
}

/* Body maps have at most 15 keys, so a fixmap whose count is patched at the end. */
static void enc_map(struct enc *e)
{
	uint8_t *p = enc_room(e, 1);

	if (!p)
		return;
	e->map = e->b->len;
	*p++ = 0x80;
	enc_done(e, p);
}

static void enc_key(struct enc *e, const char *key)
{
	size_t n = strlen(key);
	uint8_t *p = enc_room(e, 1 + n);

	if (!p)
		return;
	e->nkeys++;
	p = mp_str_hdr(p, (uint32_t)n);
	memcpy(p, key, n);
	enc_done(e, p + n);
}

static void enc_int(struct enc *e, const char *key, int64_t v)
{
	uint8_t *p;

	enc_key(e, key);
	p = enc_room(e, 9);
	if (p)
		enc_done(e, mp_int(p, v));
}

static void enc_uint(struct enc *e, const char *key, uint64_t v)
{
	uint8_t *p;

	enc_key(e, key);
	p = enc_room(e, 9);
	if (p)
		enc_done(e, mp_uint(p, v));
}

static void enc_strval(struct enc *e, const char *s)
{
	size_t n = strlen(s);
	uint8_t *p = enc_room(e, 5 + n);

	if (!p)
		return;
	p = mp_str_hdr(p, (uint32_t)n);
	memcpy(p, s, n);
	enc_done(e, p + n);
}

/* A NULL string is left out of the map: absent keys decode as NULL. */
static void enc_str(struct enc *e, const char *key, const char *s)
{
	if (!s)
		return;
	enc_key(e, key);
	enc_strval(e, s);
}

/* Patches the map count and the length; on any failure removes the frame. */
static int enc_end(struct enc *e)
{
	size_t payload;

	if (!e->err && e->nkeys > 15)
		e->err = -EINVAL;
	payload = e->b->len - e->start - WIRE_HDR_LEN;
	if (!e->err && payload > WIRE_FRAME_MAX)
		e->err = -EMSGSIZE;
	if (e->err) {
		e->b->len = e->start;
		return e->err;
	}
	if (e->map)
		e->b->data[e->map] = (char)(0x80 | e->nkeys);
	put_be32((uint8_t *)e->b->data + e->start, (uint32_t)payload);
	return 0;
}

int wire_put_hello(struct wire_buf *out, const struct wire_hello *h)
{
	struct enc e = { 0 };

	enc_begin(&e, out, WIRE_HELLO);
	enc_map(&e);
	enc_int(&e, "pmin", h->proto_min);
	enc_int(&e, "pmax", h->proto_max);
	enc_str(&e, "agent", h->agent_version);
	enc_int(&e, "schema", h->schema_version);
	enc_str(&e, "node", h->node);
	enc_int(&e, "rt_ns", h->realtime_ns);
	enc_int(&e, "mono_ns", h->monotonic_ns);
	enc_str(&e, "clock", h->clock_source);
	enc_int(&e, "drops", h->ring_drops);
	enc_int(&e, "lag_ns", h->store_lag_ns);
	enc_str(&e, "peer", h->peer_identity);
	if (h->gpu_status)
		enc_str(&e, "gpu", h->gpu_status);
	return enc_end(&e);
}

int wire_put_query(struct wire_buf *out, const struct wire_query *q)
{
	struct enc e = { 0 };
	uint8_t *p;
	size_t i;

	if (!q->sql || (q->nparams && !q->params) || (q->npeers && !q->peers))
		return -EINVAL;
	if (q->nparams > UINT32_MAX || q->npeers > UINT32_MAX)
		return -EMSGSIZE;
	enc_begin(&e, out, WIRE_QUERY);
	enc_map(&e);
	enc_uint(&e, "id", q->id);
	enc_str(&e, "sql", q->sql);
	if (q->nparams) {
		enc_key(&e, "params");
		p = enc_room(&e, 5);
		if (p)
			enc_done(&e, mp_array_hdr(p, (uint32_t)q->nparams));
		for (i = 0; i < q->nparams; i++) {
			size_t room = value_room(&q->params[i]);

			if (room == SIZE_MAX && !e.err)
				e.err = q->params[i].type > WIRE_BLOB ? -EINVAL : -EMSGSIZE;
			p = enc_room(&e, room);
			if (p)
				enc_done(&e, mp_value(p, &q->params[i]));
		}
	}
	if (q->max_rows)
		enc_int(&e, "max_rows", q->max_rows);
	if (q->max_bytes)
		enc_int(&e, "max_bytes", q->max_bytes);
	if (q->timeout_ms)
		enc_int(&e, "timeout_ms", q->timeout_ms);
	if (q->npeers) {
		enc_key(&e, "peers");
		p = enc_room(&e, 5);
		if (p)
			enc_done(&e, mp_array_hdr(p, (uint32_t)q->npeers));
		for (i = 0; i < q->npeers; i++) {
			if (!q->peers[i] && !e.err)
				e.err = -EINVAL;
			if (!e.err)
				enc_strval(&e, q->peers[i]);
		}
	}
	if (q->tree_width)
		enc_int(&e, "tree_width", q->tree_width);
	enc_str(&e, "as", q->self_name);
	if (q->clock_param)
		enc_int(&e, "clock_param", q->clock_param);
	if (q->pings)
		enc_int(&e, "pings", q->pings);
	if (q->connect_ms)
		enc_int(&e, "connect_ms", q->connect_ms);
	enc_str(&e, "for", q->on_behalf);
	return enc_end(&e);
}

int wire_put_columns(struct wire_buf *out, size_t ncols, const char *const *names)
{
	struct enc e = { 0 };
	uint8_t *p;
	size_t i;

	if (ncols && !names)
		return -EINVAL;
	if (ncols > UINT32_MAX)
		return -EMSGSIZE;
	enc_begin(&e, out, WIRE_COLUMNS);
	p = enc_room(&e, 5);
	if (p)
		enc_done(&e, mp_array_hdr(p, (uint32_t)ncols));
	for (i = 0; i < ncols; i++) {
		if (!names[i] && !e.err)
			e.err = -EINVAL;
		if (!e.err)
			enc_strval(&e, names[i]);
	}
	return enc_end(&e);
}

int wire_put_end(struct wire_buf *out, const struct wire_end *end)
{
	struct enc e = { 0 };

	enc_begin(&e, out, WIRE_END);
	enc_map(&e);
	enc_uint(&e, "id", end->id);
	enc_int(&e, "rows", end->rows);
	enc_int(&e, "status", end->status);
	enc_int(&e, "elapsed_ns", end->elapsed_ns);
	enc_int(&e, "truncated", end->truncated ? 1 : 0);
	enc_str(&e, "msg", end->message);
	enc_str(&e, "node", end->node);
	enc_str(&e, "outcome", end->outcome);
	if (end->rtt_ns) {
		enc_int(&e, "offset_ns", end->offset_ns);
		enc_int(&e, "rtt_ns", end->rtt_ns);
		if (end->samples)
			enc_int(&e, "samples", end->samples);
	}
	return enc_end(&e);
}

int wire_put_error(struct wire_buf *out, int64_t code, const char *message)
{
	struct enc e = { 0 };

	enc_begin(&e, out, WIRE_ERROR);
	enc_map(&e);
	enc_int(&e, "code", code);
	enc_str(&e, "msg", message);
	return enc_end(&e);
}

int wire_put_ping(struct wire_buf *out, int type, const struct wire_ping *ping)
{
	struct enc e = { 0 };

	if (type != WIRE_PING && type != WIRE_PONG)
		return -EINVAL;
	enc_begin(&e, out, type);
	enc_map(&e);
	enc_int(&e, "t1", ping->t1_ns);
	if (type == WIRE_PONG)
		enc_int(&e, "t2", ping->t2_ns);
	return enc_end(&e);
}

/* ---- ROWS ---- */

/*
 * The rows array header is always array32 (0xdd + 4 bytes) so its count can
 * be patched in place without moving the rows.
 */
int wire_rows_begin(struct wire_rows *w, struct wire_buf *out, size_t ncols)
{
	uint8_t *p;
	int err;

	if (ncols == 0 || ncols > UINT32_MAX)
		return -EINVAL;
	err = wire_buf_reserve(out, 4 + 1 + 1 + 2 + 5);
	if (err)
		return err;
	w->out = out;
	w->start = out->len;
	w->ncols = ncols;
	w->nrows = 0;
	w->col = 0;
	w->row_start = out->len;
	p = (uint8_t *)out->data + out->len + 4;
	*p++ = 0x93;
	p = mp_uint(p, WIRE_VERSION);
	p = mp_uint(p, WIRE_ROWS);
	w->hdr = (size_t)((char *)p - out->data);
	*p++ = 0xdd;
	p = put_be32(p, 0);
	out->len = (size_t)((char *)p - out->data);
	return 0;
}

/* A row that would push the frame past WIRE_FRAME_MAX is taken back out. */
static int rows_check_size(struct wire_rows *w)
{
	if (unlikely(w->out->len - w->start - WIRE_HDR_LEN > WIRE_FRAME_MAX)) {
		w->out->len = w->row_start;
		w->col = 0;
		return -EMSGSIZE;
	}
	return 0;
}

int wire_rows_put(struct wire_rows *w, const struct wire_value *v)
{
	size_t room = value_room(v);
	uint8_t *p;
	int err;

	if (unlikely(room == SIZE_MAX))
		return v->type > WIRE_BLOB || v->type < 0 ? -EINVAL : -EMSGSIZE;
	if (w->col == 0 && w->nrows == UINT32_MAX)
		return -EMSGSIZE;
	err = wire_buf_reserve(w->out, room + 5);
	if (unlikely(err))
		return err;
	p = (uint8_t *)w->out->data + w->out->len;
	if (w->col == 0) {
		w->row_start = w->out->len;
		p = mp_array_hdr(p, (uint32_t)w->ncols);
	}
	p = mp_value(p, v);
	w->out->len = (size_t)((char *)p - w->out->data);
	err = rows_check_size(w);
	if (err)
		return err;
	if (++w->col == w->ncols) {
		w->col = 0;
		w->nrows++;
	}
	return 0;
}

int wire_rows_add(struct wire_rows *w, const struct wire_value *row)
{
	size_t room = 5, i, r;
	uint8_t *p;
	int err;

	if (unlikely(w->col != 0))
		return -EINVAL;
	if (unlikely(w->nrows == UINT32_MAX))
		return -EMSGSIZE;
	for (i = 0; i < w->ncols; i++) {
		r = value_room(&row[i]);
		if (unlikely(r == SIZE_MAX))
			return row[i].type > WIRE_BLOB || row[i].type < 0 ? -EINVAL : -EMSGSIZE;
		room += r;
		if (unlikely(room > 2 * (size_t)WIRE_FRAME_MAX))
			return -EMSGSIZE;
	}
	err = wire_buf_reserve(w->out, room);
	if (unlikely(err))
		return err;
	w->row_start = w->out->len;
	p = (uint8_t *)w->out->data + w->out->len;
	p = mp_array_hdr(p, (uint32_t)w->ncols);
	for (i = 0; i < w->ncols; i++)
		p = mp_value(p, &row[i]);
	w->out->len = (size_t)((char *)p - w->out->data);
	err = rows_check_size(w);
	if (err)
		return err;
	w->nrows++;
	return 0;
}

size_t wire_rows_bytes(const struct wire_rows *w)
{
	return w->out->len - w->start;
}

int wire_rows_finish(struct wire_rows *w)
{
	uint8_t *base = (uint8_t *)w->out->data;

	if (w->col != 0) {
		/* A half-built row must not reach the peer: drop the frame. */
		w->out->len = w->start;
		return -EINVAL;
	}
	if (w->nrows == 0) {
		w->out->len = w->start;
		return 0;
	}
	put_be32(base + w->hdr + 1, w->nrows);
	put_be32(base + w->start, (uint32_t)(w->out->len - w->start - WIRE_HDR_LEN));
	return 0;
}

/* ---- decoding ---- */

int wire_frame_check(const void *buf, size_t avail, size_t max_payload, size_t *frame_len)
{
	const uint8_t *p = buf;
	uint32_t n;

	if (max_payload == 0 || max_payload > WIRE_FRAME_MAX)
		max_payload = WIRE_FRAME_MAX;
	if (avail < WIRE_HDR_LEN)
		return 0;
	n = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
	if (n > max_payload)
		return -EMSGSIZE;
	if (avail - WIRE_HDR_LEN < n)
		return 0;
	*frame_len = WIRE_HDR_LEN + (size_t)n;
	return 1;
}

static int claims(char **cause, const char *what, uint64_t n, ptrdiff_t off, ptrdiff_t left)
{
	return fq_fail(cause, -EPROTO,
		       "%s of %llu elements at offset %td claims more than the %td bytes left",
		       what, (unsigned long long)n, off, left);
}

static inline uint16_t be16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return __builtin_bswap16(v);
}

static inline uint32_t be32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return __builtin_bswap32(v);
}

static inline uint64_t be64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return __builtin_bswap64(v);
}

/*
 * Size of the fixed part of each msgpack header byte (the byte itself plus
 * any length or scalar payload), and for str/bin/ext/array/map, how many
 * bytes hold the count. 0 marks the never-used byte 0xc1.
 */
struct mp_hdr {
	uint8_t size;   /* header bytes, counting the first */
	uint8_t lenw;   /* bytes of count after the first byte (0 = fix) */
	uint8_t kind;   /* MP_* */
};

enum { MP_BAD, MP_SCALAR, MP_RAW, MP_EXT, MP_ARRAY, MP_MAP };

static struct mp_hdr mp_header(uint8_t c)
{
	if (c <= 0x7f || c >= 0xe0)
		return (struct mp_hdr){ 1, 0, MP_SCALAR };
	if (c <= 0x8f)
		return (struct mp_hdr){ 1, 0, MP_MAP };
	if (c <= 0x9f)
		return (struct mp_hdr){ 1, 0, MP_ARRAY };
	if (c <= 0xbf)
		return (struct mp_hdr){ 1, 0, MP_RAW };
	switch (c) {
	case 0xc0: case 0xc2: case 0xc3:
		return (struct mp_hdr){ 1, 0, MP_SCALAR };
	case 0xc4: case 0xd9:
		return (struct mp_hdr){ 2, 1, MP_RAW };
	case 0xc5: case 0xda:
		return (struct mp_hdr){ 3, 2, MP_RAW };
	case 0xc6: case 0xdb:
		return (struct mp_hdr){ 5, 4, MP_RAW };
	case 0xc7:
		return (struct mp_hdr){ 3, 1, MP_EXT };
	case 0xc8:
		return (struct mp_hdr){ 4, 2, MP_EXT };
	case 0xc9:
		return (struct mp_hdr){ 6, 4, MP_EXT };
	case 0xca:
		return (struct mp_hdr){ 5, 0, MP_SCALAR };
	case 0xcb:
		return (struct mp_hdr){ 9, 0, MP_SCALAR };
	case 0xcc: case 0xd0:
		return (struct mp_hdr){ 2, 0, MP_SCALAR };
	case 0xcd: case 0xd1:
		return (struct mp_hdr){ 3, 0, MP_SCALAR };
	case 0xce: case 0xd2:
		return (struct mp_hdr){ 5, 0, MP_SCALAR };
	case 0xcf: case 0xd3:
		return (struct mp_hdr){ 9, 0, MP_SCALAR };
	case 0xd4:
		return (struct mp_hdr){ 3, 0, MP_SCALAR }; /* fixext 1: type + 1 */
	case 0xd5:
		return (struct mp_hdr){ 4, 0, MP_SCALAR };
	case 0xd6:
		return (struct mp_hdr){ 6, 0, MP_SCALAR };
	case 0xd7:
		return (struct mp_hdr){ 10, 0, MP_SCALAR };
	case 0xd8:
		return (struct mp_hdr){ 18, 0, MP_SCALAR };
	case 0xdc:
		return (struct mp_hdr){ 3, 2, MP_ARRAY };
	case 0xdd:
		return (struct mp_hdr){ 5, 4, MP_ARRAY };
	case 0xde:
		return (struct mp_hdr){ 3, 2, MP_MAP };
	case 0xdf:
		return (struct mp_hdr){ 5, 4, MP_MAP };
	}
	return (struct mp_hdr){ 0, 0, MP_BAD };
}

/*
 * The validating pre-pass. Walks exactly one msgpack object filling
 * [buf, buf+len) without recursion; a container of n elements must have at
 * least n (array) or 2n (map) bytes after its header, every str/bin/ext its
 * whole length, and nesting stops at WIRE_DEPTH_MAX. After this, any msgpack
 * reader (ours or msgpack-c's) allocates at most in proportion to len.
 */
int wire_validate(const void *buf, size_t len, char **cause)
{
	const uint8_t *start = buf, *p = buf, *end = start + len;
	uint64_t left[WIRE_DEPTH_MAX + 1];
	int depth = 0;

	left[0] = 1;
	for (;;) {
		struct mp_hdr h;
		uint64_t n, rest;

		while (depth > 0 && left[depth] == 0)
			depth--;
		if (left[depth] == 0)
			break;
		left[depth]--;
		if (p == end)
			return fq_fail(cause, -EPROTO, "msgpack truncated at byte %zu of %zu",
				       (size_t)(p - start), len);
		h = mp_header(*p);
		if (h.kind == MP_BAD)
			return fq_fail(cause, -EPROTO, "invalid msgpack byte 0x%02x at offset %zu",
				       *p, (size_t)(p - start));
		if ((size_t)(end - p) < h.size)
			return fq_fail(cause, -EPROTO, "msgpack truncated at byte %zu of %zu",
				       (size_t)(p - start), len);
		switch (h.lenw) {
		case 0:
			n = (h.kind == MP_RAW) ? (*p & 0x1f) : (*p & 0x0f);
			break;
		case 1:
			n = p[1];
			break;
		case 2:
			n = be16(p + 1);
			break;
		default:
			n = be32(p + 1);
			break;
		}
		p += h.size;
		rest = (uint64_t)(end - p);
		switch (h.kind) {
		case MP_SCALAR:
			break;
		case MP_EXT: /* size counted the ext type byte; n is the data */
		case MP_RAW:
			if (n > rest)
				return fq_fail(cause, -EPROTO,
					       "string of %llu bytes at offset %td claims more "
					       "than the %llu bytes left", (unsigned long long)n,
					       p - h.size - start, (unsigned long long)rest);
			p += n;
			break;
		case MP_ARRAY:
		case MP_MAP:
			if (h.kind == MP_MAP)
				n *= 2;
			if (n > rest)
				return claims(cause, h.kind == MP_MAP ? "map" : "array",
					      h.kind == MP_MAP ? n / 2 : n, p - h.size - start,
					      (ptrdiff_t)rest);
			if (n == 0)
				break;
			if (depth == WIRE_DEPTH_MAX)
				return fq_fail(cause, -EPROTO,
					       "msgpack nested deeper than %d levels",
					       WIRE_DEPTH_MAX);
			left[++depth] = n;
			break;
		}
	}
	if (p != end)
		return fq_fail(cause, -EPROTO, "%zu stray bytes after the msgpack object",
			       (size_t)(end - p));
	return 0;
}

/* ---- typed reader; runs only over validated bytes but still bounds-checks ---- */

struct rd {
	const uint8_t *p, *end;
	const uint8_t *base; /* payload start, for offsets in causes */
};

/* Reads an array or map header; returns the count or -1 for another type. */
static int64_t rd_container(struct rd *r, bool map)
{
	uint8_t c;

	if (unlikely(r->p >= r->end))
		return -1;
	c = *r->p;
	if (!map && c >= 0x90 && c <= 0x9f) {
		r->p++;
		return c & 0x0f;
	}
	if (map && c >= 0x80 && c <= 0x8f) {
		r->p++;
		return c & 0x0f;
	}
	if (c == (map ? 0xde : 0xdc) && r->end - r->p >= 3) {
		r->p += 3;
		return be16(r->p - 2);
	}
	if (c == (map ? 0xdf : 0xdd) && r->end - r->p >= 5) {
		r->p += 5;
		return be32(r->p - 4);
	}
	return -1;
}

/* Reads a str; returns 0, or -1 for another type. */
static int rd_str(struct rd *r, const char **s, size_t *n)
{
	const uint8_t *p = r->p;
	size_t len, left = (size_t)(r->end - p);

	if (unlikely(left < 1))
		return -1;
	if ((*p & 0xe0) == 0xa0) {
		len = *p & 0x1f;
		p += 1;
	} else if (*p == 0xd9 && left >= 2) {
		len = p[1];
		p += 2;
	} else if (*p == 0xda && left >= 3) {
		len = be16(p + 1);
		p += 3;
	} else if (*p == 0xdb && left >= 5) {
		len = be32(p + 1);
		p += 5;
	} else {
		return -1;
	}
	if (unlikely(len > (size_t)(r->end - p)))
		return -1;
	*s = (const char *)p;
	*n = len;
	r->p = p + len;
	return 0;
}

enum { RD_OK = 0, RD_TYPE = -1, RD_RANGE = -2, RD_SHORT = -3 };

/* Reads one SQL value: nil, int, float, str or bin. */
static hot_inline int rd_value(struct rd *r, struct wire_value *v)
{
	const uint8_t *p = r->p;
	size_t left = (size_t)(r->end - p), len;
	uint64_t u;
	uint32_t f32;
	float f;
	uint8_t c;

	if (unlikely(left < 1))
		return RD_SHORT;
	c = *p;
	v->i = 0;
	v->d = 0;
	v->p = NULL;
	v->n = 0;
	if (c <= 0x7f) {
		v->type = WIRE_INT;
		v->i = c;
		r->p = p + 1;
		return RD_OK;
	}
	if (c >= 0xe0) {
		v->type = WIRE_INT;
		v->i = (int8_t)c;
		r->p = p + 1;
		return RD_OK;
	}
	if ((c & 0xe0) == 0xa0) {
		len = c & 0x1f;
		p += 1;
		v->type = WIRE_TEXT;
		goto raw;
	}
	switch (c) {
	case 0xc0:
		v->type = WIRE_NULL;
		r->p = p + 1;
		return RD_OK;
	case 0xcb:
		if (unlikely(left < 9))
			return RD_SHORT;
		u = be64(p + 1);
		v->type = WIRE_REAL;
		memcpy(&v->d, &u, 8);
		r->p = p + 9;
		return RD_OK;
	case 0xca:
		if (unlikely(left < 5))
			return RD_SHORT;
		f32 = be32(p + 1);
		memcpy(&f, &f32, 4);
		v->type = WIRE_REAL;
		v->d = f;
		r->p = p + 5;
		return RD_OK;
	case 0xcc:
	case 0xcd:
	case 0xce:
	case 0xcf:
	case 0xd0:
	case 0xd1:
	case 0xd2:
	case 0xd3: {
		size_t w = (size_t)1 << (c & 3);

		if (unlikely(left < 1 + w))
			return RD_SHORT;
		v->type = WIRE_INT;
		if (c <= 0xcf) {
			u = w == 1 ? p[1] : w == 2 ? be16(p + 1) :
			    w == 4 ? be32(p + 1) : be64(p + 1);
			if (unlikely(u > INT64_MAX))
				return RD_RANGE;
			v->i = (int64_t)u;
		} else {
			v->i = w == 1 ? (int8_t)p[1] :
			       w == 2 ? (int16_t)be16(p + 1) :
			       w == 4 ? (int32_t)be32(p + 1) : (int64_t)be64(p + 1);
		}
		r->p = p + 1 + w;
		return RD_OK;
	}
	case 0xd9:
	case 0xc4:
		if (unlikely(left < 2))
			return RD_SHORT;
		len = p[1];
		p += 2;
		break;
	case 0xda:
	case 0xc5:
		if (unlikely(left < 3))
			return RD_SHORT;
		len = be16(p + 1);
		p += 3;
		break;
	case 0xdb:
	case 0xc6:
		if (unlikely(left < 5))
			return RD_SHORT;
		len = be32(p + 1);
		p += 5;
		break;
	default:
		return RD_TYPE;
	}
	v->type = (c >= 0xd9) ? WIRE_TEXT : WIRE_BLOB;
raw:
	if (unlikely(len > (size_t)(r->end - p)))
		return RD_SHORT;
	v->p = p;
	v->n = len;
	r->p = p + len;
	return RD_OK;
}

/* Skips one object of validated bytes (unknown map values). */
static int rd_skip(struct rd *r)
{
	struct mp_hdr h;
	uint64_t n = 1, k;
	size_t off;

	/*
	 * The bytes were validated, so a forward walk counting pending objects
	 * (no depth stack needed) stays in bounds; the checks are belts.
	 */
	while (n) {
		n--;
		if (r->p >= r->end)
			return -1;
		h = mp_header(*r->p);
		if (h.kind == MP_BAD || (size_t)(r->end - r->p) < h.size)
			return -1;
		k = h.lenw == 0 ? ((h.kind == MP_RAW) ? (*r->p & 0x1f) : (*r->p & 0x0f)) :
		    h.lenw == 1 ? r->p[1] : h.lenw == 2 ? be16(r->p + 1) : be32(r->p + 1);
		r->p += h.size;
		off = (size_t)(r->end - r->p);
		if (h.kind == MP_RAW || h.kind == MP_EXT) {
			if (k > off)
				return -1;
			r->p += k;
		} else if (h.kind == MP_ARRAY) {
			n += k;
		} else if (h.kind == MP_MAP) {
			n += 2 * k;
		}
		if (n > off)
			return -1;
	}
	return 0;
}

/* ---- decoded-message memory ---- */

struct chunk {
	struct chunk *next;
	size_t used, cap;
	max_align_t data[];
};

struct wire_priv {
	struct rd rows;     /* ROWS: cursor over the remaining rows */
	size_t rows_left;
	struct chunk *chunks;
};

/* align is 1 (strings) or 8 (pointers, values): a power of two. */
static void *arena_alloc(struct wire_priv *pv, size_t n, size_t align)
{
	struct chunk *c = pv->chunks;
	size_t cap;
	void *p;

	if (c)
		c->used = (c->used + align - 1) & ~(align - 1);
	if (!c || c->used > c->cap || c->cap - c->used < n) {
		cap = n > 4000 ? n : 4000;
		c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->cap = cap;
		c->used = 0;
		c->next = pv->chunks;
		pv->chunks = c;
	}
	p = (char *)c->data + c->used;
	c->used += n;
	return p;
}

/* NUL-terminated copy; strings used as C strings may not hold a NUL. */
static int dup_cstr(struct wire_priv *pv, const char *s, size_t n, const char **out)
{
	char *d;

	if (memchr(s, 0, n))
		return -EBADMSG;
	d = arena_alloc(pv, n + 1, 1);
	if (!d)
		return -ENOMEM;
	memcpy(d, s, n);
	d[n] = 0;
	*out = d;
	return 0;
}

void wire_msg_release(struct wire_msg *msg)
{
	struct wire_priv *pv = msg->priv;
	struct chunk *c, *next;

	if (!pv)
		return;
	for (c = pv->chunks; c; c = next) {
		next = c->next;
		free(c);
	}
	free(pv);
	msg->priv = NULL;
}

/* ---- body decoders ---- */

/* What a map body's keys decode into. */
enum fkind { F_INT, F_UINT, F_STR, F_BOOL, F_PARAMS, F_PEERS };

struct field {
	const char *key;
	enum fkind kind;
	bool required;
	void *dst;
	size_t *count; /* F_PARAMS, F_PEERS */
};

static int rd_int(struct rd *r, int64_t *out, bool *range)
{
	struct wire_value v;
	int rc = rd_value(r, &v);

	*range = rc == RD_RANGE;
	if (rc || v.type != WIRE_INT)
		return -1;
	*out = v.i;
	return 0;
}

static int decode_field(struct wire_priv *pv, struct rd *r, const struct field *f,
			const char *tname, char **cause)
{
	const char *s;
	size_t n, i;
	int64_t cnt, i64;
	bool range = false;
	int err;

	switch (f->kind) {
	case F_INT:
		if (rd_int(r, f->dst, &range))
			goto type;
		return 0;
	case F_UINT:
		/* ids are uint64: take the full unsigned range here */
		if (r->p < r->end && *r->p == 0xcf && r->end - r->p >= 9) {
			*(uint64_t *)f->dst = be64(r->p + 1);
			r->p += 9;
			return 0;
		}
		if (rd_int(r, &i64, &range) || i64 < 0)
			goto type;
		*(uint64_t *)f->dst = (uint64_t)i64;
		return 0;
	case F_BOOL:
		if (r->p < r->end && (*r->p == 0xc2 || *r->p == 0xc3)) {
			*(int *)f->dst = *r->p == 0xc3;
			r->p++;
			return 0;
		}
		if (rd_int(r, &i64, &range))
			goto type;
		*(int *)f->dst = i64 != 0;
		return 0;
	case F_STR:
		if (r->p < r->end && *r->p == 0xc0) {
			r->p++; /* nil: same as absent */
			return 0;
		}
		if (rd_str(r, &s, &n))
			goto type;
		err = dup_cstr(pv, s, n, f->dst);
		if (err == -EBADMSG)
			return fq_fail(cause, err, "%s frame: key \"%s\" holds a NUL byte", tname,
				       f->key);
		return err;
	case F_PARAMS: {
		struct wire_value *vals;

		cnt = rd_container(r, false);
		if (cnt < 0)
			goto type;
		if (cnt > WIRE_PARAMS_MAX)
			return fq_fail(cause, -EBADMSG,
				       "%s frame: %lld parameters, at most %d allowed", tname,
				       (long long)cnt, WIRE_PARAMS_MAX);
		vals = arena_alloc(pv, (size_t)cnt * sizeof(*vals) + 1, 8);
		if (!vals)
			return -ENOMEM;
		for (i = 0; i < (size_t)cnt; i++) {
			err = rd_value(r, &vals[i]);
			if (err)
				return fq_fail(cause, -EBADMSG,
					       "%s frame: parameter %zu is not "
					       "nil/int/float/str/bin%s", tname, i + 1,
					       err == RD_RANGE ? " (integer > INT64_MAX)" : "");
		}
		*(const struct wire_value **)f->dst = vals;
		*f->count = (size_t)cnt;
		return 0;
	}
	case F_PEERS: {
		const char **peers;

		cnt = rd_container(r, false);
		if (cnt < 0)
			goto type;
		if (cnt > WIRE_PEERS_MAX)
			return fq_fail(cause, -EBADMSG, "%s frame: %lld peers, at most %d allowed",
				       tname, (long long)cnt, WIRE_PEERS_MAX);
		peers = arena_alloc(pv, ((size_t)cnt + 1) * sizeof(*peers), 8);
		if (!peers)
			return -ENOMEM;
		for (i = 0; i < (size_t)cnt; i++) {
			if (rd_str(r, &s, &n))
				return fq_fail(cause, -EBADMSG,
					       "%s frame: peer %zu is not a string", tname, i + 1);
			err = dup_cstr(pv, s, n, &peers[i]);
			if (err)
				return fq_fail(cause, err, "%s frame: peer %zu is not a valid name",
					       tname, i + 1);
		}
		peers[cnt] = NULL;
		*(const char *const **)f->dst = peers;
		*f->count = (size_t)cnt;
		return 0;
	}
	}
type:
	return fq_fail(cause, -EBADMSG, "%s frame: key \"%s\" has the wrong type%s", tname, f->key,
		       range ? " (integer > INT64_MAX)" : "");
}

/*
 * Map bodies: known keys decode into their fields, unknown keys are skipped
 * (so v1 can grow), a repeated key or a missing required key is an error.
 */
static int decode_map(struct wire_priv *pv, struct rd *r, const struct field *fields,
		      size_t nfields, const char *tname, char **cause)
{
	uint32_t seen = 0;
	int64_t n, k;
	const char *key;
	size_t klen, i;
	int err;

	n = rd_container(r, true);
	if (n < 0)
		return fq_fail(cause, -EBADMSG, "%s frame: body is not a map", tname);
	for (k = 0; k < n; k++) {
		if (rd_str(r, &key, &klen))
			return fq_fail(cause, -EBADMSG, "%s frame: map key %lld is not a string",
				       tname, (long long)k + 1);
		for (i = 0; i < nfields; i++)
			if (strlen(fields[i].key) == klen && !memcmp(fields[i].key, key, klen))
				break;
		if (i == nfields) {
			if (rd_skip(r))
				return fq_fail(cause, -EPROTO, "%s frame: malformed value", tname);
			continue;
		}
		if (seen & (1u << i))
			return fq_fail(cause, -EBADMSG, "%s frame: key \"%s\" appears twice", tname,
				       fields[i].key);
		seen |= 1u << i;
		err = decode_field(pv, r, &fields[i], tname, cause);
		if (err)
			return err;
	}
	for (i = 0; i < nfields; i++)
		if (fields[i].required && !(seen & (1u << i)))
			return fq_fail(cause, -EBADMSG, "%s frame: required key \"%s\" is missing",
				       tname, fields[i].key);
	return 0;
}

#define NFIELDS(f) (sizeof(f) / sizeof((f)[0]))

static int decode_hello(struct wire_priv *pv, struct rd *r, struct wire_hello *h, char **cause)
{
	const struct field f[] = {
		{ "pmin", F_INT, true, &h->proto_min, NULL },
		{ "pmax", F_INT, true, &h->proto_max, NULL },
		{ "agent", F_STR, false, &h->agent_version, NULL },
		{ "schema", F_INT, false, &h->schema_version, NULL },
		{ "node", F_STR, false, &h->node, NULL },
		{ "rt_ns", F_INT, false, &h->realtime_ns, NULL },
		{ "mono_ns", F_INT, false, &h->monotonic_ns, NULL },
		{ "clock", F_STR, false, &h->clock_source, NULL },
		{ "drops", F_INT, false, &h->ring_drops, NULL },
		{ "lag_ns", F_INT, false, &h->store_lag_ns, NULL },
		{ "peer", F_STR, false, &h->peer_identity, NULL },
		{ "gpu", F_STR, false, &h->gpu_status, NULL },
	};

	return decode_map(pv, r, f, NFIELDS(f), "HELLO", cause);
}

static int decode_query(struct wire_priv *pv, struct rd *r, struct wire_query *q, char **cause)
{
	const struct field f[] = {
		{ "id", F_UINT, true, &q->id, NULL },
		{ "sql", F_STR, true, &q->sql, NULL },
		{ "params", F_PARAMS, false, &q->params, &q->nparams },
		{ "max_rows", F_INT, false, &q->max_rows, NULL },
		{ "max_bytes", F_INT, false, &q->max_bytes, NULL },
		{ "timeout_ms", F_INT, false, &q->timeout_ms, NULL },
		{ "peers", F_PEERS, false, &q->peers, &q->npeers },
		{ "tree_width", F_INT, false, &q->tree_width, NULL },
		{ "as", F_STR, false, &q->self_name, NULL },
		{ "clock_param", F_INT, false, &q->clock_param, NULL },
		{ "pings", F_INT, false, &q->pings, NULL },
		{ "connect_ms", F_INT, false, &q->connect_ms, NULL },
		{ "for", F_STR, false, &q->on_behalf, NULL },
	};
	int err = decode_map(pv, r, f, NFIELDS(f), "QUERY", cause);

	if (!err && !q->sql)
		err = fq_fail(cause, -EBADMSG, "QUERY frame: \"sql\" is nil");
	return err;
}

static int decode_end(struct wire_priv *pv, struct rd *r, struct wire_end *e, char **cause)
{
	const struct field f[] = {
		{ "id", F_UINT, true, &e->id, NULL },
		{ "rows", F_INT, true, &e->rows, NULL },
		{ "status", F_INT, true, &e->status, NULL },
		{ "elapsed_ns", F_INT, false, &e->elapsed_ns, NULL },
		{ "truncated", F_BOOL, false, &e->truncated, NULL },
		{ "msg", F_STR, false, &e->message, NULL },
		{ "node", F_STR, false, &e->node, NULL },
		{ "outcome", F_STR, false, &e->outcome, NULL },
		{ "offset_ns", F_INT, false, &e->offset_ns, NULL },
		{ "rtt_ns", F_INT, false, &e->rtt_ns, NULL },
		{ "samples", F_INT, false, &e->samples, NULL },
	};

	return decode_map(pv, r, f, NFIELDS(f), "END", cause);
}

static int decode_error(struct wire_priv *pv, struct rd *r, struct wire_error *e, char **cause)
{
	const struct field f[] = {
		{ "code", F_INT, true, &e->code, NULL },
		{ "msg", F_STR, false, &e->message, NULL },
	};

	return decode_map(pv, r, f, NFIELDS(f), "ERROR", cause);
}

static int decode_ping(struct wire_priv *pv, struct rd *r, struct wire_ping *p, bool pong,
		       char **cause)
{
	const struct field f[] = {
		{ "t1", F_INT, true, &p->t1_ns, NULL },
		{ "t2", F_INT, pong, &p->t2_ns, NULL },
	};

	return decode_map(pv, r, f, NFIELDS(f), pong ? "PONG" : "PING", cause);
}

static int decode_columns(struct wire_priv *pv, struct rd *r, struct wire_msg *msg,
			  char **cause)
{
	const char **names;
	const char *s;
	int64_t n, i;
	size_t len;
	int err;

	n = rd_container(r, false);
	if (n < 0)
		return fq_fail(cause, -EBADMSG, "COLUMNS frame: body is not an array");
	if (n > WIRE_COLUMNS_MAX)
		return fq_fail(cause, -EBADMSG, "COLUMNS frame: %lld columns, at most %d allowed",
			       (long long)n, WIRE_COLUMNS_MAX);
	names = arena_alloc(pv, ((size_t)n + 1) * sizeof(*names), 8);
	if (!names)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		if (rd_str(r, &s, &len))
			return fq_fail(cause, -EBADMSG,
				       "COLUMNS frame: column %lld is not a string",
				       (long long)i + 1);
		err = dup_cstr(pv, s, len, &names[i]);
		if (err)
			return fq_fail(cause, err,
				       "COLUMNS frame: column %lld name holds a NUL byte",
				       (long long)i + 1);
	}
	names[n] = NULL;
	msg->u.columns.ncols = (size_t)n;
	msg->u.columns.names = names;
	return 0;
}

/*
 * Reads one row at r: an array of exactly ncols values (ncols 0 takes the
 * row's own length). Shared by the eager check in wire_decode() and by
 * wire_rows_next(), so both agree on what a valid row is.
 */
static inline int rd_row(struct rd *r, size_t *ncols, struct wire_value *vals, size_t row,
			 char **cause)
{
	struct wire_value scratch;
	int64_t n;
	size_t i;
	int rc;

	if (likely(r->p < r->end && (*r->p & 0xf0) == 0x90))
		n = *r->p++ & 0x0f;
	else
		n = rd_container(r, false);
	if (unlikely(n <= 0))
		return fq_fail(cause, -EBADMSG, "ROWS frame: row %zu is not a non-empty array",
			       row);
	if (unlikely(n > r->end - r->p))
		return claims(cause, "array", (uint64_t)n, r->p - r->base, r->end - r->p);
	if (*ncols == 0)
		*ncols = (size_t)n;
	if (unlikely((size_t)n != *ncols))
		return fq_fail(cause, -EBADMSG, "ROWS frame: row %zu has %lld values, expected %zu",
			       row, (long long)n, *ncols);
	for (i = 0; i < (size_t)n; i++) {
		rc = rd_value(r, vals ? &vals[i] : &scratch);
		if (unlikely(rc == RD_SHORT))
			return fq_fail(cause, -EPROTO,
				       "ROWS frame: row %zu value %zu claims more than the %td "
				       "bytes left", row, i + 1, r->end - r->p);
		if (unlikely(rc))
			return fq_fail(cause, -EBADMSG, "ROWS frame: row %zu value %zu is %s", row,
				       i + 1, rc == RD_RANGE ? "an integer > INT64_MAX" :
				       "not nil/int/float/str/bin");
	}
	return 0;
}

static int decode_rows(struct wire_priv *pv, struct rd *r, struct wire_msg *msg, char **cause)
{
	struct rd walk;
	size_t ncols = 0, i;
	int64_t n;
	int err;

	n = rd_container(r, false);
	if (n < 0)
		return fq_fail(cause, -EBADMSG, "ROWS frame: body is not an array");
	if (n > r->end - r->p)
		return claims(cause, "array", (uint64_t)n, r->p - r->base, r->end - r->p);
	/*
	 * Check every row now, so a frame is accepted or refused whole and a
	 * merger never inserts half a batch before finding a bad row.
	 */
	walk = *r;
	for (i = 0; i < (size_t)n; i++) {
		err = rd_row(&walk, &ncols, NULL, i + 1, cause);
		if (err)
			return err;
	}
	pv->rows = *r;
	pv->rows_left = (size_t)n;
	msg->u.rows.nrows = (size_t)n;
	msg->u.rows.ncols = ncols;
	r->p = walk.p;
	return 0;
}

int wire_decode(struct wire_msg *msg, const void *frame, size_t frame_len, char **cause)
{
	const uint8_t *f = frame;
	struct wire_priv *pv = NULL;
	struct rd r;
	int64_t n;
	uint64_t ver, type;
	struct wire_value v;
	int err;

	memset(msg, 0, sizeof(*msg));
	if (cause)
		*cause = NULL;
	if (frame_len < WIRE_HDR_LEN) {
		err = fq_fail(cause, -EPROTO, "frame of %zu bytes is shorter than its header",
			      frame_len);
		goto out;
	}
	if (be32(f) != frame_len - WIRE_HDR_LEN) {
		err = fq_fail(cause, -EPROTO,
			      "frame header says %u payload bytes but %zu were given", be32(f),
			      frame_len - WIRE_HDR_LEN);
		goto out;
	}
	if (frame_len - WIRE_HDR_LEN > WIRE_FRAME_MAX) {
		err = fq_fail(cause, -EMSGSIZE, "frame payload of %zu bytes exceeds the %u limit",
			      frame_len - WIRE_HDR_LEN, WIRE_FRAME_MAX);
		goto out;
	}
	r.p = f + WIRE_HDR_LEN;
	r.end = f + frame_len;
	r.base = r.p;

	/*
	 * Version and type first, by hand: a peer of another version gets an
	 * answer even if the rest of its frame means nothing to us.
	 */
	n = rd_container(&r, false);
	if (n < 2) {
		err = fq_fail(cause, -EPROTO, "frame is not a [version, type, body] array");
		goto out;
	}
	if (n > r.end - r.p) {
		err = claims(cause, "array", (uint64_t)n, r.p - r.base, r.end - r.p);
		goto out;
	}
	if (rd_value(&r, &v) || v.type != WIRE_INT || v.i < 0 || v.i > INT_MAX) {
		err = fq_fail(cause, -EPROTO, "frame version is not a small unsigned integer");
		goto out;
	}
	ver = (uint64_t)v.i;
	msg->version = (int)ver;
	if (rd_value(&r, &v) || v.type != WIRE_INT || v.i < 0 || v.i > INT_MAX) {
		err = fq_fail(cause, -EPROTO, "frame type is not a small unsigned integer");
		goto out;
	}
	type = (uint64_t)v.i;
	msg->type = (int)type;
	if (ver != WIRE_VERSION) {
		err = fq_fail(cause, -EPROTONOSUPPORT,
			      "peer speaks wire protocol version %d, this build speaks %d",
			      msg->version, WIRE_VERSION);
		goto out;
	}
	/*
	 * The validating pre-pass. ROWS skip the generic walk: their grammar
	 * (array of arrays of scalars) is checked just as strictly, count
	 * against bytes left included, by the eager row walk in decode_rows(),
	 * at half the cost; ROWS are nearly all the bytes of a session.
	 */
	if (msg->type == WIRE_ROWS && n == 3)
		err = 0;
	else
		err = wire_validate(f + WIRE_HDR_LEN, frame_len - WIRE_HDR_LEN, cause);
	if (err)
		goto out;
	if (n != 3) {
		err = fq_fail(cause, -EPROTO, "frame array has %lld elements, expected 3",
			      (long long)n);
		goto out;
	}
	if (!strcmp(wire_type_name(msg->type), "?")) {
		err = fq_fail(cause, -EPROTO, "unknown frame type %d", msg->type);
		goto out;
	}

	pv = calloc(1, sizeof(*pv));
	if (!pv) {
		err = -ENOMEM;
		goto out;
	}
	switch (msg->type) {
	case WIRE_HELLO:
		err = decode_hello(pv, &r, &msg->u.hello, cause);
		break;
	case WIRE_QUERY:
		err = decode_query(pv, &r, &msg->u.query, cause);
		break;
	case WIRE_END:
		err = decode_end(pv, &r, &msg->u.end, cause);
		break;
	case WIRE_ERROR:
		err = decode_error(pv, &r, &msg->u.error, cause);
		break;
	case WIRE_PING:
	case WIRE_PONG:
		err = decode_ping(pv, &r, &msg->u.ping, msg->type == WIRE_PONG, cause);
		break;
	case WIRE_COLUMNS:
		err = decode_columns(pv, &r, msg, cause);
		break;
	case WIRE_ROWS:
		err = decode_rows(pv, &r, msg, cause);
		break;
	}
	if (!err && r.p != r.end)
		err = fq_fail(cause, -EBADMSG, "%s frame: body has trailing elements",
			      wire_type_name(msg->type));
	if (err == -ENOMEM)
		fq_fail(cause, err, "out of memory decoding a %s frame", wire_type_name(msg->type));
out:
	if (err) {
		int version = msg->version, t = msg->type;

		msg->priv = pv;
		wire_msg_release(msg);
		memset(msg, 0, sizeof(*msg));
		msg->version = version;
		msg->type = t;
		return err;
	}
	msg->priv = pv;
	return 0;
}

int wire_rows_reopen(struct wire_msg *msg, const void *frame, size_t frame_len)
{
	const uint8_t *f = frame;
	struct wire_priv *pv;
	struct wire_value v;
	struct rd r, first;
	int64_t n, ncols;

	memset(msg, 0, sizeof(*msg));
	if (frame_len < WIRE_HDR_LEN)
		return -EPROTO;
	r.p = f + WIRE_HDR_LEN;
	r.end = f + frame_len;
	r.base = r.p;
	if (rd_container(&r, false) != 3 || rd_value(&r, &v) || v.type != WIRE_INT ||
	    v.i != WIRE_VERSION || rd_value(&r, &v) || v.type != WIRE_INT || v.i != WIRE_ROWS)
		return -EPROTO;
	n = rd_container(&r, false);
	if (n < 0 || n > r.end - r.p)
		return -EPROTO;
	/* the first row's length is the frame's column count */
	first = r;
	ncols = n > 0 ? rd_container(&first, false) : 0;
	if (ncols < 0)
		return -EPROTO;
	pv = calloc(1, sizeof(*pv));
	if (!pv)
		return -ENOMEM;
	msg->version = WIRE_VERSION;
	msg->type = WIRE_ROWS;
	msg->u.rows.nrows = (size_t)n;
	msg->u.rows.ncols = (size_t)ncols;
	pv->rows = r;
	pv->rows_left = (size_t)n;
	msg->priv = pv;
	return 0;
}

int wire_rows_next(struct wire_msg *msg, struct wire_value *vals)
{
	struct wire_priv *pv = msg->priv;
	size_t ncols;
	int err;

	if (!pv || msg->type != WIRE_ROWS)
		return -EINVAL;
	if (pv->rows_left == 0)
		return 0;
	ncols = msg->u.rows.ncols;
	err = rd_row(&pv->rows, &ncols, vals, msg->u.rows.nrows - pv->rows_left + 1, NULL);
	if (err) {
		pv->rows_left = 0;
		return err;
	}
	pv->rows_left--;
	return 1;
}
