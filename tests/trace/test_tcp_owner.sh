#!/bin/bash
# SPDX-License-Identifier: MIT
# Retransmits belong to the socket's process, not to whoever the CPU ran: tcp-retx (libnccl
# preloaded, so discovery traces it) connects over loopback, an nftables input rule drops the
# server's port, it waits 1 s (traced by then), writes, and its data is retransmitted from the
# RTO timer in softirq, where current is a bystander. Every retransmit to that port must carry
# tcp-retx's pid. The rule's table is removed by trap.
. "$(dirname "$0")/lib.sh"
RETX=$(dirname "$DRIVER")/tcp-retx
command -v nft >/dev/null || skip "nft is not installed"
TABLE=fqowner_$$
cleanup() {
	nft delete table inet $TABLE 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
nft add table inet $TABLE && nft add chain inet $TABLE in '{ type filter hook input priority 0; }' ||
	skip "cannot add an nftables table"
DB=$WORK/trace.db
"$DRIVER" --db "$DB" --probes "tcp,proc,$LIBS" -- env LD_PRELOAD="$STANDIN/libnccl.so.2" \
	timeout 20 "$RETX" "nft add rule inet $TABLE in tcp dport \$FQ_PORT drop && sleep 1" \
	>"$WORK/out" 2>&1 || { cat "$WORK/out"; fail "tcp-retx under the tracer failed"; }
PORT=$(grep -E '^[0-9]+$' "$WORK/out" | head -1)
[ -n "$PORT" ] || fail "no port from tcp-retx"
PID=$(q "SELECT pid FROM processes WHERE comm = 'tcp-retx' LIMIT 1")
[ -n "$PID" ] || fail "tcp-retx was not traced: $(q 'SELECT pid, comm FROM processes')"
N=$(q "SELECT count(*) FROM tcp_retransmits WHERE dport = $PORT")
[ "$N" -ge 1 ] || fail "no retransmit rows for port $PORT: $(q 'SELECT * FROM tcp_retransmits')"
OWN=$(q "SELECT count(*) FROM tcp_retransmits WHERE dport = $PORT AND pid = $PID")
expect "retransmits to $PORT owned by tcp-retx (pid $PID) of $N" "$OWN" "$N"
echo PASS
