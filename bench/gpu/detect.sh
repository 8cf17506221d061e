#!/bin/bash
# SPDX-License-Identifier: MIT
# `fleetq stragglers` on real training jobs (bench/gpu/train.py), on a machine with 2+ GPUs:
# one agentd per rank, each scoped to that rank's cgroup (as if each rank were its own
# node), fleetq's NCCL profiler plugin named in NCCL_PROFILER_PLUGIN, then for each shape
# (DDP, FSDP) one torchrun job that goes through its phases (clean, stall, busy, slower GPU;
# sync every step or every 20) and asks fleetq after each phase. Writes OUT/summary.tsv
# (phase, planted rank, fleetq's exit and first named rank, signals, effect, the phase's
# steps/s, the job's own pacer: the rank that waited least in its synchronize, and every rank
# the report named), OUT/phases.tgz
# (every phase's report and --all TSV) and the agents' logs.
# usage: bench/gpu/detect.sh BINDIR OUT
#            [ddp|fsdp|pipeline|blocking|loaded|gptddp|gptfsdp|cnnddp|cnnfsdp|gptaccum|gptcompile|ttd|overhead|ovhlive]...
#   gptddp, gptfsdp: the same with a transformer language model (train.py --model gpt, GPT_ARGS)
#   cnnddp, cnnfsdp: a ResNet-style image classifier (train.py --model cnn, CNN_ARGS); under DDP
#   its BatchNorm buffers are broadcast every step; gptaccum: the transformer under DDP accumulating gradients
#   over ACCUM micro-batches a step (4); gptcompile: the transformer under DDP, torch.compile'd
#   (fused Triton kernels; needs a C compiler on the machine)
#   ttd: TTD_ARGS passes more train.py arguments (e.g. the transformer's), PHASES_TTD its phases
#   BINDIR holds agentd, fleetq (static builds carried) and libfleetq-nccl-profiler.so, and
#   libfleetq-cupti.so (named in CUDA_INJECTION64_PATH where it is there; FQ_CUPTI=0: not)
#   TRAIN_ARGS: more train.py arguments for every job (e.g. --bind numa); PLACEMENT=1: where
#   each rank's threads ran, sampled beside fleetq (placement.py, OUT/SHAPE-placement.tsv.gz;
#   placement_report.py reads it with the job's phases); with the launch probe in AGENTD_ARGS,
#   launch_report.py reads each rank's launches from the traces (OUT/SHAPE-traces.tgz)
#   One GPU: NPROC=4 TRAIN_ARGS=--share-gpu runs 4 ranks on it, each its own NCCL host over
#   NCCL's sockets (real NCCL and PyTorch; the ranks' kernels share the GPU's time)
set -u
bin=$(cd "$1" && pwd) out=$2
shift 2
what=${*:-ddp fsdp}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
n=${NPROC:-$(nvidia-smi -L | wc -l)}
steps=${STEPS:-300}  # or PHASE_SECONDS: each phase as long as this (train.py --phase-seconds)
v2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$v2" ] || { echo "no cgroup2 mount" >&2; exit 1; }
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
cg=$v2/fleetq-detect-$$
mkdir -p "$out/p"
pids=()
stop_agents() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	wait "${pids[@]}" 2>/dev/null
	pids=()
}
cleanup() {
	stop_agents
	for i in $(seq 0 $((n - 1))); do rmdir "$cg/node$i" 2>/dev/null; done
	rmdir "$cg" 2>/dev/null
}
trap cleanup EXIT
for i in $(seq 0 $((n - 1))); do mkdir -p "$cg/node$i"; done

start_agents() { # tag
	local tag=$1 i
	pids=()
	for i in $(seq 0 $((n - 1))); do
		rm -f "/tmp/fq-$tag$i.db"* "/tmp/fq-$tag$i.port"
		"$bin/agentd" --listen 127.0.0.1:0 --insecure --port-file "/tmp/fq-$tag$i.port" \
			--node "rank$i" --db "/tmp/fq-$tag$i.db" --cgroup "$cg/node$i" ${AGENTD_ARGS:-} \
			2>"$out/$tag-agent$i.log" &
		pids+=($!)
	done
	HOSTS=
	for i in $(seq 0 $((n - 1))); do
		for _ in $(seq 100); do [ -s "/tmp/fq-$tag$i.port" ] && break; sleep 0.1; done
		HOSTS=$HOSTS${HOSTS:+,}127.0.0.1:$(cat "/tmp/fq-$tag$i.port")
	done
	export HOSTS
}

