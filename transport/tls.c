/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "tls.h"

static int verdict_idx = -1;

int tls_init(void)
{
	if (!OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS,
			      NULL))
		return -ENOMEM;
	verdict_idx = SSL_get_ex_new_index(0, "fleetq verdict", NULL, NULL, NULL);
	return verdict_idx < 0 ? -ENOMEM : 0;
}

const char *tls_error(char *buf, size_t n)
{
	unsigned long e = ERR_peek_last_error();
	const char *r;

	if (!e) {
		snprintf(buf, n, "unknown error");
	} else {
		r = ERR_reason_error_string(e);
		if (r)
			snprintf(buf, n, "%s", r);
		else
			ERR_error_string_n(e, buf, n);
	}
	ERR_clear_error();
	return buf;
}

static int verify_cb(int ok, X509_STORE_CTX *x)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
	struct tls_verdict *v = ssl ? SSL_get_ex_data(ssl, verdict_idx) : NULL;

	if (!v)
		return ok; /* nobody to tell: refuse at the TLS layer */
	if (!ok && !v->err) {
		v->err = X509_STORE_CTX_get_error(x);
		v->depth = X509_STORE_CTX_get_error_depth(x);
		if (!v->err)
			v->err = X509_V_ERR_UNSPECIFIED;
	}
	return 1;
}

void tls_verdict_attach(SSL *ssl, struct tls_verdict *v)
{
	SSL_set_ex_data(ssl, verdict_idx, v);
}

/*
 * Resumption (fleetq's cache file and repeated fan-outs, relays): one ticket
 * per handshake, valid 10 minutes. A resumed session carries the client
 * certificate that was verified against the CA at its full handshake;
 * tls_peer_check() runs the --allow-client patterns and the date check on
 * it again. A certificate reload (SIGHUP) builds a new context, whose empty
 * cache and new ticket keys end every older session.
 *
 * Stateful by default: the ticket is only an id into this context's session
 * cache. A stateless ticket carries the whole session, client certificate
 * included, encrypted; OpenSSL 3.0 decodes that certificate again both to
 * build the ticket (a private copy of the session) and to resume from it,
 * and that decode is the most expensive part of a full handshake on our
 * side. FQ_TLS_TICKETS=stateless brings them back, 0 issues none
 * (bench/tls-cost.sh compares the three).
 */
#define TICKET_LIFETIME_S 600
#define SESSION_CACHE_MAX 256

static int set_tickets(SSL_CTX *ctx, char **cause)
{
	const char *how = getenv("FQ_TLS_TICKETS");

	SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"agentd", 6);
	SSL_CTX_set_timeout(ctx, TICKET_LIFETIME_S);
	/* About 11 KB a session; the oldest go first, so a client that fills the
	 * cache only costs others full handshakes. */
	SSL_CTX_sess_set_cache_size(ctx, SESSION_CACHE_MAX);
	if (!how || !*how || !strcmp(how, "stateful")) {
		SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
		SSL_CTX_set_num_tickets(ctx, 1);
	} else if (!strcmp(how, "stateless")) {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
		SSL_CTX_set_num_tickets(ctx, 1);
	} else if (!strcmp(how, "0")) {
		SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
		SSL_CTX_set_num_tickets(ctx, 0);
	} else {
		if (asprintf(cause, "FQ_TLS_TICKETS is '%s': use stateful, stateless or 0", how) <
		    0)
			*cause = NULL;
		return -EINVAL;
	}
	return 0;
}

/* fopen first: OpenSSL's own message for a missing file names no file. */
static int readable(const char *what, const char *path, char **cause)
{
	FILE *f = fopen(path, "r");
	int err;

	if (f) {
		fclose(f);
		return 0;
	}
	err = errno;
	if (asprintf(cause, "cannot read %s '%s': %s", what, path, strerror(err)) < 0)
		*cause = NULL;
	return -err;
}

