/* SPDX-License-Identifier: MIT */
/*
 * Why a --ca, --cert or --key file did not load, in the words agentd uses for
 * its own files: a missing file says so, a key that belongs to another
 * certificate says which, a certificate given as the key says that.
 */
#ifndef FLEETQ_TLSFILES_H
#define FLEETQ_TLSFILES_H

/*
 * 0 when path can be opened for reading, else -errno with *cause
 * "cannot read WHAT 'PATH': REASON: check --OPT".
 */
int tlsfile_readable(const char *what, const char *opt, const char *path, char **cause);

/*
 * After SSL_CTX_use_PrivateKey_file() failed on key: -EINVAL with the reason
 * in *cause (a mismatch, a certificate in the key's place, or OpenSSL's
 * reason). Consumes the OpenSSL error queue.
 */
int tlsfile_key_cause(const char *key, const char *cert, char **cause);

#endif
