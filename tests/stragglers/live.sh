#!/bin/bash
# SPDX-License-Identifier: MIT
# The real path: four agentd processes with the real eBPF tracer, each scoped with --cgroup to
# one "node" cgroup of an 8-rank stand-in job (fq-workload --cgroups 4), served over mutual
# TLS. A clean job: fleetq stragglers exits 0. A job whose rank 5 is 30% slower: exit 1, rank 5
# named first, on the agent of its cgroup. Both jobs share the agents: --job picks each.
. "$(dirname "$0")/../e2e/lib.sh"
skip() { echo "SKIP: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to load BPF programs"
[ -r /sys/kernel/btf/vmlinux ] || skip "no kernel BTF at /sys/kernel/btf/vmlinux"
[ -x "${STANDIN:-}/fq-workload" ] || fail "no stand-in workload at '${STANDIN:-}' (target standin)"
V2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$V2" ] || skip "no cgroup v2 mount"
CG=$V2/fqstrag-$$
mkdir "$CG" 2>/dev/null || skip "cannot create a cgroup under $V2"
for k in 0 1 2 3; do mkdir "$CG/node$k" || fail "cannot create $CG/node$k"; done
cleanup_cg() {
	T0=$SECONDS
	cleanup
	echo "cleanup took $((SECONDS - T0))s" >&2
	for k in 0 1 2 3; do rmdir "$CG/node$k" 2>/dev/null; done
	rmdir "$CG" 2>/dev/null
}
trap cleanup_cg EXIT

# The stand-in ranks call NCCL microseconds after exec: attach its libraries at start.
LIBS="lib:$STANDIN/libnccl.so.2,lib:$STANDIN/libcudart.so.13,lib:$STANDIN/libcuda.so.1"
certs ca 127.0.0.1
# Four agents load and attach at once (BPF loading takes a while each).
for k in 0 1 2 3; do
	rm -f "$T/node$k.port"
	"$AGENTD" --listen 127.0.0.1:0 --db "$T/node$k.db" --node "node$k" \
		--ca "$T/ca/ca.crt" --cert "$T/ca/127.0.0.1.crt" --key "$T/ca/127.0.0.1.key" \
		--cgroup "$CG/node$k" --probes "nccl,sync,sched,proc,$LIBS" --ib-interval 0 \
		--port-file "$T/node$k.port" --log "$T/node$k.log" &
	APID[$k]=$!
	PIDS="$PIDS $!"
done
HOSTS=
for k in 0 1 2 3; do
	i=0
	while [ ! -s "$T/node$k.port" ]; do
		kill -0 "${APID[$k]}" 2>/dev/null || fail "agentd node$k exited at start"
		i=$((i + 1))
		[ $i -lt 600 ] || fail "agentd node$k wrote no port file"
		sleep 0.05
	done
	PORT[$k]=$(cat "$T/node$k.port")
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:${PORT[$k]}"
done
echo "agents up after ${SECONDS}s"

STEPS=100
# run JOB ARGS...: the 8-rank job over the 4 cgroups, then waits until all its collectives
# are in the four trace files (the store commits in batches)
run() {
	job=$1
	shift
	"$STANDIN/fq-workload" --ranks 8 --steps $STEPS --step-us 5000 --job-id "$job" \
		--cgroup-parent "$CG" --cgroups 4 --report "$T/$job.tsv" "$@" >"$T/$job.log" 2>&1 ||
		fail "fq-workload $job: $(tail -n 3 "$T/$job.log")"
	i=0
	while :; do
		fq -w "$HOSTS" --format csv --merge "SELECT sum(n) FROM results" \
			"SELECT count(*) AS n FROM collectives WHERE pid IN
			 (SELECT pid FROM processes WHERE job_id = '$job')"
		[ "$RC" = 0 ] && [ "$(tail -n 1 "$T/out")" = $((8 * STEPS)) ] && break
		i=$((i + 1))
		[ $i -lt 100 ] || fail "$job: $(tail -n 1 "$T/out") collectives traced, want $((8 * STEPS))"
		sleep 0.1
	done
}

run clean-$$
echo "clean job traced after ${SECONDS}s"
fq -w "$HOSTS" stragglers --since 5m --job clean-$$
expect_rc 0 "live clean job"
grep -q "^no straggler: 8 ranks in 1 communicator" "$T/out" || fail "clean: $(cat "$T/out")"

run slow-$$ --slow-rank 5 --slow-pct 30
echo "slow job traced after ${SECONDS}s"
fq -w "$HOSTS" stragglers --since 5m --job slow-$$
cat "$T/out"
expect_rc 1 "live slow rank 5"
# rank 5's cgroup, from the workload's own report, names the agent that must be blamed
CGOF5=$(awk -F'\t' '$1 == 5 && $4 == "cgroup" { print $8 }' "$T/slow-$$.tsv")
K=${CGOF5##*/node}
[ -n "$K" ] && [ -n "${PORT[$K]:-}" ] || fail "no cgroup for rank 5 in the report ($CGOF5)"
head -n 1 "$T/out" | grep -qx "straggler: rank 5 on 127.0.0.1:${PORT[$K]}" ||
	fail "want rank 5 on node$K (127.0.0.1:${PORT[$K]}) first: $(cat "$T/out")"
grep -c "^straggler:" "$T/out" | grep -qx 1 || fail "more than one straggler: $(cat "$T/out")"

# ping: four tracing agents, small offsets, no ring drops
fq -w "$HOSTS" ping --format csv
expect_rc 0 "live ping"
python3 -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), rows
assert all(abs(int(r["offset_us"])) < 50000 and r["drops"] == "0" for r in rows), rows
' "$T/out" || fail "ping: $(cat "$T/out")"
echo "PASS after ${SECONDS}s"
