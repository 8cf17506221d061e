#!/bin/sh
# SPDX-License-Identifier: MIT
# The trace keeps recording while hostile queries hit their budgets (issue 14):
# a tracing agentd on a live workload answers four clients' 320 MB rows, a
# 3M-row json_group_array and a prepare-time CTE bomb with memory or deadline
# errors, and the writer (which has no budget) goes on committing collectives
# meanwhile, with no write error.
. "$(dirname "$0")/lib.sh"
need_trace

trace_agent a budget "nccl,sync,sched,proc,$LIBS" --timeout-ms 2000
"$FQ_WORKLOAD" --ranks 4 --steps 200000 --step-us 500 --job-id budget-$$ >"$T/wl.log" 2>&1 &
WL=$!
PIDS="$PIDS $WL"

count() {
	"$FLEETQ" --insecure -w "127.0.0.1:$A" --format tsv "SELECT count(*) FROM collectives" \
		2>"$T/cerr" | tail -n 1 | cut -f2
}
i=0
until [ "$(count)" -gt 100 ] 2>/dev/null; do
	i=$((i + 1))
	[ $i -lt 200 ] || fail "no collectives recorded before the attacks"
	sleep 0.1
done

wide=$(python3 -c 'print("SELECT " + ", ".join("printf(\x27%%.*c\x27, 16000000, \x27a\x27) AS c%d" % i for i in range(20)))')
json="WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 3000000) SELECT length(json_group_array(printf('%.1000c', 'x'))) FROM s"
bomb=$(python3 -c '
p = ["c0(x) AS NOT MATERIALIZED (SELECT 1)"]
for i in range(1, 21):
    p.append("c%d(x) AS NOT MATERIALIZED (SELECT x FROM c%d UNION ALL SELECT x FROM c%d)" % (i, i - 1, i - 1))
print("WITH " + ", ".join(p) + " SELECT count(*) FROM c20")')

n=0
for sql in "$wide" "$json" "$bomb"; do
	n=$((n + 1))
	before=$(count)
	for k in 1 2 3 4; do
		"$FLEETQ" --insecure -w "127.0.0.1:$A" --format tsv "$sql" >"$T/o.$k" 2>"$T/e.$k" &
		eval "c$k=\$!"
	done
	for k in 1 2 3 4; do
		eval "wait \$c$k"
		rc=$?
		[ "$rc" = 3 ] || { cat "$T/e.$k" >&2; fail "attack $n client $k: exit $rc, want 3"; }
		grep -qE "memory budget|query memory|deadline" "$T/e.$k" ||
			{ cat "$T/e.$k" >&2; fail "attack $n client $k: no budget or deadline reason"; }
	done
	sleep 1 # a batch interval or more
	after=$(count)
	echo "attack $n: collectives $before -> $after; agent VmHWM $(vmhwm "$APID") kB"
	[ "$after" -gt "$before" ] || fail "attack $n: the trace stopped recording ($before -> $after)"
done
kill -0 "$APID" || fail "agentd died"
hwm=$(vmhwm "$APID")
[ "$hwm" -lt 262144 ] || fail "tracing agent peak RSS ${hwm} kB, over 256 MiB"
grep -iE "write (error|failed)|cannot commit" "$T/a.log" && fail "the writer failed under the attacks"
echo ok
