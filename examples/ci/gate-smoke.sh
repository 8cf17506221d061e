#!/bin/sh
# SPDX-License-Identifier: MIT
#
# gate-smoke.sh: a CI step that runs a multi-node smoke job, then asks fleetq whether this
# build made collectives slower, skewed ranks or added retransmits, against a baseline
# recorded from known-good builds. Exits with fleetq gate's code:
#
#   0  pass: every node answered, no metric regressed beyond the tolerance
#   1  a metric regressed (the report names metric and rank; --junit FILE has a testcase each)
#   2  usage or configuration error, or the fleet's shape differs from the baseline's
#   3  coverage short: not every node answered (no verdict)
#   4  TLS or authentication failed on a node
#   *  the smoke job itself failed (its own exit status, before any gate)
#
# usage: gate-smoke.sh --hosts FILE --baseline FILE [--job ID] [--save] [--junit FILE]
#                      [--report FILE] -- SMOKE-COMMAND [ARGS...]
#   --save      record the run into the baseline instead (--append: main-branch CI, or K
#               clean runs to give the baseline its spread; docs/gate.md)
# Environment: FLEETQ (the binary, default fleetq), FLEETQ_CA/CERT/KEY (else fleetq's config
# file), FLEETQ_INSECURE=1 (loopback agents only), GATE_OPTS (more fleetq gate options, e.g.
# "--tolerance 15% --builtin busy_gap_us,sync_wait_share --metric NAME=SQL"; word-split).
#
#   GitHub Actions:  - run: examples/ci/gate-smoke.sh --hosts nodes.txt --baseline main.baseline
#                             --job "$GITHUB_RUN_ID" -- srun -N4 python smoke.py
set -eu

prog=gate-smoke
FLEETQ=${FLEETQ:-fleetq}
hosts= baseline= job= save= junit= report=
usage() {
	echo "usage: $prog --hosts FILE --baseline FILE [--job ID] [--save] [--junit FILE]" \
		"[--report FILE] -- SMOKE-COMMAND..." >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	--hosts) [ $# -ge 2 ] || usage; hosts=$2; shift 2 ;;
	--baseline) [ $# -ge 2 ] || usage; baseline=$2; shift 2 ;;
	--job) [ $# -ge 2 ] || usage; job=$2; shift 2 ;;
	--save) save=1; shift ;;
	--junit) [ $# -ge 2 ] || usage; junit=$2; shift 2 ;;
	--report) [ $# -ge 2 ] || usage; report=$2; shift 2 ;;
	--) shift; break ;;
	-h | --help) sed -n '3,25s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) usage ;;
	esac
done
[ -n "$hosts" ] && [ -n "$baseline" ] && [ $# -gt 0 ] || usage

# 1. the smoke job; its own failure is the CI's answer, not a gate's
start=$(date +%s)
rc=0
"$@" || rc=$?
if [ $rc != 0 ]; then
	echo "$prog: FAIL the smoke job exited $rc (no gate run)" >&2
	exit $rc
fi
# The window: the job's run time, plus a minute for clocks and the agents' batched writes.
since=$(($(date +%s) - start + 60))s

set -- --hosts "$hosts"
[ -n "${FLEETQ_CA:-}" ] && set -- "$@" --ca "$FLEETQ_CA"
[ -n "${FLEETQ_CERT:-}" ] && set -- "$@" --cert "$FLEETQ_CERT"
[ -n "${FLEETQ_KEY:-}" ] && set -- "$@" --key "$FLEETQ_KEY"
[ "${FLEETQ_INSECURE:-}" = 1 ] && set -- "$@" --insecure
set -- "$@" gate --since "$since"
[ -n "$job" ] && set -- "$@" --job "$job"
if [ -n "$save" ]; then
	set -- "$@" --save "$baseline" --append
else
	set -- "$@" --baseline "$baseline"
fi
# shellcheck disable=SC2086 # GATE_OPTS is a list of options
set -- "$@" ${GATE_OPTS:-}

# JUnit for the CI's UI from the very fan-out that gives the exit status
[ -n "$junit" ] && [ -z "$save" ] && set -- "$@" --junit "$junit"

# 2. the gate: the side-by-side table into the job's log (our stdout, whatever it is: a
# `> smoke.log 2>&1` must keep the smoke job's output), or into --report
rc=0
if [ -n "$report" ]; then
	"$FLEETQ" "$@" >"$report" || rc=$?
else
	"$FLEETQ" "$@" || rc=$?
fi
case $rc in
0) echo "$prog: PASS (exit 0)" >&2 ;;
1) echo "$prog: FAIL a metric regressed: see the line 'fleetq gate: ...' above (exit 1)" >&2 ;;
2) echo "$prog: ERROR usage, configuration or shape mismatch (exit 2)" >&2 ;;
3) echo "$prog: ERROR coverage short, no verdict (exit 3)" >&2 ;;
4) echo "$prog: ERROR TLS/authentication failed (exit 4)" >&2 ;;
*) echo "$prog: ERROR fleetq exited $rc" >&2 ;;
esac
exit $rc
