# SPDX-License-Identifier: MIT
# (g) the CUPTI injection path: libcuda loads CUDA_INJECTION64_PATH at cuInit and calls its
# InitializeInjection; the injection library (test_inject.c) takes kernel records from the
# stand-in libcupti.so.13 as a collector takes them from CUPTI. Per rank of a DDP job: every
# kernel one record, on the rank's device, with no breach of the buffer contract; compute time
# what the job asked for, NCCL time > 0; a slower GPU's compute time larger; records on a
# registered timestamp callback's clock; no buffer given: every record dropped and counted;
# a missing library or one without InitializeInjection: one line, the job unharmed.
. "$(dirname "$0")/lib.sh"

INJ=$STANDIN_DIR/libfq-test-inject.so
CUPTI=$STANDIN_DIR/libcupti.so.13
for x in "$INJ" "$CUPTI"; do [ -e "$x" ] || fail "not built: $x"; done

# the stand-in CUPTI looks like the real one to dlopen and dlsym
readelf -d "$CUPTI" | grep -q '(SONAME).*\[libcupti.so.13\]' ||
	fail "libcupti.so.13: SONAME is not libcupti.so.13"
objdump -T "$CUPTI" | awk '$2 == "g" && $4 == ".text" { print $NF }' >"$T/syms"
for s in cuptiActivityRegisterCallbacks cuptiActivityEnable cuptiActivityDisable \
	cuptiActivityGetNextRecord cuptiActivityFlushAll cuptiActivityFlushPeriod \
	cuptiActivityRegisterTimestampCallback cuptiGetTimestamp \
	cuptiActivityGetNumDroppedRecords; do
	grep -qx "$s" "$T/syms" || fail "libcupti.so.13 does not export $s"
done

# key FILE KEY: the value the injection library wrote for KEY
key() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

# inject OUT ARGS...: fq-workload ARGS with the test injection library writing $T/OUT.<rank>
inject() {
	_out=$1
	shift
	CUDA_INJECTION64_PATH=$INJ FQ_TEST_CUPTI=$CUPTI FQ_TEST_INJECT_OUT=$T/$_out \
		"$FQ_WORKLOAD" "$@" 2>"$T/err"
}

# contract OUT RANK: the rank wrote its file, and the library saw no breach
contract() {
	f=$T/$1.$2
	[ -s "$f" ] || fail "$1: rank $2 wrote no record summary (injection not run?)"
	for k in bad unknown_buffers bad_valid; do
		[ "$(key "$f" $k)" = 0 ] || fail "$1: rank $2: $k = $(key "$f" $k): $(tr '\n' ' ' <"$f")"
	done
}

N=2 S=30 K=2000 B=8
want=$((S * K * 1000))
inject d --ranks $N --steps $S --shape ddp --buckets $B --step-us 200 --kernel-us $K ||
	fail "DDP job with the injection library exited $?"
! grep -E 'CUDA_INJECTION64_PATH|test_inject' "$T/err" >/dev/null ||
	fail "DDP job: the injection complained: $(grep -E 'INJECTION|test_inject' "$T/err" | head -n 1)"
for r in 0 1; do
	contract d $r
	f=$T/d.$r
	[ "$(key "$f" dropped)" = 0 ] || fail "rank $r: $(key "$f" dropped) records dropped"
	# every kernel one record: forward and backward per bucket, one all-reduce per bucket
	[ "$(key "$f" compute_records)" = $((S * 2 * B)) ] ||
		fail "rank $r: $(key "$f" compute_records) compute records, want $((S * 2 * B))"
	[ "$(key "$f" nccl_records)" = $((S * B)) ] ||
		fail "rank $r: $(key "$f" nccl_records) NCCL records, want $((S * B))"
	[ "$(key "$f" dev_min) $(key "$f" dev_max)" = "$r $r" ] ||
		fail "rank $r: deviceId $(key "$f" dev_min)..$(key "$f" dev_max), want $r (LOCAL_RANK)"
	# 4 KiB buffers fill every few steps: the fake's own thread hands them back
	[ "$(key "$f" worker_buffers)" -gt 0 ] ||
		fail "rank $r: no buffer came back from CUPTI's thread ($(key "$f" buffers) in all)"
	c=$(key "$f" compute_ns)
	awk -v c="$c" -v w=$want 'BEGIN { exit !(c >= 0.7 * w && c <= 1.5 * w) }' ||
		fail "rank $r: compute kernels $c ns, not within 0.7-1.5 x the $want ns asked for"
	[ "$(key "$f" nccl_ns)" -gt 0 ] || fail "rank $r: NCCL kernels took no time"
	ok "rank $r: $(key "$f" records) records, compute $c ns (asked $want), NCCL $(key "$f" nccl_ns) ns"
done

# rank 1's GPU 50 % slower: its compute kernels take clearly longer than rank 0's (1.5 x);
# and records on the clock of a registered timestamp callback (CLOCK_MONOTONIC + 10^15 ns)
FQ_TEST_INJECT_CLOCK=shift inject s --ranks $N --steps $S --shape ddp --buckets $B \
	--step-us 200 --kernel-us $K --slow-rank 1 --slow-pct 50 --slow-kind gpu ||
	fail "slow-GPU job with the injection library exited $?"
contract s 0
contract s 1
c0=$(key "$T/s.0" compute_ns) c1=$(key "$T/s.1" compute_ns)
awk -v a="$c0" -v b="$c1" 'BEGIN { exit !(a > 0 && b > 1.25 * a) }' ||
	fail "slow GPU on rank 1: compute $c1 ns, not clearly over rank 0's $c0 ns"
ok "slow GPU: rank 1 compute $c1 ns, rank 0 $c0 ns"

# the loop shape's device runs inline; no buffer from the collector: every record dropped
FQ_TEST_INJECT_BUF=0 inject z --ranks 1 --steps 10 --step-us 200 --kernel-us 500 ||
	fail "job with no CUPTI buffers exited $?"
contract z 0
[ "$(key "$T/z.0" records) $(key "$T/z.0" dropped)" = "0 20" ] ||
	fail "no buffers: $(key "$T/z.0" records) records, $(key "$T/z.0" dropped) dropped; want 0, 20"

# a library that is not there, or has no InitializeInjection: one line a rank, job unharmed
for lib in "$T/missing.so" "$CUPTI"; do
	CUDA_INJECTION64_PATH=$lib FQ_TEST_INJECT_OUT=$T/x "$FQ_WORKLOAD" --ranks $N --steps 3 \
		--step-us 200 2>"$T/err" || fail "CUDA_INJECTION64_PATH=$lib: the job exited $?"
	[ "$(grep -c "CUDA_INJECTION64_PATH '$lib'" "$T/err")" = $N ] ||
		fail "CUDA_INJECTION64_PATH=$lib: not one line per rank on stderr"
	[ "$(grep -vc '^fq-workload: rank' "$T/err")" = $N ] ||
		fail "CUDA_INJECTION64_PATH=$lib: more on stderr than one line a rank"
done
ok "a missing library and one without InitializeInjection: one line a rank, exit 0"
