# SPDX-License-Identifier: MIT
# Shared by tests/slurm: on top of tests/lib.sh (scratch folder, cleanup, certificates),
# local agentd processes.
# Callers set FLEETQ, AGENTD, MKCERTS (CMake passes them; see CMakeLists.txt) and source this.
. "$(dirname "$0")/../lib.sh"
set -eu
export FLEETQ_CONFIG=/dev/null
unset SLURM_JOB_NODELIST SLURM_NODELIST SLURM_JOB_ID

scratch fq-slurm
fail_logs() { tail_logs 15 "$T"/*.log "$T"/slurm/log/*.log; }

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
	await_port "agentd $name" "$T/$name.port" "$PID" 600
}
