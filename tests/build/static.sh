#!/bin/sh
# SPDX-License-Identifier: MIT
# FLEETQ_STATIC builds an agentd to carry to GPU hosts. A static program cannot load NVML
# (linked against the system's libc: on a 4-GPU host it died of SIGFPE inside libc.so.6 at
# start): it must say so and go on tracing. Uses tests/nvml's fake libnvidia-ml.so.1.
# usage: static.sh SOURCE_DIR FAKE_NVML
set -u
src=$1 fake=$2
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (tracing)" >&2; exit 77; }
[ -r /sys/kernel/btf/vmlinux ] || { echo "SKIP: no kernel BTF" >&2; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/fq-static.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$T"' EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
cmake -S "$src" -B "$T/b" -DFLEETQ_STATIC=ON >"$T/log" 2>&1 || fail "configure: $(tail -n 5 "$T/log")"
cmake --build "$T/b" --target agentd -j2 >"$T/log" 2>&1 || fail "build: $(grep -m3 error "$T/log")"
file "$T/b/agentd/agentd" 2>/dev/null | grep -q 'statically linked' ||
	ldd "$T/b/agentd/agentd" 2>&1 | grep -q 'not a dynamic' || fail "agentd is not static"
"$T/b/agentd/agentd" --listen 127.0.0.1:0 --insecure --db "$T/t.db" --port-file "$T/port" \
	--nvml-lib "$fake" --gpu-interval 0.1 2>"$T/err" &
pid=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || fail "agentd did not start: $(cat "$T/err")"
sleep 1
kill -0 "$pid" 2>/dev/null || fail "agentd died: $(tail -n 3 "$T/err")"
grep -q "statically linked and cannot load NVML" "$T/err" ||
	fail "no word on NVML: $(cat "$T/err")"
kill "$pid"
wait "$pid"
pid=
echo "static: ok"
