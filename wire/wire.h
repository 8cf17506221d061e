/* SPDX-License-Identifier: MIT */
/*
 * fleetq wire protocol v1: the one contract between agentd, relays and fleetq.
 * See wire/PROTOCOL.md for the byte-level specification.
 *
 * A frame is a 4-byte big-endian payload length followed by that many bytes of
 * msgpack: a 3-element array [version, type, body]. Nothing here knows about
 * sockets: callers feed bytes in and take bytes out.
 */
#ifndef FLEETQ_WIRE_H
#define FLEETQ_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION 1
#define WIRE_HDR_LEN 4
/* Hard cap on one frame's payload; a peer announcing more is cut off. */
#define WIRE_FRAME_MAX (16u << 20)
/* Encoders close a ROWS frame once it holds this many payload bytes. */
#define WIRE_ROWS_TARGET (64u << 10)
/* Deepest msgpack nesting a decoder accepts (v1 frames use 4 levels). */
#define WIRE_DEPTH_MAX 32
/* Decoder caps on counts whose decoded form is larger than their bytes. */
#define WIRE_COLUMNS_MAX 32767 /* SQLite's own hard column cap */
#define WIRE_PARAMS_MAX 32766  /* SQLite's default SQLITE_MAX_VARIABLE_NUMBER */
#define WIRE_PEERS_MAX 65536

/* Frame types, in numbered ranges: 1xx session control, 2xx query. */
enum wire_type {
	WIRE_HELLO = 100,   /* agent -> client, first frame of every session */
	WIRE_ERROR = 101,   /* either way; ends a query or the session */
	WIRE_PING = 102,    /* client -> agent: clock sample request */
	WIRE_PONG = 103,    /* agent -> client: clock sample reply */
	WIRE_QUERY = 200,   /* client -> agent */
	WIRE_COLUMNS = 201, /* agent -> client: once per query, before ROWS */
	WIRE_ROWS = 202,    /* agent -> client: a batch of rows */
	WIRE_END = 203,     /* agent -> client: last frame of every query */
};

/* END status and ERROR codes. 0 is success; codes are stable API. */
enum wire_status {
	WIRE_OK = 0,
	WIRE_E_PROTO = 1,     /* malformed frame, unknown type, bad version */
	WIRE_E_VERSION = 2,   /* peer speaks a protocol version we do not */
	WIRE_E_AUTH = 3,      /* client certificate refused */
	WIRE_E_SQL = 4,       /* prepare/step failed (syntax, missing table, ...) */
	WIRE_E_DENIED = 5,    /* authorizer refused (write, ATTACH, PRAGMA, ...) */
	WIRE_E_TIMEOUT = 6,   /* query deadline passed */
	WIRE_E_ROWS = 7,      /* row limit reached (END has truncated=1) */
	WIRE_E_BYTES = 8,     /* byte limit reached (END has truncated=1) */
	WIRE_E_MEMORY = 9,    /* memory limit reached */
	WIRE_E_BUSY = 10,     /* too many concurrent queries */
	WIRE_E_SHUTDOWN = 11, /* agent is draining */
	WIRE_E_INTERNAL = 12,
	WIRE_E_PEER = 13,     /* relay: a sub-peer failed (see message) */
};

const char *wire_type_name(int type);     /* "HELLO", ... or "?" */
const char *wire_status_name(int status); /* "ok", "sql error", ... */

/*
 * What became of one node of a fan-out: a relay's END names it in `outcome`
 * for each leaf (PROTOCOL.md, END). The requester shows it in its own words.
 */
enum wire_outcome {
	WIRE_OUT_PENDING = 0,
	WIRE_OUT_OK,	      /* END with status ok: every row arrived */
	WIRE_OUT_TRUNCATED,   /* a limit cut it; rows kept, node not ok */
	WIRE_OUT_TIMEOUT,     /* deadline passed (or no HELLO within the connect timeout) */
	WIRE_OUT_UNREACHABLE, /* DNS, refused, no route, connect timeout */
	WIRE_OUT_TLS,	      /* handshake failed, certificate refused or not for this host */
	WIRE_OUT_SQL,	      /* END with a query-level failure (sql, denied, limits) */
	WIRE_OUT_PROTOCOL,    /* malformed frames, wrong version, unexpected frame */
	WIRE_OUT_COLUMNS,     /* columns differ from the others': rows not kept */
	WIRE_OUT_PARTIAL,     /* connection lost before END: rows dropped */
	WIRE_OUT_AGENT,	      /* agent sent ERROR (shutting down, internal) */
	WIRE_OUT_INTERRUPTED, /* the requester stopped the fan-out before this node finished */
	WIRE_OUT_BUSY,	      /* agent too busy: try again */
	WIRE_NOUTCOMES
};

/* END's `outcome` text: "ok", "protocol", "columns", ... ("?" out of range). */
const char *wire_outcome_name(int outcome);
/*
 * The outcome an END's `outcome` names, or -1 when unknown. Agents before
 * protocol names were fixed sent "protocol error", "columns differ" and
 * "agent error": those parse too.
 */
