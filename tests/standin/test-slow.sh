# SPDX-License-Identifier: MIT
# (b) the planted slow rank waits LEAST in cudaStreamSynchronize and its peers wait more than
# in a clean run (DESIGN.md §2). Orderings only: no absolute times.
. "$(dirname "$0")/lib.sh"

N=4 S=30 SLOW=2
"$FQ_WORKLOAD" --ranks $N --steps $S --report "$T/clean.tsv" 2>"$T/err" ||
	fail "clean run exited $?"
"$FQ_WORKLOAD" --ranks $N --steps $S --slow-rank $SLOW --slow-pct 900 \
	--report "$T/slow.tsv" 2>"$T/err" || fail "slow run exited $?"

clean_max=0
for r in 0 1 2 3; do
	w=$(sync_wait "$T/clean.tsv" $r)
	if [ "$w" -gt "$clean_max" ]; then clean_max=$w; fi
done
slow_wait=$(sync_wait "$T/slow.tsv" $SLOW)
for r in 0 1 2 3; do
	[ $r = $SLOW ] && continue
	w=$(sync_wait "$T/slow.tsv" $r)
	[ "$slow_wait" -lt "$w" ] ||
		fail "slow rank $SLOW waited ${slow_wait} ns, not less than rank $r's $w ns"
	[ "$w" -gt "$clean_max" ] ||
		fail "rank $r waited $w ns with a straggler, not more than the clean run's max $clean_max ns"
done
echo "ok: slow rank waited $slow_wait ns; peers more than the clean max $clean_max ns"
