/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509.h>

#include "strbuf.h"
#include "tlsfiles.h"

int tlsfile_readable(const char *what, const char *opt, const char *path, char **cause)
{
	FILE *f = fopen(path, "r");
	int err;

	if (f) {
		fclose(f);
		return 0;
	}
	err = errno;
	return fq_fail(cause, -err, "cannot read %s '%s': %s: check --%s", what, path,
		       strerror(err), opt);
}

/* Whether the PEM file at path holds a certificate and no private key. */
static int holds_only_certificate(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[256];
	int cert = 0, key = 0;

	if (!f)
		return 0;
	/* PEM boundaries are lines of their own; a few MB of file is the most we look at */
	for (int i = 0; i < 100000 && fgets(line, sizeof(line), f); i++) {
		if (!strncmp(line, "-----BEGIN CERTIFICATE-----", 27))
			cert = 1;
		else if (!strncmp(line, "-----BEGIN ", 11) && strstr(line, "PRIVATE KEY-----"))
			key = 1;
	}
	fclose(f);
	return cert && !key;
}

int tlsfile_key_cause(const char *key, const char *cert, char **cause)
{
	unsigned long e = ERR_peek_last_error();
	const char *why = ERR_reason_error_string(e);
	int err;

	if (ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH)
		err = fq_fail(cause, -EINVAL,
			      "key '%s' does not match certificate '%s': check --key", key, cert);
	else if (holds_only_certificate(key))
		err = fq_fail(cause, -EINVAL,
			      "cannot load key '%s': it holds a certificate, not a private key: "
			      "check --key",
			      key);
	else
		err = fq_fail(cause, -EINVAL,
			      "cannot load key '%s': %s; is it an unencrypted PEM key? check --key",
			      key, why ? why : "unknown error");
	ERR_clear_error();
	return err;
}
