/* SPDX-License-Identifier: MIT */
/*
 * Test driver for the tracer without the query server:
 *   fq-trace-test --db FILE [--cgroup CG] [--probes LIST] [--node NAME]
 *                 [--seconds N | -- COMMAND ARGS...]
 * starts the tracer, runs COMMAND (or sleeps N seconds), stops the tracer and
 * prints its counters as key=value lines. Exit 77 when it cannot trace here
 * (not root, no BTF), 1 on failure, else COMMAND's exit status.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace.h"

#define SKIP 77

static void usage(void)
{
	fprintf(stderr, "usage: fq-trace-test --db FILE [--cgroup CG] [--probes LIST] "
			"[--node NAME] [--seconds N | -- COMMAND ARGS...]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "cgroup", required_argument, NULL, 'c' },
		{ "probes", required_argument, NULL, 'p' },
		{ "node", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 's' },
		{ "verbose", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	struct trace_opts o = { .node = "test-node" };
	struct trace_stats st;
	struct tracer *t;
	char *cause = NULL;
	double seconds = 0;
	int c, status = 0, rc = 0;

	while ((c = getopt_long(argc, argv, "+d:c:p:n:s:v", opts, NULL)) != -1) {
		switch (c) {
		case 'd': o.db_path = optarg; break;
		case 'c': o.cgroup = optarg; break;
		case 'p': o.probes = optarg; break;
		case 'n': o.node = optarg; break;
		case 's': seconds = atof(optarg); break;
		case 'v': o.verbose = 1; break;
		default: usage(); return 2;
		}
	}
	if (!o.db_path) {
		usage();
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "fq-trace-test: SKIP: needs root to load BPF programs\n");
		return SKIP;
	}
	if (access("/sys/kernel/btf/vmlinux", R_OK)) {
		fprintf(stderr, "fq-trace-test: SKIP: no kernel BTF at /sys/kernel/btf/vmlinux\n");
		return SKIP;
	}
	t = tracer_start(&o, &cause);
	if (!t) {
		fprintf(stderr, "fq-trace-test: %s\n", cause ? cause : "cannot start the tracer");
		free(cause);
		return 1;
	}
	if (optind < argc) {
		pid_t pid = fork();

		if (pid < 0) {
			perror("fq-trace-test: fork");
			rc = 1;
		} else if (pid == 0) {
			execvp(argv[optind], argv + optind);
			fprintf(stderr, "fq-trace-test: cannot run '%s': %s\n", argv[optind],
				strerror(errno));
			_exit(127);
		} else if (waitpid(pid, &status, 0) < 0) {
			rc = 1;
		} else {
			rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		}
		/* let the exit events of the last processes arrive */
		usleep(200 * 1000);
	} else if (seconds > 0) {
		usleep((useconds_t)(seconds * 1e6));
	}
	tracer_get_stats(t, &st);
	tracer_stop(t);
	printf("events=%" PRId64 "\nring_drops=%" PRId64 "\nstore_drops=%" PRId64
	       "\nrows=%" PRId64 "\n",
	       st.events, st.ring_drops, st.store_drops, st.rows);
	return rc;
}
