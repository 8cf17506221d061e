/* SPDX-License-Identifier: MIT */
/* fq-workload: its command line. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

size_t count_floats = 1u << 20;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fq-workload --ranks N --steps S [--step-us U] [--kernel-us K]\n"
		"         [--slow-rank R --slow-pct P [--slow-from STEP]] [--hang-rank R --hang-at SEQ]\n"
		"         [--cgroup-parent DIR --cgroups K] [--job-id ID]\n"
		"         [--ops allreduce|mixed|grouped] [--watchdog-us US] [--report FILE]\n"
		"         [--shape loop|ddp|fsdp|pipeline] [--buckets B] [--layers L]\n"
		"         [--stages P] [--micro M] [--sync-every K] [--blocking]\n"
		"         [--slow-kind busy|stall|gpu] [--slow-of nominal|measured]\n"
		"         [--launch-queue N] [--xfer-us US]\n"
		"         [--device thread|inline] [--data-us US] [--count FLOATS]\n"
		"         [--netns PREFIX] [--split-every K]\n");
}

int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "ranks", 1, NULL, 'n' },	  { "steps", 1, NULL, 's' },
		{ "step-us", 1, NULL, 'u' },	  { "kernel-us", 1, NULL, 'k' },
		{ "slow-rank", 1, NULL, 'r' },	  { "slow-pct", 1, NULL, 'p' },
		{ "slow-from", 1, NULL, 'f' },	  { "hang-rank", 1, NULL, 'H' },
		{ "hang-at", 1, NULL, 'a' },	  { "cgroup-parent", 1, NULL, 'c' },
		{ "cgroups", 1, NULL, 'C' },	  { "job-id", 1, NULL, 'j' },
		{ "ops", 1, NULL, 'o' },	  { "report", 1, NULL, 'R' },
		{ "watchdog-us", 1, NULL, 'w' },  { "rank-worker", 0, NULL, 'W' },
		{ "help", 0, NULL, 'h' },	  { "shape", 1, NULL, 'S' },
		{ "buckets", 1, NULL, 'b' },	  { "layers", 1, NULL, 'l' },
		{ "stages", 1, NULL, 'P' },	  { "micro", 1, NULL, 'm' },
		{ "sync-every", 1, NULL, 'e' },	  { "blocking", 0, NULL, 'B' },
		{ "slow-kind", 1, NULL, 'K' },	  { "launch-queue", 1, NULL, 'q' },
		{ "xfer-us", 1, NULL, 'x' },	  { "device", 1, NULL, 'D' },
		{ "data-us", 1, NULL, 'L' },	  { "count", 1, NULL, 'N' },
		{ "netns", 1, NULL, 'E' },	  { "slow-of", 1, NULL, 'O' },
		{ "split-every", 1, NULL, 'Y' },
		{ 0 },
	};
	int c;
	long v;

	*o = (struct opts){ .ranks = 0, .steps = -1, .step_us = 2000, .kernel_us = 100,
			    .slow_rank = -1, .hang_rank = -1, .hang_at = -1, .buckets = 8,
			    .layers = 8, .stages = 2, .micro = 4, .sync_every = 1,
			    .launch_queue = -1, .xfer_us = -1 };
	optind = 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		const char *name = lo[0].name;
		int err = 0;

		for (int i = 0; lo[i].name; i++)
			if (lo[i].val == c)
				name = lo[i].name;
		switch (c) {
		case 'n':
			err = parse_long(optarg, 1, FQSI_MAX_RANKS, &v);
			o->ranks = (int)v;
			break;
		case 's':
			err = parse_long(optarg, 0, INT_MAX, &v);
			o->steps = (int)v;
			break;
		case 'u':
			err = parse_long(optarg, 0, 60000000, &o->step_us);
			break;
		case 'k':
			err = parse_long(optarg, 0, 60000000, &o->kernel_us);
			break;
		case 'r':
			err = parse_long(optarg, 0, FQSI_MAX_RANKS, &v);
			o->slow_rank = (int)v;
			break;
		case 'p':
			err = parse_long(optarg, 0, 100000, &v);
			o->slow_pct = (int)v;
			break;
		case 'f':
			err = parse_long(optarg, 0, INT_MAX, &v);
			o->slow_from = (int)v;
			break;
		case 'H':
			err = parse_long(optarg, 0, FQSI_MAX_RANKS, &v);
			o->hang_rank = (int)v;
			break;
		case 'a':
			err = parse_long(optarg, 0, LONG_MAX, &o->hang_at);
			break;
		case 'c':
			o->cgroup_parent = optarg;
			break;
		case 'C':
			err = parse_long(optarg, 1, FQSI_MAX_RANKS, &v);
			o->cgroups = (int)v;
			break;
		case 'j':
			o->job_id = optarg;
			break;
		case 'o':
			if (!strcmp(optarg, "mixed"))
				o->mixed = true;
			else if (!strcmp(optarg, "grouped"))
				o->grouped = true;
			else if (strcmp(optarg, "allreduce"))
				err = -EINVAL;
			break;
		case 'R':
			o->report = optarg;
			break;
		case 'w':
			err = parse_long(optarg, 0, 60000000, &o->watchdog_us);
			break;
		case 'W':
			o->worker = true;
			break;
		case 'S':
			if (!strcmp(optarg, "loop"))
				o->shape = SHAPE_LOOP;
			else if (!strcmp(optarg, "ddp"))
				o->shape = SHAPE_DDP;
			else if (!strcmp(optarg, "fsdp"))
				o->shape = SHAPE_FSDP;
			else if (!strcmp(optarg, "pipeline"))
				o->shape = SHAPE_PIPELINE;
			else
				err = -EINVAL;
			break;
		case 'b':
			err = parse_long(optarg, 1, 1024, &v);
			o->buckets = (int)v;
			break;
		case 'l':
			err = parse_long(optarg, 1, 1024, &v);
			o->layers = (int)v;
			break;
		case 'P':
			err = parse_long(optarg, 2, FQSI_MAX_RANKS, &v);
			o->stages = (int)v;
			break;
		case 'm':
			err = parse_long(optarg, 1, 1024, &v);
			o->micro = (int)v;
			break;
		case 'e':
			err = parse_long(optarg, 0, INT_MAX, &v);
			o->sync_every = (int)v;
			break;
		case 'B':
			o->blocking = true;
			break;
		case 'O':
			if (!strcmp(optarg, "measured"))
				o->slow_measured = true;
			else if (strcmp(optarg, "nominal"))
				err = -EINVAL;
			break;
		case 'K':
			if (!strcmp(optarg, "busy"))
				o->slow_kind = SLOW_BUSY;
			else if (!strcmp(optarg, "stall"))
				o->slow_kind = SLOW_STALL;
			else if (!strcmp(optarg, "gpu"))
				o->slow_kind = SLOW_GPU;
			else
				err = -EINVAL;
			break;
		case 'q':
			err = parse_long(optarg, 1, 1000000, &o->launch_queue);
			break;
		case 'x':
			err = parse_long(optarg, 0, 60000000, &o->xfer_us);
			break;
		case 'L':
			err = parse_long(optarg, 0, 60000000, &o->data_us);
			break;
		case 'N':
			err = parse_long(optarg, 1, 1L << 28, &v);
			count_floats = (size_t)v;
			break;
		case 'E':
			o->netns = optarg;
			break;
		case 'Y':
			err = parse_long(optarg, 1, INT_MAX, &v);
			o->split_every = (int)v;
			break;
		case 'D':
			if (strcmp(optarg, "thread") && strcmp(optarg, "inline"))
				err = -EINVAL;
			o->device = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (err) {
			fprintf(stderr, "fq-workload: invalid value '%s' for --%s\n", optarg, name);
			return err;
		}
	}
	if (optind < argc || o->ranks < 1 || o->steps < 0) {
		fprintf(stderr, "fq-workload: --ranks and --steps are required (see --help)\n");
		return -EINVAL;
	}
	if (o->slow_rank >= o->ranks || o->hang_rank >= o->ranks) {
		fprintf(stderr, "fq-workload: --slow-rank/--hang-rank must be below --ranks %d\n",
			o->ranks);
		return -EINVAL;
	}
	if ((o->hang_rank >= 0) != (o->hang_at >= 0)) {
		fprintf(stderr, "fq-workload: --hang-rank and --hang-at go together\n");
		return -EINVAL;
	}
	if (o->shape == SHAPE_PIPELINE && o->ranks % o->stages) {
		fprintf(stderr, "fq-workload: --ranks %d is not a multiple of --stages %d\n",
			o->ranks, o->stages);
		return -EINVAL;
	}
	if (o->shape != SHAPE_LOOP && o->device && !strcmp(o->device, "inline")) {
		fprintf(stderr, "fq-workload: --device inline applies to --shape loop only\n");
		return -EINVAL;
	}
	if (o->shape == SHAPE_LOOP && o->data_us) {
		fprintf(stderr, "fq-workload: --data-us applies to the shapes other than loop\n");
		return -EINVAL;
	}
	if (o->split_every && o->shape != SHAPE_DDP) {
		fprintf(stderr, "fq-workload: --split-every applies to --shape ddp only\n");
		return -EINVAL;
	}
	if (o->shape != SHAPE_LOOP && (o->mixed || o->grouped)) {
		fprintf(stderr, "fq-workload: --ops applies to --shape loop only\n");
		return -EINVAL;
	}
	if (!!o->cgroup_parent != !!o->cgroups) {
		fprintf(stderr, "fq-workload: --cgroup-parent and --cgroups go together\n");
		return -EINVAL;
	}
	return 0;
}
