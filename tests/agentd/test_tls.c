/* SPDX-License-Identifier: MIT */
/*
 * agentd/tls.c on resumed sessions, in one process over memory BIOs: a
 * resumed client still goes through tls_peer_check() (--allow-client on the
 * certificate of its first handshake, and that certificate's end date), a
 * new context (SIGHUP) resumes nothing, and each FQ_TLS_TICKETS policy does
 * what agentd.8 says. Certificates are made here: a CA, a server and
 * clients of chosen names and lifetimes (ECDSA P-256, like certs/mkcerts).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "check.h"
#include "tls.h"

static char dir[] = "/tmp/agentd-tls-XXXXXX";
static EVP_PKEY *ca_key;
static X509 *ca_crt;

static char *path_of(const char *name)
{
	char *p;

	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

static void add_ext(X509 *crt, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v;
	X509_EXTENSION *e;

	X509V3_set_ctx(&v, issuer, crt, NULL, NULL, 0);
	e = X509V3_EXT_conf_nid(NULL, &v, nid, value);
	if (!e) {
		check_failures++;
		return;
	}
	X509_add_ext(crt, e, -1);
	X509_EXTENSION_free(e);
}

/* NAME.crt and NAME.key: CN cn, valid from a minute ago for secs, signed by the CA
 * (the CA itself when ca_crt is still NULL). */
static void make_cert(const char *name, const char *cn, long secs, const char *eku)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *crt = X509_new();
	char *cp = NULL, *kp = NULL;
	FILE *f;
	static long serial = 1;

	if (!key || !crt)
		goto fail;
	X509_set_version(crt, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(crt), serial++);
	X509_gmtime_adj(X509_getm_notBefore(crt), -60);
	X509_gmtime_adj(X509_getm_notAfter(crt), secs);
	X509_set_pubkey(crt, key);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(crt), "CN", MBSTRING_ASC,
				   (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(crt, ca_crt ? X509_get_subject_name(ca_crt)
					 : X509_get_subject_name(crt));
	if (!ca_crt) {
		add_ext(crt, crt, NID_basic_constraints, "critical,CA:TRUE");
		add_ext(crt, crt, NID_key_usage, "critical,keyCertSign,cRLSign");
	} else {
		add_ext(crt, ca_crt, NID_basic_constraints, "critical,CA:FALSE");
		add_ext(crt, ca_crt, NID_key_usage, "critical,digitalSignature");
		add_ext(crt, ca_crt, NID_ext_key_usage, eku);
	}
	if (!X509_sign(crt, ca_key ? ca_key : key, EVP_sha256()))
		goto fail;
	if (asprintf(&cp, "%s/%s.crt", dir, name) < 0 || asprintf(&kp, "%s/%s.key", dir, name) < 0)
		goto fail;
	f = fopen(cp, "w");
	if (!f || !PEM_write_X509(f, crt) || fclose(f))
		goto fail;
	f = fopen(kp, "w");
	if (!f || !PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) || fclose(f))
		goto fail;
	if (!ca_crt) {
		ca_crt = crt;
		ca_key = key;
		crt = NULL;
		key = NULL;
	}
	goto out;
fail:
	fprintf(stderr, "cannot make certificate '%s'\n", name);
	check_failures++;
out:
	free(cp);
	free(kp);
	X509_free(crt);
	EVP_PKEY_free(key);
}

static SSL_CTX *server_ctx(void)
{
	char *ca = path_of("ca.crt"), *crt = path_of("server.crt"), *key = path_of("server.key");
	char *cause = NULL;
	SSL_CTX *ctx = tls_ctx_new(ca, crt, key, &cause);

	if (!ctx)
		fprintf(stderr, "tls_ctx_new: %s\n", cause ? cause : "?");
	free(cause);
	free(ca);
	free(crt);
	free(key);
	return ctx;
}

