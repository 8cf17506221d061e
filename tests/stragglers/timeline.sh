#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq timeline over four real agentd processes serving fq-tracegen traces of one 16-rank
# job (4 ranks per node): the file parses as a Chrome/Perfetto trace, every rank has its
# track, and the planted slow rank's collective spans are late by the planted amount (its
# peers' are not); a slow GPU shows in the kernel spans alone; and the merge corrects each
# node's clock by its offset (an-run, which sets the offsets fleetq would measure).
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1
NOW_S=$(date +%s)
STEPS=200
START=$(((NOW_S - 15) * 1000000000))
STEP_NS=50000000

# job TAG ARGS...: writes $T/TAG-n{0..3}.db and serves them; sets HOSTS
job() {
	tag=$1
	shift
	HOSTS=
	for k in 0 1 2 3; do
		"$TRACEGEN" --out "$T/$tag-n$k.db" --node "node$k" --ranks 4 --rank-base $((4 * k)) \
			--nranks 16 --steps $STEPS --start-ns $START --step-ns $STEP_NS "$@" \
			>"$T/gen.log" 2>&1 || fail "fq-tracegen $tag node$k"
		# the four agents serve from this one host, as agentd records it (its boot id):
		# one clock, whose offset is the best-sampled node's. (Apart, each node's measured
		# offset strays by up to half a ping's round trip: 2 ms beside another test on 2
		# cores, past the 1.5 ms the checks below allow a rank that is not late)
		sqlite3 "$T/$tag-n$k.db" "INSERT OR REPLACE INTO meta (key, value)
			VALUES ('host_id', 'timeline-test-host')" || fail "host_id $tag node$k"
		start_agent "$tag$k" "$T/$tag-n$k.db" ca
		HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
	done
}

# check FILE CAT SLOW_RANK LATE_MS: the events of category CAT (collective or gpu) of rank
# SLOW_RANK start LATE_MS after the first rank's of their seq (median, within 15% + 0.5 ms),
# every other rank's within 1.5 ms; also the trace's shape
check() {
	python3 - "$@" <<'PY' || fail "timeline $2: $(head -c 600 "$1")"
import json, re, statistics, sys
path, cat, slow, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
d = json.load(open(path))
ev = d["traceEvents"]
assert d["otherData"]["generator"] == "fleetq timeline", d["otherData"]
names = {e["pid"]: e["args"]["name"] for e in ev
         if e["ph"] == "M" and e["name"] == "process_name"}
ranks = {p: int(n.split()[1]) for p, n in names.items()}
assert sorted(ranks.values()) == list(range(16)), names
lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev
         if e["ph"] == "M" and e["name"] == "thread_name"}
# per rank: collectives, GPU, and per thread its sync waits and off-CPU (tracegen: one)
kinds = {re.sub(r" \(tid [0-9]+\)$", "", n) for n in lanes.values()}
assert kinds == {"collectives", "sync waits", "off-CPU", "GPU"}, lanes
assert len(lanes) == 16 * 4, lanes
cats = {}
for e in ev:
    if e["ph"] == "X":
        assert e["dur"] >= 0 and isinstance(e["ts"], (int, float)), e
        assert (e["pid"], e["tid"]) in lanes, e
        cats[e["cat"]] = cats.get(e["cat"], 0) + 1
# a lane's slices nest or follow one another, as the viewers need (none straddles another)
by_lane = {}
for e in ev:
    if e["ph"] == "X":
        by_lane.setdefault((e["pid"], e["tid"]), []).append((e["ts"], -e["dur"]))
for lane, xs in by_lane.items():
    open_ends = []
    for ts, mdur in sorted(xs):
        while open_ends and open_ends[-1] <= ts:
            open_ends.pop()
        assert not open_ends or ts - mdur <= open_ends[-1] + 0.001, (lane, ts, -mdur, open_ends)
        open_ends.append(ts - mdur)
for c in ("collective", "sync", "offcpu"):
    assert cats.get(c, 0) > 0, cats
# each collective on its rank's collectives lane, 200 seqs x 16 ranks
assert cats["collective"] == 16 * 200, cats
spans = [e for e in ev if e.get("cat") == cat]
assert spans, cats
first = {}
for e in spans:
    k = e["args"]["seq"]
    first[k] = min(first.get(k, float("inf")), e["ts"])
late = {}
for e in spans:
    late.setdefault(ranks[e["pid"]], []).append(e["ts"] - first[e["args"]["seq"]])
med = {r: statistics.median(v) / 1000 for r, v in late.items()}
print(cat, {r: round(m, 2) for r, m in sorted(med.items())})
tol = 0.15 * want + 0.5
if want > 0:
    assert abs(med[slow] - want) <= tol, (slow, med[slow], want)
for r, m in med.items():
    if r != slow or want == 0:
        assert m < 1.5, (r, m)
PY
}

# 1. rank 6 (node1) 20% of a step slower on-CPU: its enqueues 10 ms late, and so its kernels
job slow --seed 6 --slow-rank 6 --slow-pct 20 --kernels
# two TCP retransmits on node1: one of rank 6's process (pid 4032), one of no process
sqlite3 "$T/slow-n1.db" "INSERT INTO tcp_retransmits (ts_ns, pid, saddr, sport, daddr, dport,
	state) SELECT max(ts_ns) - 1000000, 4032, '10.0.0.2', 40000, '10.0.0.3', 5201,
	'ESTABLISHED' FROM collectives UNION ALL SELECT max(ts_ns) - 2000000, NULL, '10.0.0.2',
	22, '10.0.0.9', 50000, 'ESTABLISHED' FROM collectives" || fail "cannot add retransmits"
