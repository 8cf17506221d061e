#!/bin/sh
# SPDX-License-Identifier: MIT
# Bounded fuzzing from a normal (gcc) build: configures SRC with clang and
# -DFLEETQ_FUZZ=ON in BUILD (kept between runs, so only the first is slow),
# builds the fuzz_<name> harnesses only, and runs each for
# $FLEETQ_FUZZ_SECONDS (default 20) over a scratch copy of its corpus.
# A crash fails the test and leaves the input in BUILD/crashes/<name>/:
# copy it into tests/fuzz/corpus/<name>/ as a regression case once fixed.
# Exit 77 (skipped) when clang is missing.
# usage: fuzz-bounded.sh SRC BUILD NAME...
set -eu
src=$1 build=$2
shift 2
secs=${FLEETQ_FUZZ_SECONDS:-20}
cc=$(command -v clang || command -v clang-14 || true)
if [ -z "$cc" ]; then
	echo "fuzz-bounded: clang not found; install clang to fuzz (skipped)"
	exit 77
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
	CC=$cc cmake -S "$src" -B "$build" -DFLEETQ_FUZZ=ON -DFLEETQ_BPF=OFF \
		-DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build.configure.log" 2>&1 ||
		{ cat "$build.configure.log" >&2; echo "fuzz-bounded: cannot configure '$build' with clang" >&2; exit 1; }
fi
targets=
for n in "$@"; do
	targets="$targets fuzz_$n"
done
# shellcheck disable=SC2086
cmake --build "$build" -j"$(nproc)" --target $targets >"$build.build.log" 2>&1 ||
	{ tail -n 30 "$build.build.log" >&2; echo "fuzz-bounded: cannot build the fuzzers in '$build'" >&2; exit 1; }
rc=0
for n in "$@"; do
	work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-$n.XXXXXX")
	mkdir -p "$build/crashes/$n"
	dict=
	[ "$n" = sqlguard ] && dict=-dict=$src/tests/fuzz/sql.dict
	# shellcheck disable=SC2086
	if "$build/tests/fuzz/fuzz_$n" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=30 \
		-artifact_prefix="$build/crashes/$n/" -print_final_stats=1 $dict \
		"$work" "$src/tests/fuzz/corpus/$n" >"$work.log" 2>&1; then
		execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work.log")
		echo "fuzz_$n: ${execs:-?} executions in ${secs} s, no crash"
	else
		tail -n 40 "$work.log" >&2
		echo "fuzz_$n: crashed; the input is in '$build/crashes/$n/'" >&2
		rc=1
	fi
	rm -rf "$work" "$work.log"
done
exit $rc
