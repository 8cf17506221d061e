#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq gate over four real agentd processes (--no-trace, mutual TLS) serving fq-tracegen
# traces of a 16-rank job, 4 ranks per node: a baseline from one clean job; another clean job
# (other seed) passes; rank 6 slowed by 20% fails naming busy_gap_us and rank 6; other node or
# rank counts are a shape error (2); junit output parses; the issue's --metric example works.
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1
NOW_S=$(date +%s)
START=$(((NOW_S - 15) * 1000000000))

# job TAG RANKS_PER_NODE ARGS...: writes $T/TAG-n{0..3}.db and serves them; sets HOSTS and
# writes $T/TAG.hosts (one host:port a line)
job() {
	tag=$1 per=$2
	shift 2
	HOSTS=
	: >"$T/$tag.hosts"
	for k in 0 1 2 3; do
		"$TRACEGEN" --out "$T/$tag-n$k.db" --node "node$k" --ranks "$per" \
			--rank-base $((per * k)) --nranks $((4 * per)) --steps 200 --start-ns $START \
			"$@" >"$T/gen.log" 2>&1 || fail "fq-tracegen $tag node$k"
		start_agent "$tag$k" "$T/$tag-n$k.db" ca
		HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
		echo "127.0.0.1:$PORT" >>"$T/$tag.hosts"
	done
}

job base 4 --seed 5
job clean 4 --seed 7
job slow 4 --seed 8 --slow-rank 6 --slow-pct 20
job wide 3 --seed 9

# 1. the baseline: every built-in metric, the shape, the SQL
fq --hosts "$T/base.hosts" gate --save "$T/b.json" --since 2m
expect_rc 0 "save"
expect_err "saved 7 metrics, run 1"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "fleetq-gate-baseline" and d["version"] == 1, d
assert d["shape"] == {"node_count": 4, "rank_count": 16}, d["shape"]
assert len(d["runs"]) == 1 and len(d["runs"][0]["nodes"]) == 4, d["runs"]
assert all(n["schema"] == 5 and n["agent"] for n in d["runs"][0]["nodes"]), d["runs"]
m = {x["name"]: x for x in d["metrics"]}
assert m["busy_gap_us"]["shape"] == "per rank" and len(m["busy_gap_us"]["series"]) == 16, m
assert m["busy_skew"]["shape"] == "scalar" and m["busy_skew"]["series"][0]["rank"] is None
assert m["tcp_retransmits"]["series"][0]["values"] == [0.0], m["tcp_retransmits"]
assert "FROM collectives" in m["coll_p99_us"]["sql"]
' "$T/b.json" || fail "baseline file: $(cat "$T/b.json")"

# 2. the same job against its own baseline, and another clean job: 0
fq --hosts "$T/base.hosts" gate --baseline "$T/b.json" --since 2m
expect_rc 0 "own baseline"
expect_err "fleetq gate: 7 metrics, 37 checks, none regressed"
fq --hosts "$T/clean.hosts" gate --baseline "$T/b.json" --since 2m
expect_rc 0 "clean job"
grep -q "^busy_gap_us  *6  .* ok$" "$T/out" || fail "report: $(cat "$T/out")"

# 3. rank 6 slowed by 20%: 1, busy_gap_us rank 6 named in the report, the summary and junit
fq --hosts "$T/slow.hosts" gate --baseline "$T/b.json" --since 2m
expect_rc 1 "slow rank"
grep -q "^busy_gap_us  *6  .*regressed$" "$T/out" || fail "slow report: $(cat "$T/out")"
[ "$(grep -c "^busy_gap_us .*regressed$" "$T/out")" = 1 ] || fail "only rank 6: $(cat "$T/out")"
expect_err "regressed: .*busy_gap_us rank 6 +[0-9.]*% (baseline"
fq --hosts "$T/slow.hosts" gate --baseline "$T/b.json" --since 2m --format junit
expect_rc 1 "slow rank, junit"
python3 -c '
import sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
cases = d.getElementsByTagName("testcase")
assert len(cases) == 37, len(cases)
fails = [c for c in cases if c.getElementsByTagName("failure")]
s = d.getElementsByTagName("testsuite")[0]
assert int(s.getAttribute("failures")) == len(fails) > 0, s.toxml()
six = [c for c in fails if c.getAttribute("classname") == "fleetq.gate.busy_gap_us"]
assert [c.getAttribute("name") for c in six] == ["rank 6"], [c.toxml() for c in six]
msg = six[0].getElementsByTagName("failure")[0].getAttribute("message")
assert msg.startswith("busy_gap_us rank 6 +") and "tolerance 10%" in msg, msg
' "$T/out" || fail "junit: $(cat "$T/out")"
# the same, csv: the numbers as numbers
fq --hosts "$T/slow.hosts" gate --baseline "$T/b.json" --since 2m --format csv
expect_rc 1 "slow rank, csv"
python3 -c '
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["metric"] == "busy_gap_us"]
bad = [r for r in rows if r["verdict"] == "regressed"]
assert len(bad) == 1 and bad[0]["rank"] == "6" and float(bad[0]["change_pct"]) > 10, bad
' "$T/out" || fail "csv: $(cat "$T/out")"
# a tolerance above the slowdown lets it pass
fq --hosts "$T/slow.hosts" gate --baseline "$T/b.json" --since 2m --builtin busy_gap_us \
	--tolerance 80%
