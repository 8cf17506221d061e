/* SPDX-License-Identifier: MIT */
/* config: file syntax, relative paths, errors with file:line, flags over file. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "config.h"

static char dir[] = "/tmp/fq-config-XXXXXX";

static char *write_file(const char *name, const char *text)
{
	char *path;
	FILE *f;

	if (asprintf(&path, "%s/%s", dir, name) < 0)
		return NULL;
	f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	return path;
}

int main(void)
{
	struct fq_config c, flags;
	char *cause = NULL, *path, *want;
	const char *used = NULL;

	if (!mkdtemp(dir))
		return 1;
	config_init(&c);
	path = write_file("good.conf", "# fleetq settings\n"
				       "ca = certs/ca.crt\n"
				       "cert=/abs/client.crt   # absolute stays\n"
				       "  key =  client.key  \n"
				       "\n"
				       "port = 9000\n"
				       "fanout = 64\n"
				       "timeout = 2.5\n"
				       "connect_timeout = 1\n"
				       "format = csv\n"
				       "session_cache = no\n");
	CHECK(!config_read_file(&c, path, &cause));
	CHECK(!cause);
	if (asprintf(&want, "%s/certs/ca.crt", dir) > 0) {
		CHECK_STR(c.ca, want);
		free(want);
	}
	CHECK_STR(c.cert, "/abs/client.crt");
	if (asprintf(&want, "%s/client.key", dir) > 0) {
		CHECK_STR(c.key, want);
		free(want);
	}
	CHECK(c.port == 9000);
	CHECK(c.fanout == 64);
	CHECK(c.timeout == 2.5);
	CHECK(c.connect_timeout == 1.0);
	CHECK_STR(c.format, "csv");
	CHECK(c.session_cache == 0);

	/* Flags win over the file; unset flags leave the file's values. */
	config_init(&flags);
	CHECK(!config_set(&flags, "port", "7100", &cause));
	CHECK(!config_set(&flags, "format", "json", &cause));
	CHECK(!config_overlay(&c, &flags));
	CHECK(c.port == 7100);
	CHECK_STR(c.format, "json");
	CHECK(c.fanout == 64);
	CHECK(c.session_cache == 0);
	config_release(&flags);

	/* Environment variable picks the file. */
	setenv("FLEETQ_CONFIG", path, 1);
	config_release(&c);
	CHECK(!config_load(&c, &used, &cause));
	CHECK_STR(used, path);
	CHECK(c.port == 9000);
	free(path);
	config_release(&c);

	setenv("FLEETQ_CONFIG", "/nonexistent/fleetq.conf", 1);
	CHECK(config_load(&c, &used, &cause) == -ENOENT);
	CHECK(cause && strstr(cause, "/nonexistent/fleetq.conf") && strstr(cause, "FLEETQ_CONFIG"));
	free(cause);
	cause = NULL;
	unsetenv("FLEETQ_CONFIG");

	/* No file at all is fine (HOME without one, /etc without one). */
	setenv("HOME", dir, 1);
	if (access("/etc/fleetq/fleetq.conf", F_OK)) {
		CHECK(!config_load(&c, &used, &cause));
		CHECK(!used);
	}

	/* Errors name the file and line. */
	path = write_file("bad1.conf", "port = 9000\nbogus = 1\n");
	CHECK(config_read_file(&c, path, &cause) == -EINVAL);
	CHECK(cause && strstr(cause, "bad1.conf:2:") && strstr(cause, "bogus"));
	free(cause);
	free(path);
	path = write_file("bad2.conf", "port = 99999\n");
	CHECK(config_read_file(&c, path, &cause) == -EINVAL);
	CHECK(cause && strstr(cause, "bad2.conf:1:") && strstr(cause, "99999"));
	free(cause);
	free(path);
	path = write_file("bad3.conf", "just words\n");
	CHECK(config_read_file(&c, path, &cause) == -EINVAL);
	CHECK(cause && strstr(cause, "bad3.conf:1:"));
	free(cause);
	free(path);
	path = write_file("bad4.conf", "format = xml\n");
	CHECK(config_read_file(&c, path, &cause) == -EINVAL);
	CHECK(cause && strstr(cause, "xml"));
	free(cause);
	free(path);
	path = write_file("bad5.conf", "timeout = -1\n");
	CHECK(config_read_file(&c, path, &cause) == -EINVAL);
	free(cause);
	free(path);
	path = write_file("bad6.conf", "session_cache = maybe\n");
	CHECK(config_read_file(&c, path, &cause) == -EINVAL);
	CHECK(cause && strstr(cause, "maybe") && strstr(cause, "yes or no"));
	free(cause);
	free(path);

	/* A failed file leaves the settings alone (bad1.conf set a port first). */
	CHECK(c.port == -1);
	config_defaults(&c);
	CHECK(c.port == FQ_DEFAULT_PORT);
	CHECK(c.fanout == FQ_DEFAULT_FANOUT);
	CHECK(c.timeout == FQ_DEFAULT_TIMEOUT);
	CHECK(c.connect_timeout == FQ_DEFAULT_CONNECT_TIMEOUT);
	CHECK(c.session_cache == 1);
	config_release(&c);
	{
		char *cmd;

		if (asprintf(&cmd, "rm -rf '%s'", dir) > 0 && system(cmd) < 0)
			check_failures++;
		free(cmd);
	}
	return check_done(NULL);
}
