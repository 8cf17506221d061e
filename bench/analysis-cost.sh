#!/bin/sh
# SPDX-License-Identifier: MIT
# What the GPU-side signals cost `fleetq stragglers`' analysis: the node and merge files of
# sql/analysis run by an-run (as fleetq runs them: each node's query on its own file, the
# merge over every node's rows) over NODES fq-tracegen node files of 8 ranks each, rank 517's
# GPU 10 % slower, with the NCCL profiler plugin's kernel rows (--kernels) against the same
# job without them (the CPU-side signals alone: the baseline, measured in the same run), and
# with the CUDA injection library's GPU-busy slices too (--busy-frac) against the kernels'
# job (the compute stream's cost).
# One collective a step, so every kernel opens a step: the most work `pace` can have.
# Median wall time of FQ_BENCH_REPS runs (default 5) each, alternating, and the peak RSS
# (GNU time, where installed). With the kernels the analysis must name rank 517 on its kernels
# and measure its GPU's pace (z_pace), so that the run times the work it is meant to.
#   bench/analysis-cost.sh [BUILD_DIR] [NODES] [STEPS]     (defaults: 128 nodes, 200 steps)
. "$(dirname "$0")/lib.sh"
nodes=${2:-128}
steps=${3:-200}
AN=$B/tests/analysis/an-run
need "$AN" "$TRACEGEN"
sql=$SRC/sql/analysis
ranks=$((nodes * 8))

# job DIR [ARGS]: the node files of one job
job() {
	d=$CACHE/ancost-$nodes-$steps-$1
	shift
	gen_nodes "$d" "$nodes" "$steps" 3 --gpu-slow-rank 517 --gpu-slow-pct 10 "$@"
	echo "$d"
}
[ "$ranks" -gt 517 ] || die "NODES must be 65 or more (rank 517 is the slow one)"
kern=$(job kernels --kernels)
base=$(job cpu)
busy=$(job busy --kernels --busy-frac 0.8)
kf=$(node_files "$kern" "$nodes")
bf=$(node_files "$base" "$nodes")
uf=$(node_files "$busy" "$nodes")

# an FILE...: one analysis run over those node files, as fleetq runs it (a function
# timeit can run; `time` needs the program itself, so it gets the same line through "$@")
an() { "$AN" "$sql/stragglers.node.sql" "$sql/stragglers.merge.sql" -p since_ns=1 "$@"; }
peak() { an_peak "$@"; }
# shellcheck disable=SC2086
an $kf >"$T/an.tsv" 2>"$T/an.err" || die "an-run: $(tail -n 2 "$T/an.err")"
awk -F '\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	NR == 2 { ok = $c["rank"] == 517 && $c["verdict"] == "straggler" && $c["signals"] ~ /gpu/ &&
		       $c["z_pace"] != "" && $c["z_pace"] != "NULL" }
	END { exit !ok }' "$T/an.tsv" ||
	die "with the kernels, rank 517 is not named on its kernels with its pace measured: $(head -n 3 "$T/an.tsv")"
# shellcheck disable=SC2086
an $uf >"$T/an.tsv" 2>"$T/an.err" || die "an-run: $(tail -n 2 "$T/an.err")"
awk -F '\t' 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	NR == 2 { ok = $c["rank"] == 517 && $c["verdict"] == "straggler" &&
		       $c["idle_pct"] + 0 < $c["peer_idle_pct"] + 0 && $c["z_compute"] + 0 > 3.5 }
	END { exit !ok }' "$T/an.tsv" ||
	die "with the slices, rank 517's GPU is not the least idle: $(head -n 3 "$T/an.tsv")"

tk= tb= tu=
i=0
while [ $i -lt "$REPS" ]; do
	# shellcheck disable=SC2086
	tk="$tk $(timeit an $kf)"
	# shellcheck disable=SC2086
	tb="$tb $(timeit an $bf)"
	# shellcheck disable=SC2086
	tu="$tu $(timeit an $uf)"
	i=$((i + 1))
done
# shellcheck disable=SC2086
mk=$(peak $kf)
# shellcheck disable=SC2086
mb=$(peak $bf)
# shellcheck disable=SC2086
mu=$(peak $uf)
k=$(median $tk)
b=$(median $tb)
u=$(median $tu)
echo "analysis-cost: $ranks ranks on $nodes node files, $steps steps, median of $REPS runs"
echo "  with the plugin's kernel rows: $(fmt "$k" 3) s (runs:$tk), peak RSS $mk KiB"
echo "  baseline, CPU side alone:      $(fmt "$b" 3) s (runs:$tb), peak RSS $mb KiB"
echo "  ratio (time): $(fmt "$(calc "$k / $b")" 3)"
echo "  with the GPU-busy slices too:  $(fmt "$u" 3) s (runs:$tu), peak RSS $mu KiB"
echo "  ratio (time) against the kernels alone: $(fmt "$(calc "$u / $k")" 3)"
result analysis_kernels_s "$(fmt "$k" 3)" s "$(fmt "$b" 3)" - -
[ "$mk" = - ] || result analysis_kernels_rss_kib "$mk" KiB "$mb" - -
result analysis_busy_s "$(fmt "$u" 3)" s "$(fmt "$k" 3)" - -
[ "$mu" = - ] || result analysis_busy_rss_kib "$mu" KiB "$mk" - -
