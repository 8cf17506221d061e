/* SPDX-License-Identifier: MIT */
/*
 * Writes the fuzz seed corpus: one file per valid frame kind, plus a stream
 * of several frames. Usage: wire_gen_corpus DIR (tests/fuzz/corpus/wire).
 */
#include "wire.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int save(const char *dir, const char *name, struct wire_buf *b)
{
	char path[4096];
	FILE *f;
	int rc = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(b->data, 1, b->len, f) != b->len)
		rc = -1;
	if (f && fclose(f))
		rc = -1;
	if (rc)
		fprintf(stderr, "cannot write '%s'\n", path);
	wire_buf_reset(b);
	return rc;
}

int main(int argc, char **argv)
{
	static const char blob[] = { 0, 1, 2, 0 };
	const char *cols[] = { "rank", "seq", "dur_ns", "name" };
	struct wire_value v[6] = {
		{ .type = WIRE_INT, .i = 3 },
		{ .type = WIRE_INT, .i = -1234567890123LL },
		{ .type = WIRE_REAL, .d = -0.0 },
		{ .type = WIRE_TEXT, .p = "ncclAllReduce", .n = 13 },
		{ .type = WIRE_BLOB, .p = blob, .n = 4 },
		{ .type = WIRE_NULL },
	};
	struct wire_rows w;
	struct wire_buf b;
	int rc = 0, i;

	if (argc != 2) {
		fprintf(stderr, "usage: wire_gen_corpus DIR\n");
		return 2;
	}
	wire_buf_init(&b);
	wire_put_hello(&b, &(struct wire_hello){
		.agent_version = "0.1.0", .schema_version = 1, .node = "gpu-01",
		.realtime_ns = 1700000000000000000LL, .clock_source = "tai", .proto_min = 1,
		.proto_max = 1, .peer_identity = "CN=client" });
	rc |= save(argv[1], "hello", &b);
	wire_put_query(&b, &(struct wire_query){ .id = 9, .sql = "SELECT * FROM t WHERE a = ?",
						 .nparams = 6, .params = v, .max_rows = 10,
						 .timeout_ms = 5000, .npeers = 1,
						 .peers = (const char *[]){ "leaf:7411" } });
	rc |= save(argv[1], "query", &b);
	wire_put_columns(&b, 4, cols);
	rc |= save(argv[1], "columns", &b);
	wire_rows_begin(&w, &b, 6);
	for (i = 0; i < 20; i++) {
		v[0].i = i;
		v[2].d = i == 1 ? NAN : i == 2 ? INFINITY : i * 1e300;
		wire_rows_add(&w, v);
	}
	wire_rows_finish(&w);
	rc |= save(argv[1], "rows", &b);
	wire_put_end(&b, &(struct wire_end){ .id = 9, .rows = 20, .status = WIRE_E_ROWS,
					     .truncated = 1, .message = "row limit",
					     .node = "leaf" });
	rc |= save(argv[1], "end", &b);
	wire_put_error(&b, WIRE_E_VERSION, "speak version 1");
	rc |= save(argv[1], "error", &b);
	wire_put_ping(&b, WIRE_PING, &(struct wire_ping){ .t1_ns = 5 });
	rc |= save(argv[1], "ping", &b);
	wire_put_ping(&b, WIRE_PONG, &(struct wire_ping){ .t1_ns = 5, .t2_ns = 7 });
	rc |= save(argv[1], "pong", &b);
	/* a whole session's worth of frames in one stream */
	wire_put_hello(&b, &(struct wire_hello){ .proto_min = 1, .proto_max = 1 });
	wire_put_columns(&b, 2, cols);
	wire_rows_begin(&w, &b, 2);
	wire_rows_add(&w, v);
	wire_rows_add(&w, v + 3);
	wire_rows_finish(&w);
	wire_put_end(&b, &(struct wire_end){ .id = 1, .rows = 2 });
	rc |= save(argv[1], "stream", &b);
	wire_buf_release(&b);
	return rc ? 1 : 0;
}
