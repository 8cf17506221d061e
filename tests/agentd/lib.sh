# SPDX-License-Identifier: MIT
# Shared by the t*.sh scripts: on top of tests/lib.sh, certificates, a trace file, and
# agentd processes that are always killed on exit.
. "$(dirname "$0")/../lib.sh"
set -eu
: "${AGENTD:?set AGENTD to the agentd binary}"
: "${FQTC:?set FQTC to the fqtc test client}"
: "${MKCERTS:?set MKCERTS to certs/mkcerts}"
: "${SCHEMA_SQL:?set SCHEMA_SQL to sql/schema.sql}"

scratch agentd-test
# agentd and fqtc are killed outright: a test may leave either mid-stream.
KILL_SIGNAL=KILL

# every log and stderr file, line by line under its name
fail_logs() {
	for f in "$T"/*.log "$T"/*.err; do
		[ -s "$f" ] && sed "s|^|  $(basename "$f"): |" "$f" >&2
	done
}

# make_certs [DIR [HOST...]]: a CA, a localhost server certificate and a client certificate.
make_certs() {
	d=${1:-$T/certs}
	[ $# -gt 0 ] && shift
	[ $# -gt 0 ] || set -- localhost
	certs_in "$d" "$@"
}

# make_db FILE: the trace schema with schema_version 1, plus test tables t and v.
make_db() {
	db=${1:-$T/trace.db}
	{
		cat "$SCHEMA_SQL"
		cat <<'SQL'
INSERT OR REPLACE INTO meta VALUES ('schema_version', 1), ('clock_source', 'realtime-test');
CREATE TABLE t (a INTEGER, b INTEGER, c REAL, d TEXT);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 1000)
INSERT INTO t SELECT x, x * x - 500, x / 7.0, 'row ' || x || char(233) FROM n;
CREATE TABLE v (k INTEGER PRIMARY KEY, x);
INSERT INTO v VALUES
	(1, 9223372036854775807), (2, -9223372036854775808), (3, 0), (4, -1),
	(5, 0.1), (6, 1.7976931348623157e308), (7, 4.9e-324), (8, -2.5),
	(9, ''), (10, 'tab	and
newline ü 日本'), (11, X'00ff10'), (12, X''), (13, NULL);
SQL
	} | sqlite3 -batch "$db" || fail "cannot create $db"
}

# start_agentd [ARGS...]: starts agentd on 127.0.0.1:0; sets PORT and APID.
start_agentd() {
	rm -f "$T/port"
	"$AGENTD" --listen 127.0.0.1:0 --port-file "$T/port" --no-trace --db "$T/trace.db" \
		--ca "$T/certs/ca.crt" --cert "$T/certs/localhost.crt" --key "$T/certs/localhost.key" \
		--node testnode --log "$T/agentd.log" "$@" 2>>"$T/agentd.err" &
	APID=$!
	PIDS="$PIDS $APID"
	wait_for "port file" test -s "$T/port"
	PORT=$(cat "$T/port")
}

# wait_for WHAT CMD...: polls CMD until it succeeds (20 s at most; not a timing check), and
# fails at once when agentd ($APID) has exited.
wait_for() {
	what=$1
	shift
	await "waiting for $what" 200 0.1 "${APID:--}" "$@"
}

# fq [ARGS...]: fqtc with the default client certificate.
fq() {
	"$FQTC" --port "$PORT" --ca "$T/certs/ca.crt" --cert "$T/certs/client.crt" \
		--key "$T/certs/client.key" "$@"
}

# fq_bg OUT ARGS...: fq in the background, output to OUT; sets BG to fqtc's own pid.
fq_bg() {
	out=$1
	shift
	"$FQTC" --port "$PORT" --ca "$T/certs/ca.crt" --cert "$T/certs/client.crt" \
		--key "$T/certs/client.key" "$@" >"$out" 2>&1 &
	BG=$!
	PIDS="$PIDS $BG"
}

# has FILE LINE: FILE has exactly this line.
has() {
	grep -qxF -- "$2" "$1" || fail "expected line '$2' in $1; got:
$(cat "$1")"
}
# has_re FILE REGEX
has_re() {
	grep -qE -- "$2" "$1" || fail "expected /$2/ in $1; got:
$(cat "$1")"
}
lacks_re() {
	! grep -qE -- "$2" "$1" || fail "did not expect /$2/ in $1; got:
$(cat "$1")"
}
