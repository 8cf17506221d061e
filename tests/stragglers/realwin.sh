#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq's report over a real trace window served by real agents: the CNN under DDP on
# 4 x H200 (tests/analysis/real/cnn17-slow5, BENCHMARKS.md round 17), rank 1's GPU slower
# all through its step by about 3.4 % of the step (the job lost 2.0 %), one agentd per rank. Over the whole
# phase it is named on its GPU's pace alone, and the first line says the effect is an
# estimate; over the newest 500 seqs of each op under a bar well above its effect
# (--min-effect 5) nobody is named (exit 0), and the closest line says what came closest:
# its GPU's compute (its kernels' effect is half of it). Then the same CNN with a sync
# every 20 steps (cnn18-slow5s20, 4 x H100, round 18): its CPUs run ahead of their GPUs and
# wait in their launches, so only the plugin's rows say the GPUs set the pace; rank 2's GPU
# slower all through its step by 4.9 % of it (the job lost 4.1 %) is named on pace alone.
# Last the CNN under FSDP (cnnf18-slow20), rank 3's GPU slower all through its step (the job
# lost 14.2 %): a known miss (exit 0), whose closest line names it on its kernels, and whose
# second line says what its peers' kernels waited in all and that the cost is not measured.
. "$(dirname "$0")/../e2e/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)

certs ca 127.0.0.1
python3 - "$SRC" "$T" <<'PY' || fail "cannot write the windows' trace files"
import gzip, json, sys
src, t = sys.argv[1:3]
sys.path.insert(0, src + "/bench/gpu")
import window
schema = open(src + "/sql/schema.sql").read()
for case, tag in (("cnn17-slow5", "r"), ("cnn18-slow5s20", "s"), ("cnnf18-slow20", "f")):
    j = json.load(gzip.open(src + "/tests/analysis/real/%s.json.gz" % case, "rt"))
    for k, node in enumerate(j["nodes"]):
        window.write("%s/%s%d.db" % (t, tag, k), schema, node["tables"])
PY
# serve TAG N: one agent per rank over the window's trace files $T/TAGk.db (nodes gpuNk)
serve() {
	HOSTS=
	for k in 0 1 2 3; do
		start_agent "gpu$2$k" "$T/$1$k.db" ca
		HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
	done
}

serve r 0

fq -w "$HOSTS" stragglers --since all --max-seqs 0
expect_rc 1 "the whole phase"
grep -q "^straggler: rank 1 on 127.0.0.1:[0-9]* (costs its job about [0-9.]*% of the span, if its GPU is slower all through its step)$" \
	"$T/out" || fail "first line: $(cat "$T/out")"
grep -q "^  signals that name it: pace (method mad)$" "$T/out" || fail "signals: $(cat "$T/out")"
grep -q "^  \* pace z=  *+[0-9.]*  [0-9.]* ms, peers [0-9.]* ms of GPU compute before each" \
	"$T/out" || fail "pace line: $(cat "$T/out")"

fq -w "$HOSTS" stragglers --since all --max-seqs 500 --min-effect 5
expect_rc 0 "the newest 500 seqs"
grep -q "^no straggler: 4 ranks" "$T/out" || fail "500 seqs: $(cat "$T/out")"
grep -q "^  closest: rank 1 on 127.0.0.1:[0-9]*: its GPU's compute before each step stands out (z [0-9.]*), [0-9.]*% of the span, if its GPU is slower all through its step, under the bar of [0-9.]*%$" \
	"$T/out" || fail "closest line: $(cat "$T/out")"

serve s 1
fq -w "$HOSTS" stragglers --since all --max-seqs 0
expect_rc 1 "a sync every 20 steps"
grep -q "^straggler: rank 2 on 127.0.0.1:[0-9]* (costs its job about [0-9.]*% of the span, if its GPU is slower all through its step)$" \
	"$T/out" || fail "sync every 20, first line: $(cat "$T/out")"
grep -q "^  signals that name it: pace (method mad)$" "$T/out" ||
	fail "sync every 20, signals: $(cat "$T/out")"

serve f 2
fq -w "$HOSTS" stragglers --since all --max-seqs 0
expect_rc 0 "FSDP"
grep -q "^  closest: rank 3 on 127.0.0.1:[0-9]*: its collective kernels stand out (z [0-9.]*), [0-9.]*% of the span, under the bar of [0-9.]*%$" \
	"$T/out" || fail "FSDP, closest line: $(cat "$T/out")"
grep -q "^    (all-gathers and reduce-scatters: its peers' kernels waited on it 5[0-9].[0-9]% of the span in all, overlapping their own compute; what it cost the job is not measured)$" \
	"$T/out" || fail "FSDP, its peers' wait in all: $(cat "$T/out")"
echo PASS
