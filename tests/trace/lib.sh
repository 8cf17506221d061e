# SPDX-License-Identifier: MIT
# Shared by the tracer tests: $1 = fq-trace-test, $2 = the stand-in folder.
. "$(dirname "$0")/../lib.sh"
DRIVER=$1
STANDIN=$2
[ "$(id -u)" = 0 ] || skip "needs root to load BPF programs"
[ -r /sys/kernel/btf/vmlinux ] || skip "no kernel BTF at /sys/kernel/btf/vmlinux"
command -v sqlite3 >/dev/null || fail "sqlite3 (the CLI) is needed to check the trace file"
[ -x "$STANDIN/fq-workload" ] || fail "no stand-in workload at $STANDIN (build target standin)"
WORK=$(mktemp -d /tmp/fq-trace-test.XXXXXX)
# Library files attached at start: a uprobe covers every process that maps the file, and
# the stand-in's ranks call into NCCL within microseconds of exec (faster than discovery).
LIBS="lib:$STANDIN/libnccl.so.2,lib:$STANDIN/libcudart.so.13,lib:$STANDIN/libcuda.so.1"
q() { sqlite3 -batch -noheader "$DB" "$@"; }
# expect NAME GOT WANT
expect() { [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"; echo "ok: $1 = $3"; }
