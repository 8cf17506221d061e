#!/bin/sh
# SPDX-License-Identifier: MIT
# Four real agentd processes with real certificates on fq-tracegen files: fleetq's
# merged rows equal what the sqlite3 CLI reads from the same files, row for row;
# --merge statistics equal ones computed independently; every format carries coverage.
. "$(dirname "$0")/lib.sh"

certs ca 127.0.0.1 localhost
for k in 1 2 3 4; do
	"$TRACEGEN" --out "$T/n$k.db" --node "n$k" --ranks 2 --rank-base $((2 * k - 2)) \
		--nranks 8 --steps 40 --start-ns 1700000000000000000 --slow-rank 5 --slow-pct 30 >"$T/gen$k.log" 2>&1 ||
		fail "fq-tracegen n$k"
done
start_agent n1 "$T/n1.db" ca; P1=$PORT
CERTHOST=localhost start_agent n2 "$T/n2.db" ca; P2=$PORT
start_agent n3 "$T/n3.db" ca; P3=$PORT
start_agent n4 "$T/n4.db" ca; P4=$PORT
H1=127.0.0.1:$P1 H2=localhost:$P2 H3=127.0.0.1:$P3 H4=127.0.0.1:$P4

cat >"$T/hosts" <<HOSTS
# the test fleet
$H1

localhost:$P2   # its certificate names localhost
	$H3
$H4
$H1
HOSTS

Q="SELECT rank, seq, op, comm_hash, dur_ns, busy_ns, peer FROM collectives"

# 1. hosts file: merged rows == sqlite3 rows, in hostlist order.
fq --hosts "$T/hosts" --format csv "$Q"
expect_rc 0 "query over the hosts file"
expect_err "coverage: 4/4 nodes ok"
head -n 1 "$T/out" | grep -qx 'node,rank,seq,op,comm_hash,dur_ns,busy_ns,peer' ||
	fail "csv header: $(head -n 1 "$T/out")"
: >"$T/want"
k=0
for h in $H1 $H2 $H3 $H4; do
	k=$((k + 1))
	sqlite3 -csv "$T/n$k.db" "SELECT '$h', rank, seq, op, comm_hash, dur_ns, busy_ns, peer FROM collectives" |
		tr -d '\r' >>"$T/want"
done
[ "$(wc -l <"$T/want")" -ge 4 ] || fail "sqlite3 returned nothing"
tail -n +2 "$T/out" >"$T/got"
cmp -s "$T/got" "$T/want" || {
	diff "$T/want" "$T/got" | head >&2
	fail "merged rows differ from sqlite3's (order: hostlist, then rows)"
}
cp "$T/out" "$T/out.file"

# 2. the same fleet as a -w hostlist: same output.
fq -w "127.0.0.1:[$P1,$P3],$H2,$H4" --format csv "$Q"
expect_rc 0 "query over -w"
sort "$T/out" >"$T/a"
sort "$T/out.file" >"$T/b"
cmp -s "$T/a" "$T/b" || fail "-w and --hosts give different rows"

# 3. --merge: median and percentile across nodes, against Python over the same files.
fq --hosts "$T/hosts" --format csv \
	--merge "SELECT count(*), median(dur_ns), percentile(dur_ns, 90), count(DISTINCT node) FROM results" \
	"SELECT dur_ns FROM collectives"
expect_rc 0 "--merge"
python3 - "$T" <<'PY' || fail "--merge statistics differ"
import csv, sqlite3, sys
t = sys.argv[1]
xs = []
for k in range(1, 5):
    xs += [r[0] for r in sqlite3.connect(f"{t}/n{k}.db").execute("SELECT dur_ns FROM collectives")]
xs.sort()
def pct(p):
    h = (len(xs) - 1) * p / 100
    lo = int(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])
rows = list(csv.reader(open(f"{t}/out")))
assert rows[0] == ["count(*)", "median(dur_ns)", "percentile(dur_ns, 90)", "count(DISTINCT node)"], rows[0]
n, med, p90, nodes = rows[1]
assert int(n) == len(xs), (n, len(xs))
assert abs(float(med) - pct(50)) <= 1e-9 * abs(pct(50)), (med, pct(50))
assert abs(float(p90) - pct(90)) <= 1e-9 * abs(pct(90)), (p90, pct(90))
assert int(nodes) == 4
PY

# Per-rank merge: the slow rank (5) has the largest busy gap.
fq --hosts "$T/hosts" --format tsv \
	--merge "SELECT rank FROM results GROUP BY rank ORDER BY median(busy_ns) DESC LIMIT 1" \
	"SELECT rank, busy_ns FROM collectives"
expect_rc 0 "per-rank merge"
[ "$(tail -n 1 "$T/out")" = 5 ] || fail "slowest rank by busy gap is '$(tail -n 1 "$T/out")', want 5"