static SSL_CTX *client_ctx(const char *name)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	char *ca = path_of("ca.crt"), *crt = NULL, *key = NULL;

	if (ctx && asprintf(&crt, "%s/%s.crt", dir, name) > 0 &&
	    asprintf(&key, "%s/%s.key", dir, name) > 0) {
		SSL_CTX_load_verify_locations(ctx, ca, NULL);
		SSL_CTX_use_certificate_chain_file(ctx, crt);
		SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT);
	}
	free(ca);
	free(crt);
	free(key);
	return ctx;
}

struct conn {
	SSL *c, *s;
	struct tls_verdict v;
};

/*
 * One connection over a BIO pair, offering sess when not NULL. Returns 0
 * once both handshakes are done and the client has read the server's
 * first byte (and with it the ticket).
 */
static int connect_pair(struct conn *k, SSL_CTX *sctx, SSL_CTX *cctx, SSL_SESSION *sess)
{
	BIO *cb = NULL, *sb = NULL;
	int cdone = 0, sdone = 0;
	char byte;

	memset(k, 0, sizeof(*k));
	k->c = SSL_new(cctx);
	k->s = SSL_new(sctx);
	if (!k->c || !k->s || !BIO_new_bio_pair(&cb, 0, &sb, 0))
		return -ENOMEM;
	SSL_set_bio(k->c, cb, cb);
	SSL_set_bio(k->s, sb, sb);
	tls_verdict_attach(k->s, &k->v);
	SSL_set_connect_state(k->c);
	SSL_set_accept_state(k->s);
	if (sess)
		SSL_set_session(k->c, sess);
	for (int i = 0; i < 100 && !(cdone && sdone); i++) {
		if (!cdone) {
			int r = SSL_do_handshake(k->c);

			if (r == 1)
				cdone = 1;
			else if (SSL_get_error(k->c, r) != SSL_ERROR_WANT_READ)
				return -EPROTO;
		}
		if (!sdone) {
			int r = SSL_do_handshake(k->s);

			if (r == 1)
				sdone = 1;
			else if (SSL_get_error(k->s, r) != SSL_ERROR_WANT_READ)
				return -EPROTO;
		}
	}
	if (!cdone || !sdone || SSL_write(k->s, "h", 1) != 1 || SSL_read(k->c, &byte, 1) != 1)
		return -EPROTO;
	return 0;
}

/* Ends k cleanly (close_notify both ways), so both sides keep its session. */
static void close_pair(struct conn *k)
{
	if (k->c && k->s) {
		SSL_shutdown(k->c);
		SSL_shutdown(k->s);
		SSL_shutdown(k->c);
	}
	SSL_free(k->c);
	SSL_free(k->s);
	memset(k, 0, sizeof(*k));
}

static int peer_check(struct conn *k, const char *pattern, char **cause)
{
	const char *allow[] = { pattern };
	char id[256];

	*cause = NULL;
	return tls_peer_check(k->s, &k->v, allow, pattern ? 1 : 0, id, sizeof(id), cause);
}

