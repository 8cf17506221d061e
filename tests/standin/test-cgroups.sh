# SPDX-License-Identifier: MIT
# (d) --cgroups 2 puts ranks 0-1 and 2-3 in two cgroup v2 children, before they load libnccl;
# while they run, /proc shows the torchrun-like environment and the stand-in libnccl mapped.
. "$(dirname "$0")/lib.sh"

V2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$V2" ] || skip "no cgroup2 mount"
CG=fq-standin-test-$$
mkdir "$V2/$CG.probe" 2>/dev/null || skip "cannot create cgroups under $V2"
rmdir "$V2/$CG.probe"

# rank 3 hangs at seq 2, so every rank stays alive until this test stops the job
FQ_STANDIN_TIMEOUT_S=120 "$FQ_WORKLOAD" --ranks 4 --steps 50 --step-us 200 --hang-rank 3 \
	--hang-at 2 --cgroup-parent "$CG" --cgroups 2 --job-id 4242 --report "$T/r.tsv" \
	2>"$T/err" &
JOB=$!
trap 'kill $JOB 2>/dev/null || true; rm -rf "$T"' EXIT

i=0
while :; do
	up=0
	for r in 0 1 2 3; do
		grep -q '	ncclCommInitRank	' "$T/r.tsv.rank$r" 2>/dev/null && up=$((up + 1))
	done
	[ $up = 4 ] && break
	kill -0 $JOB 2>/dev/null || fail "job ended before all ranks were up"
	i=$((i + 1))
	[ $i -lt 600 ] || fail "ranks not up after 600 polls"
	sleep 0.1
done

for r in 0 1 2 3; do
	pid=$(awk -F'\t' '$4 == "cgroup" { print $2 }' "$T/r.tsv.rank$r")
	node=$((r / 2))
	grep -qx "0::.*/$CG/node$node" "/proc/$pid/cgroup" ||
		fail "rank $r (pid $pid) is in $(grep '^0::' "/proc/$pid/cgroup"), not $CG/node$node"
	tr '\0' '\n' <"/proc/$pid/environ" >"$T/env.$r"
	for kv in RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 GROUP_RANK=$node \
		SLURM_JOB_ID=4242 FQ_JOB_ID=4242; do
		grep -qx "$kv" "$T/env.$r" || fail "rank $r environ lacks $kv"
	done
	grep -q '^FQ_NCCL_UNIQUE_ID=[0-9a-f]\{256\}$' "$T/env.$r" ||
		fail "rank $r environ lacks the unique id"
	grep -q "$STANDIN_DIR/libnccl.so.2\$" "/proc/$pid/maps" ||
		fail "rank $r has no stand-in libnccl.so.2 mapped"
done

kill -TERM $JOB
if wait $JOB; then fail "stopped job exited 0"; fi
grep -q 'stopped by signal 15' "$T/err" || fail "job did not say it was stopped"
for r in 0 1 2 3; do
	awk -F'\t' -v r=$r '$1 == r && $4 == "cgroup"' "$T/r.tsv" |
		grep -q "/$CG/node$((r / 2))\$" || fail "report: rank $r cgroup is not $CG/node$((r / 2))"
done
[ ! -e "$V2/$CG" ] || fail "cgroup $V2/$CG was not removed"
check_shm_gone "$T/r.tsv"
echo "ok"
