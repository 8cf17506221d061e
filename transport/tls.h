/* SPDX-License-Identifier: MIT */
/*
 * The serving side's TLS (agentd): the server context (mutual TLS against one
 * CA) and the check of a client's identity once its handshake is done.
 */
#ifndef FLEETQ_TLS_H
#define FLEETQ_TLS_H

#include <stddef.h>
#include <openssl/ssl.h>

/* Loads the library and the ex_data slot; call once before anything else. */
int tls_init(void);

/*
 * Builds a server SSL_CTX: TLS >= 1.2, our certificate chain and key, client
 * certificates required and checked against ca. Returns NULL with *cause
 * (caller frees) naming the file that failed and why.
 */
SSL_CTX *tls_ctx_new(const char *ca, const char *cert, const char *key, char **cause);

/*
 * Chain problems seen during the handshake. The verify callback lets the
 * handshake finish so that a refused client can be told why in an ERROR
 * frame (under TLS 1.3 it could not hear a late alert anyway); nothing is
 * served before tls_peer_check() has passed.
 */
struct tls_verdict {
	int err;   /* first X509_V_ERR_*, 0 when none */
	int depth; /* where in the chain */
};

/* Attaches v to ssl so the verify callback can fill it; v must outlive ssl. */
void tls_verdict_attach(SSL *ssl, struct tls_verdict *v);

/*
 * After the handshake: is the client trusted and, when allow patterns are
 * given, does its CN or one of its DNS SANs fnmatch one of them? Returns 0
 * with the CN in id, or -EACCES with *cause (caller frees) saying why.
 */
int tls_peer_check(SSL *ssl, const struct tls_verdict *v, const char *const *allow, size_t nallow,
		   char *id, size_t idlen, char **cause);

/* The first queued OpenSSL error as text ("unknown" when none); clears the queue. */
const char *tls_error(char *buf, size_t n);

#endif
