#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq stragglers --watch over real agents serving fq-tracegen jobs: a clean job prints one
# line and then nothing; when the hosts file (read again every period) turns to agents whose
# job has a slow rank, --exit-on-straggler exits 1 naming it within a few periods; an agent
# that stops is one stamped line per change, the verdict that goes with it saying for how
# many periods it held and since when; Ctrl-C exits 130.
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1
START=$((($(date +%s) - 15) * 1000000000))
STAMP='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z'

# job TAG ARGS...: serves $T/TAG-n{0..3}.db; the hosts, one a line, in $T/TAG.hosts
job() {
	tag=$1
	shift
	: >"$T/$tag.hosts"
	for k in 0 1 2 3; do
		"$TRACEGEN" --out "$T/$tag-n$k.db" --node "node$k" --ranks 4 --rank-base $((4 * k)) \
			--nranks 16 --steps 200 --start-ns $START "$@" >"$T/gen.log" 2>&1 ||
			fail "fq-tracegen $tag node$k"
		start_agent "$tag$k" "$T/$tag-n$k.db" ca
		echo "$PID" >"$T/$tag$k.pid"
		echo "127.0.0.1:$PORT" >>"$T/$tag.hosts"
	done
}
job clean --seed 5
job slow --seed 6 --slow-rank 6 --slow-pct 20

# watch ARGS...: fleetq stragglers --watch in the background, SIGINT as a terminal has it;
# output in $T/wout, $T/werr; sets WPID
watch() {
	env --default-signal=INT "$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" \
		--key "$T/ca/client.key" --hosts "$T/hosts" stragglers --since 2m "$@" \
		>"$T/wout" 2>"$T/werr" &
	WPID=$!
	PIDS="$PIDS $WPID"
}

# until_line RE SECONDS: waits for a line of $T/wout matching RE
until_line() {
	i=0
	until grep -Eq -- "$1" "$T/wout"; do
		i=$((i + 1))
		[ $i -le $(($2 * 10)) ] || fail "no line '$1' within $2 s: $(cat "$T/wout" "$T/werr")"
		sleep 0.1
	done
}

