/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "readfile.h"
#include "strbuf.h"

/* A config file is a few lines: more is the wrong file (/dev/zero, a log). */
#define CONFIG_FILE_MAX (1 << 20)

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void config_init(struct fq_config *c)
{
	memset(c, 0, sizeof(*c));
	c->port = -1;
	c->fanout = -1;
	c->timeout = -1;
	c->connect_timeout = -1;
	c->session_cache = -1;
}

void config_release(struct fq_config *c)
{
	free(c->ca);
	free(c->cert);
	free(c->key);
	free(c->format);
	config_init(c);
}

static int parse_int(const char *v, long lo, long hi, long *out)
{
	char *e;
	long x;

	errno = 0;
	x = strtol(v, &e, 10);
	if (errno || e == v || *e || x < lo || x > hi)
		return -EINVAL;
	*out = x;
	return 0;
}

static int parse_secs(const char *v, double *out)
{
	char *e;
	double x;

	errno = 0;
	x = strtod(v, &e);
	if (errno || e == v || *e || !isfinite(x) || x <= 0 || x > 86400 * 7)
		return -EINVAL;
	*out = x;
	return 0;
}

static int set_str(char **dst, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return -ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

int config_set(struct fq_config *c, const char *key, const char *value, char **cause)
{
	long n;

	if (cause)
		*cause = NULL;
	if (!strcmp(key, "ca"))
		return set_str(&c->ca, value);
	if (!strcmp(key, "cert"))
		return set_str(&c->cert, value);
	if (!strcmp(key, "key"))
		return set_str(&c->key, value);
	if (!strcmp(key, "format")) {
		static const char *const fmts[] = { "table", "csv", "tsv", "json", "ndjson" };

		for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++)
			if (!strcmp(value, fmts[i]))
				return set_str(&c->format, value);
		return fq_fail(cause, -EINVAL,
			       "unknown format '%s': use table, csv, tsv, json or ndjson",
			       value);
	}
	if (!strcmp(key, "port")) {
		if (parse_int(value, 1, 65535, &n))
			return fq_fail(cause, -EINVAL,
			       "invalid port '%s': use a number from 1 to 65535",
			       value);
		c->port = (int)n;
		return 0;
	}
	if (!strcmp(key, "fanout")) {
		if (parse_int(value, 1, 65536, &n))
			return fq_fail(cause, -EINVAL,
			       "invalid fanout '%s': use a number from 1 to 65536",
			       value);
		c->fanout = (int)n;
		return 0;
	}
	if (!strcmp(key, "timeout") || !strcmp(key, "connect_timeout")) {
		double *dst = key[0] == 't' ? &c->timeout : &c->connect_timeout;

		if (parse_secs(value, dst))
			return fq_fail(cause, -EINVAL,
			       "invalid %s '%s': use a number of seconds above 0",
			       key, value);
		return 0;
	}
	if (!strcmp(key, "session_cache")) {
		if (strcmp(value, "yes") && strcmp(value, "no"))
			return fq_fail(cause, -EINVAL, "invalid session_cache '%s': use yes or no",
				       value);
		c->session_cache = value[0] == 'y';
		return 0;
	}
	return fq_fail(cause, -EINVAL,
		       "unknown setting '%s': use ca, cert, key, port, fanout, timeout, "
		       "connect_timeout, format or session_cache",
		       key);
}

static char *trim(char *s)
{
	size_t len;

	while (isspace((unsigned char)*s))
		s++;
	len = strlen(s);
	while (len && isspace((unsigned char)s[len - 1]))
		s[--len] = 0;
	return s;
}

/* Relative certificate paths in a config file are relative to that file. */
static int rebase(char **p, const char *file)
{
	const char *slash = strrchr(file, '/');
	char *s;

	if (!*p || (*p)[0] == '/' || !slash)
		return 0;
	if (asprintf(&s, "%.*s/%s", (int)(slash - file), file, *p) < 0)
		return -ENOMEM;
	free(*p);
	*p = s;
	return 0;
}

