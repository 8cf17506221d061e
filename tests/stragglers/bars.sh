#!/bin/sh
# SPDX-License-Identifier: MIT
# fleetq stragglers --bars over four real agents serving an fq-tracegen job with a slow rank:
# under the report, one line per rank with a bar per signal, the planted rank's the longest;
# the report itself is what it is without bars; auto draws on a terminal only.
. "$(dirname "$0")/../e2e/lib.sh"

certs ca 127.0.0.1
START=$((($(date +%s) - 15) * 1000000000))
HOSTS=
for k in 0 1 2 3; do
	"$TRACEGEN" --out "$T/n$k.db" --node "node$k" --ranks 4 --rank-base $((4 * k)) --nranks 16 \
		--steps 200 --start-ns $START --seed 6 --slow-rank 6 --slow-pct 20 --kernels \
		>"$T/gen.log" 2>&1 || fail "fq-tracegen node$k"
	start_agent "a$k" "$T/n$k.db" ca
	HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:$PORT"
done

# bars BARS_FILE: rank 6's bars are the longest of every signal (late, wait, gpu, cpu, pace),
# no other rank's reaches the threshold mark, and every one of the 16 ranks has its line
bars() {
	python3 - "$1" <<'PY' || fail "bars: $(cat "$1")"
import re, sys
lines = open(sys.argv[1]).read().split("\n")
h = [i for i, l in enumerate(lines) if l.startswith("communicator ")]
assert len(h) == 1, lines
head = lines[h[0] + 1]
assert head.split() == ["rank", "node", "late", "wait", "gpu", "cpu", "pace"], head
cols = [head.index(s) for s in ("late", "wait", "gpu", "cpu", "pace")]
rows = {}
for l in lines[h[0] + 2:]:
    if not re.match(r"^\s+\d+ ", l):
        break  # (on a terminal stderr follows)
    rank = int(l.split()[0])
    rows[rank] = [l[c:c + 12].count("#") for c in cols]
assert sorted(rows) == list(range(16)), rows
# late (k = 0) is measured across the agents' clocks, whose offsets fleetq samples over
# loopback: on a loaded box their uncertainty reached 3 ms and held the slow rank's late z
# at 2.2, under the threshold mark (a bar of 8). Its bar must still be the longest, by far.
# (pace, k = 4: fq-tracegen's slow rank arrives late at every step, so its GPU idles longer
# before each step's collective than its peers' do)
for k in range(5):
    longest = max(rows, key=lambda r: rows[r][k])
    assert longest == 6 and rows[6][k] >= (6 if k == 0 else 12), (k, rows)
    assert all(rows[r][k] < 3 for r in rows if r != 6), (k, rows)
assert re.search(r"^\s+6 \S+\s+#{6,12} +#{12}  #{12}  #{12}  #{12}  straggler$", "\n".join(lines),
                 re.M)
print("rank 6:", rows[6], "others at most", max(max(v) for r, v in rows.items() if r != 6))
PY
}

fq -w "$HOSTS" stragglers --since 2m
expect_rc 1 "plain report"
cp "$T/out" "$T/plain"
grep -q "^communicator .*robust z" "$T/plain" && fail "bars when stdout is no terminal"

fq -w "$HOSTS" stragglers --since 2m --bars=always
expect_rc 1 "--bars=always"
bars "$T/out"
# the report above the bars is the report without them (no 'ok' rows, the same lines; the
# figures move a little with each run's clock samples)
sed '/^$/,$d' "$T/out" | sed -E 's/[0-9]+(\.[0-9]+)?/N/g; s/[+ -]+/ /g' >"$T/above"
sed -E 's/[0-9]+(\.[0-9]+)?/N/g; s/[+ -]+/ /g' "$T/plain" >"$T/plainN"
cmp -s "$T/above" "$T/plainN" || fail "report with bars differs: $(diff "$T/plainN" "$T/above")"
fq -w "$HOSTS" stragglers --since 2m --bars
expect_rc 1 "--bars"
bars "$T/out"
fq -w "$HOSTS" stragglers --since 2m --bars=never
expect_rc 1 "--bars=never"
sed -E 's/[0-9]+(\.[0-9]+)?/N/g; s/[+ -]+/ /g' "$T/out" | diff "$T/plainN" - || fail "--bars=never drew"
# --all keeps every rank's row in the report, and the bars under it
fq -w "$HOSTS" stragglers --since 2m --all --bars=always
expect_rc 1 "--all --bars"
[ "$(grep -c '^ok: rank' "$T/out")" = 15 ] || fail "--all lost its ok rows: $(cat "$T/out")"
bars "$T/out"

# auto: on a terminal (script(1) gives fleetq one), bars; --bars=never there, none
if command -v script >/dev/null 2>&1; then
	FQ="$FLEETQ --ca $T/ca/ca.crt --cert $T/ca/client.crt --key $T/ca/client.key -w $HOSTS"
	script -qec "$FQ stragglers --since 2m" /dev/null </dev/null | tr -d '\r' >"$T/tty" 2>&1
	bars "$T/tty"
	script -qec "$FQ stragglers --since 2m --bars=never" /dev/null </dev/null |
		tr -d '\r' >"$T/tty"
	grep -q "^communicator .*robust z" "$T/tty" && fail "--bars=never on a terminal drew"
fi

# bad input
fq -w "$HOSTS" stragglers --bars=sometimes
expect_rc 2 "--bars=sometimes"
expect_err "fleetq: --bars: invalid value 'sometimes': use auto, always or never"
fq -w "$HOSTS" stragglers --bars=always --format json
expect_rc 2 "--bars with --format"
expect_err "drop --format"
fq -w "$HOSTS" netcheck --bars
expect_rc 2 "--bars on netcheck"
expect_err "option '--bars' does not apply to 'netcheck'"

echo PASS
