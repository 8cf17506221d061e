#!/bin/sh
# SPDX-License-Identifier: MIT
# Fan-out: one scan-heavy aggregate over the collectives table of NODES (default 16) local
# agents (127.0.0.1, one port each, --no-trace, real mutual TLS), each serving its own
# fq-tracegen trace of ~1M collectives (8 ranks x 125000 steps; cached by parameters).
# Baseline in the same run: the sqlite3 CLI running the same query on the NODES files one
# after another. The CLI has no p99/median, so the like-for-like ratio uses an equivalent
# the CLI can run (count/avg/max) both ways; the p99/median query through fleetq is timed
# against the same baseline too. Target: fleetq within 1.5x of the CLI. Median of
# FQ_BENCH_REPS runs (default 5).
#   bench/fanout16.sh [BUILD_DIR] [NODES] [STEPS]
. "$(dirname "$0")/lib.sh"
nodes=${2:-16}
steps=${3:-125000}
ranks=8
need "$AGENTD" "$FLEETQ" "$TRACEGEN"
q_fq="SELECT rank, count(*), p99(dur_ns), median(busy_ns) FROM collectives GROUP BY rank"
q_eq="SELECT rank, count(*), avg(dur_ns), max(busy_ns) FROM collectives GROUP BY rank"

dbs=
i=0
while [ $i -lt "$nodes" ]; do
	db=$CACHE/tracegen-r$ranks-n$((ranks * nodes))-s$steps-l0-node$i.db
	if [ ! -s "$db" ]; then
		rm -f "$db.tmp"
		"$TRACEGEN" --out "$db.tmp" --node "node$i" --ranks $ranks --steps "$steps" \
			--rank-base $((i * ranks)) --nranks $((ranks * nodes)) --launches 0 \
			--seed 1 >/dev/null 2>"$T/tracegen.err" || die "fq-tracegen failed"
		mv "$db.tmp" "$db"
	fi
	dbs="$dbs $db"
	i=$((i + 1))
done

certs 127.0.0.1
hosts=
i=0
for db in $dbs; do
	start_agent "a$i" "$db" --no-trace --timeout-ms 600000
	hosts="${hosts:+$hosts,}127.0.0.1:$PORT"
	i=$((i + 1))
done

fq_run() {
	"$FLEETQ" --ca "$T/certs/ca.crt" --cert "$T/certs/client.crt" --key "$T/certs/client.key" \
		-w "$hosts" --timeout 600 --format tsv -q "$1"
}
cli_run() {
	for db in $dbs; do
		sqlite3 -batch -separator "$(printf '\t')" "$db" "$1" || return 1
	done
}
# every node answers with one row per rank, both ways
got=$(fq_run "$q_fq" | wc -l)
[ "$got" -eq $((nodes * ranks + 1)) ] || die "fleetq printed $got lines, want $((nodes * ranks + 1))"
got=$(cli_run "$q_eq" | wc -l)
[ "$got" -eq $((nodes * ranks)) ] || die "sqlite3 printed $got lines, want $((nodes * ranks))"
rows=$(sqlite3 "$(echo $dbs | cut -d' ' -f1)" "SELECT count(*) FROM collectives")

tb= te= tp=
i=0
while [ $i -lt "$REPS" ]; do
	tb="$tb $(timeit cli_run "$q_eq")"
	te="$te $(timeit fq_run "$q_eq")"
	tp="$tp $(timeit fq_run "$q_fq")"
	i=$((i + 1))
done
mb=$(median $tb)
me=$(median $te)
mp=$(median $tp)
echo "fanout: $nodes agents x $rows collectives rows, mTLS on 127.0.0.1, median of $REPS runs"
echo "  baseline sqlite3 CLI, $nodes files one after another, count/avg/max: $(fmt "$mb" 3) s (runs:$tb)"
echo "  fleetq, same count/avg/max SQL:                     $(fmt "$me" 3) s (runs:$te) ratio $(fmt "$(calc "$me / $mb")" 3)"
echo "  fleetq, count/p99/median SQL:                       $(fmt "$mp" 3) s (runs:$tp) ratio $(fmt "$(calc "$mp / $mb")" 3)"
met=no
[ "$(calc "$me <= 1.5 * $mb")" = 1 ] && met=yes
result fanout${nodes}_same_sql_s "$(fmt "$me" 3)" s "$(fmt "$mb" 3)" "<=1.5x" $met
met=no
[ "$(calc "$mp <= 1.5 * $mb")" = 1 ] && met=yes
result fanout${nodes}_p99_median_s "$(fmt "$mp" 3)" s "$(fmt "$mb" 3)" "<=1.5x" $met
