/* SPDX-License-Identifier: MIT */
/*
 * an-accuracy: how often stragglers.{node,merge}.sql name the planted straggler.
 * For 8, 16 and 32 ranks over 4 nodes, K seeds each of a clean run and one rank
 * slowed 5%, 10% and 20% of a step (fq-tracegen), it prints top-1 accuracy (the
 * first row is the slow rank, verdict 'straggler'), runs with a false positive
 * (any other rank called straggler or hung), and how many other ranks had any
 * single signal over the threshold (what a 1-signal rule would have flagged).
 * Not a test: bench/ material. Deterministic: seeds 1..K.
 * usage: an-accuracy FQ-TRACEGEN SQL-DIR WORKDIR [K] [STEPS] [PCT,PCT,...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "driver.h"

int main(int argc, char **argv)
{
	static const int sizes[] = { 8, 16, 32 };
	double pcts[16] = { 0, 5, 10, 20 };
	size_t npcts = 4;
	const char *mp[] = { "all_ranks=1", NULL };
	char path[1200], *node_sql, *merge_sql;
	int k, steps, bad = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: an-accuracy FQ-TRACEGEN SQL-DIR WORKDIR [K] [STEPS] [PCT,...]\n");
		return 2;
	}
	k = argc > 4 ? atoi(argv[4]) : 20;
	steps = argc > 5 ? atoi(argv[5]) : 200;
	if (argc > 6) {
		char *p = argv[6];

		for (npcts = 0; npcts < 16 && *p; npcts++) {
			pcts[npcts] = strtod(p, &p);
			p += *p == ',';
		}
	}
	snprintf(path, sizeof(path), "%s/stragglers.node.sql", argv[2]);
	node_sql = an_slurp(path);
	snprintf(path, sizeof(path), "%s/stragglers.merge.sql", argv[2]);
	merge_sql = an_slurp(path);
	if (!node_sql || !merge_sql) {
		fprintf(stderr, "an-accuracy: cannot read the .sql files in '%s'\n", argv[2]);
		return 1;
	}
	mkdir(argv[3], 0755);
	printf("ranks\tslow%%\truns\ttop1\tfp_runs\tslow_nsig_min\tslow_z_min\tothers_1sig\n");
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		for (size_t pi = 0; pi < npcts; pi++) {
			int n = sizes[si], top1 = 0, fp = 0, runs = 0, nsig_min = 9, one_sig = 0;
			double zmin = 1e18;

			for (int seed = 1; seed <= k; seed++) {
				int slow = (seed * 5 + 3) % n, ok = 1;
				char names[4][16], files[4][1300], cmd[8192], *cause = NULL;
				struct an_node nodes[4];
				struct an_rows r;

				for (int f = 0; f < 4 && ok; f++) {
					int st;

					snprintf(names[f], sizeof(names[f]), "node%d", f);
					snprintf(files[f], sizeof(files[f]), "%s/acc-n%d.db", argv[3], f);
					snprintf(cmd, sizeof(cmd),
						 "'%s' --out '%s' --node node%d --ranks %d "
						 "--rank-base %d --nranks %d --steps %d --seed %d "
						 "--slow-rank %d --slow-pct %g >/dev/null",
						 argv[1], files[f], f, n / 4, f * n / 4, n, steps, seed,
						 slow, pcts[pi]);
					st = system(cmd);
					ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
					nodes[f] = (struct an_node){ files[f], names[f], 0 };
				}
				if (!ok || an_run(node_sql, merge_sql, nodes, 4, NULL, mp, 0, &r,
						  &cause) < 0) {
					fprintf(stderr, "an-accuracy: %s\n", cause ? cause : cmd);
					free(cause);
					bad = 1;
					continue;
				}
				runs++;
				for (size_t i = 0; i < r.nrows; i++) {
					const char *v = an_get(&r, i, "verdict");
					const char *sg = an_get(&r, i, "signals");
					int is_slow = pcts[pi] > 0 && atoi(an_get(&r, i, "rank")) == slow;
					int ns = 0;

					for (const char *p = sg; p && *p; p = strchr(p, ','), p = p ? p + 1 : p)
						ns += strncmp(p, "ratio", 5) != 0;
					if (is_slow) {
						double z = 1e18;

						for (int c = 0; c < 3; c++) {
							static const char *zc[] = { "z_late", "z_wait",
										    "z_cpu" };
							double x = atof(an_get(&r, i, zc[c]));

							z = x < z ? x : z;
						}
						zmin = z < zmin ? z : zmin;
						nsig_min = ns < nsig_min ? ns : nsig_min;
						if (i == 0 && !strcmp(v, "straggler"))
							top1++;
					} else {
						one_sig += ns > 0;
						if (strcmp(v, "ok")) {
							fp++;
							break;
						}
					}
				}
				an_rows_release(&r);
			}
			if (pcts[pi] > 0)
				printf("%d\t%g\t%d\t%.0f%%\t%d\t%d\t%.1f\t%d\n", n, pcts[pi], runs,
				       runs ? 100.0 * top1 / runs : 0, fp, nsig_min, zmin, one_sig);
			else
				printf("%d\t%g\t%d\t-\t%d\t-\t-\t%d\n", n, pcts[pi], runs, fp,
				       one_sig);
			fflush(stdout);
		}
	}
	free(node_sql);
	free(merge_sql);
	return bad;
}