# what fleetq says after each phase: the report, and every rank as TSV
export FQ_ANALYZE='
	"$FQ_BIN/fleetq" -w "$HOSTS" --insecure stragglers --since "${FQ_SINCE}s" --max-seqs 0 \
		>"$FQ_OUT/p/$FQ_PHASE.txt" 2>&1
	rc=$?
	"$FQ_BIN/fleetq" -w "$HOSTS" --insecure stragglers --since "${FQ_SINCE}s" --max-seqs 0 \
		--all --format tsv >"$FQ_OUT/p/$FQ_PHASE.tsv" 2>/dev/null
	first=$(sed -n "1s/^\(straggler\|hung\): rank \([0-9]*\) .*(\(.*\))$/\2 \3/p" "$FQ_OUT/p/$FQ_PHASE.txt")
	sig=$(sed -n "s/^  signals that name it: \([^ ]*\).*/\1/p" "$FQ_OUT/p/$FQ_PHASE.txt" | head -n 1)
	all=$(sed -n "s/^\(straggler\|hung\): rank \([0-9]*\) .*/\2/p" "$FQ_OUT/p/$FQ_PHASE.txt" |
		paste -sd, -)
	printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$FQ_PHASE" "$FQ_TARGET" "$rc" "${first:--}" "${sig:--}" \
		"${FQ_STEPS_PER_S:--}" "${FQ_PACER:--}" "${all:--}" >>"$FQ_OUT/summary.tsv"
	head -n 12 "$FQ_OUT/p/$FQ_PHASE.txt"
	exit $rc'
export FQ_BIN=$bin FQ_OUT=$out
PYTHON_TTD=${PYTHON_TTD:-$py}

counts() { # tag: trace completeness of the tag's agents
	"$bin/fleetq" -w "$HOSTS" --insecure "SELECT (SELECT count(*) FROM nccl_kernels) AS kernels,
		(SELECT count(*) FROM collectives) AS colls,
		(SELECT count(*) FROM collectives WHERE op IN ('Send', 'Recv')) AS p2p,
		(SELECT count(*) FROM nccl_kernels WHERE op IN ('Send', 'Recv')) AS p2p_kernels,
		(SELECT count(*) FROM comms WHERE nccl_hash IS NOT NULL) AS comms_hashed,
		(SELECT count(*) FROM nccl_kernels WHERE comm_hash IS NOT NULL) AS kernels_joined,
		(SELECT value FROM meta WHERE key = 'ring_drops') AS ring_drops" --format tsv \
		>"$out/$1-counts.tsv" 2>&1
	cat "$out/$1-counts.tsv"
}

keep_traces() { # tag: the agents' trace files, for studying here (KEEP_TRACES=0: not)
	[ "${KEEP_TRACES:-1}" = 1 ] || return 0
	tar -C /tmp -czf "$out/$1-traces.tgz" $(cd /tmp && ls "fq-$1"*.db 2>/dev/null)
}
export NCCL_PROFILER_PLUGIN=$bin/libfleetq-nccl-profiler.so
# fleetq's CUDA injection library (each GPU's compute-busy time through CUPTI), where BINDIR
# has it, unless FQ_CUPTI=0 (train.py --kernels-dir runs CUPTI itself: not both)
inject=
if [ -e "$bin/libfleetq-cupti.so" ] && [ "${FQ_CUPTI:-1}" != 0 ]; then
	inject=$bin/libfleetq-cupti.so
	export CUDA_INJECTION64_PATH=$inject
fi

