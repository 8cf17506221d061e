#!/bin/sh
# SPDX-License-Identifier: MIT
# cmake -DCMAKE_BUILD_TYPE=Release must build: warnings are errors only where asked for
# (FLEETQ_WERROR, which scripts/test and .ci/run turn on), and the maybe-uninitialized
# warnings GCC finds at -O3 in agentd/store*.c and transport/session.c are gone.
. "$(dirname "$0")/../lib.sh"
set -u
src=$1
scratch fq-release
cmake -S "$src" -B "$T" -DCMAKE_BUILD_TYPE=Release -DFLEETQ_BPF=OFF >"$T/log" 2>&1 ||
	fail "Release configure: $(tail -n 5 "$T/log")"
grep -q '^FLEETQ_WERROR:BOOL=OFF$' "$T/CMakeCache.txt" ||
	fail "a user's build has -Werror: $(grep FLEETQ_WERROR "$T/CMakeCache.txt")"
# the -O3 warnings: compiled with -Werror, each must pass
cmake -S "$src" -B "$T" -DFLEETQ_WERROR=ON >"$T/log" 2>&1 || fail "reconfigure"
make -C "$T/agentd" store.o store_retain.o >"$T/store.log" 2>&1 ||
	fail "agentd/store.c: $(grep -m3 error "$T/store.log")"
make -C "$T/transport" session.o >"$T/session.log" 2>&1 ||
	fail "transport/session.c: $(grep -m3 error "$T/session.log")"
grep -q 'FLEETQ_WERROR=.*ON' "$src/scripts/test" || fail "scripts/test does not turn FLEETQ_WERROR on"
grep -q 'FLEETQ_WERROR=ON' "$src/.ci/run" || fail ".ci/run does not turn FLEETQ_WERROR on"
echo "release: ok"