int wire_outcome_parse(const char *name);

enum wire_vtype { WIRE_NULL = 0, WIRE_INT, WIRE_REAL, WIRE_TEXT, WIRE_BLOB };

/*
 * One SQL value. For TEXT and BLOB, p/n point into memory owned by someone
 * else (the caller when encoding, the decoded frame when decoding); TEXT is
 * NOT NUL-terminated.
 */
struct wire_value {
	int type; /* enum wire_vtype */
	int64_t i;
	double d;
	const void *p;
	size_t n;
};

/* Growable byte buffer. */
struct wire_buf {
	char *data;
	size_t len;
	size_t cap;
};
void wire_buf_init(struct wire_buf *b);
void wire_buf_release(struct wire_buf *b);
int wire_buf_reserve(struct wire_buf *b, size_t more); /* 0 or -ENOMEM */
void wire_buf_reset(struct wire_buf *b);                /* len = 0, keeps memory */

struct wire_hello {
	const char *agent_version;
	int64_t schema_version;
	const char *node;        /* node name the agent reports */
	int64_t realtime_ns;     /* CLOCK_REALTIME when the frame was built */
	int64_t monotonic_ns;    /* CLOCK_MONOTONIC at the same moment */
	const char *clock_source;/* how trace timestamps relate to realtime */
	int64_t ring_drops;      /* trace events lost in the kernel ring buffer */
	int64_t store_lag_ns;    /* age of the oldest event not yet committed */
	int64_t proto_min, proto_max;
	const char *peer_identity; /* client identity the agent verified, or NULL */
	/* what the agent samples of its GPUs, or why nothing (meta 'gpu_status'); NULL from
	 * agents before it (optional key "gpu") */
	const char *gpu_status;
};

struct wire_query {
	uint64_t id;          /* client's query id, echoed in END */
	const char *sql;      /* NUL-terminated */
	size_t nparams;
	const struct wire_value *params;
	int64_t max_rows;     /* 0 = agent default */
	int64_t max_bytes;    /* 0 = agent default */
	int64_t timeout_ms;   /* 0 = agent default */
	/* Relay (tree fan-out): when npeers > 0 the agent forwards the query to
	 * these "host:port" peers and streams their rows too. Reserved in v1:
	 * agents that do not relay answer END with status WIRE_E_PROTO (the
	 * session stays usable; see PROTOCOL.md "Relay"). */
	size_t npeers;
	const char *const *peers;
	/* Relay extensions (optional keys, ignored by agents that do not relay):
	 * tree_width: a relay with more peers than this splits them into at most
	 * this many sub-relays (0: every peer is a leaf); self_name: the name the
	 * requester lists this agent under, which labels its own rows and END. */
	int64_t tree_width;
	const char *self_name;
	int64_t clock_param; /* 1-based param holding a time on the sender's clock; 0 none */
	/* Relay: clock samples (PINGs) the relay takes of each leaf after its HELLO, as
	 * the requester does of its own nodes; 0 = the relay's default. */
	int64_t pings;
	/* Relay: ms the relay gives each leaf from connect to HELLO (the requester's own
	 * connect timeout); 0 = the relay's default. */
	int64_t connect_ms;
	/* "for": the identity of the client a relay forwards for (the certificate name
	 * the first relay verified); an agent serves the query only if that client
	 * would be served directly. NULL: the sender asks for itself. */
	const char *on_behalf;
};

struct wire_end {
	uint64_t id;
	int64_t rows;
	int64_t status;      /* enum wire_status */
	int64_t elapsed_ns;
	int truncated;       /* 1 when a limit cut the result short */
	const char *message; /* NULL or text for non-OK status */
	/* Relay: the leaf this END reports on; NULL for the answering agent's
	 * own, final END. (Added after the first draft; zero-init keeps it NULL.) */
	const char *node;
	/* Relay: the requester-side outcome of that leaf ("ok", "unreachable",
	 * "tls", ... as fleetq names them), so coverage survives each hop. */
	const char *outcome;
	/* Relay: that leaf's clock offset to the relay's and the round trip it
	 * was measured with; rtt_ns 0 = no sample (the keys are left out). */
	int64_t offset_ns, rtt_ns;
	/* Relay: how many clock samples that offset is the best of (HELLO included). */
	int64_t samples;
};

struct wire_error {
	int64_t code; /* enum wire_status */
	const char *message;
};

struct wire_ping {
	int64_t t1_ns; /* client send time, echoed back */
	int64_t t2_ns; /* agent CLOCK_REALTIME when answering (PONG only) */
};

/* ---- encoding: each call appends one complete frame to out ---- */

int wire_put_hello(struct wire_buf *out, const struct wire_hello *h);
int wire_put_query(struct wire_buf *out, const struct wire_query *q);
int wire_put_columns(struct wire_buf *out, size_t ncols, const char *const *names);
int wire_put_end(struct wire_buf *out, const struct wire_end *e);
int wire_put_error(struct wire_buf *out, int64_t code, const char *message);
int wire_put_ping(struct wire_buf *out, int type /* PING or PONG */, const struct wire_ping *p);

