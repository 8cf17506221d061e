#!/bin/sh
# SPDX-License-Identifier: MIT
# FLEETQ_STATIC builds an agentd to carry to GPU hosts. A static program cannot load NVML
# (linked against the system's libc: on a 4-GPU host it died of SIGFPE inside libc.so.6 at
# start): it must say so and go on tracing. FLEETQ_STATIC_LIBC=OFF links every library from its
# .a but libc from the machine: that agentd loads NVML and samples. Uses tests/nvml's fake
# libnvidia-ml.so.1 (a test double with NVML's ABI).
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

# every library static but libc: no shared library beyond libc's own, and NVML loads
cmake -S "$src" -B "$T/d" -DFLEETQ_STATIC=ON -DFLEETQ_STATIC_LIBC=OFF >"$T/log" 2>&1 ||
	fail "configure (libc shared): $(tail -n 5 "$T/log")"
cmake --build "$T/d" --target agentd fleetq -j2 >"$T/log" 2>&1 ||
	fail "build (libc shared): $(grep -m3 error "$T/log")"
for b in "$T/d/agentd/agentd" "$T/d/fanout/fleetq"; do
	other=$(ldd "$b" | grep -v -e linux-vdso -e 'libc\.so' -e 'libm\.so' -e 'ld-linux' \
		-e 'libmvec\.so')
	[ -z "$other" ] || fail "$b needs shared libraries besides libc: $other"
done
rm -f "$T/port"
printf 'gpus 2\n' >"$T/nvml.conf"
FAKE_NVML_CONFIG=$T/nvml.conf "$T/d/agentd/agentd" --listen 127.0.0.1:0 --insecure --db "$T/d.db" --port-file "$T/port" \
	--nvml-lib "$fake" --gpu-interval 0.1 2>"$T/err" &
pid=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || fail "agentd (libc shared) did not start: $(cat "$T/err")"
n=0
for _ in $(seq 50); do
	n=$("$T/d/fanout/fleetq" -w "127.0.0.1:$(cat "$T/port")" --insecure --format tsv \
		"SELECT count(*) AS n FROM gpu_samples" 2>/dev/null | tail -n 1 | cut -f 2)
	[ "${n:-0}" -gt 0 ] 2>/dev/null && break
	sleep 0.2
done
[ "${n:-0}" -gt 0 ] 2>/dev/null || fail "agentd (libc shared) took no GPU sample: $(tail -n 3 "$T/err")"
grep -q "cannot load NVML" "$T/err" && fail "agentd (libc shared) refused NVML"
kill "$pid"
wait "$pid"
pid=
echo "static, libc shared: ok ($n samples)"
