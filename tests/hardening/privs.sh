#!/bin/sh
# SPDX-License-Identifier: MIT
# What a running agentd may still do (docs/security.md): with --no-trace, no
# capability at all and no_new_privs; with --user, not root either; with the
# tracer, the query side holds nothing while the tracer's threads hold
# exactly CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYS_PTRACE,
# CAP_DAC_READ_SEARCH and CAP_SYS_RESOURCE, and still attach to a workload started after agentd.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || skip "privs: not root, nothing to drop"
certs ca 127.0.0.1
"$TRACEGEN" --out "$T/n.db" --node n --ranks 2 --nranks 2 --steps 5 >"$T/gen.log" 2>&1 ||
	fail "fq-tracegen"
field() { awk -v k="$2:" '$1 == k { print $2 }' "$1"; }

# --no-trace: nothing left.
start_agent a "$T/n.db" ca
# The port file says "listening"; privileges are dropped just after, before
# the first query is served: wait for that before reading /proc.
log_has a "privileges: uid 0, no capabilities on the query side, no_new_privs"
st=/proc/$PID/status
for k in CapEff CapPrm CapInh CapBnd CapAmb; do
	[ "$(field "$st" $k)" = 0000000000000000 ] || fail "--no-trace: $k is $(field "$st" $k)"
done
[ "$(field "$st" NoNewPrivs)" = 1 ] || fail "--no-trace: NoNewPrivs is not set"
fq -w "127.0.0.1:$PORT" --format tsv "SELECT count(*) FROM collectives"
[ "$RC" = 0 ] || fail "--no-trace: no longer serves after dropping privileges"

# --user nobody: uid and gid change, queries still work.
chmod 755 "$T" "$T/ca"
chmod 644 "$T/n.db" "$T/ca/127.0.0.1.key"
start_agent u "$T/n.db" ca --user nobody
NOBODY=$(id -u nobody)
log_has u "privileges: uid $NOBODY, no capabilities"
[ "$(field "/proc/$PID/status" Uid)" = "$NOBODY" ] || fail "--user nobody: still uid $(field "/proc/$PID/status" Uid)"
[ "$(field "/proc/$PID/status" CapEff)" = 0000000000000000 ] || fail "--user: CapEff"
fq -w "127.0.0.1:$PORT" --format tsv "SELECT count(*) FROM collectives"
[ "$RC" = 0 ] || fail "--user nobody: does not serve: $(cat "$T/err")"
"$AGENTD" --listen 127.0.0.1:0 --db "$T/n.db" --insecure --user no-such-user-here \
	--no-trace >"$T/x.out" 2>"$T/x.err" && fail "--user no-such-user-here started"
grep -q "^agentd: cannot switch to user 'no-such-user-here': no such user; name an existing user in --user$" "$T/x.err" ||
	fail "--user unknown: $(cat "$T/x.err")"
"$AGENTD" --listen 127.0.0.1:0 --db "$T/n.db" --insecure --user nobody >"$T/x.out" \
	2>"$T/x.err" && fail "--user with the tracer started"
grep -q "^agentd: --user works only with --no-trace" "$T/x.err" || fail "--user with tracing: $(cat "$T/x.err")"

# The tracer: only when built with it and a workload to trace is at hand.
if [ "${AGENTD_HAVE_TRACE:-0}" != 1 ] || [ -z "${FQ_WORKLOAD:-}" ]; then
	echo "ok (tracer part skipped: no tracer or no fq-workload)"
	exit 0
fi
# start_agent serves with --no-trace: start this one by hand, probing the stand-in libraries
SD=$(dirname "$FQ_WORKLOAD")
LIBS="lib:$SD/libnccl.so.2,lib:$SD/libcudart.so.13,lib:$SD/libcuda.so.1"
"$AGENTD" --listen 127.0.0.1:0 --db "$T/t.db" --node t --port-file "$T/t.port" \
	--log "$T/t.log" --ib-interval 0 --probes "nccl,sync,proc,$LIBS" --ca "$T/ca/ca.crt" --cert "$T/ca/127.0.0.1.crt" \
	--key "$T/ca/127.0.0.1.key" 2>"$T/t.err" &
TPID=$!
PIDS="$PIDS $TPID"
i=0
until [ -s "$T/t.port" ]; do
	kill -0 "$TPID" 2>/dev/null || fail "tracing agentd exited: $(cat "$T/t.err")"
	i=$((i + 1))
	[ $i -lt 300 ] || fail "tracing agentd wrote no port file"
	sleep 0.1
done
log_has t "privileges: uid 0, no capabilities on the query side"
# the thread that serves queries holds nothing; the others exactly the trace set
# (those of them we hold: a container may withhold some, e.g. CAP_SYS_RESOURCE)
have=$(field /proc/self/status CapPrm)
want=$(printf '%016x' $(((1 << 39 | 1 << 38 | 1 << 21 | 1 << 19 | 1 << 2 | 1 << 24) & 0x$have)))
[ "$(field "/proc/$TPID/status" CapEff)" = 0000000000000000 ] || fail "tracing: main thread CapEff"
[ "$(field "/proc/$TPID/status" NoNewPrivs)" = 1 ] || fail "tracing: NoNewPrivs"
for s in /proc/$TPID/task/*/status; do
	c=$(field "$s" CapEff)
	[ "$c" = 0000000000000000 ] || [ "$c" = "$want" ] ||
		fail "tracing: thread $(field "$s" Pid) has CapEff $c, want 0 or $want"
	[ "$c" = "$want" ] && tracer_threads=1
done
[ -n "${tracer_threads:-}" ] || fail "tracing: no thread holds the trace capabilities"
# a workload started after agentd is still attached to and traced
"$FQ_WORKLOAD" --ranks 2 --steps 200 --step-us 2000 --report "$T/r.tsv" >"$T/w.log" 2>&1 ||
	fail "fq-workload: $(cat "$T/w.log")"
i=0
until [ "$(sqlite3 "$T/t.db" 'SELECT count(*) FROM collectives' 2>/dev/null || echo 0)" -ge 40 ]; do
	i=$((i + 1))
	[ $i -lt 150 ] || fail "tracing with dropped privileges: $(sqlite3 "$T/t.db" \
		'SELECT count(*) FROM collectives') collectives traced, want 40"
	sleep 0.2
done
echo "ok (tracer attached to a later workload with $want)"
