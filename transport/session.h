/* SPDX-License-Identifier: MIT */
/*
 * TLS client sessions, so that the next connection to an agent resumes
 * instead of making a full handshake. One table for the whole process
 * (gate's several fan-outs and agentd's relay workers share it), keyed by a
 * scope, a fingerprint of the client certificate and of the CAs trusted,
 * and by the host and port dialled. fleetq also keeps each scope's sessions
 * in a cache file, dir/sessions-SCOPE, so that its next run resumes too.
 *
 * The file holds resumption secrets: whoever reads it may pass for the
 * client certificate's owner until the agents' tickets expire. It is
 * written mode 0600, read only when it is a regular file of ours that no
 * one else may read or write, and any damage (truncation, bad checksum,
 * stale format) only costs full handshakes.
 */
#ifndef FLEETQ_SESSION_H
#define FLEETQ_SESSION_H

#include <stddef.h>
#include <openssl/ssl.h>

#define SESSION_SCOPE_LEN 16 /* hex digits */

/* Makes ctx (a client context with its certificate and CAs loaded) keep
 * its sessions in the table. */
void session_setup(SSL_CTX *ctx);

/* ctx's scope: SESSION_SCOPE_LEN hex digits and a NUL in scope. 0 or -errno. */
int session_scope(SSL_CTX *ctx, char *scope);

/*
 * Indexes dir/sessions-SCOPE once per process: entries not expired, none
 * decoded yet (that costs a certificate decode each, done when the host is
 * dialled). A missing, foreign or damaged file is ignored: returns the
 * entries taken.
 */
size_t session_load(const char *dir, const char *scope);

/*
 * Before ssl's handshake: offers the session kept under key ("SCOPE
 * host:port", which must outlive ssl) and files the session ssl gets
 * under key.
 */
void session_offer(SSL *ssl, const char *key);

/*
 * s's DER as the cache file keeps it: without the agent's certificate
 * (decoding it costs more than the rest of the session) when the shorter
 * DER decodes to a session that resumes alike. malloc'd, its length in *n;
 * NULL on failure.
 */
unsigned char *session_encode(SSL_SESSION *s, size_t *n);

/*
 * Writes scope's live sessions to dir/sessions-SCOPE (created 0700, file
 * 0600, replaced by rename) when any arrived since the last load or save.
 * 0 or -errno; callers may ignore failures, the next run just resumes less.
 */
int session_save(const char *dir, const char *scope);

#endif