phases_ddp=${PHASES_DDP:-clean1=clean,stall20=stall:20,busy20=busy:20,gpu20=gpu:20,stall10=stall:10,busy10=busy:10,gpu10=gpu:10,clean2=clean,stall20s20=stall:20/s20,busy20s20=busy:20/s20,gpu20s20=gpu:20/s20,clean3=clean/s20,stall10s20=stall:10/s20,busy10s20=busy:10/s20,gpu10s20=gpu:10/s20,stall5=stall:5,gpu5=gpu:5,clean4=clean,busy5=busy:5,clean5=clean/s20,clean6=clean,clean7=clean/s20}
phases_pipeline=${PHASES_PIPELINE:-pclean1=clean,pstall20=stall:20,pbusy20=busy:20,pgpu20=gpu:20,pgpu10=gpu:10,pstall10=stall:10,pclean2=clean}
phases_blocking=${PHASES_BLOCKING:-bclean1=clean,bstall20=stall:20,bbusy20=busy:20,bgpu20=gpu:20,bgpu10=gpu:10,bclean2=clean}
phases_loaded=${PHASES_LOADED:-lclean1=clean,lclean2=clean/s20,lgpu20=gpu:20,lclean3=clean,lstall20=stall:20,lclean4=clean/s20,lclean5=clean,lclean6=clean/s20}
phases_ttd=${PHASES_TTD:-tgpu20=gpu:20@0.34,tstall20=stall:20@0.34,tbusy20=busy:20@0.34,tgpu10=gpu:10@0.34}
phases_gptddp=${PHASES_GPTDDP:-gclean1=clean,gstall20=stall:20,ggpu20=gpu:20,gbusy20=busy:20,gclean2=clean/s20,ggpu10=gpu:10,gstall10s20=stall:10/s20,gclean3=clean}
phases_gptfsdp=${PHASES_GPTFSDP:-hclean1=clean,hstall20=stall:20,hgpu20=gpu:20,hbusy20=busy:20,hclean2=clean,hgpu10=gpu:10,hclean3=clean}
phases_cnnddp=${PHASES_CNNDDP:-qclean1=clean,qstall10=stall:10,qslow20=slow:20,qbusy10s20=busy:10/s20,qclean2=clean/s20,qgpu10=gpu:10,qclean3=clean}
phases_cnnfsdp=${PHASES_CNNFSDP:-yclean1=clean,ystall15=stall:15,ygpu20=gpu:20,yclean2=clean,ybusy15=busy:15,yclean3=clean}
phases_gptaccum=${PHASES_GPTACCUM:-aclean1=clean,astall10=stall:10,aslow20=slow:20,abusy10=busy:10,aclean2=clean,agpu20s20=gpu:20/s20,aclean3=clean}
phases_gptcompile=${PHASES_GPTCOMPILE:-kclean1=clean,kstall10=stall:10,kgpu20=gpu:20,kbusy10s20=busy:10/s20,kclean2=clean,khog50=hog:50,kclean3=clean/s20}
phases_fsdp=${PHASES_FSDP:-fclean1=clean,fstall20=stall:20,fgpu20=gpu:20,fbusy20=busy:20,fclean2=clean,fstall10=stall:10,fgpu10=gpu:10,fbusy10=busy:10,fstall20s20=stall:20/s20,fgpu20s20=gpu:20/s20,fclean3=clean}
printf "phase\tplanted\tfleetq_rc\tnamed (effect)\tsignals\tsteps/s\tpacer\tevery rank named\n" >"$out/summary.tsv"

