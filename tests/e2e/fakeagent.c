/* SPDX-License-Identifier: MIT */
/*
 * fq-fakeagent: a plaintext loopback agent that misbehaves on purpose, so the
 * fault paths of fleetq (partial streams, garbage, other versions, wrong row
 * counts) can be tested against real sockets. Real agents never do this.
 *
 *   fq-fakeagent MODE PORTFILE
 *
 * MODE: partial   HELLO, COLUMNS, one ROWS frame of 3 rows, then close
 *       garbage   bytes that are no frame at all
 *       version   a HELLO of protocol version 2
 *       badcount  3 rows, END saying 5
 *       huge      a header announcing a frame past WIRE_FRAME_MAX
 *       errorauth ERROR WIRE_E_AUTH instead of HELLO, then close
 *       ok        a well-behaved answer: COLUMNS (a, b), 3 rows, END
 *       busy      END with status BUSY after the QUERY (too many queries)
 *       flood     COLUMNS (a, b), then ROWS frames of 1 MiB (16 rows each) until the
 *                 client goes away: no row limit, no END
 *       dupcols   4,000 columns all named "x", one row
 *       dupcols2k 1,998 columns all named "x" (as many as the merge holds), one row
 *       widecols  2,001 columns, one row
 *       escape    terminal escapes (OSC title, clear screen) in the HELLO, a column
 *                 name and a value
 *       escend    END sql error whose message is terminal escapes
 *       errbusy   ERROR WIRE_E_BUSY instead of HELLO (too many sessions), then close
 *       values    a well-behaved answer with values a real agent never sends (NaN,
 *                 -0.0, text with a NUL, invalid UTF-8, ...) and column names that
 *                 clash ("v", "V", "node", "", "v_2", "w")
 *       stall     HELLO, takes the query, never answers (until the client closes)
 *       relaynew  a relay for the peers leaf1.invalid .. leaf3.invalid, which it ends
 *                 with the outcomes PROTOCOL.md names (columns, protocol, agent)
 *       relayold  the same with the words older agents sent (columns differ,
 *                 protocol error, agent error)
 *       oldcols   its first query: END sql error "no such table: gpu_busy" (an agent older
 *                 than that table); every later one: COLUMNS (a, b), 3 rows, END (columns
 *                 no analysis has, to win the vote of the nodes asked again)
 * One connection at a time, forever; the test kills it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire.h"

static int write_all(int fd, const void *p, size_t n)
{
	const char *s = p;

	while (n) {
		ssize_t w = write(fd, s, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		s += w;
		n -= w;
	}
	return 0;
}

/* Reads one frame (and ignores it): the client's QUERY. */
static int read_frame(int fd)
{
	unsigned char hdr[4], buf[4096];
	size_t len;

	if (recv(fd, hdr, 4, MSG_WAITALL) != 4)
		return -1;
	len = (size_t)hdr[0] << 24 | hdr[1] << 16 | hdr[2] << 8 | hdr[3];
	while (len) {
		ssize_t r = read(fd, buf, len < sizeof(buf) ? len : sizeof(buf));

		if (r <= 0)
			return -1;
		len -= r;
	}
	return 0;
}

static void put_rows(struct wire_buf *b, int n)
{
	struct wire_rows w;

	wire_rows_begin(&w, b, 2);
	for (int i = 0; i < n; i++) {
		struct wire_value v[2] = { { .type = WIRE_INT, .i = i },
					   { .type = WIRE_TEXT, .p = "fake", .n = 4 } };

		wire_rows_add(&w, v);
	}
	wire_rows_finish(&w);
}

/* Every row holds each of these once, shifted by the row number. */
#define TEXT(s) { .type = WIRE_TEXT, .p = s, .n = sizeof(s) - 1 }
#define BLOB(s) { .type = WIRE_BLOB, .p = s, .n = sizeof(s) - 1 }
static const struct wire_value specials[] = {
	{ .type = WIRE_REAL, .d = NAN },
	{ .type = WIRE_REAL, .d = -0.0 },
	{ .type = WIRE_REAL, .d = 0.0 },
	{ .type = WIRE_REAL, .d = 1.0 },
	{ .type = WIRE_REAL, .d = 0.1 },
	{ .type = WIRE_REAL, .d = 1e300 },
	{ .type = WIRE_REAL, .d = -1e-300 },
	{ .type = WIRE_REAL, .d = 5e-324 },
	{ .type = WIRE_REAL, .d = INFINITY },
	{ .type = WIRE_REAL, .d = -INFINITY },
	{ .type = WIRE_REAL, .d = -NAN },
	{ .type = WIRE_INT, .i = INT64_MAX },
	{ .type = WIRE_INT, .i = INT64_MIN },
	{ .type = WIRE_INT, .i = 0 },
	TEXT(""),
	TEXT("a\0b"),
	TEXT("\xff\xfe"),
	TEXT("tab\tnl\ncr\r\\ \"q\" ,"),
	TEXT("\xc3\xa9\x01\x7f"),
	BLOB(""),
	BLOB("\x00\xff"),
	{ .type = WIRE_NULL },
};
#define NSPECIALS (sizeof(specials) / sizeof(specials[0]))

