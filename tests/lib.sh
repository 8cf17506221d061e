# SPDX-License-Identifier: MIT
# Shared by every shell test: each folder's lib.sh sources this first, then adds what is its
# own. One way to fail, skip and report, to make a scratch folder that goes away with the
# processes the test started, to wait for a process without a fixed sleep, and to make
# certificates. Sourced, not run: it sets no shell option (the folder's lib.sh does), and
# POSIX sh, as the tests run under sh or bash.

# skip WHY: this test cannot run here (ctest's SKIP_RETURN_CODE 77): no root, no BTF...
skip() {
	echo "SKIP: $*" >&2
	exit 77
}

# ok WHAT: a check passed, for the log ctest keeps.
ok() { echo "ok: $*"; }

# fail WHY: the test failed. fail_logs shows what helps to see why (a folder's lib.sh
# replaces it: agent logs, a workload's stderr); what it runs cannot change the status.
fail() {
	echo "FAIL: $*" >&2
	fail_logs || :
	exit 1
}
fail_logs() { :; }

# tail_logs N FILE...: the last N lines of each FILE that exists, under its name, on stderr.
tail_logs() {
	_tl_n=$1
	shift
	for _tl_f in "$@"; do
		[ -f "$_tl_f" ] || continue
		echo "--- $_tl_f" >&2
		tail -n "$_tl_n" "$_tl_f" >&2
	done
}

# scratch NAME: makes T, a fresh folder under $TMPDIR (default /tmp), and sets the traps that
# run cleanup on any exit. A test adds the processes it starts to PIDS and the functions to
# run first to CLEANUP_HOOKS.
scratch() {
	T=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || {
		echo "FAIL: cannot make a scratch folder under ${TMPDIR:-/tmp}" >&2
		exit 1
	}
	PIDS=
	CLEANUP_HOOKS=
	trap cleanup EXIT
	trap 'exit 1' INT TERM HUP
}

# cleanup: runs CLEANUP_HOOKS, stops every process in PIDS (stopped ones too) with
# KILL_SIGNAL (default TERM) and reaps it, then removes T, unless KEEP is set: then it
# names T and keeps it.
cleanup() {
	for _cl_h in $CLEANUP_HOOKS; do
		"$_cl_h" || :
	done
	for _cl_p in $PIDS; do
		kill -CONT "$_cl_p" 2>/dev/null || :
		kill -"${KILL_SIGNAL:-TERM}" "$_cl_p" 2>/dev/null || :
	done
	for _cl_p in $PIDS; do
		wait "$_cl_p" 2>/dev/null || :
	done
	if [ -n "${KEEP:-}" ]; then
		echo "kept $T" >&2
	else
		rm -rf "$T"
	fi
}

# await WHAT TRIES STEP PID CMD...: runs CMD until it succeeds, STEP seconds apart, and
# fails the test naming WHAT once TRIES runs have not, or as soon as process PID (unless
# it is "-") has exited. A bound on a wait, not a timing check.
await() {
	_aw_what=$1 _aw_tries=$2 _aw_step=$3 _aw_pid=$4
	shift 4
	_aw_i=0
	until "$@"; do
		if [ "$_aw_pid" != - ] && ! kill -0 "$_aw_pid" 2>/dev/null; then
			fail "$_aw_what: process $_aw_pid exited first"
		fi
		_aw_i=$((_aw_i + 1))
		[ "$_aw_i" -lt "$_aw_tries" ] || fail "$_aw_what: gave up after $_aw_i tries"
		sleep "$_aw_step"
	done
}

# await_port NAME FILE PID [TRIES]: waits (0.05 s steps, TRIES of them, default 200) for
# process PID (NAME in messages; "-": none to watch) to write its port to FILE, as agentd's
# --port-file does once it listens; sets PORT.
await_port() {
	await "$1 wrote no port file ($2)" "${4:-200}" 0.05 "$3" test -s "$2"
	PORT=$(cat "$2")
}

# certs_in DIR HOST...: certs/mkcerts ($MKCERTS) makes a CA, a certificate for each HOST and
# a client certificate in DIR; its output goes to $T/mkcerts-<DIR's name>.log.
certs_in() {
	_ci_d=$1
	shift
	"$MKCERTS" "$_ci_d" "$@" >"$T/mkcerts-${_ci_d##*/}.log" 2>&1 ||
		fail "mkcerts $_ci_d $* failed"
}

# free_port: a port nobody listens on: bind one on 127.0.0.1, print it, let it go.
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
