#!/bin/sh
# SPDX-License-Identifier: MIT
# Streaming: ROWS rows of (int, int, double, text) from one agentd (--no-trace, real mutual
# TLS on 127.0.0.1) to fleetq, printed as TSV to /dev/null. Baseline in the same run: the
# sqlite3 CLI printing the same rows from the same file as TSV to /dev/null. Median of
# FQ_BENCH_REPS runs (default 5) each. Target: >= 500k rows/s through fleetq.
#   bench/stream.sh [BUILD_DIR] [ROWS]
# (Adapted from tests/agentd/bench-stream.sh, which times the fqtc test client instead.)
. "$(dirname "$0")/lib.sh"
n=${2:-1000000}
need "$AGENTD" "$FLEETQ"
db=$(stream_db "$n")
sql="SELECT a, b, c, d FROM b"
certs 127.0.0.1
start_agent s0 "$db" --no-trace --max-rows 100000000 --max-bytes 4294967296 --timeout-ms 600000

# same row count both ways, and both print every row
got=$(fq -w "127.0.0.1:$PORT" --max-rows 100000000 --timeout 600 --format tsv -q "$sql" | wc -l)
[ "$got" -eq $((n + 1)) ] || die "fleetq printed $got lines, want $((n + 1)) (header + rows)"
got=$(sqlite3 -batch -separator "$(printf '\t')" "$db" "$sql" | wc -l)
[ "$got" -eq "$n" ] || die "sqlite3 printed $got lines, want $n"

fqs= base=
i=0
while [ $i -lt "$REPS" ]; do
	fqs="$fqs $(timeit sh -c "\"\$0\" --ca '$T/certs/ca.crt' --cert '$T/certs/client.crt' \
		--key '$T/certs/client.key' -w 127.0.0.1:$PORT --max-rows 100000000 --timeout 600 \
		--format tsv -q '$sql' >/dev/null" "$FLEETQ")"
	base="$base $(timeit sh -c "sqlite3 -batch -separator \"\$(printf '\t')\" '$db' '$sql' \
		>/dev/null")"
	i=$((i + 1))
done
tf=$(median $fqs)
tb=$(median $base)
rf=$(calc "$n / $tf")
rb=$(calc "$n / $tb")
echo "stream: $n rows (int, int, double, text), median of $REPS runs"
echo "  fleetq <- agentd (mTLS, 127.0.0.1) --format tsv: $(fmt "$tf" 3) s = $(fmt "$rf" 0) rows/s (runs:$fqs)"
echo "  baseline sqlite3 CLI, same file, tsv:            $(fmt "$tb" 3) s = $(fmt "$rb" 0) rows/s (runs:$base)"
echo "  ratio fleetq / sqlite3 CLI (rows/s): $(fmt "$(calc "$rf / $rb")" 3)"
met=no
[ "$(calc "$rf >= 500000")" = 1 ] && met=yes
result stream_rows_per_s "$(fmt "$rf" 0)" rows/s "$(fmt "$rb" 0)" ">=500000" $met