static void put_specials(struct wire_buf *b)
{
	struct wire_rows w;
	struct wire_value v[6];

	wire_rows_begin(&w, b, 6);
	for (size_t r = 0; r < NSPECIALS; r++) {
		for (size_t c = 0; c < 6; c++)
			v[c] = specials[(r + c) % NSPECIALS];
		wire_rows_add(&w, v);
	}
	wire_rows_finish(&w);
}

/* "127.0.0.1:PORT": how the client names us, for our own END as a relay. */
static char self[32];

/* Ends our own node and three leaves the way a relay does (PROTOCOL.md "Relay"). */
static void put_relay(struct wire_buf *b, int old)
{
	static const char *const cols[] = { "node", "a", "b" };
	struct wire_end e = { .id = 1, .status = WIRE_OK, .node = self, .outcome = "ok" };

	wire_put_columns(b, 3, cols);
	wire_put_end(b, &e);
	e.status = WIRE_E_PEER;
	e.node = "leaf1.invalid";
	e.outcome = old ? "columns differ" : "columns";
	e.message = "column 2 is 'x' where the first node has 'b': not merged";
	wire_put_end(b, &e);
	/* nothing more to say than the outcome (a relay's last resort) */
	e.node = "leaf2.invalid";
	e.outcome = old ? "protocol error" : "protocol";
	e.message = e.outcome;
	wire_put_end(b, &e);
	e.node = "leaf3.invalid";
	e.outcome = old ? "agent error" : "agent";
	e.message = "outside the relay's --relay-peer list: not dialled";
	wire_put_end(b, &e);
	e = (struct wire_end){ .id = 1, .status = WIRE_E_PEER,
			       .message = "3 of 4 nodes did not answer fully" };
	wire_put_end(b, &e);
}

/* An answer of no rows: END with this status and message alone. */
static void end_only(int fd, struct wire_buf *b, int status, const char *message)
{
	struct wire_end e = { .id = 1, .status = status, .message = message };

	wire_put_end(b, &e);
	write_all(fd, b->data, b->len);
}

