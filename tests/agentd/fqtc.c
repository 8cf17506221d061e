/* SPDX-License-Identifier: MIT */
/*
 * fqtc: a small blocking test client for agentd. It connects (mutual TLS or
 * plaintext), prints the first frame, then runs its actions in order on one
 * session, printing every frame it gets as one line, flushed, so scripts can
 * compare and wait on them.
 *
 *   fqtc --port P [--host IP] [--ca F --cert F --key F | --plain] ACTION...
 *
 * --tls12 caps the client at TLS 1.2.
 * Actions: ping | query SQL | send SQL (no wait) | raw-len N | raw-version V |
 * raw-garbage | wait-close | sleep-ms N. Options before a query apply to it:
 * --max-rows N --max-bytes N --timeout-ms N --typed --count --int N --text S
 * --real X --null --blob HEX.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sqlite3.h>

#include "wire.h"

#define MAX_PARAMS 16

struct client {
	int fd;
	SSL *ssl;
	struct wire_buf out;
	unsigned char *in;
	uint64_t next_id;
};

static int xwrite(struct client *c, const void *p, size_t n)
{
	const char *s = p;

	while (n) {
		ssize_t k = c->ssl ? SSL_write(c->ssl, s, (int)n) : write(c->fd, s, n);

		if (k <= 0)
			return -1;
		s += k;
		n -= (size_t)k;
	}
	return 0;
}

static int xread(struct client *c, void *p, size_t n)
{
	char *s = p;

	while (n) {
		ssize_t k = c->ssl ? SSL_read(c->ssl, s, (int)n) : read(c->fd, s, n);

		if (k <= 0)
			return -1;
		s += k;
		n -= (size_t)k;
	}
	return 0;
}

static int send_buf(struct client *c)
{
	int rc = xwrite(c, c->out.data, c->out.len);

	wire_buf_reset(&c->out);
	return rc;
}

/* Reads one frame into c->in; returns its length, or -1 when the connection ended. */
static long read_frame(struct client *c)
{
	unsigned char hdr[WIRE_HDR_LEN];
	size_t n, flen;

	if (xread(c, hdr, sizeof(hdr)))
		return -1;
	n = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
	if (n > WIRE_FRAME_MAX) {
		printf("oversized frame %zu\n", n);
		return -1;
	}
	free(c->in);
	c->in = malloc(n + WIRE_HDR_LEN);
	if (!c->in)
		return -1;
	memcpy(c->in, hdr, sizeof(hdr));
	if (xread(c, c->in + WIRE_HDR_LEN, n))
		return -1;
	if (wire_frame_check(c->in, n + WIRE_HDR_LEN, WIRE_FRAME_MAX, &flen) != 1)
		return -1;
	return (long)flen;
}

