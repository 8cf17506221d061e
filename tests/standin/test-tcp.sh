# SPDX-License-Identifier: MIT
# FQ_STANDIN_TRANSPORT=tcp: the all-reduces go round a TCP ring on loopback and really sum (rank
# r sends r + 1 everywhere; fq-workload checks every element is 1 + ... + n, which shared memory,
# moving no data, never gives), with an uneven split of the buffer, on both device models; a
# wrong address list fails at init with one line.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "python3 is needed for free ports"
N=4
ADDRS=$(python3 -c '
import socket
s = [socket.socket() for _ in range('$N')]
for x in s: x.bind(("127.0.0.1", 0))
print(",".join("127.0.0.1:%d" % x.getsockname()[1] for x in s))')
export FQ_STANDIN_TRANSPORT=tcp FQ_STANDIN_TCP_ADDRS=$ADDRS FQ_STANDIN_TIMEOUT_S=30

for dev in inline thread; do
	"$FQ_WORKLOAD" --ranks $N --steps 20 --count 10001 --device $dev \
		--report "$T/$dev.tsv" 2>"$T/err" || fail "$dev: exited $?"
	[ "$(ops_per_rank "$T/$dev.tsv" ncclAllReduce | tr '\n' ' ')" = "0 20 1 20 2 20 3 20 " ] ||
		fail "$dev: $(ops_per_rank "$T/$dev.tsv" ncclAllReduce)"
	check_shm_gone "$T/$dev.tsv"
	echo "ok: $dev: 20 all-reduces of 10001 floats over TCP, sums right"
done

FQ_STANDIN_TCP_ADDRS=${ADDRS%,*} "$FQ_WORKLOAD" --ranks $N --steps 2 2>"$T/err" &&
	fail "3 addresses for 4 ranks accepted"
grep -q "^fq-standin nccl: rank [0-9]: ncclCommInitRank: FQ_STANDIN_TCP_ADDRS has 3 addresses" \
	"$T/err" ||
	fail "want the address count error"
FQ_STANDIN_TRANSPORT=udp "$FQ_WORKLOAD" --ranks 2 --steps 2 2>"$T/err" && fail "udp accepted"
grep -q "FQ_STANDIN_TRANSPORT is 'udp', want shm or tcp$" "$T/err" ||
	fail "want the transport error"
echo PASS