/*
 * ROWS are built in place: begin, add rows, finish. The row count and the
 * frame length are patched in wire_rows_finish(). Callers finish the frame
 * when wire_rows_bytes() passes WIRE_ROWS_TARGET, then begin another, so no
 * side ever buffers a whole result.
 */
struct wire_rows {
	struct wire_buf *out;
	size_t start;  /* offset of the frame in out */
	size_t hdr;    /* offset of the rows array header */
	size_t ncols;
	uint32_t nrows;
	size_t col;    /* values added to the current row */
	size_t row_start; /* offset of the current row, to take it back */
};
int wire_rows_begin(struct wire_rows *w, struct wire_buf *out, size_t ncols);
int wire_rows_add(struct wire_rows *w, const struct wire_value *row); /* ncols values */
/* Value-at-a-time alternative to wire_rows_add (ncols calls make a row). */
int wire_rows_put(struct wire_rows *w, const struct wire_value *v);
size_t wire_rows_bytes(const struct wire_rows *w);
int wire_rows_finish(struct wire_rows *w); /* a batch of 0 rows is removed */
/*
 * Errors of the ROWS calls: -EINVAL for a bad value type, ncols == 0, or
 * wire_rows_add() in the middle of a wire_rows_put() row; -ENOMEM; -EMSGSIZE
 * when a row cannot fit one frame: that row is taken back out and the frame
 * stays valid (callers finish it and end the query with WIRE_E_BYTES).
 * wire_rows_finish() with a half-built row drops the frame and says -EINVAL.
 */

/* ---- decoding ---- */

/*
 * Looks at the first bytes of a stream. Returns 1 and sets *frame_len (header
 * included) when a whole frame is available, 0 when more bytes are needed,
 * -EMSGSIZE when the announced payload exceeds max_payload (<= WIRE_FRAME_MAX).
 */
int wire_frame_check(const void *buf, size_t avail, size_t max_payload, size_t *frame_len);

/*
 * The validating pre-pass on its own: checks that [buf, buf+len) is exactly
 * one well-formed msgpack object whose every array/map/str/bin/ext count fits
 * the bytes left, nested at most WIRE_DEPTH_MAX deep. Only after it succeeds
 * may bytes go to an allocating unpacker such as msgpack-c's. Returns 0 or
 * -EPROTO with *cause set (caller frees; *cause must be NULL on entry).
 */
int wire_validate(const void *buf, size_t len, char **cause);

/*
 * A decoded frame. Strings and values point into the frame bytes handed to
 * wire_decode() and into msg-owned memory; both must outlive the msg.
 */
struct wire_msg {
	int version;
	int type;
	union {
		struct wire_hello hello;
		struct wire_query query;
		struct wire_end end;
		struct wire_error error;
		struct wire_ping ping;
		struct {
			size_t ncols;
			const char **names; /* NUL-terminated copies, msg-owned */
		} columns;
		struct {
			size_t nrows;
			size_t ncols; /* 0 when nrows == 0 */
		} rows;
	} u;
	void *priv; /* decoder state (msgpack zone, row cursor, string copies) */
};

/*
 * Decodes one whole frame (header included, as delimited by wire_frame_check).
 * Validates every msgpack container count against the bytes left BEFORE
 * msgpack-c allocates for it. Returns 0, or -EPROTO/-EBADMSG/-ENOMEM with
 * *cause set to a one-line reason (caller frees). A version other than
 * WIRE_VERSION decodes only far enough to fill msg->version and msg->type and
 * returns -EPROTONOSUPPORT.
 *
 * -EPROTO: the bytes are not a frame (bad length, bad msgpack, not
 * [version, type, body], unknown type); -EBADMSG: a well-formed frame whose
 * body has the wrong shape (missing key, wrong type, row length mismatch);
 * -EMSGSIZE: payload over WIRE_FRAME_MAX. On any error msg holds only
 * version and type (when they could be read) and needs no release; calling
 * wire_msg_release() on it is harmless. A ROWS frame is checked whole here,
 * so a frame is accepted or refused as a unit.
 */
int wire_decode(struct wire_msg *msg, const void *frame, size_t frame_len, char **cause);

/*
 * Opens a ROWS frame that wire_decode() has accepted in this process before (the
 * same bytes, e.g. a copy kept until its rows are printed), for wire_rows_next(),
 * without checking every row a second time. wire_rows_next() still bounds every
 * value it reads. 0, -EPROTO when the bytes do not start as a ROWS frame, or
 * -ENOMEM; release msg with wire_msg_release().
 */
int wire_rows_reopen(struct wire_msg *msg, const void *frame, size_t frame_len);

/*
 * ROWS frames: walks the rows one at a time. vals has room for
 * msg->u.rows.ncols values. Returns 1 with a row, 0 at the end, -EBADMSG
 * if a row has the wrong number of values or a value of an unknown type.
 */
int wire_rows_next(struct wire_msg *msg, struct wire_value *vals);

void wire_msg_release(struct wire_msg *msg);

#endif