SSL_CTX *tls_ctx_new(const char *ca, const char *cert, const char *key, char **cause)
{
	STACK_OF(X509_NAME) *names = NULL;
	SSL_CTX *ctx = NULL;
	char why[256];
	int err = EINVAL;

	*cause = NULL;
	if (readable("CA file", ca, cause) || readable("certificate", cert, cause) ||
	    readable("key", key, cause))
		goto fail;
	ERR_clear_error();
	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx) {
		err = ENOMEM;
		if (asprintf(cause, "cannot create TLS context: %s", tls_error(why, sizeof(why))) <
		    0)
			*cause = NULL;
		goto fail;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* A client that closes without close_notify has still only closed: EOF, not an error. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
					 SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
	/* TLS 1.2 only: forward secrecy and AEAD, nothing else. 1.3 suites are all fine. */
	SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20");
	if (set_tickets(ctx, cause))
		goto fail;
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);

	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		if (asprintf(cause, "cannot load certificate '%s': %s; is it a PEM certificate?",
			     cert, tls_error(why, sizeof(why))) < 0)
			*cause = NULL;
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		unsigned long e = ERR_peek_last_error();

		if (ERR_GET_LIB(e) == ERR_LIB_X509 &&
		    ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH) {
			ERR_clear_error();
			if (asprintf(cause, "key '%s' does not match certificate '%s'", key, cert) <
			    0)
				*cause = NULL;
			goto fail;
		}
		if (asprintf(cause, "cannot load key '%s': %s; is it an unencrypted PEM key?", key,
			     tls_error(why, sizeof(why))) < 0)
			*cause = NULL;
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		ERR_clear_error();
		if (asprintf(cause, "key '%s' does not match certificate '%s'", key, cert) < 0)
			*cause = NULL;
		goto fail;
	}
	if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
		if (asprintf(cause, "cannot load CA file '%s': %s; is it a PEM certificate?", ca,
			     tls_error(why, sizeof(why))) < 0)
			*cause = NULL;
		goto fail;
	}
	names = SSL_load_client_CA_file(ca);
	if (names)
		SSL_CTX_set_client_CA_list(ctx, names);
	ERR_clear_error();
	SSL_CTX_set_purpose(ctx, X509_PURPOSE_SSL_CLIENT);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_cb);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	errno = err;
	return NULL;
}

/* UTF-8 text of an ASN1 string with no NUL or control bytes, or -1. */
static int asn1_text(const ASN1_STRING *s, char *out, size_t n)
{
	unsigned char *u = NULL;
	int len = ASN1_STRING_to_UTF8(&u, s), i, rc = -1;

	if (len < 0)
		return -1;
	if ((size_t)len >= n)
		goto out;
	for (i = 0; i < len; i++)
		if (u[i] < 0x20 || u[i] == 0x7f)
			goto out;
	memcpy(out, u, (size_t)len);
	out[len] = '\0';
	rc = 0;
out:
	OPENSSL_free(u);
	return rc;
}

static int allowed(X509 *crt, const char *cn, const char *const *allow, size_t nallow)
{
	GENERAL_NAMES *sans = X509_get_ext_d2i(crt, NID_subject_alt_name, NULL, NULL);
	char dns[256];
	size_t i;
	int j, ok = 0;

	for (i = 0; i < nallow && !ok; i++) {
		if (fnmatch(allow[i], cn, 0) == 0) {
			ok = 1;
			break;
		}
		for (j = 0; sans && j < sk_GENERAL_NAME_num(sans); j++) {
			GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, j);

			if (g->type != GEN_DNS || asn1_text(g->d.dNSName, dns, sizeof(dns)))
				continue;
			if (fnmatch(allow[i], dns, 0) == 0) {
				ok = 1;
				break;
			}
		}
	}
	GENERAL_NAMES_free(sans);
	return ok;
}

int tls_peer_check(SSL *ssl, const struct tls_verdict *v, const char *const *allow, size_t nallow,
		   char *id, size_t idlen, char **cause)
{
	X509 *crt = SSL_get0_peer_certificate(ssl);
	X509_NAME *subj;
	long vr = SSL_get_verify_result(ssl);
	int err = v && v->err ? v->err : (int)vr, idx;

	*cause = NULL;
	id[0] = '\0';
	if (!crt) {
		if (asprintf(cause, "no client certificate") < 0)
			*cause = NULL;
		return -EACCES;
	}
	if (err != X509_V_OK) {
		if (asprintf(cause, "client certificate not trusted: %s (depth %d)",
			     X509_verify_cert_error_string(err), v ? v->depth : 0) < 0)
			*cause = NULL;
		return -EACCES;
	}
	/* The chain was verified when the session began; its end date may have passed since. */
	if (SSL_session_reused(ssl) && X509_cmp_current_time(X509_get0_notAfter(crt)) <= 0) {
		if (asprintf(cause, "client certificate expired after its session began") < 0)
			*cause = NULL;
		return -EACCES;
	}
	subj = X509_get_subject_name(crt);
	idx = subj ? X509_NAME_get_index_by_NID(subj, NID_commonName, -1) : -1;
	if (idx < 0 ||
	    asn1_text(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, idx)), id, idlen)) {
		id[0] = '\0';
		if (asprintf(cause, "client certificate has no usable common name") < 0)
			*cause = NULL;
		return -EACCES;
	}
	if (nallow && !allowed(crt, id, allow, nallow)) {
		if (asprintf(cause, "client '%s' matches no --allow-client pattern", id) < 0)
			*cause = NULL;
		return -EACCES;
	}
	return 0;
}
