#!/bin/sh
# SPDX-License-Identifier: MIT
#
# straggler-gate.sh: a CI step that fails a run whose GPU job had a straggler or hung rank.
# Runs `fleetq stragglers` over a hosts file, prints ONE summary line fit for a CI log (the
# full report goes to a file when asked), and exits with fleetq's code:
#
#   0  pass: every node answered, no straggler, no hung rank
#   1  a straggler was found
#   5  a hung rank was found (wins over 1)
#   3  no verdict: nodes timed out, were unreachable or failed the query, or the answers
#      held no rank (no such job, a window before the trace) or only part of a job
#   4  TLS or authentication failed on a node (fix certificates; wins over 3)
#   2  usage or configuration error (this script's, or fleetq's)
#
# usage: straggler-gate.sh --hosts FILE [--job ID] [--since DUR] [--report FILE]
#                          [-- more fleetq options, e.g. --min-effect 5 --min-coverage 0.9]
# Environment: FLEETQ (the binary, default fleetq), FLEETQ_CA, FLEETQ_CERT, FLEETQ_KEY (else
# fleetq's config file supplies them), FLEETQ_INSECURE=1 (loopback agents only).
#
#   GitHub Actions:  - run: examples/ci/straggler-gate.sh --hosts nodes.txt --job "$JOB_ID"
#   GitLab CI:       script: [ "examples/ci/straggler-gate.sh --hosts nodes.txt --since 2h" ]
set -eu

prog=straggler-gate
FLEETQ=${FLEETQ:-fleetq}
hosts= job= since=1h report=
usage() {
	echo "usage: $prog --hosts FILE [--job ID] [--since DUR] [--report FILE] [-- FLEETQ-OPTIONS]" >&2
	exit 2
}
while [ $# -gt 0 ]; do
	case $1 in
	--hosts) [ $# -ge 2 ] || usage; hosts=$2; shift 2 ;;
	--job) [ $# -ge 2 ] || usage; job=$2; shift 2 ;;
	--since) [ $# -ge 2 ] || usage; since=$2; shift 2 ;;
	--report) [ $# -ge 2 ] || usage; report=$2; shift 2 ;;
	--) shift; break ;;
	-h | --help) sed -n '3,22s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) usage ;;
	esac
done
[ -n "$hosts" ] || usage
[ -r "$hosts" ] || { echo "$prog: cannot read hosts file '$hosts'" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/straggler-gate.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 2' INT TERM

set -- --hosts "$hosts" --format tsv "$@"
[ -z "${FLEETQ_CA:-}" ] || set -- "$@" --ca "$FLEETQ_CA"
[ -z "${FLEETQ_CERT:-}" ] || set -- "$@" --cert "$FLEETQ_CERT"
[ -z "${FLEETQ_KEY:-}" ] || set -- "$@" --key "$FLEETQ_KEY"
[ "${FLEETQ_INSECURE:-0}" != 1 ] || set -- "$@" --insecure
set -- "$@" stragglers --since "$since"
[ -z "$job" ] || set -- "$@" --job "$job"

rc=0
"$FLEETQ" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ -n "$report" ]; then
	cat "$tmp/out" "$tmp/err" >"$report" ||
		echo "$prog: cannot write report '$report'" >&2
fi

# findings from the TSV's named columns: "straggler rank 3@gpu07 (late,sync)" etc.
found=$(awk -F'\t' '
	NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	function f(n) { return (n in c) ? $(c[n]) : "?" }
	f("verdict") == "hung" {
		s = s sep "hung rank " f("rank") "@" f("node") " stopped at seq " f("stopped_at_seq"); sep = "; "
	}
	f("verdict") == "straggler" {
		s = s sep "straggler rank " f("rank") "@" f("node") " (" f("signals") ")"; sep = "; "
	}
	END { print s }' "$tmp/out")
coverage=$(grep '^coverage:' "$tmp/err" | tail -n 1 | sed 's/^coverage: //') || coverage=
msg=$(grep -v '^coverage:' "$tmp/err" | head -n 1) || msg=

# how much time the judged collectives span: a clean verdict holds for that much
judged=$(sed -n 's/^fleetq: stragglers: none among .*: \([0-9.-]* s\) of collectives judged$/\1/p' \
	"$tmp/err" | head -n 1) || judged=
case $rc in
0) line="PASS no straggler${judged:+ (${judged} judged)}" ;;
1) line="FAIL ${found:-straggler found}" ;;
5) line="FAIL ${found:-hung rank found}" ;;
3)
	# what fleetq says to check (no rank seen, part of a job), else the coverage
	why=$(grep -v '^coverage:\|^fleetq: stragglers:' "$tmp/err" | head -n 1) || why=
	if [ -n "$why" ]; then
		line="ERROR no verdict: ${why#fleetq: }"
	else
		line="ERROR coverage short, no verdict"
	fi
	;;
4) line="ERROR TLS/authentication failed${msg:+: $msg}" ;;
*) line="ERROR fleetq exit $rc${msg:+: $msg}" ;;
esac
echo "$prog: $line${coverage:+ [$coverage]} (exit $rc)"
exit $rc
