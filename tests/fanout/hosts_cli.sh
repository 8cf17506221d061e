#!/bin/sh
# SPDX-License-Identifier: MIT
# pdsh/clush conventions on fleetq's command line: -x HOSTLIST, -w ^FILE, --hosts - (stdin),
# -f N (--fanout), and -x applied to $SLURM_JOB_NODELIST. Hosts are loopback ports where
# nobody listens (refused at once), so `ping` lists exactly the hosts selected.
# usage: hosts_cli.sh FLEETQ
. "$(dirname "$0")/../lib.sh"
set -u
FLEETQ=$1
scratch fq-hostscli
export FLEETQ_CONFIG=/dev/null
unset SLURM_JOB_NODELIST
# nodes ARGS...: the node column of fleetq ping, space-joined
nodes() {
	"$FLEETQ" --insecure --format tsv --connect-timeout 2 "$@" ping 2>"$T/err" |
		awk -F'\t' 'NR > 1 { printf "%s%s", s, $1; s = " " }'
}
[ "$(nodes -w '127.0.0.1:[1-3]' -x 127.0.0.1:2)" = "127.0.0.1:1 127.0.0.1:3" ] || fail "-x"
[ "$(nodes -w '127.0.0.1:[1-4]' -x '127.0.0.1:[1,4]' -f 1)" = "127.0.0.1:2 127.0.0.1:3" ] ||
	fail "-x with a range, -f 1"
printf '# two\n127.0.0.1:[5-6]\n' >"$T/hosts"
[ "$(nodes -w "^$T/hosts")" = "127.0.0.1:5 127.0.0.1:6" ] || fail "-w ^FILE"
[ "$(nodes -w '127.0.0.1:[4-7]' -x "^$T/hosts")" = "127.0.0.1:4 127.0.0.1:7" ] || fail "-x ^FILE"
[ "$(nodes --hosts - <"$T/hosts")" = "127.0.0.1:5 127.0.0.1:6" ] || fail "--hosts -"
[ "$(SLURM_JOB_NODELIST='127.0.0.1:[7-9]' nodes -x 127.0.0.1:8)" = "127.0.0.1:7 127.0.0.1:9" ] ||
	fail "-x on \$SLURM_JOB_NODELIST"
"$FLEETQ" -w a -x a ping >/dev/null 2>"$T/err"
[ $? = 2 ] && grep -q "no hosts: -x left none" "$T/err" || fail "-x leaving none: $(cat "$T/err")"
"$FLEETQ" -f 0 -w a ping >/dev/null 2>"$T/err"
[ $? = 2 ] && grep -q "^fleetq: -f: invalid fanout '0'" "$T/err" || fail "-f 0: $(cat "$T/err")"
"$FLEETQ" --hosts - - </dev/null >/dev/null 2>"$T/err"
[ $? = 2 ] && grep -q "standard input cannot hold both" "$T/err" || fail "--hosts - with SQL -"
echo ok