for w in $what; do
	case $w in
	ddp | fsdp | pipeline | blocking | loaded | gptddp | gptfsdp | cnnddp | cnnfsdp | gptaccum | gptcompile)
		shape=$w
		eval "ph=\$phases_$w"
		margs=
		case $w in
		blocking) shape=ddp ;;
		loaded) shape=ddp ;;
		cnn*)
			shape=${w#cnn}
			margs=${CNN_ARGS:---model cnn --layers 16 --width 64 --batch 256 --img 128}
			;;
		gptcompile)
			shape=ddp
			margs="${GPT_ARGS:---model gpt --layers 12 --width 1024 --heads 16 --seq 1024 --batch 8} --compile"
			;;
		gptaccum)
			shape=ddp
			margs="${GPT_ARGS:---model gpt --layers 12 --width 1024 --heads 16 --seq 1024 --batch 8} --accum ${ACCUM:-4}"
			;;
		gpt*)
			shape=${w#gpt}
			margs=${GPT_ARGS:---model gpt --layers 12 --width 1024 --heads 16 --seq 1024 --batch 8}
			;;
		esac
		start_agents "$w"
		hogs=()
		if [ $w = loaded ]; then
			# a loaded machine: one CPU hog per core, outside the job's cgroups
			for _ in $(seq "$(nproc)"); do
				timeout 400 sh -c 'while :; do :; done' &
				hogs+=($!)
			done
		fi
		sampler=
		if [ "${PLACEMENT:-0}" = 1 ]; then
			# where each rank's threads ran (bench/gpu/placement.py), beside fleetq
			"$py" "$here/placement.py" "$cg" "$out/$w-placement.tsv.gz" &
			sampler=$!
		fi
		(
			[ $w = blocking ] && export CUDA_LAUNCH_BLOCKING=1
			timeout "${JOB_TIMEOUT:-420}" "$py" -m torch.distributed.run --standalone --nproc_per_node="$n" \
				"$here/train.py" --shape "$shape" $margs --cgroup-parent "$cg" --steps "$steps" \
				${PHASE_SECONDS:+--phase-seconds "$PHASE_SECONDS"} \
				${TRAIN_ARGS:-} --phases "$ph" --out "$out/$w-phases.jsonl" >"$out/$w-torch.log" 2>&1
		)
		echo "$w: torchrun exit $?"
		[ -n "$sampler" ] && { kill -TERM "$sampler"; wait "$sampler"; }
		for h in "${hogs[@]}"; do kill "$h" 2>/dev/null; done
		grep "^fq-train" "$out/$w-torch.log" | head -n 2
		sleep 1
		counts "$w"
		stop_agents
		keep_traces "$w"
		;;
	ttd)
		# time to detection: a fault starts a third of the way into a long phase while a
		# poller asks fleetq about the last 3 s every ~0.5 s; the planted rank writes the
		# onset time, the poller each answer's time and first line
		start_agents ttd
		mkdir -p "$out/onset"
		(
			while [ ! -e "$out/ttd.done" ]; do
				t0=$(date +%s.%N)
				line=$("$bin/fleetq" -w "$HOSTS" --insecure stragglers --since 3s \
					--max-seqs 0 2>&1 | head -n 1)
				printf "%s\t%s\t%s\n" "$t0" "$(date +%s.%N)" "$line" >>"$out/ttd-poll.tsv"
				sleep 0.3
			done
		) &
		poller=$!
		FQ_ANALYZE= timeout "${TTD_TIMEOUT:-300}" "$py" -m torch.distributed.run --standalone \
			--nproc_per_node="$n" "$here/train.py" --shape ddp ${TTD_ARGS:-} --cgroup-parent "$cg" \
			--steps "${TTD_STEPS:-900}" --phases "$phases_ttd" --onset-dir "$out/onset" \
			--out "$out/ttd-phases.jsonl" >"$out/ttd-torch.log" 2>&1
		echo "ttd: torchrun exit $?"
		touch "$out/ttd.done"
		wait "$poller"
		rm -f "$out/ttd.done"
		"$PYTHON_TTD" - "$out" <<'PY' | tee "$out/ttd.txt"
import json, os, re, sys
out = sys.argv[1]
polls = [l.rstrip("\n").split("\t", 2) for l in open(os.path.join(out, "ttd-poll.tsv"))]
for l in open(os.path.join(out, "ttd-phases.jsonl")):
    p = json.loads(l)
    f = os.path.join(out, "onset", p["name"])
    if not os.path.exists(f):
        print(p["name"], "no onset recorded")
        continue
    onset = float(open(f).read())
    end = onset + p["seconds"] * (1 - p["onset"])
    named = [(float(b) - onset, m) for a_, b, m in polls if onset < float(b) <= end
             and re.match(r"straggler: rank %d " % p["target"], m)]
    # (polls whose 3 s window lies inside the phase before the onset: earlier ones still
    # hold the previous phase's fault, or the job's warm-up. The phase's start as the job
    # wrote it; else reckoned back from the onset, which steps slower than the mean misplace)
    start = p["start_ns"] / 1e9 if "start_ns" in p else onset - p["seconds"] * p["onset"]
    pre = [m for a_, b, m in polls if start + 3 <= float(a_) < onset]
    before = [m for m in pre if m.startswith("straggler")]
    print("%s target %d: first named %s s after onset%s; false before onset: %d of %d" % (
        p["name"], p["target"], "%.2f" % named[0][0] if named else "never",
        " (%s)" % named[0][1] if named else "", len(before), len(pre)))