expect_rc 0 "slow rank under --tolerance 80%"

# 4. shape: three of four nodes, or 12 ranks: 2, said plainly, nothing compared
fq -w "$(sed -n 1,3p "$T/clean.hosts" | paste -sd,)" gate --baseline "$T/b.json" --since 2m
expect_rc 2 "three nodes"
expect_err "shape mismatch: 3 nodes now, baseline '.*' has 4"
fq --hosts "$T/wide.hosts" gate --baseline "$T/b.json" --since 2m
expect_rc 2 "12 ranks"
expect_err "shape mismatch: 12 ranks now, baseline '.*' has 16"
[ ! -s "$T/out" ] || fail "shape mismatch printed a comparison: $(cat "$T/out")"

# 5. the issue's example, as written (percentile over all ranks' AllReduces)
M="allreduce_p99_us=SELECT percentile(dur_ns,99)/1e3 FROM collectives WHERE op LIKE '%AllReduce%'"
fq --hosts "$T/base.hosts" gate --save "$T/ar.json" --since 2m --metric "$M"
expect_rc 0 "save --metric"
fq --hosts "$T/clean.hosts" gate --baseline "$T/ar.json" --tolerance 10% --metric "$M" --since 2m
expect_rc 0 "--metric compare"
grep -q "^allreduce_p99_us  *-  " "$T/out" || fail "--metric report: $(cat "$T/out")"
# exact: the same percentile as one query over every node's rows
fq --hosts "$T/clean.hosts" --format csv --merge "SELECT percentile(d, 99)/1e3 FROM results" \
	"SELECT dur_ns AS d FROM collectives WHERE op LIKE '%AllReduce%'"
WANT=$(tail -n 1 "$T/out")
fq --hosts "$T/clean.hosts" gate --baseline "$T/ar.json" --metric "$M" --since 2m --format csv
python3 -c '
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
assert abs(float(r["now"]) - float(sys.argv[2])) < 1e-9 * float(sys.argv[2]), (r, sys.argv[2])
' "$T/out" "$WANT" || fail "metric is not the exact percentile ($WANT): $(cat "$T/out")"
# direction: a higher-is-better metric that fell fails
RATE="count(*) * 1e9 / (max(ts_ns) - min(ts_ns)) / 16"
fq --hosts "$T/base.hosts" gate --save "$T/hi.json" --since 2m \
	--metric "steps_per_s:higher=SELECT $RATE FROM collectives"
expect_rc 0 "save :higher"
fq --hosts "$T/slow.hosts" gate --baseline "$T/hi.json" --since 2m
expect_rc 1 "slow job makes fewer steps per second"
grep -q "^steps_per_s  *-  .*-[0-9.]*%  *regressed$" "$T/out" || fail "higher: $(cat "$T/out")"
# another SQL under a baseline's name is refused
fq --hosts "$T/clean.hosts" gate --baseline "$T/ar.json" --since 2m \
	--metric "allreduce_p99_us=SELECT p50(dur_ns)/1e3 FROM collectives"
expect_rc 2 "changed metric SQL"
expect_err "metric 'allreduce_p99_us' differs from the one in baseline"

# 6. --append: two runs, median and MAD over them; --samples slices one run
fq --hosts "$T/base.hosts" gate --save "$T/ap.json" --append --since 2m --samples 4 \
	--builtin busy_gap_us,sync_wait_share
expect_rc 0 "append 1"
fq --hosts "$T/clean.hosts" gate --save "$T/ap.json" --append --since 2m
expect_rc 0 "append 2"
expect_err "run 2 (4 samples)"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["runs"]) == 2 and d["samples"] == 4, d["runs"]
s = d["metrics"][0]["series"][0]
assert len(s["values"]) == 8, s
' "$T/ap.json" || fail "append: $(cat "$T/ap.json")"
fq --hosts "$T/clean.hosts" gate --baseline "$T/ap.json" --since 2m
expect_rc 0 "against two runs"
fq --hosts "$T/slow.hosts" gate --baseline "$T/ap.json" --since 2m
expect_rc 1 "slow against two runs"

# 7. a node down: not compared, coverage (3), never "none regressed"
fq -w "$(sed -n 1,3p "$T/clean.hosts" | paste -sd,),127.0.0.1:$(free_port)" gate \
	--baseline "$T/b.json" --since 2m
expect_rc 3 "a node down"
expect_err "not compared: 3 of 4 nodes answered fully"

# 8. usage
fq --hosts "$T/clean.hosts" gate --since 2m
expect_rc 2 "neither --save nor --baseline"
fq --hosts "$T/clean.hosts" gate --save "$T/x.json" --metric "bad name=SELECT 1"
expect_rc 2 "bad metric name"
fq --hosts "$T/clean.hosts" gate --save "$T/x.json" --metric "x=SELECT nope FROM collectives"
expect_rc 2 "bad metric SQL"
expect_err "metric 'x': no such column: nope"
fq --hosts "$T/clean.hosts" gate --baseline "$T/missing.json"
expect_rc 2 "no baseline file"
fq --hosts "$T/clean.hosts" stragglers --format junit
expect_rc 2 "junit is the gate's"
echo PASS
