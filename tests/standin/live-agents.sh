# SPDX-License-Identifier: MIT
# Sourced by the live tests (after tests/e2e/lib.sh): four agentd processes with the real
# eBPF tracer, each scoped with --cgroup to one "node" cgroup (CG/node0..3) of the stand-in
# job, over mutual TLS. Skips (exit 77) without root, kernel BTF or a cgroup v2 mount.
#   live_agents NAME: makes CG=<cgroup v2 mount>/NAME-$$ with node0..3 (removed at exit),
#   starts the agents and waits for their ports; sets CG, PORT[0..3], HOSTS (a,b,c,d).
#   live_agents_cg NAME and live_agents_start are its two halves (a job can start between
#   them); live_agents_stop stops the agents, and live_agents_start starts them again on
#   the same trace files (agentd restarted while a job runs).
#   With FAKENVML (tests/nvml's fake libnvidia-ml.so.1) set, each agent samples its fake GPUs
#   every 100 ms, as $T/nvml.node<k>.conf says (a test writes these first).
#   LIVE_PROBES: probe sets to add (e.g. tcp). PLUGIN, CUPTI: fleetq's NCCL profiler plugin
#   and CUDA injection library, attached at start as agentd attaches them where installed.

cleanup_cg() {
	cleanup
	for k in 0 1 2 3; do rmdir "$CG/node$k" 2>/dev/null; done
	rmdir "$CG" 2>/dev/null
}

live_agents() {
	live_agents_cg "$1"
	live_agents_start
}

# live_agents_cg NAME: the checks and the cgroups only (a job can start in them first)
live_agents_cg() {
	[ "$(id -u)" = 0 ] || skip "needs root to load BPF programs"
	[ -r /sys/kernel/btf/vmlinux ] || skip "no kernel BTF at /sys/kernel/btf/vmlinux"
	[ -x "${STANDIN:-}/fq-workload" ] ||
		fail "no stand-in workload at '${STANDIN:-}' (target standin)"
	V2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
	[ -n "$V2" ] || skip "no cgroup v2 mount"
	CG=$V2/$1-$$
	mkdir "$CG" 2>/dev/null || skip "cannot create a cgroup under $V2"
	for k in 0 1 2 3; do mkdir "$CG/node$k" || fail "cannot create $CG/node$k"; done
	trap cleanup_cg EXIT
}

# live_agents_start: the four agents (again, after live_agents_stop: the same trace files)
live_agents_start() {
	# The stand-in ranks call NCCL microseconds after exec: attach its libraries at start.
	LIBS="lib:$STANDIN/libnccl.so.2,lib:$STANDIN/libcudart.so.13,lib:$STANDIN/libcuda.so.1"
	# and fleetq's NCCL profiler plugin, as agentd attaches it where it is installed
	[ -z "${PLUGIN:-}" ] || LIBS="$LIBS,lib:$PLUGIN"
	# and fleetq's CUDA injection library (CUPTI: its path), likewise
	[ -z "${CUPTI:-}" ] || LIBS="$LIBS,lib:$CUPTI"
	[ -s "$T/ca/ca.crt" ] || certs ca 127.0.0.1
	# Four agents load and attach at once (BPF loading takes a while each).
	for k in 0 1 2 3; do
		rm -f "$T/node$k.port"
		GPUARGS=
		[ -z "${FAKENVML:-}" ] || GPUARGS="--gpu-interval 0.1 --nvml-lib $FAKENVML"
		FAKE_NVML_CONFIG=$T/nvml.node$k.conf \
		"$AGENTD" --listen 127.0.0.1:0 --db "$T/node$k.db" --node "node$k" \
			--ca "$T/ca/ca.crt" --cert "$T/ca/127.0.0.1.crt" --key "$T/ca/127.0.0.1.key" \
			--cgroup "$CG/node$k" --probes "nccl,sync,sched,proc${LIVE_PROBES:+,$LIVE_PROBES},$LIBS" \
			--ib-interval 0 $GPUARGS --port-file "$T/node$k.port" --log "$T/node$k.log" &
		APID[$k]=$!
		PIDS="$PIDS $!"
	done
	HOSTS=
	for k in 0 1 2 3; do
		# not await_port: PORT is an array here
		await "agentd node$k wrote no port file" 600 0.05 "${APID[$k]}" \
			test -s "$T/node$k.port"
		PORT[$k]=$(cat "$T/node$k.port")
		HOSTS="$HOSTS${HOSTS:+,}127.0.0.1:${PORT[$k]}"
	done
}

# live_agents_stop: stops the four agents (SIGTERM) and waits for them
live_agents_stop() {
	for k in 0 1 2 3; do kill -TERM "${APID[$k]}" 2>/dev/null; done
	for k in 0 1 2 3; do wait "${APID[$k]}" 2>/dev/null; done
}
