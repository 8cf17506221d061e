/* SPDX-License-Identifier: MIT */
/*
 * TLS handshakes in one thread over memory BIOs, agentd's server context
 * (agentd/tls.c's tls_ctx_new) against a client set up as fleetq's: CPU per
 * handshake of each side, no sockets, processes or other load in the
 * figures. Per case: full handshakes, and resumed ones, under stateful and
 * stateless tickets, and full ones with no ticket (FQ_TLS_TICKETS=0); and
 * what fleetq pays to keep a session between runs: encoding it for the
 * cache file and decoding it, whole (d2i_SSL_SESSION decodes the agent's
 * certificate again) and as the file keeps it (session_encode: without).
 * The server side includes tls_peer_check(), the client side reading the
 * ticket. Ratios are to full handshakes under stateless tickets.
 *   bench_tls CERTDIR HOST [N]
 * CERTDIR from certs/mkcerts CERTDIR HOST: ca.crt, HOST.{crt,key}, client.{crt,key}.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "session.h"
#include "tls.h"

static const char *dir, *host;

static double cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *path(const char *name, const char *ext)
{
	char *p;

	if (asprintf(&p, "%s/%s%s", dir, name, ext) < 0) {
		perror("asprintf");
		exit(1);
	}
	return p;
}

static SSL_CTX *server_ctx(const char *tickets)
{
	char *ca = path("ca", ".crt"), *crt = path(host, ".crt"), *key = path(host, ".key");
	char *cause = NULL;
	SSL_CTX *ctx;

	setenv("FQ_TLS_TICKETS", tickets, 1);
	ctx = tls_ctx_new(ca, crt, key, &cause);
	if (!ctx) {
		fprintf(stderr, "bench_tls: %s\n", cause ? cause : "cannot make the server context");
		exit(1);
	}
	free(ca);
	free(crt);
	free(key);
	return ctx;
}

/* As fanout.c's load_tls(): the agent's certificate checked against the CA and HOST. */
static SSL_CTX *client_ctx(void)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	char *ca = path("ca", ".crt"), *crt = path("client", ".crt"), *key = path("client", ".key");

	if (!ctx || SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1 ||
	    SSL_CTX_use_certificate_chain_file(ctx, crt) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		fprintf(stderr, "bench_tls: cannot load %s/ca.crt, client.crt or client.key\n", dir);
		exit(1);
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT);
	free(ca);
	free(crt);
	free(key);
	return ctx;
}

struct side {
	double server, client; /* CPU seconds */
	int reused;
};

/* One connection, offering sess; returns the client's new session (or NULL). */
static SSL_SESSION *handshake(SSL_CTX *sctx, SSL_CTX *cctx, SSL_SESSION *sess, struct side *t)
{
	SSL *c = SSL_new(cctx), *s = SSL_new(sctx);
	struct tls_verdict v = { 0 };
	const char *allow[] = { "fleetq-*" };
	SSL_SESSION *got = NULL;
	BIO *cb = NULL, *sb = NULL;
	int cdone = 0, sdone = 0;
	char id[256], *cause = NULL, byte;
	struct in6_addr a;
	double t0;

	t0 = cpu();
	if (!c || !s || !BIO_new_bio_pair(&cb, 0, &sb, 0))
		goto fail;
	SSL_set_bio(c, cb, cb);
	SSL_set_connect_state(c);
	if (inet_pton(AF_INET, host, &a) == 1 || inet_pton(AF_INET6, host, &a) == 1) {
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c), host);
	} else {
		X509_VERIFY_PARAM_set1_host(SSL_get0_param(c), host, 0);
		SSL_set_tlsext_host_name(c, host);
	}
	if (sess)
		SSL_set_session(c, sess);
	t->client += cpu() - t0;
	t0 = cpu();
	SSL_set_bio(s, sb, sb);
	SSL_set_accept_state(s);
	tls_verdict_attach(s, &v);
	t->server += cpu() - t0;
	for (int i = 0; i < 100 && !(cdone && sdone); i++) {
		int r;

		t0 = cpu();
		r = cdone ? 1 : SSL_do_handshake(c);
		if (r != 1 && SSL_get_error(c, r) != SSL_ERROR_WANT_READ)
			goto fail;
		cdone = cdone || r == 1;
		t->client += cpu() - t0;
		t0 = cpu();
		r = sdone ? 1 : SSL_do_handshake(s);
		if (r != 1 && SSL_get_error(s, r) != SSL_ERROR_WANT_READ)
			goto fail;
		sdone = sdone || r == 1;
		t->server += cpu() - t0;
	}
	t0 = cpu();
	if (!sdone || tls_peer_check(s, &v, allow, 1, id, sizeof(id), &cause) ||
	    SSL_write(s, "h", 1) != 1)
		goto fail;
	t->reused += SSL_session_reused(s);
	t->server += cpu() - t0;
	/* The client closes first, as fleetq does after END. */
	t0 = cpu();
	if (!cdone || SSL_read(c, &byte, 1) != 1)
		goto fail;
	got = SSL_get1_session(c);
	SSL_shutdown(c);
	SSL_free(c);
	t->client += cpu() - t0;
	t0 = cpu();
	SSL_shutdown(s);
	SSL_free(s);
	t->server += cpu() - t0;
	return got;