PY
		stop_agents
		keep_traces ttd
		;;
	ovhlive)
		# the tracing cost within one launch: a 4-rank launch on one GPU settles on one of
		# several speeds, so launches cannot be compared. The agents attach to the running job
		# and leave it instead, in blocks of two clean phases (a sync every step, every 20):
		# OVL_BLOCKS blocks, off on on off off on on off ... (the plugin loaded throughout: with
		# no agent its events end in a no-op nobody probes; the CUDA injection library only
		# with FQ_CUPTI_LIVE=1). Between two traced blocks the agents restart on the same
		# trace files. After each traced phase fleetq judges it (agents that came in mid-job,
		# or restarted: agentd places the job's communicators from the plugin's records).
		# OUT/ovhlive.txt: each phase's steps/s, traced over untraced per block pair and per
		# regime; OUT/ovhlive-traces.tgz the trace files as each traced block left them.
		[ "${FQ_CUPTI_LIVE:-0}" = 1 ] || unset CUDA_INJECTION64_PATH
		fqa=$FQ_ANALYZE
		# (OVL_FAULTS, e.g. stall:20,gpu:20: the traced blocks' first phases plant these in
		# turn instead, to see the agents that came in mid-job name them; no cost measured)
		# (OVL_FROM_START=1: on on off off ..., the agents of the first block started before
		# the job, so they see its communicator made and the restart after it must keep its
		# name; the cost pairs are then on2 off3, off4 on5, ...)
		nb=${OVL_BLOCKS:-8} ph= acts=$out/ovhlive-acts sh=${OVL_FROM_START:-0}
		IFS=, read -ra ovf <<<"${OVL_FAULTS:-}"
		nf=0
		: >"$acts"
		for b in $(seq 1 "$nb"); do
			case $(((b - 1 + sh) % 4)) in 0 | 3) m=off ;; *) m=on ;; esac
			case $(((b + sh) % 4)) in 0 | 3) nm=off ;; *) nm=on ;; esac
			k=clean
			[ $m = on ] && [ $nf -lt ${#ovf[@]} ] && k=${ovf[$nf]} && nf=$((nf + 1))
			ph=$ph${ph:+,}${m}${b}a=$k,${m}${b}b=clean/s20
			[ $m = on ] && { echo "${m}${b}a judge" >>"$acts"; echo "${m}${b}b judge" >>"$acts"; }
			[ $m = off ] && [ $nm = on ] && [ "$b" -lt "$nb" ] && echo "${m}${b}b start" >>"$acts"
			[ $m = on ] && [ $nm = off ] && echo "${m}${b}b stop" >>"$acts"
			# between two traced blocks the agents restart on the same trace files
			[ $m = on ] && [ $nm = on ] && echo "${m}${b}b restart" >>"$acts"
		done
		# the hook runs in rank 0's shell between phases (every rank waits in a barrier)
		export OVL_BIN=$bin OVL_OUT=$out OVL_N=$n OVL_CG=$cg OVL_ACTS=$acts
		export FQ_ANALYZE='
			hosts=$(cat "$OVL_OUT/ovl-hosts" 2>/dev/null)
			ovl_stop() { # the agents: SIGTERM, then up to 10 s each to be gone
				for p in $(cat "$OVL_OUT/ovl-pids"); do kill -TERM "$p"; done
				for p in $(cat "$OVL_OUT/ovl-pids"); do
					for _ in $(seq 100); do
						[ -e /proc/$p ] && ! grep -q "^[0-9]* (.*) Z" /proc/$p/stat || break
						sleep 0.1
					done
				done
				: >"$OVL_OUT/ovl-pids"
			}
			for act in $(awk -v p="$FQ_PHASE" "\$1 == p { print \$2 }" "$OVL_ACTS"); do
			case $act in
			judge)
				"$OVL_BIN/fleetq" -w "$hosts" --insecure stragglers --since "${FQ_SINCE}s" \
					--max-seqs 0 >"$OVL_OUT/p/$FQ_PHASE.txt" 2>&1
				printf "%s\t%s\t%s\t%s\n" "$FQ_PHASE" "$FQ_TARGET" "$?" \
					"$(head -n 1 "$OVL_OUT/p/$FQ_PHASE.txt")" >>"$OVL_OUT/ovhlive-judged.tsv" ;;
			restart | start | prestart)
				[ $act = restart ] && ovl_stop
				hosts=
				for i in $(seq 0 $((OVL_N - 1))); do
					[ $act = restart ] || rm -f /tmp/fq-ovl$i.db*
					rm -f /tmp/fq-ovl$i.port
					setsid "$OVL_BIN/agentd" --listen 127.0.0.1:0 --insecure \
						--port-file /tmp/fq-ovl$i.port --node rank$i --db /tmp/fq-ovl$i.db \
						--cgroup "$OVL_CG/node$i" ${AGENTD_ARGS:-} \
						2>>"$OVL_OUT/ovl-agent$i.log" </dev/null >/dev/null &
					echo $! >>"$OVL_OUT/ovl-pids"
				done
				for i in $(seq 0 $((OVL_N - 1))); do
					for _ in $(seq 300); do
						{ [ $act = prestart ] || grep -q "functions in .*libfleetq-nccl-profiler" \
							"$OVL_OUT/ovl-agent$i.log" 2>/dev/null; } &&
							[ -s /tmp/fq-ovl$i.port ] && break
						sleep 0.1
					done
					hosts=$hosts${hosts:+,}127.0.0.1:$(cat /tmp/fq-ovl$i.port)
				done
				echo "$hosts" >"$OVL_OUT/ovl-hosts"
				echo "ovhlive: agents in after $FQ_PHASE ($act)" ;;
			stop)
				"$OVL_BIN/fleetq" -w "$hosts" --insecure "SELECT count(*) AS colls,
					count(seq) AS placed, (SELECT count(*) FROM nccl_kernels) AS kernels,
					(SELECT group_concat(fn) FROM comms) AS comms FROM collectives" \
					--format tsv >>"$OVL_OUT/ovhlive-counts.tsv" 2>&1
				ovl_stop
				rm -f "$OVL_OUT/ovl-hosts"
				for i in $(seq 0 $((OVL_N - 1))); do
					cp /tmp/fq-ovl$i.db "$OVL_OUT/ovl-$FQ_PHASE-$i.db" 2>/dev/null
				done
				echo "ovhlive: agents out after $FQ_PHASE" ;;
			esac
			done'
		: >"$out/ovl-pids"
		# (the first block's agents, before the job: the hook's start, with no plugin to wait for)
		[ "$sh" = 1 ] && echo "pre prestart" >>"$acts" && FQ_PHASE=pre bash -c "$FQ_ANALYZE"
		timeout "${JOB_TIMEOUT:-540}" "$py" -m torch.distributed.run --standalone \
			--nproc_per_node="$n" "$here/train.py" --shape ddp ${OVH_ARGS:-} --cgroup-parent "$cg" \
			--steps 300 ${PHASE_SECONDS:+--phase-seconds "$PHASE_SECONDS"} --phases "$ph" \
			--out "$out/ovhlive-phases.jsonl" >"$out/ovhlive-torch.log" 2>&1
		echo "ovhlive: torchrun exit $?"
		for p in $(cat "$out/ovl-pids"); do kill -TERM "$p" 2>/dev/null; done
		# the traced blocks' trace files, for studying here (KEEP_TRACES=0: not)
		[ "${KEEP_TRACES:-1}" = 1 ] && (cd "$out" && ls ovl-*.db >/dev/null 2>&1 &&
			tar -czf ovhlive-traces.tgz ovl-*.db && rm -f ovl-*.db)
		export FQ_ANALYZE=$fqa
		[ -n "$inject" ] && export CUDA_INJECTION64_PATH=$inject
		"$py" - "$out" <<'PY' | tee "$out/ovhlive.txt"
