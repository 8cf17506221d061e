# SPDX-License-Identifier: MIT
# The stand-in libraries look to a tracer like the real ones: SONAMEs and the NEEDED chain of a
# wheel-installed stack, every API fleetq probes exported, ncclX and pncclX at one address, and
# probed entry points that start with `push %rbp`, never `endbr64` (DESIGN.md §2).
. "$(dirname "$0")/lib.sh"
cd "$STANDIN_DIR"

CUDA="cuInit cuStreamCreate cuStreamSynchronize cuCtxSynchronize cuEventCreate cuEventRecord
	cuEventSynchronize cuEventQuery cuStreamWaitEvent cuLaunchKernel cuMemAlloc_v2 cuMemFree_v2
	cuMemcpyHtoD_v2 cuMemcpyDtoH_v2 cuMemcpyAsync"
CUDART="cudaStreamCreate cudaStreamSynchronize cudaStreamWaitEvent cudaDeviceSynchronize
	cudaEventCreate cudaEventRecord cudaEventSynchronize cudaEventQuery cudaLaunchKernel
	cudaMemcpy cudaMemcpyAsync cudaMalloc cudaFree cudaSetDevice cudaGetDeviceCount cudaGetErrorString"
NCCL="ncclGetVersion ncclGetUniqueId ncclCommInitRank ncclCommInitRankConfig ncclCommInitAll
	ncclCommSplit ncclCommDestroy ncclCommAbort ncclCommCount ncclCommUserRank ncclCommCuDevice
	ncclAllReduce ncclAllGather ncclReduceScatter ncclBroadcast ncclBcast ncclReduce ncclSend
	ncclRecv ncclGroupStart ncclGroupEnd ncclGetErrorString"
# called once per job or never on a hot path: any prologue is fine (real NCCL's
# ncclCommInitRankConfig starts with movabs); all others must start with push %rbp
COLD="cuInit cudaGetErrorString ncclGetVersion ncclCommCount ncclCommUserRank ncclCommCuDevice
	ncclGetErrorString"

for pair in libcuda.so.1: libcudart.so.13:libcuda.so.1 libnccl.so.2:libcudart.so.13; do
	lib=${pair%%:*} need=${pair#*:}
	readelf -d "$lib" | grep -q "(SONAME).*\[$lib\]" || fail "$lib: SONAME is not $lib"
	if [ -n "$need" ]; then
		readelf -d "$lib" | grep -q "(NEEDED).*\[$need\]" || fail "$lib: does not need $need"
	fi
	objdump -T "$lib" | awk '$2 == "g" && $4 == ".text" { print $1, $NF }' >"$T/$lib.syms"
done

first_insn() { # LIB ADDR
	objdump -d --no-show-raw-insn --start-address=0x$2 --stop-address=$((0x$2 + 16)) "$1" |
		awk -F'\t' '/^ *[0-9a-f]+:\t/ { sub(/ +.*/, "", $2); print $2; exit }'
}

check() { # LIB SYMBOLS...
	lib=$1
	shift
	for s in "$@"; do
		addr=$(awk -v s="$s" '$2 == s { print $1 }' "$T/$lib.syms")
		[ -n "$addr" ] || fail "$lib does not export $s"
		insn=$(first_insn "$lib" "$addr")
		[ "$insn" != endbr64 ] || fail "$lib: $s starts with endbr64 (expensive to probe)"
		case " $(echo $COLD) " in *" $s "*) continue ;; esac
		[ "$insn" = push ] || fail "$lib: $s starts with '$insn', not push %rbp"
	done
}
# shellcheck disable=SC2086
check libcuda.so.1 $CUDA
# shellcheck disable=SC2086
check libcudart.so.13 $CUDART
# shellcheck disable=SC2086
check libnccl.so.2 $NCCL

for s in $NCCL; do
	a=$(awk -v s="$s" '$2 == s { print $1 }' "$T/libnccl.so.2.syms")
	p=$(awk -v s="p$s" '$2 == s { print $1 }' "$T/libnccl.so.2.syms")
	[ -n "$p" ] || fail "libnccl.so.2 does not export p$s"
	[ "$a" = "$p" ] || fail "libnccl.so.2: $s at $a but p$s at $p"
done
# no exported function anywhere starts with endbr64
for lib in libcuda.so.1 libcudart.so.13 libnccl.so.2; do
	while read -r addr s; do
		[ "$(first_insn "$lib" "$addr")" != endbr64 ] || fail "$lib: $s starts with endbr64"
	done <"$T/$lib.syms"
done
echo "ok"
