#!/bin/bash
# SPDX-License-Identifier: MIT
# Real retransmits: an nftables input rule drops one loopback connection's packets for 2 s; the
# tracer must record tcp_retransmits rows for that port. The rule's table is removed by trap.
. "$(dirname "$0")/lib.sh"
RETX=$(dirname "$DRIVER")/tcp-retx
command -v nft >/dev/null || skip "nft is not installed"
TABLE=fqtrace_$$
cleanup() {
	nft delete table inet $TABLE 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
nft add table inet $TABLE && nft add chain inet $TABLE in '{ type filter hook input priority 0; }' ||
	skip "cannot add an nftables table"
DB=$WORK/trace.db
"$DRIVER" --db "$DB" --probes tcp -- timeout 20 "$RETX" "nft add rule inet $TABLE in tcp dport \$FQ_PORT drop" \
	>"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "tcp-retx under the tracer failed"; }
cat "$WORK/out"
PORT=$(grep -E '^[0-9]+$' "$WORK/out" | head -1)
[ -n "$PORT" ] || fail "no port from tcp-retx"
N=$(q "SELECT count(*) FROM tcp_retransmits WHERE dport = $PORT AND daddr = '127.0.0.1' AND saddr = '127.0.0.1' AND state = 'ESTABLISHED'")
[ "$N" -ge 1 ] || fail "no retransmit rows for port $PORT: $(q 'SELECT * FROM tcp_retransmits')"
echo "ok: $N retransmits recorded for 127.0.0.1:$PORT"
echo PASS
