# SPDX-License-Identifier: MIT
# Shared by tests/slurm: a temp dir, certificates, local agentd processes, cleanup by trap.
# Callers set FLEETQ, AGENTD, MKCERTS (CMake passes them; see CMakeLists.txt) and source this.
set -eu
export FLEETQ_CONFIG=/dev/null
unset SLURM_JOB_NODELIST SLURM_NODELIST SLURM_JOB_ID

T=$(mktemp -d "${TMPDIR:-/tmp}/fq-slurm.XXXXXX")
PIDS=
CLEANUP_HOOKS=
cleanup() {
	for h in $CLEANUP_HOOKS; do
		"$h" || :
	done
	for p in $PIDS; do
		kill "$p" 2>/dev/null || :
	done
	for p in $PIDS; do
		wait "$p" 2>/dev/null || :
	done
	if [ -n "${KEEP:-}" ]; then
		echo "kept $T" >&2
	else
		rm -rf "$T"
	fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() {
	echo "FAIL: $*" >&2
	for f in "$T"/*.log "$T"/slurm/log/*.log; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
	done
	exit 1
}
skip() {
	echo "SKIP: $*" >&2
	exit 77
}
ok() { echo "ok: $*"; }

for v in FLEETQ AGENTD MKCERTS; do
	eval "x=\${$v:-}"
	[ -n "$x" ] && [ -x "$x" ] || fail "$v is not set to an executable"
done

# the subcommand may not be built yet in a tree where it is being added
has_stragglers() {
	"$FLEETQ" stragglers --help >/dev/null 2>&1
}

# start_agent NAME DB [agentd options...]: agentd on 127.0.0.1:0 with the node certificate
# of $CERTHOST (default localhost) from $T/certs; sets PORT and PID
start_agent() {
	name=$1 db=$2
	shift 2
	"$AGENTD" --listen 127.0.0.1:0 --db "$db" --node "$name" \
		--ca "$T/certs/ca.crt" --cert "$T/certs/${CERTHOST:-localhost}.crt" \
		--key "$T/certs/${CERTHOST:-localhost}.key" \
		--port-file "$T/$name.port" --log "$T/$name.log" "$@" &
	PID=$!
	PIDS="$PIDS $PID"
	i=0
	while [ ! -s "$T/$name.port" ]; do
		kill -0 "$PID" 2>/dev/null || fail "agentd $name exited at start"
		i=$((i + 1))
		[ $i -lt 600 ] || fail "agentd $name wrote no port file in 30 s"
		sleep 0.05
	done
	PORT=$(cat "$T/$name.port")
}