static void hex(const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static void print_value(const struct wire_value *v, int typed)
{
	char buf[64];

	switch (v->type) {
	case WIRE_NULL:
		fputs(typed ? "n" : "", stdout);
		break;
	case WIRE_INT:
		printf(typed ? "i:%lld" : "%lld", (long long)v->i);
		break;
	case WIRE_REAL:
		if (typed) {
			printf("r:%a", v->d);
		} else {
			/* What sqlite3's CLI prints for a REAL in list mode. */
			sqlite3_snprintf(sizeof(buf), buf, "%!.15g", v->d);
			fputs(buf, stdout);
		}
		break;
	case WIRE_TEXT:
	case WIRE_BLOB:
		if (typed) {
			fputs(v->type == WIRE_TEXT ? "t:" : "b:", stdout);
			hex(v->p, v->n);
		} else {
			fwrite(v->p, 1, v->n, stdout);
		}
		break;
	default:
		fputs("?", stdout);
	}
}

struct qopts {
	int64_t max_rows, max_bytes, timeout_ms;
	int typed, count;
	size_t nparams;
	struct wire_value params[MAX_PARAMS];
	unsigned char blobs[MAX_PARAMS][256];
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * Reads and prints frames until END/ERROR (or close when until_end is 0).
 * Returns 0 after END, 1 after ERROR, -1 when the connection ended first.
 */
static int read_until_end(struct client *c, const struct qopts *qo, int until_end)
{
	struct wire_value *vals = NULL;
	int64_t rows = 0;
	double t0 = now_s();
	int rc = -1;

	for (;;) {
		struct wire_msg m;
		char *cause = NULL;
		long flen = read_frame(c);
		size_t i;

		if (flen < 0) {
			printf("closed\n");
			break;
		}
		memset(&m, 0, sizeof(m));
		if (wire_decode(&m, c->in, (size_t)flen, &cause)) {
			printf("bad frame: %s\n", cause ? cause : "?");
			free(cause);
			wire_msg_release(&m);
			break;
		}
		switch (m.type) {
		case WIRE_HELLO:
			printf("hello agent=%s schema=%lld node=%s clock_source=%s proto=%lld-%lld "
			       "peer=%s drops=%lld lag=%lld realtime=%lld\n",
			       m.u.hello.agent_version, (long long)m.u.hello.schema_version,
			       m.u.hello.node, m.u.hello.clock_source,
			       (long long)m.u.hello.proto_min, (long long)m.u.hello.proto_max,
			       m.u.hello.peer_identity ? m.u.hello.peer_identity : "(none)",
			       (long long)m.u.hello.ring_drops, (long long)m.u.hello.store_lag_ns,
			       (long long)m.u.hello.realtime_ns);
			rc = 0;
			break;
		case WIRE_COLUMNS:
			printf("columns ");
			for (i = 0; i < m.u.columns.ncols; i++)
				printf("%s%s", i ? "|" : "", m.u.columns.names[i]);
			printf("\n");
			free(vals);
			vals = calloc(m.u.columns.ncols + 1, sizeof(*vals));
			break;
		case WIRE_ROWS: {
			struct wire_value *rv = calloc(m.u.rows.ncols + 1, sizeof(*rv));
			int k;

			while ((k = wire_rows_next(&m, rv)) == 1) {
				rows++;
				if (qo && qo->count)
					continue;
				for (i = 0; i < m.u.rows.ncols; i++) {
					if (i)
						putchar('|');
					print_value(&rv[i], qo && qo->typed);
				}
				putchar('\n');
			}
			free(rv);
			if (k < 0)
				printf("bad rows\n");
			break;
		}
		case WIRE_END:
			if (qo && qo->count) {
				double dt = now_s() - t0;

				printf("count rows=%lld seconds=%.3f rows_per_s=%.0f\n",
				       (long long)rows, dt, dt > 0 ? (double)rows / dt : 0.0);
			}
			printf("end id=%llu status=%lld rows=%lld truncated=%d msg=%s\n",
			       (unsigned long long)m.u.end.id, (long long)m.u.end.status,
			       (long long)m.u.end.rows, m.u.end.truncated,
			       m.u.end.message ? m.u.end.message : "");
			rc = 0;
			break;
		case WIRE_ERROR:
			printf("error code=%lld msg=%s\n", (long long)m.u.error.code,
			       m.u.error.message ? m.u.error.message : "");
			rc = 1;
			break;
		case WIRE_PONG:
			printf("pong t1=%lld t2=%lld\n", (long long)m.u.ping.t1_ns,
			       (long long)m.u.ping.t2_ns);
			rc = 0;
			break;
		default:
			printf("frame %s\n", wire_type_name(m.type));
		}
		wire_msg_release(&m);
		fflush(stdout);
		if (until_end && (m.type == WIRE_END || m.type == WIRE_ERROR ||
				  m.type == WIRE_PONG || m.type == WIRE_HELLO))
			break;
	}
	free(vals);
	fflush(stdout);
	return rc;
}

static int tls12;

static int connect_tls(struct client *c, const char *host, int port, const char *ca,
		       const char *cert, const char *key, int plain)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct timeval tv = { .tv_sec = 60 };
	SSL_CTX *ctx;
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (c->fd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return -1;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		printf("connect failed: %s\n", strerror(errno));
		return -1;
	}
	if (plain)
		return 0;
	ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	if (tls12)
		SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
	if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1 ||
	    (cert && SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) ||
	    (key && SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)) {
		printf("cannot load client tls files\n");
		return -1;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	c->ssl = SSL_new(ctx);
	SSL_CTX_free(ctx);
	/* The agent's certificate must name the address we dialled. */
	X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), host);
	SSL_set_fd(c->ssl, c->fd);
	if (SSL_connect(c->ssl) != 1) {
		char buf[256];

		ERR_error_string_n(ERR_get_error(), buf, sizeof(buf));
		printf("tls handshake failed: %s\n", buf);
		return -1;
	}
	printf("tls %s\n", SSL_get_version(c->ssl));
	return 0;
}