/* A full handshake of client name, then its session: resumed, checked again. */
static void resumption(const char *policy)
{
	SSL_CTX *sctx, *sctx2 = NULL, *cctx = client_ctx("client");
	SSL_SESSION *sess = NULL;
	struct conn k;
	char *cause = NULL;

	setenv("FQ_TLS_TICKETS", policy, 1);
	sctx = server_ctx();
	CHECK(sctx && cctx);
	if (!sctx || !cctx)
		goto out;
	CHECK(connect_pair(&k, sctx, cctx, NULL) == 0);
	CHECK(!SSL_session_reused(k.s));
	CHECK(peer_check(&k, "fleetq-*", &cause) == 0);
	free(cause);
	sess = SSL_get1_session(k.c);
	CHECK(sess && SSL_SESSION_is_resumable(sess));
	close_pair(&k);

	/* Resumed: same checks, on the certificate of the first handshake. */
	CHECK(connect_pair(&k, sctx, cctx, sess) == 0);
	CHECK(SSL_session_reused(k.s));
	CHECK(SSL_get0_peer_certificate(k.s) != NULL);
	CHECK(peer_check(&k, "fleetq-*", &cause) == 0);
	free(cause);
	CHECK(peer_check(&k, "ops-*", &cause) == -EACCES);
	CHECK(cause && strstr(cause, "'fleetq-client' matches no --allow-client pattern"));
	free(cause);
	close_pair(&k);

	/* A reload (SIGHUP) builds a new context: nothing of before resumes. */
	sctx2 = server_ctx();
	CHECK(sctx2 && connect_pair(&k, sctx2, cctx, sess) == 0);
	CHECK(!SSL_session_reused(k.s));
	CHECK(peer_check(&k, "fleetq-*", &cause) == 0);
	free(cause);
	close_pair(&k);
out:
	SSL_SESSION_free(sess);
	SSL_CTX_free(sctx);
	SSL_CTX_free(sctx2);
	SSL_CTX_free(cctx);
}

int main(void)
{
	SSL_CTX *sctx, *cctx;
	SSL_SESSION *sess = NULL;
	struct conn k;
	char *cause = NULL, *crt = NULL, *key = NULL;

	if (!mkdtemp(dir) || tls_init())
		return 1;
	make_cert("ca", "fleetq CA", 3600, NULL);
	make_cert("server", "localhost", 3600, "serverAuth,clientAuth");
	make_cert("client", "fleetq-client", 3600, "clientAuth");

	resumption("stateful");
	resumption("stateless");

	/* FQ_TLS_TICKETS=0: no ticket, so nothing to resume. */
	setenv("FQ_TLS_TICKETS", "0", 1);
	sctx = server_ctx();
	cctx = client_ctx("client");
	CHECK(sctx && cctx && connect_pair(&k, sctx, cctx, NULL) == 0);
	sess = SSL_get1_session(k.c);
	CHECK(!sess || !SSL_SESSION_is_resumable(sess));
	close_pair(&k);
	SSL_SESSION_free(sess);
	SSL_CTX_free(sctx);
	SSL_CTX_free(cctx);

	setenv("FQ_TLS_TICKETS", "sometimes", 1);
	crt = path_of("server.crt");
	key = path_of("server.key");
	sctx = tls_ctx_new(crt, crt, key, &cause);
	CHECK(!sctx && cause && strstr(cause, "FQ_TLS_TICKETS is 'sometimes'"));
	free(cause);
	SSL_CTX_free(sctx);

	/* A client certificate that expires after its full handshake: its
	 * session no longer passes, although the ticket has 10 minutes left. */
	unsetenv("FQ_TLS_TICKETS");
	make_cert("brief", "fleetq-brief", 3, "clientAuth");
	sctx = server_ctx();
	cctx = client_ctx("brief");
	CHECK(sctx && cctx && connect_pair(&k, sctx, cctx, NULL) == 0);
	CHECK(peer_check(&k, NULL, &cause) == 0);
	free(cause);
	sess = SSL_get1_session(k.c);
	close_pair(&k);
	sleep(4);
	CHECK(sess && connect_pair(&k, sctx, cctx, sess) == 0);
	CHECK(SSL_session_reused(k.s));
	CHECK(peer_check(&k, NULL, &cause) == -EACCES);
	CHECK(cause && strstr(cause, "expired"));
	free(cause);
	close_pair(&k);
	SSL_SESSION_free(sess);
	SSL_CTX_free(sctx);
	SSL_CTX_free(cctx);

	free(crt);
	free(key);
	X509_free(ca_crt);
	EVP_PKEY_free(ca_key);
	{
		char *cmd;

		if (asprintf(&cmd, "rm -rf '%s'", dir) > 0 && system(cmd) < 0)
			check_failures++;
		free(cmd);
	}
	return check_done(NULL);
}
