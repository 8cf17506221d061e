/* SPDX-License-Identifier: MIT */
/*
 * fleetq settings: built-in defaults, then one config file ($FLEETQ_CONFIG,
 * else ~/.config/fleetq/config, else /etc/fleetq/fleetq.conf), then flags.
 */
#ifndef FLEETQ_CONFIG_H
#define FLEETQ_CONFIG_H

#define FQ_DEFAULT_PORT 7077
#define FQ_DEFAULT_FANOUT 128
#define FQ_DEFAULT_CONNECT_TIMEOUT 5.0
#define FQ_DEFAULT_TIMEOUT 30.0

/* Strings are malloc'd and owned by the struct; NULL / -1 mean "not set". */
struct fq_config {
	char *ca, *cert, *key;
	char *format;
	int port;
	int fanout;
	double timeout;		/* seconds */
	double connect_timeout; /* seconds */
	int session_cache;	/* keep TLS sessions for the next run: 1 yes, 0 no */
};

/* Every field "not set". */
void config_init(struct fq_config *c);
void config_release(struct fq_config *c);

/* Sets one key ("ca", "port", "session_cache" yes|no, ...) from text. 0 or -EINVAL with *cause. */
int config_set(struct fq_config *c, const char *key, const char *value, char **cause);

/*
 * Parses "key = value" lines ('#' comments, blank lines) into c. Relative
 * certificate paths are taken relative to the file's folder. Returns 0,
 * -ENOENT when the file does not exist (no cause), or -errno with *cause.
 */
int config_read_file(struct fq_config *c, const char *path, char **cause);

/*
 * Finds and reads the config file: $FLEETQ_CONFIG (must exist), else the
 * first of ~/.config/fleetq/config and /etc/fleetq/fleetq.conf that exists.
 * *used (may be NULL) gets the path read, or NULL. 0 or -errno with *cause.
 */
int config_load(struct fq_config *c, const char **used, char **cause);

/* Fields set in over replace those in c (over keeps its strings). */
int config_overlay(struct fq_config *c, const struct fq_config *over);

/* Fills unset fields with the built-in defaults. */
void config_defaults(struct fq_config *c);

#endif