# wait_exit SECONDS: waits for the watcher to end; RC its status
wait_exit() {
	i=0
	while kill -0 $WPID 2>/dev/null && [ $i -lt $(($1 * 10)) ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -0 $WPID 2>/dev/null && { kill -KILL $WPID; fail "watch still runs after $1 s"; }
	wait $WPID
	RC=$?
}

# 1. clean, then the slow job: exit 1 naming rank 6 on the slow job's node1
cp "$T/clean.hosts" "$T/hosts"
watch --watch 1s --exit-on-straggler
until_line "^$STAMP watching 16 ranks in 1 communicator on 4 nodes, every 1s$" 10
sleep 3 # three periods of a clean job: nothing more to say
[ "$(wc -l <"$T/wout")" = 1 ] || fail "a clean job printed more than its first line: $(cat "$T/wout")"
kill -0 $WPID 2>/dev/null || fail "watch ended on a clean job: $(cat "$T/wout" "$T/werr")"
cp "$T/slow.hosts" "$T/hosts.new" && mv "$T/hosts.new" "$T/hosts"
wait_exit 15
cp "$T/wout" "$T/wout1"
[ "$RC" = 1 ] || fail "exit $RC, want 1 at the straggler: $(cat "$T/wout" "$T/werr")"
SLOW1=$(sed -n 2p "$T/slow.hosts")
grep -Eq "^$STAMP straggler: rank 6 on $SLOW1, communicator [0-9a-f]{16} \\(signals [a-z,]*late" \
	"$T/wout" || fail "no straggler line for rank 6 on $SLOW1: $(cat "$T/wout")"
grep -Eq "^$STAMP left: 16 ranks, among them rank" "$T/wout" || fail "no 'left': $(cat "$T/wout")"
grep -Eq "^$STAMP joined: 16 ranks, among them rank" "$T/wout" || fail "no 'joined'"
tail -n 1 "$T/wout" | grep -Eq "^$STAMP exit 1: a straggler \\(--exit-on-straggler\\)$" ||
	fail "last line: $(tail -n 1 "$T/wout")"
grep -Evq "^$STAMP " "$T/wout" && fail "a line without its time: $(grep -Ev "^$STAMP " "$T/wout")"
[ -s "$T/werr" ] && fail "stderr while watching: $(cat "$T/werr")"

# 2. without --exit-on-straggler the straggler is said once; an agent that stops is a node
# line and its ranks leaving; the verdict going is a line; Ctrl-C ends it with 130
cp "$T/slow.hosts" "$T/hosts"
watch --watch 500ms
until_line "^$STAMP straggler: rank 6 on $SLOW1" 10
# three more periods, counted by the queries node1 answered (a period takes longer than its
# 500 ms on a loaded machine: a fixed sleep would count fewer)
q0=$(grep -c 'stragglers.node.sql' "$T/slow1.log")
i=0
until [ "$(grep -c 'stragglers.node.sql' "$T/slow1.log")" -ge $((q0 + 3)) ]; do
	i=$((i + 1))
	[ $i -le 200 ] || fail "node1 answered no 3 more periods within 20 s"
	sleep 0.1
done
[ "$(grep -c "straggler: rank 6" "$T/wout")" = 1 ] || fail "said twice: $(cat "$T/wout")"
# node1 of the slow job stops: one line for it, one for each of its 4 ranks, one for the
# verdict that went with them
kill "$(cat "$T/slow1.pid")"
until_line "^$STAMP no longer straggler: rank 6 on $SLOW1, communicator" 10
# named at one period and the three or more after it, from when it was first
GONE=$(grep -E "^$STAMP no longer straggler: rank 6" "$T/wout")
FIRST=$(grep -E "^$STAMP straggler: rank 6" "$T/wout" | cut -d' ' -f1)
echo "$GONE" | grep -Eq "\(signals [a-z,]*\); named for [0-9]+ periods, from $FIRST\$" ||
	fail "no periods and start (first said at $FIRST): $GONE"
HELD=$(echo "$GONE" | sed -E 's/.*; named for ([0-9]+) periods.*/\1/')
[ "$HELD" -ge 3 ] || fail "named for $HELD periods, want 3 or more: $GONE"
grep -Eq "^$STAMP node $SLOW1: unreachable" "$T/wout" || fail "no node line: $(cat "$T/wout")"
[ "$(grep -Ec "^$STAMP left: rank (4|5|6|7) on $SLOW1, communicator" "$T/wout")" = 4 ] ||
	fail "ranks 4-7 did not leave: $(cat "$T/wout")"
N=$(wc -l <"$T/wout")
sleep 1.5
[ "$(wc -l <"$T/wout")" = "$N" ] || fail "repeated itself: $(cat "$T/wout")"
kill -INT $WPID
wait_exit 5
[ "$RC" = 130 ] || fail "Ctrl-C: exit $RC, want 130: $(cat "$T/wout" "$T/werr")"
tail -n 1 "$T/wout" | grep -Eq "^$STAMP interrupted$" || fail "Ctrl-C: $(tail -n 2 "$T/wout")"

# 3. bad input: one line, exit 2
for a in "--watch 0" "--watch soon" "--watch 50ms" "--exit-on-straggler" \
	"--watch 1s --format json"; do
	# shellcheck disable=SC2086
	fq --hosts "$T/hosts" stragglers $a
	expect_rc 2 "stragglers $a"
	[ "$(wc -l <"$T/err")" = 1 ] || fail "stragglers $a: $(cat "$T/err")"
done
expect_err "drop --format"
fq --hosts "$T/hosts" netcheck --watch 1s
expect_rc 2 "netcheck --watch"
expect_err "option '--watch' does not apply to 'netcheck'"

echo PASS
