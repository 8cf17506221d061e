/* SPDX-License-Identifier: MIT */
/*
 * an-run: runs a node/merge pair of analysis files over trace files the way
 * fleetq will, and prints the merge's rows (tab-separated). For trying out and
 * adapting the files in sql/analysis/ without a cluster.
 * usage: an-run NODE.sql MERGE.sql [-p NAME=VALUE]... [-m NAME=VALUE]... [-g]
 *               FILE[@OFFSET_NS]...
 *   -p  bind a node-side parameter   -m  bind a merge-side parameter
 *   -g  run the node query behind agentd's read-only guard
 *   @OFFSET_NS  that node's clock.offset_ns (node clock minus coordinator clock)
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

int main(int argc, char **argv)
{
	const char *np[64] = { 0 }, *mp[64] = { 0 };
	struct an_node nodes[256];
	struct an_rows rows;
	size_t nn = 0, npn = 0, nmp = 0;
	char *node_sql, *merge_sql, *cause = NULL;
	int c, guarded = 0, ret;

	while ((c = getopt(argc, argv, "p:m:g")) != -1) {
		if (c == 'p' && npn < 63)
			np[npn++] = optarg;
		else if (c == 'm' && nmp < 63)
			mp[nmp++] = optarg;
		else if (c == 'g')
			guarded = 1;
		else
			goto usage;
	}
	if (argc - optind < 3 || argc - optind - 2 > 256)
		goto usage;
	node_sql = an_slurp(argv[optind]);
	merge_sql = an_slurp(argv[optind + 1]);
	if (!node_sql || !merge_sql) {
		fprintf(stderr, "an-run: cannot read '%s' or '%s'\n", argv[optind],
			argv[optind + 1]);
		return 1;
	}
	for (int i = optind + 2; i < argc; i++) {
		char *at = strrchr(argv[i], '@');

		nodes[nn].name = NULL;
		nodes[nn].offset_ns = 0;
		if (at) {
			*at = 0;
			nodes[nn].offset_ns = strtoll(at + 1, NULL, 0);
		}
		nodes[nn++].path = argv[i];
	}
	ret = an_run(node_sql, merge_sql, nodes, nn, np, mp, guarded, &rows, &cause);
	if (ret < 0) {
		fprintf(stderr, "an-run: %s\n", cause ? cause : "failed");
		return 1;
	}
	an_rows_print(&rows, stdout);
	an_rows_release(&rows);
	free(node_sql);
	free(merge_sql);
	free(cause);
	return 0;
usage:
	fprintf(stderr, "usage: an-run NODE.sql MERGE.sql [-p NAME=VALUE]... [-m NAME=VALUE]... "
			"[-g] FILE[@OFFSET_NS]...\n");
	return 2;
}