static void serve(int fd, const char *mode)
{
	static int asked; /* queries answered so far (oldcols) */
	static const char *const cols[] = { "a", "b" };
	struct wire_hello h = { .agent_version = "fake",
				.schema_version = 1,
				.node = strcmp(mode, "escape") ? "fake" : "\x1b]0;pwned\x07",
				.clock_source = "realtime",
				.proto_min = 1,
				.proto_max = 1 };
	struct wire_end e = { .id = 1, .rows = 3, .status = WIRE_OK };
	struct wire_buf b;

	wire_buf_init(&b);
	if (!strcmp(mode, "garbage")) {
		write_all(fd, "\x00\x00\x00\x05hello", 9);
		goto out;
	}
	if (!strcmp(mode, "huge")) {
		write_all(fd, "\x7f\xff\xff\xff", 4);
		goto out;
	}
	if (!strcmp(mode, "version")) {
		/* [2, 100, {}] */
		write_all(fd, "\x00\x00\x00\x04\x93\x02\x64\x80", 8);
		goto out;
	}
	if (!strcmp(mode, "errorauth")) {
		wire_put_error(&b, WIRE_E_AUTH, "client 'x' is not allowed");
		write_all(fd, b.data, b.len);
		goto out;
	}
	if (!strcmp(mode, "errbusy")) {
		wire_put_error(&b, WIRE_E_BUSY, "too many sessions (256)");
		write_all(fd, b.data, b.len);
		goto out;
	}
	wire_put_hello(&b, &h);
	write_all(fd, b.data, b.len);
	wire_buf_reset(&b);
	if (read_frame(fd))
		goto out;
	if (!strcmp(mode, "stall")) {
		/* took the query, never answers: until the client goes */
		char c;

		while (read(fd, &c, 1) > 0)
			;
		goto out;
	}
	if (!strncmp(mode, "relay", 5)) {
		put_relay(&b, !strcmp(mode, "relayold"));
		write_all(fd, b.data, b.len);
		goto drain;
	}
	if (!strcmp(mode, "busy")) {
		end_only(fd, &b, WIRE_E_BUSY, "agent busy: 8 queries running, try again");
		goto out;
	}
	if (!strcmp(mode, "flood")) {
		static char big[65536];
		struct wire_rows w;

		memset(big, 'f', sizeof(big));
		wire_put_columns(&b, 2, cols);
		for (;;) {
			wire_rows_begin(&w, &b, 2);
			for (int i = 0; i < 16; i++) {
				struct wire_value v[2] = { { .type = WIRE_INT, .i = i },
							   { .type = WIRE_TEXT, .p = big,
							     .n = sizeof(big) - 64 } };

				wire_rows_add(&w, v);
			}
			wire_rows_finish(&w);
			if (write_all(fd, b.data, b.len))
				goto out;
			wire_buf_reset(&b);
		}
	}
	if (!strncmp(mode, "dupcols", 7) || !strcmp(mode, "widecols")) {
		size_t n = !strcmp(mode, "dupcols")	  ? 4000
			   : !strcmp(mode, "dupcols2k") ? 1998
							: 2001;
		const char **names = calloc(n, sizeof(*names));
		char (*wide)[16] = calloc(n, 16);
		struct wire_value *v = calloc(n, sizeof(*v));
		struct wire_rows w;

		for (size_t i = 0; names && wide && v && i < n; i++) {
			snprintf(wide[i], 16, "c%zu", i + 1);
			names[i] = mode[0] == 'd' ? "x" : wide[i];
			v[i] = (struct wire_value){ .type = WIRE_INT, .i = (int64_t)i };
		}
		if (names && wide && v) {
			wire_put_columns(&b, n, names);
			wire_rows_begin(&w, &b, n);
			wire_rows_add(&w, v);
			wire_rows_finish(&w);
			e.rows = 1;
			wire_put_end(&b, &e);
			write_all(fd, b.data, b.len);
		}
		free(names);
		free(wide);
		free(v);
		goto drain;
	}
	if (!strcmp(mode, "escape")) {
		static const char *const ecols[] = { "\x1b]0;pwned\x07", "b" };
		struct wire_rows w;
		struct wire_value v[2] = { TEXT("\x1b[2J\x1b]0;pwned\x07"), TEXT("ok") };

		wire_put_columns(&b, 2, ecols);
		wire_rows_begin(&w, &b, 2);
		wire_rows_add(&w, v);
		wire_rows_finish(&w);
		e.rows = 1;
		wire_put_end(&b, &e);
		write_all(fd, b.data, b.len);
		goto drain;
	}
	if (!strcmp(mode, "oldcols") && !asked++) {
		end_only(fd, &b, WIRE_E_SQL, "no such table: gpu_busy");
		goto drain;
	}
	if (!strcmp(mode, "escend")) {
		end_only(fd, &b, WIRE_E_SQL, "no such table: \x1b]0;pwned\x07\x1b[2J");
		goto drain;
	}
	if (!strcmp(mode, "values")) {
		static const char *const vcols[] = { "v", "V", "node", "", "v_2", "w" };

		wire_put_columns(&b, 6, vcols);
		put_specials(&b);
		e.rows = NSPECIALS;
	} else {
		wire_put_columns(&b, 2, cols);
		put_rows(&b, 3);
	}
	if (!strcmp(mode, "badcount"))
		e.rows = 5;
	if (strcmp(mode, "partial"))
		wire_put_end(&b, &e);
	write_all(fd, b.data, b.len);
	/* Let the client close first when the answer is complete. */
	if (strcmp(mode, "partial")) {
		char c;

drain:
		while (read(fd, &c, 1) > 0)
			;
	}
out:
	wire_buf_release(&b);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	FILE *f;
	int ls;

	if (argc != 3) {
		fprintf(stderr, "usage: fq-fakeagent MODE PORTFILE\n");
		return 2;
	}
	/* flood writes until the client has gone: that is no reason to die */
	signal(SIGPIPE, SIG_IGN);
	ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 16) ||
	    getsockname(ls, (struct sockaddr *)&sa, &len)) {
		perror("fq-fakeagent");
		return 1;
	}
	snprintf(self, sizeof(self), "127.0.0.1:%d", ntohs(sa.sin_port));
	f = fopen(argv[2], "w");
	if (!f || fprintf(f, "%d\n", ntohs(sa.sin_port)) < 0 || fclose(f)) {
		perror(argv[2]);
		return 1;
	}
	for (;;) {
		int fd = accept(ls, NULL, NULL);

		if (fd < 0)
			continue;
		serve(fd, argv[1]);
		close(fd);
	}
}
