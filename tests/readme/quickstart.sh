#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs the fenced block under README.md's "Quick start on one machine" as written, from a
# stand-in checkout (build/ and certs/ linked to the real ones), and checks that each
# everyday command gave a true answer: the planted rank 6, four nodes that answer, 1200
# collectives per rank, a saved baseline that the same job passes. Only stragglers fails
# (exit 1: it found the straggler).
set -u
fail() {
	echo "FAIL: $*" >&2
	[ -f "$T/out" ] && { echo "--- output" >&2; cat "$T/out" >&2; }
	exit 1
}
for v in FLEETQ AGENTD TRACEGEN README CERTS; do
	eval "x=\${$v:-}"
	[ -n "$x" ] && [ -e "$x" ] || { echo "readme: $v is not set" >&2; exit 1; }
done
T=$(mktemp -d "${TMPDIR:-/tmp}/fq-readme.XXXXXX")
trap 'rm -rf "$T"' EXIT
unset SLURM_JOB_NODELIST FLEETQ_CONFIG

# The block: from the heading to the first closing fence after it.
awk '/^## Quick start on one machine/ { on = 1; next }
     on && /^```sh$/ { inblk = 1; next }
     inblk && /^```$/ { exit }
     inblk { print }' "$README" >"$T/block.sh"
[ -s "$T/block.sh" ] || fail "no sh block under '## Quick start on one machine' in README.md"
grep -q '^fleetq .*stragglers' "$T/block.sh" || fail "the quick start runs no stragglers"

mkdir -p "$T/checkout/build/fanout" "$T/checkout/build/agentd" "$T/checkout/build/tests/tracegen" \
	"$T/tmp"
ln -s "$FLEETQ" "$T/checkout/build/fanout/fleetq"
ln -s "$AGENTD" "$T/checkout/build/agentd/agentd"
ln -s "$TRACEGEN" "$T/checkout/build/tests/tracegen/fq-tracegen"
ln -s "$CERTS" "$T/checkout/certs"

# The only lines put before the block: each fleetq command logs its exit status (a function
# wins over the one on PATH), and the agents die with the shell whatever happens.
cat - "$T/block.sh" >"$T/run.sh" <<'PRE'
fleetq() { command fleetq "$@"; set -- $? "$@"; echo "fq-rc $*"; return "$1"; }
trap 'kill $(jobs -p) 2>/dev/null' EXIT
PRE
(cd "$T/checkout" && TMPDIR=$T/tmp timeout 150 bash "$T/run.sh") >"$T/out" 2>&1
rc=$?
[ $rc != 124 ] || fail "the block ran past 150 s"

# Eight fleetq commands; only stragglers fails, with 1: a straggler found.
grep '^fq-rc ' "$T/out" >"$T/rcs"
[ "$(grep -c . "$T/rcs")" = 8 ] || fail "not eight fleetq commands: $(cat "$T/rcs")"
[ "$(grep -v '^fq-rc 0 ' "$T/rcs")" = "fq-rc 1 --hosts nodes.txt stragglers --since 5m" ] ||
	fail "unexpected exit statuses: $(cat "$T/rcs")"
# stragglers: the planted rank, agreed on by the signals
grep -q '^straggler: rank 6 on localhost:[0-9]' "$T/out" || fail "stragglers did not name rank 6"
grep -q 'stragglers: 0 hung, 1 straggler (first: rank 6 on ' "$T/out" || fail "stragglers summary"
# netcheck: looked at all 16 ranks
grep -q '^fleetq: netcheck: nothing among 16 ranks, last 5m' "$T/out" || fail "netcheck"
# ping: four nodes, their names, ok
[ "$(grep -cE '^localhost:[0-9]+ +ok +[0-9]+ .* gpu0[1-4] +generated' "$T/out")" = 4 ] ||
	fail "ping: not four nodes ok"
# timeline: every rank's events, a trace a JSON parser reads
grep -q '^fleetq: timeline: [0-9]* events of 16 ranks, last 5m, newest 1000 seqs, in job.json' \
	"$T/out" || fail "timeline"
JOB=$(find "$T/tmp" -name job.json | head -n 1)
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["traceEvents"]' "${JOB:-/}" ||
	fail "timeline: job.json is no trace"
# --merge: 16 ranks, 1200 collectives each
[ "$(grep -cP '^([0-9]|1[0-5])\t1200\.0$' "$T/out")" = 16 ] || fail "--merge: not 16 ranks x 1200"
# hostlist(): all four nodes hold 4800 collectives, folded into one expression
grep -qP '^localhost:\[\d+(-\d+)?(,\d+(-\d+)?)*\]\t4800$' "$T/out" || fail "--merge hostlist()"
# gate: saved, then the same job passes its own baseline
grep -q '^fleetq: gate: saved [0-9]* metrics, run 1 (1 sample), 4 nodes, 16 ranks, to main.baseline' \
	"$T/out" || fail "gate --save"
grep -q '^fleetq gate: .* none regressed (tolerance 10%, 16 ranks)' "$T/out" || fail "gate --baseline"
# every fan-out reached every node
[ "$(grep -c '^coverage: 4/4 nodes ok' "$T/out")" = 8 ] || fail "a fan-out without full coverage"
# the last line stopped the agents: nothing is left to kill
echo "ok: README quick start ($(grep -c . "$T/block.sh") lines) gave true answers"
