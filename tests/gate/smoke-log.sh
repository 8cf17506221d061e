#!/bin/sh
# SPDX-License-Identifier: MIT
# examples/ci/gate-smoke.sh run as CI runs it, `> smoke.log 2>&1`: the log keeps the smoke
# job's own output, the gate's report and verdict; --junit comes from the fan-out that gave
# the exit status (no second fan-out). And fleetq gate's mistakes are said before any fan-out:
# --save with --baseline, a --save or --junit path that cannot be written.
. "$(dirname "$0")/../e2e/lib.sh"

[ -x "${EXAMPLES:-}/gate-smoke.sh" ] || fail "no examples/ci/gate-smoke.sh at '${EXAMPLES:-}'"
certs ca 127.0.0.1
end=$(date +%s)
: >"$T/hosts"
for k in 0 1; do
	# ends now: inside the window gate-smoke.sh asks for (the smoke job's run time + 60 s)
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 2 --rank-base $((2 * k)) --nranks 4 \
		--steps 200 --seed 5 --end "$end" >"$T/gen.log" 2>&1 || fail "fq-tracegen node$k"
	start_agent "n$k" "$T/n$k.db" ca
	echo "127.0.0.1:$PORT" >>"$T/hosts"
done
export FLEETQ FLEETQ_CA="$T/ca/ca.crt" FLEETQ_CERT="$T/ca/client.crt" FLEETQ_KEY="$T/ca/client.key"
GS=$EXAMPLES/gate-smoke.sh
queries() { cat "$T"/n?.log | grep -c ' query peer='; }

# 1. record; the log has the job's output and the gate's line
"$GS" --hosts "$T/hosts" --baseline "$T/b.json" --save -- sh -c 'echo smoke-says-hello-1' \
	>"$T/smoke.log" 2>&1
RC=$?
[ $RC = 0 ] || { cat "$T/smoke.log" >&2; fail "gate-smoke --save: exit $RC"; }
grep -q '^smoke-says-hello-1$' "$T/smoke.log" || fail "the smoke job's output is not in the log"
grep -q 'fleetq: gate: saved .* to ' "$T/smoke.log" || fail "no 'saved' line in the log"

# 2. compare, without and with --junit: the same number of queries reach the agents
q0=$(queries)
"$GS" --hosts "$T/hosts" --baseline "$T/b.json" -- sh -c 'echo smoke-says-hello-2' \
	>"$T/smoke.log" 2>&1
RC=$?
[ $RC = 0 ] || { cat "$T/smoke.log" >&2; fail "gate-smoke compare: exit $RC"; }
q1=$(queries)
"$GS" --hosts "$T/hosts" --baseline "$T/b.json" --junit "$T/junit.xml" -- \
	sh -c 'echo smoke-says-hello-3' >"$T/smoke.log" 2>&1
RC=$?
[ $RC = 0 ] || { cat "$T/smoke.log" >&2; fail "gate-smoke --junit: exit $RC"; }
q2=$(queries)
[ $((q2 - q1)) = $((q1 - q0)) ] ||
	fail "--junit made another fan-out: $((q1 - q0)) queries without, $((q2 - q1)) with"
grep -q '^smoke-says-hello-3$' "$T/smoke.log" || fail "the smoke job's output is not in the log"
grep -q '^metric ' "$T/smoke.log" || fail "the gate's report is not in the log"
grep -q 'fleetq gate: .* none regressed' "$T/smoke.log" || fail "no verdict in the log"
grep -q 'gate-smoke: PASS' "$T/smoke.log" || fail "no PASS in the log"
python3 -c '
import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
s = r.find("testsuite")
assert int(s.get("tests")) > 0 and s.get("failures") == "0", (s.get("tests"), s.get("failures"))
' "$T/junit.xml" || fail "junit: $(cat "$T/junit.xml")"

# 3. mistakes, said before any query reaches an agent
q0=$(queries)
fq --hosts "$T/hosts" gate --save "$T/x.json" --baseline "$T/b.json"
expect_rc 2 "--save with --baseline"
expect_err "--save and --baseline conflict"
fq --hosts "$T/hosts" gate --save "$T/no/such/dir/b.json"
expect_rc 2 "--save into a missing folder"
expect_err "cannot write baseline '$T/no/such/dir/b.json': folder '$T/no/such/dir': No such file or directory: check --save"
fq --hosts "$T/hosts" gate --save "$T"
expect_rc 2 "--save onto a folder"
expect_err "it is a folder"
fq --hosts "$T/hosts" gate --baseline "$T/b.json" --junit "$T/nope/j.xml"
expect_rc 2 "--junit into a missing folder"
expect_err "check --junit"
fq --hosts "$T/hosts" gate --save "$T/y.json" --junit "$T/j.xml"
expect_rc 2 "--junit with --save"
[ "$(queries)" = "$q0" ] || fail "a mistaken gate still fanned out"
echo ok
