#!/bin/sh
# SPDX-License-Identifier: MIT
# agentd and fleetq stand side by side on the shared libraries: neither
# program's folder includes from the other's, the libraries (base, wire,
# transport, sql, bpf) include from neither, and agentd carries none of
# fleetq's merge, coverage or output code.
# usage: deps.sh SOURCE_DIR AGENTD_BINARY
set -u
src=$1
agentd=$2
bad=0
fail() {
	echo "FAIL: $*" >&2
	bad=1
}
reach() { # folder, the folders it must not include from
	dir=$1
	shift
	for other in "$@"; do
		hits=$(grep -rnE "^#[[:space:]]*include[[:space:]]*\"(\.\./)+$other/" \
			"$src/$dir" --include='*.c' --include='*.h' 2>/dev/null)
		[ -z "$hits" ] || fail "$dir/ includes from $other/: $hits"
	done
}
reach agentd fanout
reach fanout agentd
for lib in base wire transport sql bpf; do
	reach "$lib" agentd fanout
done
# Headers only one program has: found by name, not by path.
for h in coverage.h merge.h direct.h output.h gather.h; do
	hits=$(grep -rln "#include \"$h\"" "$src/agentd" "$src/base" "$src/wire" \
		"$src/transport" "$src/sql" 2>/dev/null)
	[ -z "$hits" ] || fail "fleetq's $h included by $hits"
done
for h in query.h server.h store.h trace.h; do
	hits=$(grep -rln "#include \"$h\"" "$src/fanout" "$src/base" "$src/wire" \
		"$src/transport" 2>/dev/null)
	[ -z "$hits" ] || fail "agentd's $h included by $hits"
done
# The binary: no merge database, coverage or direct output inside agentd.
syms=$(nm "$agentd" 2>/dev/null | grep -E ' T (merge_|coverage_|direct_|gather_|outcome_name$)')
[ -z "$syms" ] || fail "agentd links fleetq's code: $syms"
nm "$agentd" | grep -q ' T fanout_run$' || fail "agentd has no fanout_run: is this the right binary?"
[ "$bad" = 0 ] && echo "layout: ok"
exit "$bad"