import json, os, sys
out = sys.argv[1]
ph = [json.loads(l) for l in open(os.path.join(out, "ovhlive-phases.jsonl"))]
for p in ph:
    print("%-7s %-4s %7.2f steps/s" % (p["name"], "s%d" % p["sync"], p["steps_per_s"]))
# blocks: off1 on2 on3 off4 ...; a pair is an off block and the on block beside it
blk = {}
for p in ph:
    blk.setdefault(p["name"][:-1], []).append(p)
names = list(blk)
for sync in (1, 20):
    on = [q["steps_per_s"] for b in names if b.startswith("on") for q in blk[b] if q["sync"] == sync]
    off = [q["steps_per_s"] for b in names if b.startswith("off") for q in blk[b] if q["sync"] == sync]
    if on and off:
        print("sync every %d: untraced %s, traced %s: traced/untraced %.4f (means)" % (
            sync, " ".join("%.2f" % x for x in off), " ".join("%.2f" % x for x in on),
            (sum(on) / len(on)) / (sum(off) / len(off))))
# (an off block and the on block beside it, in turn: on1 on2 off3 off4 on5 ... pairs
# on2 with off3 and off4 with on5)
pairs, i = [], 0
while i < len(names) - 1:
    if names[i][:2] != names[i + 1][:2]:
        pairs.append((names[i], names[i + 1]))
        i += 1
    i += 1
