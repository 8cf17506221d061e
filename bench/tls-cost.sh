#!/bin/sh
# SPDX-License-Identifier: MIT
# Connection cost: CPU per connection of agentd and per node of fleetq for `SELECT 1` over
# mutual TLS 1.3 (ECDSA P-256 certificates from certs/mkcerts), NODES local agents
# (127.0.0.1, one port each, --no-trace), RUNS fleetq runs over all of them:
#   full       full handshakes (--no-session-cache)
#   resumed    fleetq's session cache file from the run before (one warm-up run first)
#   tickets0   agents issue no ticket at all (FQ_TLS_TICKETS=0), full handshakes
# each under the agents' stateful tickets (the default) and stateless ones
# (FQ_TLS_TICKETS=stateless, what agentd did before). Baseline in the same run: full
# handshakes with stateless tickets. Agent CPU is the agents' utime+stime from /proc over
# the RUNS runs; fleetq per node is (CPU of a run over NODES - CPU of a run over one) /
# (NODES - 1), so that process start and exit drop out. Then bench_tls: the same
# handshakes in one process over memory BIOs, each side's CPU alone, and what a session
# costs to decode, whole and as fleetq's cache file keeps it.
#   bench/tls-cost.sh [BUILD_DIR] [NODES] [RUNS]
. "$(dirname "$0")/lib.sh"
nodes=${2:-16}
runs=${3:-40}
need "$AGENTD" "$FLEETQ" "$B/bench/bench_tls" /usr/bin/time
[ "$nodes" -ge 2 ] || die "NODES must be 2 or more"
tck=$(getconf CLK_TCK)

certs 127.0.0.1
sqlite3 -batch "$T/n.db" "CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1);" || die "sqlite3"

# agents POLICY: NODES agents with FQ_TLS_TICKETS=POLICY; sets hosts, first, apids.
# (start_agent sets i, name and db.)
agents() {
	hosts= apids=
	k=0
	while [ $k -lt "$nodes" ]; do
		FQ_TLS_TICKETS=$1 start_agent "$1-$k" "$T/n.db" --no-trace
		hosts="${hosts:+$hosts,}127.0.0.1:$PORT"
		apids="$apids $APID"
		k=$((k + 1))
	done
	first=${hosts%%,*}
}
stop_agents() {
	for p in $apids; do kill "$p" 2>/dev/null || true; done
	for p in $apids; do wait "$p" 2>/dev/null || true; done
}
# ticks: the agents' utime + stime, in clock ticks
ticks() {
	for p in $apids; do awk '{ print $14 + $15 }' "/proc/$p/stat"; done |
		awk '{ s += $1 } END { print s }'
}
# cpu HOSTLIST ARGS...: CPU seconds of RUNS fleetq runs (one shell loop, user + sys)
cpu() {
	h=$1
	shift
	/usr/bin/time -f '%U %S' -o "$T/time" sh -c 'h=$1; n=$2; shift 2; i=0
		while [ $i -lt "$n" ]; do
			"$@" -w "$h" "SELECT 1" >/dev/null || exit 1
			i=$((i + 1))
		done' sh "$h" "$runs" "$FLEETQ" --ca "$T/certs/ca.crt" --cert "$T/certs/client.crt" \
		--key "$T/certs/client.key" --format tsv -q "$@" || die "fleetq failed ($*)"
	awk '{ print $1 + $2 }' "$T/time"
}
# resumed POLICY: how many agent log lines of POLICY's agents say tls=resumed
resumed() { cat "$T/$1"-*.err | grep -c ' tls=resumed ' || true; }

# measure NAME POLICY [fleetq options]: agent ms per connection, fleetq ms per node
measure() {
	name=$1 pol=$2
	shift 2
	rm -rf "$XDG_CACHE_HOME"
	"$FLEETQ" --ca "$T/certs/ca.crt" --cert "$T/certs/client.crt" --key "$T/certs/client.key" \
		-q -w "$hosts" "$@" "SELECT 1" >/dev/null || die "warm-up run failed"
	r0=$(resumed "$pol")
	c0=$(ticks)
	all=$(cpu "$hosts" "$@")
	c1=$(ticks)
	r1=$(resumed "$pol")
	one=$(cpu "$first" "$@")
	a=$(calc "($c1 - $c0) * 1000 / $tck / ($nodes * $runs)")
	f=$(calc "($all - $one) * 1000 / (($nodes - 1) * $runs)")
	eval "agent_$name=\$a fleetq_$name=\$f resumed_$name=\$((r1 - r0))"
}

for pol in stateless stateful 0; do
	agents $pol
	case $pol in
	0)
		measure tickets0 $pol --no-session-cache
		;;
	*)
		measure "full_$pol" $pol --no-session-cache
		measure "resumed_$pol" $pol
		;;
	esac
	stop_agents
done

conns=$((nodes * runs))
for m in full_stateless resumed_stateless full_stateful resumed_stateful; do
	eval "r=\$resumed_$m"
	case $m in
	full*) [ "$r" -eq 0 ] || die "$m: $r resumed handshakes, want none" ;;
	resumed*) [ "$r" -eq "$conns" ] || die "$m: $r of $conns handshakes resumed" ;;
	esac
done
[ "$resumed_tickets0" -eq 0 ] || die "tickets0: $resumed_tickets0 resumed handshakes"

ba=$agent_full_stateless
bf=$fleetq_full_stateless
echo "tls-cost: $nodes agents on 127.0.0.1, $runs fleetq runs of SELECT 1 each, mTLS 1.3 P-256"
echo "  CPU ms        agent/conn  ratio  fleetq/node  ratio"
for m in full_stateless resumed_stateless full_stateful resumed_stateful tickets0; do
	eval "a=\$agent_$m f=\$fleetq_$m"
	printf '  %-18s %7s  %5s  %11s  %5s\n' "$m" "$(fmt "$a" 3)" "$(fmt "$(calc "$a / $ba")" 2)" \
		"$(fmt "$f" 3)" "$(fmt "$(calc "$f / $bf")" 2)"
done
for m in resumed_stateless full_stateful resumed_stateful tickets0; do
	eval "a=\$agent_$m f=\$fleetq_$m"
	result "tls_agent_ms_per_conn_$m" "$(fmt "$a" 3)" ms "$(fmt "$ba" 3)" - -
	result "tls_fleetq_ms_per_node_$m" "$(fmt "$f" 3)" ms "$(fmt "$bf" 3)" - -
done
"$B/bench/bench_tls" "$T/certs" 127.0.0.1 500 || die "bench_tls failed"