fq -w "$HOSTS" timeline --since 2m -o "$T/slow.json"
expect_rc 0 "timeline, slow rank"
expect_err "fleetq: timeline: [0-9]* events of 16 ranks, last 2m, newest 1000 seqs, in $T/slow.json"
[ -s "$T/out" ] && fail "-o FILE printed on stdout: $(head -c 200 "$T/out")"
check "$T/slow.json" collective 6 10
check "$T/slow.json" gpu 6 10
python3 - "$T/slow.json" <<'PY' || fail "retransmits: $(grep -i retransmit "$T/slow.json")"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
rt = [(names[e["pid"]].split()[1], e["args"]["host_wide"], e["args"]["flow"], e["tid"], e["s"])
      for e in ev if e["ph"] == "i"]
own = [r for r in rt if not r[1]]
assert own == [("6", 0, "10.0.0.2:40000>10.0.0.3:5201 ESTABLISHED", 1, "t")], rt
assert sorted(r[0] for r in rt if r[1]) == ["4", "5", "6", "7"], rt
PY

# stdout without -o, and --max-seqs bounds it: 50 seqs a communicator
fq -w "$HOSTS" timeline --since 2m --max-seqs 50
expect_rc 0 "timeline on stdout"
python3 -c '
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
seqs = {e["args"]["seq"] for e in ev if e.get("cat") == "collective"}
assert len(seqs) == 50 and max(seqs) == 199, sorted(seqs)
assert all(e["args"]["late_us"] >= 0 for e in ev if e.get("cat") == "collective")
' "$T/out" || fail "timeline --max-seqs 50: $(head -c 300 "$T/out")"

# 2. rank 9's GPU 10% of a step slow: its kernels start 5 ms late; its enqueues are on time
job gpu --seed 7 --gpu-slow-rank 9 --gpu-slow-pct 10
fq -w "$HOSTS" timeline --since 2m -o "$T/gpu.json"
expect_rc 0 "timeline, slow GPU"
check "$T/gpu.json" gpu 9 5
check "$T/gpu.json" collective 9 0

# 3. bad input: a path that cannot be written fails before the fan-out; no window: 3
fq -w "$HOSTS" timeline -o "$T/no/such/dir/x.json"
expect_rc 2 "unwritable -o"
expect_err "fleetq: cannot open '$T/no/such/dir/x.json'"
fq -w "$HOSTS" timeline --since 1s -o "$T/empty.json"
expect_rc 3 "old trace"
expect_err "no collectives in the window"
python3 -c 'import json, sys
assert not [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] != "M"]' \
	"$T/empty.json" || fail "empty timeline: $(cat "$T/empty.json")"
fq -w "$HOSTS" timeline --format csv
expect_rc 2 "timeline --format"
expect_err "drop --format"
fq timeline --show-sql --since 5m --max-seqs 20
expect_rc 0 "timeline --show-sql"
grep -q "^-- node SQL, run on every node: .*timeline.node.sql" "$T/out" &&
	grep -q "^--   :max_seqs = 20" "$T/out" && grep -q "^-- merge SQL.*timeline.merge.sql" "$T/out" ||
	fail "timeline --show-sql: $(head -n 20 "$T/out")"
fq -w "$HOSTS" stragglers -o x
expect_rc 2 "-o on stragglers"
expect_err "option '--output' does not apply to 'stragglers'"

# 4. clock correction: node2's clock runs 30 ms ahead (its whole trace later by 30 ms); with
# the offset fleetq would measure, its ranks are on time; without it, 30 ms late
if [ -n "${AN_RUN:-}" ]; then
	"$TRACEGEN" --out "$T/ck-n2.db" --node node2 --ranks 4 --rank-base 8 --nranks 16 \
		--steps $STEPS --start-ns $((START + 30000000)) --step-ns $STEP_NS --seed 6 \
		--slow-rank 6 --slow-pct 20 --kernels >"$T/gen.log" 2>&1 || fail "fq-tracegen ck"
	# an-run prints the merge's rows tab-separated; rebuild the events for check
	for off in 30000000 0; do
		"$AN_RUN" "$FLEETQ_SQL_DIR/timeline.node.sql" "$FLEETQ_SQL_DIR/timeline.merge.sql" -g \
			"$T/slow-n0.db@0" "$T/slow-n1.db@0" "$T/ck-n2.db@$off" "$T/slow-n3.db@0" \
			>"$T/ck-$off.tsv" 2>"$T/an-run.log" || fail "an-run timeline, offset $off"
		python3 - "$T/ck-$off.tsv" "$T/ck-$off.json" <<'PY' || fail "an-run output"
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
cols, ev = rows[0], []
for r in rows[1:]:
    e = {}
    for c, v in zip(cols, r):
        if v in ("", "NULL"):
            continue
        e[c] = json.loads(v) if c in ("args", "pid", "tid", "ts", "dur") else v
    ev.append(e)
json.dump({"traceEvents": ev, "otherData": {"generator": "fleetq timeline"}}, open(sys.argv[2], "w"))
PY
	done
	check "$T/ck-30000000.json" collective 6 10
	# without the correction rank 6 is still 10 ms late, node2's ranks 8-11 are 30 ms late
	python3 - "$T/ck-0.json" <<'PY' || fail "uncorrected clock not late"
import json, statistics, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["pid"]: int(e["args"]["name"].split()[1]) for e in ev
         if e["ph"] == "M" and e["name"] == "process_name"}
late = {}
for e in ev:
    if e.get("cat") == "collective":
        late.setdefault(names[e["pid"]], []).append(e["args"]["late_us"])
med = {r: statistics.median(v) / 1000 for r, v in late.items()}
assert all(abs(med[r] - 30) < 3 for r in (8, 9, 10, 11)), med
PY
fi

echo PASS