for a, b in pairs:
    ta = sum(q["seconds"] for q in blk[a]) / sum(q["steps"] for q in blk[a])
    tb = sum(q["seconds"] for q in blk[b]) / sum(q["steps"] for q in blk[b])
    off, on = (ta, tb) if a.startswith("off") else (tb, ta)
    print("blocks %s %s: traced/untraced throughput %.4f" % (a, b, off / on))
PY
		;;
	overhead)
		# alternating untraced and traced (agents + plugin) DDP runs of the same phases;
		# OVH_MODES may add "agents" (no plugin), "plugin" (no agents), "nonvml" (agents
		# and plugin, the agents' GPU sampler off) and "noinject" (agents and plugin, no CUDA
		# injection library) to tell their costs apart, OVH_ROUNDS sets the rounds
		for round in ${OVH_ROUNDS:-1 2}; do
			for mode in ${OVH_MODES:-off on}; do
				case $mode in
				on | agents | noinject) start_agents "ovh$round" ;;
				nonvml) AGENTD_ARGS="${AGENTD_ARGS:-} --gpu-interval 0" start_agents "ovn$round" ;;
				esac
				case $mode in
				on | plugin | nonvml | noinject) export NCCL_PROFILER_PLUGIN=$bin/libfleetq-nccl-profiler.so ;;
				*) unset NCCL_PROFILER_PLUGIN ;;
				esac
				# (noinject: agents and plugin, no CUDA injection library)
				case $mode in
				on | nonvml) [ -n "$inject" ] && export CUDA_INJECTION64_PATH=$inject ;;
				*) unset CUDA_INJECTION64_PATH ;;
				esac
				# (OVH_ARGS, OVH_PHASES: another job, e.g. the transformer's clean phases)
				FQ_ANALYZE= timeout 200 "$py" -m torch.distributed.run --standalone \
					--nproc_per_node="$n" "$here/train.py" --shape ddp ${OVH_ARGS:-} \
					--cgroup-parent "$cg" --steps 600 ${PHASE_SECONDS:+--phase-seconds "$PHASE_SECONDS"} \
					--phases "${OVH_PHASES:-c1=clean,c2=clean/s20}" \
					--out "$out/overhead-$mode-$round.jsonl" \
					>"$out/overhead-$mode-$round.log" 2>&1
				echo "overhead $mode round $round: $(cat "$out/overhead-$mode-$round.jsonl" 2>/dev/null | tr '\n' ' ')"
				case $mode in
				on) stop_agents; keep_traces "ovh$round" ;;
				agents | nonvml | noinject) stop_agents ;;
				esac
			done
		done
		export NCCL_PROFILER_PLUGIN=$bin/libfleetq-nccl-profiler.so
		[ -n "$inject" ] && export CUDA_INJECTION64_PATH=$inject
		;;
	esac
done
tar -C "$out" -czf "$out/phases.tgz" p
rm -rf "$out/p"
keep='^\(phases.tgz\|summary.tsv\|logs.tgz\|.*-traces.tgz\|.*-placement.tsv.gz\|ttd.txt\|ovhlive.txt\)$'
(cd "$out" && tar -czf logs.tgz $(ls | grep -v "$keep") && ls | grep -v "$keep" | xargs rm -rf)
cat "$out/summary.tsv"
