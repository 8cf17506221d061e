#!/bin/sh
# SPDX-License-Identifier: MIT
# What `fleetq stragglers` asking again over a longer span costs its analysis. A job of 24
# all-reduces a step (fq-tracegen --colls-per-step 24: an FSDP-sized step), 120 steps, NODES
# node files of 8 ranks each, rank 517 slower by 4 % of a step: on the default --max-seqs
# (1000 collectives: 42 steps, where the bar grows to 4.7 %) the verdict is clean with rank
# 517 closest, and fleetq asks again over the newest 2700 (112 steps), where it is named.
# The node and merge files of sql/analysis run by an-run, as fleetq runs them (each node's
# query on its own file, the merge over every node's rows): the default span alone is the
# baseline, measured in the same run; the widened verdict costs both queries. Median wall
# time of FQ_BENCH_REPS runs (default 5) each, alternating, and the peak RSS (GNU time,
# where installed). The bench checks that the first span leaves rank 517 under a grown bar
# and the second names it, so that it times the case the second query is for.
#   bench/widen-cost.sh [BUILD_DIR] [NODES]     (default: 64 nodes)
. "$(dirname "$0")/lib.sh"
nodes=${2:-64}
AN=$B/tests/analysis/an-run
need "$AN" "$TRACEGEN"
sql=$SRC/sql/analysis
ranks=$((nodes * 8))
[ "$ranks" -gt 517 ] || die "NODES must be 65 or more (rank 517 is the slow one)"

d=$CACHE/widen-$nodes
gen_nodes "$d" "$nodes" 120 7 --colls-per-step 24 --slow-rank 517 --slow-pct 4
files=$(node_files "$d" "$nodes")

# an SEQS: one analysis run over the node files at :max_seqs = SEQS, every rank's row
an() {
	# shellcheck disable=SC2086
	"$AN" "$sql/stragglers.node.sql" "$sql/stragglers.merge.sql" -p since_ns=1 \
		-p max_seqs="$1" -m all_ranks=1 $files
}
# shellcheck disable=SC2086
peak() { an_peak -p max_seqs="$1" -m all_ranks=1 $files; }
# both: the default span, then the wider one (what fleetq runs when it asks again)
both() { an 1000 >/dev/null && an 2700 >/dev/null; }

an 1000 >"$T/a.tsv" 2>"$T/a.err" || die "an-run: $(tail -n 2 "$T/a.err")"
awk -F '\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	$c["verdict"] != "ok" { bad = 1 }
	$c["rank"] == 517 { ok = $c["near_pct"] != "NULL" && $c["bar_steps"] != "NULL" &&
			       $c["near_pct"] + 0 < $c["bar_pct"] + 0 }
	END { exit bad || !ok }' "$T/a.tsv" ||
	die "at 1000 seqs, rank 517 is not the clean verdict's rank under a grown bar: $(head -n 3 "$T/a.tsv")"
an 2700 >"$T/b.tsv" 2>"$T/b.err" || die "an-run: $(tail -n 2 "$T/b.err")"
awk -F '\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	NR == 2 { ok = $c["rank"] == 517 && $c["verdict"] == "straggler" } END { exit !ok }' \
	"$T/b.tsv" || die "at 2700 seqs, rank 517 is not named: $(head -n 3 "$T/b.tsv")"

t1= t2=
i=0
while [ $i -lt "$REPS" ]; do
	t1="$t1 $(timeit an 1000)"
	t2="$t2 $(timeit both)"
	i=$((i + 1))
done
m1=$(peak 1000)
m2=$(peak 2700)
a=$(median $t1)
w=$(median $t2)
echo "widen-cost: $ranks ranks on $nodes node files, 24 collectives a step, 120 steps, median of $REPS runs"
echo "  default span (1000 seqs), the baseline: $(fmt "$a" 3) s (runs:$t1), peak RSS $m1 KiB"
echo "  asked again (1000, then 2700 seqs):     $(fmt "$w" 3) s (runs:$t2), peak RSS $m2 KiB (2700)"
echo "  ratio (time): $(fmt "$(calc "$w / $a")" 3)"
result widen_s "$(fmt "$w" 3)" s "$(fmt "$a" 3)" - -
[ "$m2" = - ] || result widen_rss_kib "$m2" KiB "$m1" - -