# 4. json and ndjson: rows only, objects keyed by column (jq sees rows alone)...
fq --hosts "$T/hosts" --format json "$Q"
expect_rc 0 "json rows"
python3 - "$T" <<'PY' || fail "json rows: $(head -c 300 "$T/out")"
import json, sys
t = sys.argv[1]
d = json.load(open(f"{t}/out"))
want = sum(1 for _ in open(f"{t}/want"))
assert isinstance(d, list) and len(d) == want, (type(d), len(d), want)
assert list(d[0]) == ["node", "rank", "seq", "op", "comm_hash", "dur_ns", "busy_ns", "peer"], d[0]
assert isinstance(d[0]["seq"], int)
PY
expect_err "coverage: 4/4 nodes ok"
fq --hosts "$T/hosts" --format ndjson "$Q"
[ "$(grep -c '"coverage"' "$T/out")" = 0 ] || fail "ndjson: a coverage line without --with-coverage"
[ "$(grep -c . "$T/out")" = "$(grep -c . "$T/want")" ] || fail "ndjson: not one line a row"
# ... and with --with-coverage, the rows as arrays and the coverage.
fq --hosts "$T/hosts" --format json --with-coverage "$Q"
expect_rc 0 "json"
python3 - "$T" <<'PY' || fail "json output"
import json, sys
t = sys.argv[1]
d = json.load(open(f"{t}/out"))
want = sum(1 for _ in open(f"{t}/want"))
assert d["columns"][0] == "node" and len(d["columns"]) == 8, d["columns"]
assert len(d["rows"]) == want, (len(d["rows"]), want)
assert d["coverage"]["total"] == 4 and d["coverage"]["ok"] == 4, d["coverage"]
assert d["coverage"]["failures"] == []
assert isinstance(d["rows"][0][2], int)
PY
fq --hosts "$T/hosts" --format ndjson --with-coverage "$Q"
expect_rc 0 "ndjson"
python3 - "$T" <<'PY' || fail "ndjson output"
import json, sys
t = sys.argv[1]
lines = [json.loads(l) for l in open(f"{t}/out")]
want = sum(1 for _ in open(f"{t}/want"))
assert len(lines) == want + 1, (len(lines), want)
assert set(lines[0]) == {"node", "rank", "seq", "op", "comm_hash", "dur_ns", "busy_ns", "peer"}
assert lines[-1]["coverage"]["ok"] == 4
PY

# 5. a row limit per node, asked for: rows kept, said on stderr, not a failure.
fq --hosts "$T/hosts" --format csv --max-rows 7 "$Q"
expect_rc 0 "--max-rows"
expect_err "; rows limited by --max-rows: "
[ "$(tail -n +2 "$T/out" | wc -l)" = 28 ] || fail "--max-rows 7 on 4 nodes gave $(tail -n +2 "$T/out" | wc -l) rows"

# 6. 0 rows is an answer, not a failure.
fq --hosts "$T/hosts" --format csv "SELECT rank FROM collectives WHERE 0"
expect_rc 0 "empty result"
expect_err "coverage: 4/4 nodes ok, 0 rows"
[ "$(cat "$T/out")" = "node,rank" ] || fail "empty result printed '$(cat "$T/out")'"

# 7. SLURM_JOB_NODELIST when neither --hosts nor -w.
SLURM_JOB_NODELIST="127.0.0.1:[$P3-$P3]" fq -q --format tsv "SELECT count(*) FROM collectives"
expect_rc 0 "SLURM_JOB_NODELIST"
[ -s "$T/err" ] && fail "-q still printed: $(cat "$T/err")"
[ "$(tail -n 1 "$T/out")" = "$H3	$(sqlite3 "$T/n3.db" 'SELECT count(*) FROM collectives')" ] ||
	fail "SLURM_JOB_NODELIST query printed '$(cat "$T/out")'"

# 8. agentd keeps connections and their last statement between queries: the same query
# again sees rows written in between (no stale snapshot), a schema change (SQLite
# prepares again), and a query the guard refuses leaves the next one working.
C="SELECT count(*) FROM collectives"
n=$(sqlite3 "$T/n3.db" "$C")
for step in 1 2 3 4; do
	fq -q -w "$H3" --format tsv "$C"
	expect_rc 0 "repeated query, step $step"
	[ "$(tail -n 1 "$T/out")" = "$H3	$n" ] || fail "step $step: '$(cat "$T/out")', want $n"
	sqlite3 "$T/n3.db" "INSERT INTO collectives SELECT max(ts_ns) + 1, dur_ns, pid, tid, comm_ptr, comm_hash, rank, nranks, seq, op, count, bytes, datatype, redop, peer, stream, busy_ns, ret, sync_ns, gap_ns, cpu_ns FROM collectives" ||
		fail "cannot write n3.db"
	n=$((n + 1))
	[ $step != 1 ] || [ "$(sqlite3 "$T/n3.db" "PRAGMA journal_mode = WAL")" = wal ] ||
		fail "cannot put n3.db in WAL mode (as agentd's store writes it)"
	[ $step != 2 ] || sqlite3 "$T/n3.db" "CREATE TABLE extra (a); DROP INDEX collectives_comm_seq" ||
		fail "cannot change n3.db's schema"
done
fq -q -w "$H3" --format tsv "DELETE FROM collectives"
expect_rc 2 "DELETE through a kept connection (the node refuses it: the SQL is wrong)"
fq -q -w "$H3" --format tsv "$C"
expect_rc 0 "query after a refused one"
[ "$(tail -n 1 "$T/out")" = "$H3	$n" ] || fail "after refusal: '$(cat "$T/out")', want $n"
echo "ok"
