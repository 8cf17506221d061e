#!/bin/sh
# SPDX-License-Identifier: MIT
# examples/ci/straggler-gate.sh end to end: two real agentd processes (mutual TLS, loopback)
# serve fq-tracegen traces of one 8-rank job, 4 ranks per node. Clean -> exit 0 and a PASS
# line; rank 5 slowed 20% -> 1 naming rank 5; rank 2 hung -> 5 naming rank 2; one node down
# -> 3; a client certificate from another CA -> 4. One summary line each time.
. "$(dirname "$0")/lib.sh"
[ -x "${TRACEGEN:-}" ] || fail "TRACEGEN is not set to fq-tracegen"
[ -x "${GATE:-}" ] || fail "GATE is not set to examples/ci/straggler-gate.sh"
has_stragglers || skip "'$FLEETQ stragglers' is not available in this build"

certs_in "$T/certs" 127.0.0.1
certs_in "$T/other" 127.0.0.1
export CERTHOST=127.0.0.1 FLEETQ
export FLEETQ_CA=$T/certs/ca.crt FLEETQ_CERT=$T/certs/client.crt FLEETQ_KEY=$T/certs/client.key

# scenario NAME TRACEGEN-OPTIONS...: two nodes' traces, two agents, a hosts file $T/NAME.hosts
scenario() {
	sc=$1
	shift
	: >"$T/$sc.hosts"
	for n in 0 1; do
		"$TRACEGEN" --out "$T/$sc-$n.db" --node "n$n" --ranks 4 --rank-base $((n * 4)) \
			--nranks 8 --steps 300 --job-id gate --seed 7 --start-ns 1700000000000000000 "$@" >>"$T/tracegen.log" 2>&1 ||
			fail "fq-tracegen $sc node $n failed"
		start_agent "$sc-n$n" "$T/$sc-$n.db" --no-trace
		echo "127.0.0.1:$PORT" >>"$T/$sc.hosts"
	done
}

# gate WANT-EXIT WANT-IN-LINE HOSTS [gate options]
gate() {
	want=$1 pat=$2 h=$3
	shift 3
	rc=0
	"$GATE" --hosts "$h" --job gate --since all "$@" >"$T/gate.out" 2>&1 || rc=$?
	cat "$T/gate.out"
	[ "$(wc -l <"$T/gate.out")" -eq 1 ] || fail "gate printed $(wc -l <"$T/gate.out") lines, want 1"
	[ "$rc" = "$want" ] || fail "gate exit $rc, want $want"
	grep -q -- "$pat" "$T/gate.out" || fail "gate line lacks '$pat'"
	ok "exit $want, line has '$pat'"
}

scenario clean
# (and for how long: the time the judged collectives span)
gate 0 "PASS no straggler ([0-9.]* s judged)" "$T/clean.hosts" --report "$T/clean.report"
[ -s "$T/clean.report" ] || fail "--report wrote nothing"

scenario slow --slow-rank 5 --slow-pct 20
gate 1 "FAIL straggler rank 5@" "$T/slow.hosts"
grep -q "rank [0-46-7]@" "$T/gate.out" && fail "ranks other than 5 named"

scenario hang --hang-rank 2 --hang-at 150
gate 5 "FAIL hung rank 2@" "$T/hang.hosts"

# one node of the clean job unreachable: no verdict
down=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
{ head -n 1 "$T/clean.hosts"; echo "127.0.0.1:$down"; } >"$T/down.hosts"
gate 3 "ERROR coverage short" "$T/down.hosts" -- --connect-timeout 2 --timeout 5

FLEETQ_CERT=$T/other/client.crt FLEETQ_KEY=$T/other/client.key \
	gate 4 "ERROR TLS" "$T/clean.hosts"

"$GATE" >/dev/null 2>&1 && fail "gate without --hosts succeeded"
[ $? = 2 ] || fail "gate without --hosts: want exit 2"
ok "usage error exit 2"
echo PASS
