#!/bin/bash
# SPDX-License-Identifier: MIT
# The real path, through examples/ci/gate-smoke.sh: four agentd processes with the real eBPF
# tracer, each scoped with --cgroup to one "node" cgroup of an 8-rank stand-in job, over
# mutual TLS. A clean job is recorded as the baseline (gate-smoke.sh --save) and passes
# against it; a job whose rank 5 is 20% slower fails (exit 1) naming busy_gap_us rank 5,
# with a junit file that names it too.
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/../standin/live-agents.sh"
[ -x "${EXAMPLES:-}/gate-smoke.sh" ] || fail "no examples/ci/gate-smoke.sh at '${EXAMPLES:-}'"
live_agents fqgate
echo "$HOSTS" | tr ',' '\n' >"$T/hosts"

STEPS=100
# The smoke job: the stand-in over the four cgroups, then a wait until the agents' batched
# writes hold all its collectives (a real smoke job's wrapper would do the same, or sleep).
cat >"$T/smoke.sh" <<SMOKE
#!/bin/sh
job=\$1
shift
"$STANDIN/fq-workload" --ranks 8 --steps $STEPS --step-us 5000 --job-id "\$job" \\
	--cgroup-parent "$CG" --cgroups 4 --report "$T/\$job.tsv" "\$@" >"$T/\$job.log" 2>&1 || exit 9
i=0
while [ \$i -lt 100 ]; do
	n=\$("$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" \\
		--hosts "$T/hosts" --format csv --merge "SELECT sum(n) FROM results" \\
		"SELECT count(*) AS n FROM collectives WHERE pid IN
		 (SELECT pid FROM processes WHERE job_id = '\$job')" 2>/dev/null | tail -n 1)
	[ "\$n" = $((8 * STEPS)) ] && exit 0
	i=\$((i + 1))
	sleep 0.1
done
echo "smoke: \$n collectives traced, want $((8 * STEPS))" >&2
exit 8
SMOKE
chmod +x "$T/smoke.sh"

export FLEETQ FLEETQ_CA=$T/ca/ca.crt FLEETQ_CERT=$T/ca/client.crt FLEETQ_KEY=$T/ca/client.key
export GATE_OPTS="--builtin busy_gap_us,sync_wait_share,tcp_retransmits"
GS=$EXAMPLES/gate-smoke.sh

# A warm-up job, not gated: the agents' probes settle before the jobs that count.
"$T/smoke.sh" warm-$$ >/dev/null 2>&1 || echo "warm-up job not fully traced" >&2

# 1. record the clean job; it passes against its own baseline
"$GS" --hosts "$T/hosts" --baseline "$T/b.json" --job clean-$$ --save -- \
	"$T/smoke.sh" clean-$$ >"$T/out" 2>"$T/err"
RC=$?
expect_rc 0 "gate-smoke --save"
expect_err "saved 3 metrics, run 1 (1 sample), 4 nodes, 8 ranks"
fq --hosts "$T/hosts" gate --baseline "$T/b.json" --job clean-$$ --since 5m
expect_rc 0 "clean job against its own baseline"
expect_err "none regressed"

# 2. rank 5 20% slower: exit 1 from the pipeline step, busy_gap_us rank 5 named
"$GS" --hosts "$T/hosts" --baseline "$T/b.json" --job slow-$$ --junit "$T/junit.xml" -- \
	"$T/smoke.sh" slow-$$ --slow-rank 5 --slow-pct 20 >"$T/out" 2>"$T/err"
RC=$?
cat "$T/out"
expect_rc 1 "gate-smoke, slow rank 5"
grep -q "^busy_gap_us  *5  .*regressed$" "$T/out" || fail "want busy_gap_us rank 5: $(cat "$T/out")"
expect_err "gate-smoke: FAIL a metric regressed"
python3 -c '
import sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
f = [c for c in d.getElementsByTagName("testcase") if c.getElementsByTagName("failure")]
assert any(c.getAttribute("classname") == "fleetq.gate.busy_gap_us" and
           c.getAttribute("name") == "rank 5" for c in f), [c.toxml() for c in f]
' "$T/junit.xml" || fail "junit: $(cat "$T/junit.xml")"
# 3. a smoke job that fails is the answer, no gate
"$GS" --hosts "$T/hosts" --baseline "$T/b.json" -- false >"$T/out" 2>"$T/err"
RC=$?
expect_rc 1 "failing smoke job"
expect_err "smoke job exited 1 (no gate run)"
echo "PASS after ${SECONDS}s"