static int hexval(int ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

int main(int argc, char **argv)
{
	const char *host = "127.0.0.1", *ca = NULL, *cert = NULL, *key = NULL;
	struct client c = { .fd = -1, .next_id = 1 };
	struct qopts qo;
	int port = 0, plain = 0, i, rc = 0;

	memset(&qo, 0, sizeof(qo));
	wire_buf_init(&c.out);
	for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i += 2) {
		if (!strcmp(argv[i], "--plain")) {
			plain = 1;
			i--;
			continue;
		}
		if (!strcmp(argv[i], "--tls12")) {
			tls12 = 1;
			i--;
			continue;
		}
		if (i + 1 >= argc)
			goto usage;
		if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--host"))
			host = argv[i + 1];
		else if (!strcmp(argv[i], "--ca"))
			ca = argv[i + 1];
		else if (!strcmp(argv[i], "--cert"))
			cert = argv[i + 1];
		else if (!strcmp(argv[i], "--key"))
			key = argv[i + 1];
		else
			break;
	}
	if (!port || (!plain && !ca))
		goto usage;
	if (connect_tls(&c, host, port, ca, cert, key, plain))
		return 3;
	/* The agent speaks first: HELLO, or ERROR for a refused client. */
	if (read_until_end(&c, NULL, 1) != 0)
		return 4;

	for (; i < argc; i++) {
		const char *a = argv[i], *arg = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--typed")) {
			qo.typed = 1;
		} else if (!strcmp(a, "--count")) {
			qo.count = 1;
		} else if (!strcmp(a, "--null")) {
			qo.params[qo.nparams++].type = WIRE_NULL;
		} else if (!strcmp(a, "ping")) {
			struct timespec ts;
			struct wire_ping p;

			clock_gettime(CLOCK_REALTIME, &ts);
			p.t1_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
			p.t2_ns = 0;
			if (wire_put_ping(&c.out, WIRE_PING, &p) || send_buf(&c) ||
			    read_until_end(&c, NULL, 1) < 0)
				return 5;
		} else if (!strcmp(a, "raw-garbage")) {
			/* A 4-byte payload that is not a 3-element array. */
			unsigned char f[8] = { 0, 0, 0, 4, 0xc1, 0xc1, 0xc1, 0xc1 };

			if (xwrite(&c, f, sizeof(f)))
				return 5;
			read_until_end(&c, NULL, 0);
		} else if (!strcmp(a, "wait-close")) {
			read_until_end(&c, NULL, 0);
		} else if (!arg) {
			goto usage;
		} else if (!strcmp(a, "--max-rows")) {
			qo.max_rows = atoll(arg), i++;
		} else if (!strcmp(a, "--max-bytes")) {
			qo.max_bytes = atoll(arg), i++;
		} else if (!strcmp(a, "--timeout-ms")) {
			qo.timeout_ms = atoll(arg), i++;
		} else if (!strcmp(a, "--int")) {
			qo.params[qo.nparams].type = WIRE_INT;
			qo.params[qo.nparams++].i = strtoll(arg, NULL, 0), i++;
		} else if (!strcmp(a, "--real")) {
			qo.params[qo.nparams].type = WIRE_REAL;
			qo.params[qo.nparams++].d = strtod(arg, NULL), i++;
		} else if (!strcmp(a, "--text")) {
			qo.params[qo.nparams].type = WIRE_TEXT;
			qo.params[qo.nparams].p = arg;
			qo.params[qo.nparams++].n = strlen(arg), i++;
		} else if (!strcmp(a, "--blob")) {
			size_t k, n = strlen(arg) / 2;

			for (k = 0; k < n && k < 256; k++)
				qo.blobs[qo.nparams][k] = (unsigned char)(hexval(arg[2 * k]) << 4 |
									  hexval(arg[2 * k + 1]));
			qo.params[qo.nparams].type = WIRE_BLOB;
			qo.params[qo.nparams].p = qo.blobs[qo.nparams];
			qo.params[qo.nparams++].n = k, i++;
		} else if (!strcmp(a, "query") || !strcmp(a, "send")) {
			struct wire_query q = {
				.id = c.next_id++,
				.sql = arg,
				.nparams = qo.nparams,
				.params = qo.params,
				.max_rows = qo.max_rows,
				.max_bytes = qo.max_bytes,
				.timeout_ms = qo.timeout_ms,
			};

			i++;
			if (wire_put_query(&c.out, &q) || send_buf(&c)) {
				printf("send failed\n");
				return 5;
			}
			if (!strcmp(a, "query") && read_until_end(&c, &qo, 1) < 0)
				return 5;
			memset(&qo, 0, sizeof(qo));
		} else if (!strcmp(a, "raw-len")) {
			uint32_t n = (uint32_t)strtoul(arg, NULL, 0);
			unsigned char hdr[4] = { n >> 24, n >> 16, n >> 8, n };

			i++;
			if (xwrite(&c, hdr, 4))
				return 5;
			read_until_end(&c, NULL, 0);
		} else if (!strcmp(a, "raw-version")) {
			/* [V, PING, nil] */
			unsigned char f[8] = { 0, 0, 0, 4, 0x93, 0, 0x66, 0xc0 };

			f[5] = (unsigned char)atoi(arg);

			i++;
			if (xwrite(&c, f, sizeof(f)))
				return 5;
			read_until_end(&c, NULL, 0);
		} else if (!strcmp(a, "sleep-ms")) {
			usleep((useconds_t)atoi(arg) * 1000);
			i++;
		} else {
			goto usage;
		}
	}
	fflush(stdout);
	return rc;
usage:
	fprintf(stderr, "usage: fqtc --port P [--host IP] (--ca F [--cert F --key F] | --plain) "
			"ACTION...\n");
	return 2;
}