int config_read_file(struct fq_config *c, const char *path, char **cause)
{
	struct fq_config fc;
	FILE *f;
	char *line = NULL, *k, *v, *eq, *sub = NULL, *text;
	size_t cap = 0, tlen;
	unsigned lineno = 0;
	int err = 0;

	*cause = NULL;
	err = fq_read_file(path, "config file", CONFIG_FILE_MAX, &text, &tlen, cause);
	if (err == -ENOENT) {
		free(*cause);
		*cause = NULL;
	}
	if (err)
		return err;
	f = fmemopen(text, tlen ? tlen : 1, "r");
	if (!f) {
		free(text);
		return -ENOMEM;
	}
	config_init(&fc);
	while (getline(&line, &cap, f) >= 0) {
		lineno++;
		if ((k = strchr(line, '#')))
			*k = 0;
		k = trim(line);
		if (!*k)
			continue;
		eq = strchr(k, '=');
		if (!eq) {
			err = -EINVAL;
			if (asprintf(cause, "%s:%u: expected 'key = value'", path, lineno) < 0)
				*cause = NULL;
			goto out;
		}
		*eq = 0;
		v = trim(eq + 1);
		k = trim(k);
		err = config_set(&fc, k, v, &sub);
		if (err) {
			if (asprintf(cause, "%s:%u: %s", path, lineno, sub ? sub : strerror(-err)) <
			    0)
				*cause = NULL;
			goto out;
		}
	}
	if (rebase(&fc.ca, path) || rebase(&fc.cert, path) || rebase(&fc.key, path)) {
		err = -ENOMEM;
		goto out;
	}
	err = config_overlay(c, &fc);
out:
	free(sub);
	free(line);
	fclose(f);
	free(text);
	config_release(&fc);
	return err;
}

int config_load(struct fq_config *c, const char **used, char **cause)
{
	static char home_path[PATH_MAX];
	const char *env = getenv("FLEETQ_CONFIG"), *home = getenv("HOME");
	int err;

	*cause = NULL;
	if (used)
		*used = NULL;
	if (env && *env) {
		err = config_read_file(c, env, cause);
		if (err == -ENOENT && asprintf(cause,
					       "config file '%s' (from FLEETQ_CONFIG) does "
					       "not exist: fix or unset FLEETQ_CONFIG",
					       env) < 0)
			*cause = NULL;
		if (!err && used)
			*used = env;
		return err;
	}
	if (home && *home) {
		snprintf(home_path, sizeof(home_path), "%s/.config/fleetq/config", home);
		err = config_read_file(c, home_path, cause);
		if (err != -ENOENT) {
			if (!err && used)
				*used = home_path;
			return err;
		}
	}
	err = config_read_file(c, "/etc/fleetq/fleetq.conf", cause);
	if (err == -ENOENT)
		return 0;
	if (!err && used)
		*used = "/etc/fleetq/fleetq.conf";
	return err;
}

int config_overlay(struct fq_config *c, const struct fq_config *over)
{
	if ((over->ca && set_str(&c->ca, over->ca)) ||
	    (over->cert && set_str(&c->cert, over->cert)) ||
	    (over->key && set_str(&c->key, over->key)) ||
	    (over->format && set_str(&c->format, over->format)))
		return -ENOMEM;
	if (over->port > 0)
		c->port = over->port;
	if (over->fanout > 0)
		c->fanout = over->fanout;
	if (over->timeout > 0)
		c->timeout = over->timeout;
	if (over->connect_timeout > 0)
		c->connect_timeout = over->connect_timeout;
	if (over->session_cache >= 0)
		c->session_cache = over->session_cache;
	return 0;
}

void config_defaults(struct fq_config *c)
{
	if (c->port <= 0)
		c->port = FQ_DEFAULT_PORT;
	if (c->fanout <= 0)
		c->fanout = FQ_DEFAULT_FANOUT;
	if (c->timeout <= 0)
		c->timeout = FQ_DEFAULT_TIMEOUT;
	if (c->connect_timeout <= 0)
		c->connect_timeout = FQ_DEFAULT_CONNECT_TIMEOUT;
	if (c->session_cache < 0)
		c->session_cache = 1;
}