fail:
	fprintf(stderr, "bench_tls: handshake failed: %s\n",
		cause ? cause : ERR_reason_error_string(ERR_peek_last_error()));
	exit(1);
}

/* N handshakes, each resuming the session of the one before when resume is set. */
static struct side run(const char *tickets, int resume, int n)
{
	SSL_CTX *sctx = server_ctx(tickets), *cctx = client_ctx();
	SSL_SESSION *sess = handshake(sctx, cctx, NULL, &(struct side){ 0 });
	struct side t = { 0 };

	for (int i = 0; i < n; i++) {
		SSL_SESSION *next = handshake(sctx, cctx, resume ? sess : NULL, &t);

		SSL_SESSION_free(sess);
		sess = next;
	}
	SSL_SESSION_free(sess);
	SSL_CTX_free(sctx);
	SSL_CTX_free(cctx);
	if (resume && t.reused != n) {
		fprintf(stderr, "bench_tls: %s tickets: %d of %d handshakes resumed\n", tickets,
			t.reused, n);
		exit(1);
	}
	t.server /= n;
	t.client /= n;
	return t;
}

/* CPU us per d2i_SSL_SESSION of der, n times. */
static double decode_us(const unsigned char *der, size_t len, int n)
{
	double t0 = cpu();

	for (int i = 0; i < n; i++) {
		const unsigned char *p = der;
		SSL_SESSION *s = d2i_SSL_SESSION(NULL, &p, (long)len);

		if (!s) {
			fprintf(stderr, "bench_tls: cannot decode a session\n");
			exit(1);
		}
		SSL_SESSION_free(s);
	}
	return (cpu() - t0) / n * 1e6;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name, *tickets;
		int resume;
	} cases[] = {
		{ "full, stateless tickets", "stateless", 0 }, { "resumed, stateless", "stateless", 1 },
		{ "full, stateful tickets", "stateful", 0 },   { "resumed, stateful", "stateful", 1 },
		{ "full, no ticket", "0", 0 },
	};
	struct side base = { 0 }, res[sizeof(cases) / sizeof(cases[0])];
	SSL_SESSION *sess;
	SSL_CTX *sctx, *cctx;
	unsigned char *der = NULL, *file;
	size_t flen;
	int n, len;
	double t0, enc, dec, fdec;

	if (argc < 3) {
		fprintf(stderr, "usage: bench_tls CERTDIR HOST [N]\n");
		return 2;
	}
	dir = argv[1];
	host = argv[2];
	n = argc > 3 ? atoi(argv[3]) : 500;
	if (n < 1 || tls_init())
		return 2;
	printf("tls handshakes over memory BIOs, %d per case, CPU us per handshake\n", n);
	printf("  %-26s %8s %6s %8s %6s\n", "case", "server", "ratio", "client", "ratio");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct side t = run(cases[i].tickets, cases[i].resume, n);

		if (!i)
			base = t;
		res[i] = t;
		printf("  %-26s %8.1f %6.2f %8.1f %6.2f\n", cases[i].name, t.server * 1e6,
		       t.server / base.server, t.client * 1e6, t.client / base.client);
	}

	/* What keeping a session in fleetq's file costs per host: encode once, decode once. */
	sctx = server_ctx("stateful");
	cctx = client_ctx();
	sess = handshake(sctx, cctx, NULL, &(struct side){ 0 });
	len = i2d_SSL_SESSION(sess, NULL);
	i2d_SSL_SESSION(sess, &der);
	t0 = cpu();
	for (int i = 0; i < n; i++) {
		unsigned char *p = session_encode(sess, &flen);

		if (!p)
			return 1;
		free(p);
	}
	enc = (cpu() - t0) / n;
	file = session_encode(sess, &flen);
	dec = decode_us(der, (size_t)len, n);
	fdec = decode_us(file, flen, n);
	printf("  client session, whole: %d bytes, d2i_SSL_SESSION %.1f us\n", len, dec);
	printf("  as fleetq's file keeps it: %zu bytes, session_encode %.1f us, d2i_SSL_SESSION "
	       "%.1f us\n",
	       flen, enc * 1e6, fdec);
	printf("RESULT tls_session_decode_us %.1f us baseline=%.1f ratio=%.3f target=- met=-\n",
	       fdec, dec, fdec / dec);
	for (size_t i = 1; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *side[] = { "server", "client" };
		double v[] = { res[i].server, res[i].client }, b[] = { base.server, base.client };

		for (int k = 0; k < 2; k++)
			printf("RESULT tls_%s_us_%s_%s %.1f us baseline=%.1f ratio=%.3f target=- "
			       "met=-\n",
			       side[k], cases[i].resume ? "resumed" : "full", cases[i].tickets,
			       v[k] * 1e6, b[k] * 1e6, v[k] / b[k]);
	}
	OPENSSL_free(der);
	free(file);
	SSL_SESSION_free(sess);
	SSL_CTX_free(sctx);
	SSL_CTX_free(cctx);
	return 0;
}
