# SPDX-License-Identifier: MIT
# Shared by the hardening tests: tests/e2e/lib.sh (temp dir, certificates,
# agents on 127.0.0.1:0, cleanup) plus what attacks need.
. "$(dirname "$0")/../e2e/lib.sh"

# dated_cert CADIR NAME CN START END: a client certificate signed by CADIR's CA
# with the given validity (openssl ca: x509 -req cannot date into the past).
# START/END are YYMMDDHHMMSSZ.
dated_cert() {
	cad=$1 name=$2 cn=$3 start=$4 end=$5
	w=$T/ca-$name
	mkdir -p "$w"
	: >"$w/index.txt"
	cat >"$w/ca.cnf" <<CNF
[ ca ]
default_ca = fq
[ fq ]
database = $w/index.txt
new_certs_dir = $w
serial = $w/serial
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
x509_extensions = leaf
[ any ]
commonName = supplied
[ leaf ]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectAltName = DNS:$cn
CNF
	openssl rand -hex 16 | sed 's/^./7/' >"$w/serial"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$cad/$name.key" \
		2>"$w/err" || fail "genpkey $name: $(cat "$w/err")"
	openssl req -new -key "$cad/$name.key" -subj "/CN=$cn" -out "$w/csr" 2>"$w/err" ||
		fail "req $name: $(cat "$w/err")"
	openssl ca -batch -notext -config "$w/ca.cnf" -cert "$cad/ca.crt" -keyfile "$cad/ca.key" \
		-startdate "$start" -enddate "$end" -in "$w/csr" -out "$cad/$name.crt" \
		>"$w/out" 2>&1 || fail "openssl ca $name: $(cat "$w/out")"
}

# fqc CERTNAME ARGS...: fleetq with client certificate $T/ca/CERTNAME.{crt,key}.
fqc() {
	cn=$1
	shift
	"$FLEETQ" --ca "$T/ca/ca.crt" --cert "$T/ca/$cn.crt" --key "$T/ca/$cn.key" "$@" \
		>"$T/out" 2>"$T/err"
	RC=$?
}

# log_has NAME REGEX: agent NAME's log has (or gets, within 10 s: the agent may
# log just after the client has gone) a line matching REGEX.
log_has() {
	await "agent $1's log lacks /$2/" 100 0.1 - grep -qE -- "$2" "$T/$1.log"
}

# err_has REGEX: fleetq's stderr has a line matching REGEX.
err_has() {
	grep -qE -- "$1" "$T/err" || { cat "$T/err" >&2; fail "fleetq's stderr lacks /$1/"; }
}

# no_rows: fleetq printed nothing on stdout.
no_rows() {
	[ ! -s "$T/out" ] || fail "${1:-refused client} got rows: $(head -c 300 "$T/out")"
}

# vmhwm PID: peak resident set of PID in KiB.
vmhwm() {
	awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"
}

# need_trace: skips unless this run can trace the stand-in workload (root, an agentd built
# with the tracer, fq-workload); sets LIBS (the stand-in's libraries, for --probes) and DB.
need_trace() {
	[ "$(id -u)" = 0 ] || skip "needs root for BPF"
	[ "${AGENTD_HAVE_TRACE:-0}" = 1 ] || skip "agentd built without tracing"
	[ -n "${FQ_WORKLOAD:-}" ] || skip "no stand-in workload"
	S=$(dirname "$FQ_WORKLOAD")
	LIBS="lib:$S/libnccl.so.2,lib:$S/libcudart.so.13,lib:$S/libcuda.so.1"
	DB=$T/trace.db
}

# trace_agent NAME NODE PROBES [ARG...]: a tracing agentd writing $DB, plaintext on a free
# loopback port, its stderr in $T/NAME.log; returns once it serves, with APID and A (its
# port) set.
trace_agent() {
	_n=$1 _node=$2 _probes=$3
	shift 3
	rm -f "$T/$_n.port"
	"$AGENTD" --listen 127.0.0.1:0 --insecure --db "$DB" --node "$_node" --probes "$_probes" \
		--port-file "$T/$_n.port" "$@" 2>"$T/$_n.log" &
	APID=$!
	PIDS="$PIDS $APID"
	await "agentd ($_n) did not start" 300 0.05 "$APID" grep -q 'serving' "$T/$_n.log"
	A=$(cat "$T/$_n.port")
}
