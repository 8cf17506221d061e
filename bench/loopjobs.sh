#!/bin/bash
# SPDX-License-Identifier: MIT
# How far does a rank of a clean stand-in job stand out on this machine, shape by shape?
# N jobs of fq-workload (4 ranks, 400 steps: tests/slurm/epilog.sh's jobs) with the given
# options, traced by one host-wide agentd; after each, `fleetq stragglers --all` over it. One
# line per job: the rank whose waits stand out most (largest z_wait), that z, its wait effect
# (its peers' wait per step beyond its own, % of the step), and the ranks named
# (rank:signals:effect). With `taskset -c 0` in front, everything shares one CPU. Not a
# test: it measures the false-positive side of a test's job shape for BENCHMARKS.md.
# usage: bench/loopjobs.sh N [fq-workload options...]   (as root; FLEETQ, AGENTD, MKCERTS,
#   STANDIN as ctest gives slurm.epilog, e.g. from `ctest -R slurm.epilog -V`)
set -u
N=${1:?usage: bench/loopjobs.sh N [fq-workload options...]}
shift
for v in FLEETQ AGENTD MKCERTS STANDIN; do
	[ -n "${!v:-}" ] || { echo "loopjobs: set $v (see the usage)" >&2; exit 2; }
done
T=$(mktemp -d /tmp/fq-loopjobs.XXXXXX)
AP=
trap '[ -z "$AP" ] || kill "$AP" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
"$MKCERTS" "$T/certs" localhost >/dev/null 2>&1 || { echo "loopjobs: mkcerts failed" >&2; exit 1; }
LIBS="lib:$STANDIN/libnccl.so.2,lib:$STANDIN/libcudart.so.13,lib:$STANDIN/libcuda.so.1"
"$AGENTD" --listen 127.0.0.1:0 --db "$T/trace.db" --node localhost --ca "$T/certs/ca.crt" \
	--cert "$T/certs/localhost.crt" --key "$T/certs/localhost.key" --port-file "$T/port" \
	--log "$T/agentd.log" --probes "nccl,sync,malloc,sched,tcp,proc,$LIBS" &
AP=$!
for _ in $(seq 300); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || { echo "loopjobs: agentd did not start: $(tail -n 2 "$T/agentd.log")" >&2; exit 1; }
export FLEETQ_CONFIG=/dev/null XDG_CACHE_HOME=$T/cache
printf 'job\ttop_rank\tz_wait\twait_effect_pct\tnamed\n'
for i in $(seq "$N"); do
	job=loop$i-$$
	"$STANDIN/fq-workload" --ranks 4 --steps 400 --job-id "$job" "$@" >"$T/$job.log" 2>&1 ||
		{ echo "$job: fq-workload failed: $(tail -n 1 "$T/$job.log")"; continue; }
	sleep 2 # the agent stores the job's last collectives
	"$FLEETQ" -q -w "127.0.0.1:$(cat "$T/port")" --ca "$T/certs/ca.crt" \
		--cert "$T/certs/client.crt" --key "$T/certs/client.key" --format tsv \
		stragglers --since 5m --job "$job" --all >"$T/out" 2>"$T/err"
	awk -F'\t' -v job="$job" '
	NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
	{
		z = $(c["z_wait"]) + 0
		if (!seen || z > best) {
			best = z; seen = 1; r = $(c["rank"])
			e = $(c["step_ms"]) > 0 ? 100 * ($(c["peer_wait_ms"]) - $(c["wait_ms"])) / $(c["step_ms"]) : 0
		}
		if ($(c["verdict"]) != "ok")
			named = named (named ? " " : "") $(c["rank"]) ":" $(c["signals"]) ":" $(c["effect_pct"])
	}
	END { printf "%s\t%s\t%.2f\t%.1f\t%s\n", job, seen ? r : "-", best, e, named ? named : "-" }' "$T/out"
done
