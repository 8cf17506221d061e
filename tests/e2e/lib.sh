# SPDX-License-Identifier: MIT
# Shared by the fleetq end-to-end tests: a temp dir, certificates, real agentd
# processes on 127.0.0.1 with free ports, and cleanup on any exit.
#
# Callers set FLEETQ, AGENTD, TRACEGEN, MKCERTS (CMake passes them) and source this.

set -u
# No user or system config file leaks into a test.
export FLEETQ_CONFIG=/dev/null
unset SLURM_JOB_NODELIST

T=$(mktemp -d "${TMPDIR:-/tmp}/fq-e2e.XXXXXX")
PIDS=
cleanup() {
	for p in $PIDS; do
		kill -CONT "$p" 2>/dev/null
		kill "$p" 2>/dev/null
	done
	for p in $PIDS; do
		wait "$p" 2>/dev/null
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
	for f in "$T"/*.log; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
	done
	exit 1
}

for v in FLEETQ AGENTD TRACEGEN MKCERTS; do
	eval "x=\${$v:-}"
	[ -n "$x" ] && [ -x "$x" ] || { echo "e2e: $v is not set to an executable" >&2; exit 1; }
done

# certs DIR HOST...: a CA with node and client certificates under $T/DIR.
certs() {
	d=$1
	shift
	"$MKCERTS" "$T/$d" "$@" >"$T/mkcerts-$d.log" 2>&1 || fail "mkcerts $d failed"
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
	i=0
	while [ ! -s "$T/$name.port" ]; do
		kill -0 "$PID" 2>/dev/null || fail "agentd $name exited at start"
		i=$((i + 1))
		[ $i -lt 200 ] || fail "agentd $name wrote no port file"
		sleep 0.05
	done
	PORT=$(cat "$T/$name.port")
}

# A port nobody listens on: bind one, read it, let it go.
# fake MODE: starts fq-fakeagent ($FAKEAGENT) in MODE; sets port.
fake() {
	"$FAKEAGENT" "$1" "$T/fake-$1.port" >/dev/null 2>"$T/fake-$1.log" &
	PIDS="$PIDS $!"
	i=0
	while [ ! -s "$T/fake-$1.port" ]; do
		i=$((i + 1))
		[ $i -lt 100 ] || fail "fake agent $1 did not start"
		sleep 0.05
	done
	port=$(cat "$T/fake-$1.port")
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
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
