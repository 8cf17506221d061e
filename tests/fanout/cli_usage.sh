#!/bin/sh
# SPDX-License-Identifier: MIT
# Usage and configuration errors: exit 2 with one line that names the culprit.
# No agents needed.
set -u
FLEETQ=$1
T=$(mktemp -d "${TMPDIR:-/tmp}/fq-cli.XXXXXX")
trap 'rm -rf "$T"' EXIT
export FLEETQ_CONFIG=/dev/null
unset SLURM_JOB_NODELIST
fails=0

# usage_error WANT_TEXT ARGS...: exit 2, exactly one line on stderr containing WANT_TEXT.
usage_error() {
	want=$1
	shift
	"$FLEETQ" "$@" >"$T/out" 2>"$T/err"
	rc=$?
	if [ $rc != 2 ] || [ "$(wc -l <"$T/err")" != 1 ] || ! grep -qF -- "$want" "$T/err"; then
		echo "FAIL: fleetq $*: rc=$rc, stderr: $(cat "$T/err"), want one line with '$want'" >&2
		fails=$((fails + 1))
	fi
}

usage_error "no query"
usage_error "no hosts" "SELECT 1"
usage_error "'gpu[3-1]'" -w 'gpu[3-1]' "SELECT 1"
usage_error "'gpu[01-'" -w 'gpu[01-' "SELECT 1"
usage_error "'a,,b'" -w 'a,,b' "SELECT 1"
usage_error "'--bogus'" --bogus -w a "SELECT 1"
usage_error "xml" --format xml -w a "SELECT 1"
usage_error "--min-coverage" --min-coverage 2 -w a "SELECT 1"
usage_error "--max-rows" --max-rows 0 -w a "SELECT 1"
usage_error "--port" --port 70000 -w a "SELECT 1"
usage_error "--timeout" --timeout 0 -w a "SELECT 1"
usage_error "one query" -w a "SELECT 1" "SELECT 2"
usage_error "$T/nohosts" --hosts "$T/nohosts" "SELECT 1"
printf 'gpu01\n# fine\ngpu[x]\n' >"$T/hosts"
usage_error "$T/hosts:3:" --hosts "$T/hosts" "SELECT 1"
usage_error "invalid host 'gpu01:0'" -w gpu01:0 --insecure "SELECT 1"
usage_error "'gpu01' is not a loopback address" -w gpu01 --insecure "SELECT 1"
usage_error "--ca" -w gpu01 "SELECT 1"
printf 'port = 7077\nfanout = lots\n' >"$T/conf"
FLEETQ_CONFIG=$T/conf usage_error "$T/conf:2:" -w a "SELECT 1"
FLEETQ_CONFIG=$T/missing usage_error "FLEETQ_CONFIG" -w a "SELECT 1"
SLURM_JOB_NODELIST='n[2-1]' usage_error "'n[2-1]'" "SELECT 1"
# subcommands: their options after them, global ones anywhere
usage_error "goes after the subcommand" --since 5m -w a stragglers
usage_error "--since: invalid duration '5x'" -w a stragglers --since 5x
usage_error "'--merge' does not apply to 'stragglers'" stragglers -w a --merge "SELECT 1"
usage_error "'--since' does not apply to 'ping'" ping -w a --since 5m
usage_error "'--since' does not apply to 'query'" -w a "SELECT 1" --since 5m
usage_error "'ping' takes no arguments (extra 'x')" -w a ping x
usage_error "--comm: invalid communicator 'xyz'" -w a stragglers --comm xyz
usage_error "--threshold: invalid z-score '-1'" -w a netcheck --threshold -1
usage_error "--min-effect: invalid share '0'" -w a stragglers --min-effect 0
usage_error "--min-effect: invalid share '100'" -w a stragglers --min-effect 100
usage_error "--effect-steps: invalid count '-1'" -w a stragglers --effect-steps -1
usage_error "'--effect-steps' does not apply to 'netcheck'" -w a netcheck --effect-steps 3
usage_error "--busy-idle: invalid share '101'" -w a stragglers --busy-idle 101
usage_error "'--busy-idle' does not apply to 'netcheck'" -w a netcheck --busy-idle 20
usage_error "'--min-effect' does not apply to 'netcheck'" -w a netcheck --min-effect 3
usage_error "--pings: invalid count '100'" --pings 100 -w a "SELECT 1"
usage_error "no hosts" stragglers
usage_error "--ca" stragglers -w gpu01

# help and version succeed and say what they should.
"$FLEETQ" --help >"$T/out" 2>&1 || { echo "FAIL: --help exit $?" >&2; fails=$((fails + 1)); }
for w in "exit status" "--min-coverage" "SLURM_JOB_NODELIST" "FLEETQ_CONFIG"; do
	grep -qF -- "$w" "$T/out" || { echo "FAIL: --help lacks '$w'" >&2; fails=$((fails + 1)); }
done
"$FLEETQ" help | cmp -s - "$T/out" || { echo "FAIL: 'fleetq help' differs from --help" >&2; fails=$((fails + 1)); }
"$FLEETQ" stragglers --help | cmp -s - "$T/out" || { echo "FAIL: 'fleetq stragglers --help' differs" >&2; fails=$((fails + 1)); }
for w in stragglers netcheck ping --since --show-sql "5  stragglers"; do
	grep -qF -- "$w" "$T/out" || { echo "FAIL: --help lacks '$w'" >&2; fails=$((fails + 1)); }
done
"$FLEETQ" --version | grep -q '^fleetq [0-9]' || { echo "FAIL: --version" >&2; fails=$((fails + 1)); }

[ $fails = 0 ] || exit 1
echo ok
