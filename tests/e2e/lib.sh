# SPDX-License-Identifier: MIT
# Shared by the fleetq end-to-end tests (and the gate, relay, stragglers and nvml ones):
# on top of tests/lib.sh's scratch folder, cleanup and waits, certificates under $T, real
# agentd processes on 127.0.0.1 with free ports, and fleetq with the test client's.
#
# Callers set FLEETQ, AGENTD, TRACEGEN, MKCERTS (CMake passes them) and source this; a
# script outside tests/ sets FQ_TESTS to the tests folder first.

. "${FQ_TESTS:-$(dirname "$0")/..}/lib.sh"
set -u
# No user or system config file leaks into a test.
export FLEETQ_CONFIG=/dev/null
unset SLURM_JOB_NODELIST

scratch fq-e2e
fail_logs() { tail_logs 20 "$T"/*.log; }

for v in FLEETQ AGENTD TRACEGEN MKCERTS; do
	eval "x=\${$v:-}"
	[ -n "$x" ] && [ -x "$x" ] || { echo "e2e: $v is not set to an executable" >&2; exit 1; }
done

# certs DIR HOST...: a CA with node and client certificates under $T/DIR.
certs() {
	d=$1
	shift
	certs_in "$T/$d" "$@"
}

# start_agent NAME DB CERTDIR [agentd options...]: starts agentd on 127.0.0.1:0
# with the node certificate CERTDIR/$CERTHOST.crt (default 127.0.0.1), or none when
# CERTDIR is "-" (pass --insecure then); sets PORT and PID.
start_agent() {
	name=$1 db=$2 cd=$3 ch=${CERTHOST:-127.0.0.1}
	shift 3
	rm -f "$T/$name.port"
	if [ "$cd" = - ]; then
		set -- "$@"
	else
		set -- --ca "$T/$cd/ca.crt" --cert "$T/$cd/$ch.crt" --key "$T/$cd/$ch.key" "$@"
	fi
	"$AGENTD" --listen 127.0.0.1:0 --db "$db" --no-trace \
		--node "$name" --port-file "$T/$name.port" --log "$T/$name.log" "$@" &
	PID=$!
	PIDS="$PIDS $PID"
	await_port "agentd $name" "$T/$name.port" "$PID"
}

# fake MODE: starts fq-fakeagent ($FAKEAGENT) in MODE; sets port.
fake() {
	"$FAKEAGENT" "$1" "$T/fake-$1.port" >/dev/null 2>"$T/fake-$1.log" &
	PIDS="$PIDS $!"
	await "fake agent $1 did not start" 100 0.05 - test -s "$T/fake-$1.port"
	port=$(cat "$T/fake-$1.port")
}

# fq ARGS...: fleetq with the test client certificate (none with --insecure, which
# refuses them); stdout $T/out, stderr $T/err, exit status in RC.
fq() {
	case " $* " in
	*" --insecure "*) "$FLEETQ" "$@" >"$T/out" 2>"$T/err" ;;
	*) "$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/client.crt" --key "$T/ca/client.key" "$@" \
		>"$T/out" 2>"$T/err" ;;
	esac
	RC=$?
}

expect_rc() {
	[ "$RC" = "$1" ] || { cat "$T/err" >&2; fail "${2:-}: exit status $RC, want $1"; }
}

expect_err() {
	grep -q -- "$1" "$T/err" || { cat "$T/err" >&2; fail "${2:-check}: stderr lacks '$1'"; }
}
