#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# `fleetq stragglers` on windows of real trace files: 2 s of a DDP job (bench/gpu/train.py,
# 8 x Linear(4096), ~7 gradient buckets a step all-reduced from the autograd thread) and of
# a pipeline (2 stages of 2 data-parallel ranks, send/recv between stages on the world
# communicator, each stage's all-reduce on a communicator of 2 made by ncclCommSplit) on
# 4 x H200 with NCCL 2.28.9 and fleetq's profiler plugin, one agentd per rank
# (bench/gpu/detect.sh, BENCHMARKS.md "round 6"). Each file holds the rows of that window
# (collectives, nccl_kernels, comms, processes, host_id) as the agents wrote them. The job
# measured its own throughput loss in each phase; the verdict must name the planted rank
# and state an effect of the same size as that loss (not the sum of every bucket's wait,
# which counts one delay once per bucket), and name nobody in a clean phase. The pipeline's
# windows are the last 2 s of each phase of the run in BENCHMARKS.md (losses against its
# clean phases' 39.17 steps/s).
# usage: real.py AN_RUN SQL_DIR SCHEMA_SQL DATA_DIR WORKDIR
import csv, gzip, io, json, os, sqlite3, subprocess, sys

an_run, sql_dir, schema, data, work = sys.argv[1:6]
os.makedirs(work, exist_ok=True)

# phase: (planted rank or None, the job's throughput loss against its clean phases, %)
CASES = {
    "ddp-gpu20": (3, 15.5),     # extra matmuls on rank 3's GPU, loss.item() every step
    "ddp-stall10": (0, 6.5),    # rank 0's main thread sleeps 10 % of a step
    "ddp-busy5": (2, 1.9),      # rank 2's main thread spins 5 % of a step
    "ddp-gpu10s20": (2, 7.6),   # slower GPU, loss.item() every 20 steps
    "ddp-clean2": (None, 0.0),
    # the pipeline: ranks named by the job's rank (RANK); its stages' communicators hold 2
    "pipe-stall20": (1, 18.5),  # rank 1 (stage 0) sleeps 20 % of a step
    "pipe-busy20": (2, 6.3),    # rank 2 (stage 1) spins 20 % of a step
    "pipe-clean1": (None, 0.0), # a stage-0 pair's consistent asymmetry is no straggler
    # rank 3's (stage 1) slower GPU holds back rank 1's backward through their send/recv:
    # both stages' pairs see their rank of that link arrive last; rank 1 waited more than
    # rank 3 over the send/recv, so the delay is rank 3's
    "pipe-gpu20": (3, 15.0),
    # every side of the stage-0 pair agrees on rank 1 (12 % in the phase), but rank 1
    # waited more than its send/recv peer: nobody
    "pipe-clean2": (None, 0.0),
    # kept apart while the send/recv rule was chosen (never tuned on): rank 1 sleeps 10 %
    # of a step; named alone (its send/recv peer, rank 3, no longer), but see EFFECT_OFF
    "pipe-stall10": (1, 7.3),
    # the clean DDP window with rank 2's synchronize waits cut by 1.2 ms each (as a loaded
    # host does to one rank): its waits stand apart, its kernels are its peers', so nobody
    "ddp-clean2+wait": (None, 0.0),
    # the clean DDP window, then its communicator idle for 1.9 s but for rank 3, which
    # entered the next collective 50 ms ago (as a barrier's first rank does, before the
    # other agents have stored theirs): its peers are behind, but nobody waited on them
    "ddp-clean2+idle": (None, 0.0),
    # 2 ranks on 2 x H100 (BENCHMARKS.md "round 7"): no population, so a pair needs its
    # wait to agree clearly and an effect past a pair's noise (:pair_effect)
    "ddp2-clean15": (None, 0.0),  # named at 4.4 % on wait and CPU work, clean
    # the first 2 s after a 7 s pause (rank 0 ran fleetq while rank 1 waited in a barrier):
    # the first collective carries that wait, from before the window
    "ddp2-pause": (None, 0.0),
    # blocking collectives (CUDA_LAUNCH_BLOCKING=1): rank 1 sleeps 20 % of a step; both
    # ranks enqueue every bucket but the first together, so lateness is nil on both
    "blk2-stall20": (1, 16.3),
    "blk2-clean1": (None, 0.0),   # named at 3.2 % on wait
    "fsdp2-clean1": (None, 0.0),  # FSDP (fully_shard per layer), named at 3.2 % on lateness
    # 4 x H200 (BENCHMARKS.md "round 8"), whole phases as fleetq saw them live. A transformer
    # language model (train.py --model gpt: 12 blocks of 1024, 20 DDP buckets a step), never
    # tuned on: clean, and rank 1's GPU 10 % slower (named live at 4.0 %, over :min_effect)
    "gpt-clean1": (None, 0.0),
    "gpt-gpu10": (1, 2.6),
    # the same model under FSDP: rank 1, last to every all-gather by a little with nothing
    # planted, had its peers wait 6.6 % more in synchronize but only 2.2 % in the kernels;
    # the kernels measure the loss, so the wait no longer outbids them (named live)
    "gfsdp-clean1": (None, 0.0),
    "gfsdp-stall20": (1, 15.1),
    # the 2 x 2 pipeline, whose stages' all-reduces run on communicators made by
    # ncclCommSplit (no rank on the CPU side): clean, named live at 8.3 % on wait (its
    # kernels: 1.6 %); rank 3's GPU 20 % slower, which cost the job 0.2 %: nobody
    "pipe4-clean1": (None, 0.0),
    # rank 2 (stage 1) spinning 20 % of a step cost the job 5.1 %; its peer's kernels waited
    # 4.6 % of the span, under a pair's 5 %, and its synchronize waits (10.4 %) no longer
    # name it above the kernels (a clean phase of round 9, s5-clean2, was 9.6 % and 3.9 %):
    # a miss this rule accepts, pinned here so that a change to it is seen
    "pipe4-busy20": (None, 5.1),
    "pipe4-gpu20": (None, 0.0),
    # the same pipeline in a later run (its phases never seen before this SQL's round):
    # rank 1's GPU 15 % slower cost the job 10.8 % and was missed live: its synchronize
    # waits equal its peer's (it waits for its own GPU), so the pair rule's wait veto held;
    # its kernels (11.1 %) now stand in for them, its Send/Recv peer having waited more
    "p3-gpu15": (1, 10.8),
    "p3-clean3": (None, 0.0),
    # an FSDP (MLP) clean phase of that run: rank 0 last to every all-gather and
    # reduce-scatter, kernels 5 times shorter than its peers', for 2.6-3.1 % of the span
    # and no loss measured; named if the effect were taken from the op its peers lost most to
    "f3-clean6": (None, 0.0),
    # round 9: more phases of those two pipeline runs (R2: pipe4-*, R4: q4-*), judged with
    # the plugin's Send/Recv kernels (whose Recv waits for its sender), each process against
    # its stage siblings. q4-gpu15b, q4-busy10: their phase's first 2 s. rank 0's (stage 0)
    # GPU 15 % slower, missed live: the send/recv rule cleared it, as every stage-0 rank
    # waits more than its stage-1 peer; rank 1 spinning 10 %: rank 3, downstream, was named
    "q4-gpu15b": (0, 8.9),
    "q4-stall20": (1, 16.7),
    "q4-busy10": (1, 9.3),
    "q4-clean2": (None, 0.0),
    # rank 2's GPU 15 % slower: its extra work filled its own bubble, the job lost nothing
    "q4-gpu15": (None, 0.0),
    "pipe4-gpu10": (0, 5.7),
    "pipe4-stall10": (1, 8.4),
    "pipe4-clean2": (None, 0.0),
    # a later run's phases (R5), never seen by any rule before: their first 2 s. A clean
    # phase whose rank 1 was a little slower (the job 1.4 % below its clean mean), named at
    # 14.6 % on wait before the kernels' bound took a pair's floor; a stage-0 GPU 10 % slower
    # and a stage-0 rank spinning 15 %, both named on the wrong stage by round 8's send/recv
    # rule; a stage-1 rank sleeping 15 %, named at 18.1 % (on wait) for a loss of 5.0 %
    # before the effect came from the kernels
    "s5-clean2": (None, 0.0),
    "s5-gpu10": (0, 5.6),
    "s5-busy15": (1, 12.9),
    "s5-stall15": (2, 5.0),
    # a trace of schema version 4 (an agent not yet upgraded: no nccl_kernels.peer, and its
    # plugin recorded no Send/Recv): the node SQL still runs there, and the send/recv rule
    # falls back to the CPU side's whole shares
    "q4-stall20+v4": (1, 16.7),
    # round 9, R6: the transformer under DDP, 3 s of a phase whose planted fault (rank 1's
    # GPU) cost nothing, during a stretch where rank 2's backward ran at about half speed
    # with nothing planted on it: its buckets came last all through the backward, the steps
    # took 70.3 ms against 41.7 in the clean phase. Each bucket waits a little, so the
    # kernels' step-by-step measure said 4.5 %; the synchronize waits measure it. Its 43
    # steps raise the bar to 4.6 % (:effect_steps); the waits pass it, and the kernels,
    # which only confirm a proxy's verdict, are asked for :min_effect itself
    "k6-slow2": (2, 40.7),
    # R8: DDP with the MLP, whole phases. A clean phase whose rank 1 did 4.8 % more CPU work
    # than its peers, its kernels like theirs and the job no slower: named on CPU work alone
    # until the kernels bounded that proxy too. A GPU slower all through the step (extra
    # products after every layer, forward and backward: train.py's "slow"), 20 % and 10 %:
    # named on their rank, the effect about half the loss (see EFFECT_OFF)
    "x8-clean2": (None, 0.0),
    "x8-slow20": (1, 16.4),
    "x8-slow10": (0, 10.6),
    # round 10, R9: phases never seen by any rule, whole, as fleetq saw them live. The
    # transformer under DDP: rank 1's GPU slower all through its step (7.2 %), named at 3.5 %
    # (see EFFECT_OFF); rank 0 sleeping 10 % of a step with a sync every 20 (5.5 %, one clean
    # phase in that regime to measure it against): its kernels were the shortest (0.23 ms
    # against 0.74-1.25), but rank 2's sat between and widened the four ranks' MAD (z 2.3),
    # and lateness (z 10.5) does not name where the kernels are known: a miss pinned here so
    # that a change to it is seen (naming it through lateness where the kernels lean its way
    # named three clean or cheap 3 s windows of other runs). FSDP (MLP): rank 1's GPU slower
    # all through its step (5.1 %)
    "l9-slow20": (1, 7.2),
    "l9-stall10s20": (None, 5.5),
    "m9-slow20": (1, 5.1),
    # round 11, R10-R12: held out (the rules of round 9, unchanged), whole phases as fleetq
    # saw them live. Blocking collectives on 4 GPUs (CUDA_LAUNCH_BLOCKING=1, the MLP): a GPU
    # 10 % slower, named on wait and kernels; a clean phase
    "w10-gpu10": (1, 9.2),
    "w10-clean2": (None, 0.0),
    # a loaded host (a CPU hog on every core beside the job): rank 0 sleeping 15 % of a step,
    # and a clean phase whose 3 s windows named a rank once at 5.8 % (a moment the hogs held
    # it back); the whole phase names nobody
    "z11-stall15": (0, 14.3),
    "z11-clean3": (None, 0.0),
    # the shape of l9-stall10s20 again (the transformer under DDP, a sleep of 10 % of a step
    # with a sync every 20): named this time, on lateness and kernels (z_gpu 5.7)
    "n10-stall10s20": (3, 5.7),
    # the transformer under FSDP: rank 0 spinning 10 % of a step (4.0 %, with clean phases
    # 9 % apart in throughput: a rough loss), named at 8.6 %
    "j12-busy10": (0, 4.0),
    # round 12, a ResNet-style CNN under DDP on 4 x H200 (GPU-bound, 5 buckets and one
    # BatchNorm broadcast a step): rank 1 sleeps 10 % of a step. Its peers waited for it at
    # the broadcast (ranks 2, 3) or the first bucket (rank 0, whose all-reduce kernels then
    # widened the four ranks' MAD: z_gpu 1.2): the kernels over every op name it with wait
    "q14-stall10": (1, 8.0),
    "q14-clean3": (None, 0.0),
    # R15, held out for that rule: the same CNN, rank 1 sleeping 20 % of a step (round 11's
    # rules named nobody), and the CNN under FSDP (a layer's all-gather and reduce-scatter
    # per block), rank 0 spinning 15 % of a step, and a clean phase of it
    "c15-stall20": (1, 16.0),
    "y15-busy15": (0, 11.7),
    "y15-clean2": (None, 0.0),
    # round 13, the CI stand-in (no GPU; FQ_STANDIN_DEVICE_PRIO=rt: device threads first in
    # line for a core): a pipeline of 4 stages x 2 data-parallel ranks (ranks stage * 2 + d,
    # Send/Recv along each d), rank 3 (stage 1) spinning 50 % of a step (the job's wall time
    # 15.9 % longer than the clean job's). Every rank of its chain behind it (5, 7) waited in its Recv 21-22 %
    # of the span more than its sibling and comes last to its stage's all-reduce; rank 7,
    # the last stage, was named first (21.9 %) until a rank that waited on its Send/Recv
    # peers more than its siblings did was taken for downstream of a delay
    "s13-pipe4-busy50": (3, 15.9),
    # round 14, held out (never tuned on, whole phases as fleetq saw them live): the MLP
    # under DDP on 2 x H200, a pair. Rank 1's GPU 10 % slower before its forward, a sync
    # every step (5.9 % against the run's clean phases); rank 1's GPU slower all through
    # its step (20 %) with a sync every 20 (16.8 % against the clean phases of that regime),
    # its kernels' effect about half of it; a clean phase
    "d17-gpu10": (1, 5.9),
    "d17-slow20s20": (1, 16.8),
    "d17-clean3": (None, 0.0),
    # round 16, the pace signal: the same run's rank 0 with its GPU 10 % slower all through
    # its step, a sync every step (6.1 % against the clean phases): its kernels said 3.9 %,
    # under a pair's 5 %, and nobody was named; its forward on its GPU took 7.9 % longer
    "d17-slow10": (0, 6.1),
    # held out (4 x H200, round 16, never tuned on): the MLP under DDP, rank 1's GPU 5 %
    # slower all through its step, a sync every step (5.7 %)
    "x19-slow5": (1, 5.7),
    # a clean phase of the transformer under DDP (4 x H200, round 7's run 2): its ranks wait
    # on their GPUs 15 % of the span (the CPU sets the pace), and rank 2's GPU idled 3 %
    # longer before each step's first bucket, its kernels last (z 4.0): no verdict on pace
    # where the GPUs do not set the pace
    "g2-clean3": (None, 0.0),
    # round 17, held out (4 x H200, never tuned on): the ResNet-style CNN under DDP (112 ms
    # a step, GPU-bound; five buckets and a BatchNorm broadcast a step), the planted rank's
    # GPU slower all through its step: it spins about 3.4 % (6.8 %) of a step on its GPU,
    # spread after every block's forward and before its backward (the phases "slow:5" and
    # "slow:10" of BENCHMARKS.md round 17, whose fault was sized too small; the job lost
    # 2.0 % and 5.1 % against its clean phases). Named on pace alone at 5 %; a clean phase
    "cnn17-slow5": (1, 2.0),
    "cnn17-slow10": (2, 5.1),
    "cnn17-clean2": (None, 0.0),
    # round 18, held out (4 x H100, 125 ms a step; never tuned on): the same CNN with a
    # sync every 20 steps. Its CPU runs ahead of its GPU and waits in its launches, not in
    # a synchronize call (its ranks' synchronize waits 5 % of the span), so the waits no
    # longer say the GPUs set its pace; the plugin's rows do: on every rank the CPU had
    # enqueued each step's first bucket before its GPU began the compute before it. Rank 2's
    # GPU spins 4.9 % of a step spread over it (loss 4.1 %): named on pace alone at 5.8 %
    # (round 17's SQL: nobody, its kernels 2.7 % under the bar of 3 %). A clean phase of the
    # same regime, and rank 1 sleeping 5 % of a step before its forward: its CPU, ahead of
    # its GPU, catches up, and the job lost 0.2 %: nobody (neither reaches pace: no rank's
    # kernels lean its way; g2-clean3 above is the case where pace's gate must stay shut)
    "cnn18-slow5s20": (2, 4.1),
    "cnn18-clean2s20": (None, 0.0),
    "cnn18-stall5s20": (None, 0.2),
    # round 18, held out, a known miss: the CNN under FSDP (4 x H100), rank 3's GPU slower all
    # through its step by 16.9 % of it, the job 14.2 % slower. Its reduce-scatter kernels
    # are the shortest by far (z 39) and its peers' kernels over every op waited 57 % of
    # the span more than its own, but they wait at every layer, overlapping their compute,
    # and the step's largest wait says 2.2 %: nobody is named. Kept so that the clean
    # verdict's closest line names it (NEAR), with its peers' wait in all beside
    # (stragglers_realwin), and so that a rule that sizes FSDP's cost shows here
    "cnnf18-slow20": (None, 14.2),
    # round 20, the compute stream (fleetq's CUDA injection library, gpu_busy rows; 4 x H200,
    # the last 6 s of each phase, the whole phase for cnnf20-slow10, whose 53 steps in 6 s
    # grow the bar past it). The rule was set from round 19's torch.profiler runs of this
    # job; these were its first run through the library, kept after: the CNN under FSDP,
    # rank 1's GPU slower all through its step (loss 13.8 % against the run's clean phases),
    # and rank 3's at 10 % (6.4 %): its peers' kernels never show the cost (their lead is
    # steady), their compute streams idle 8 and 3 points more than its own, about half the
    # loss (EFFECT_OFF: what the compute stream's idle time misses is not understood yet)
    "cnnf20-slow20": (1, 13.8),
    "cnnf20-slow10": (3, 6.4),
    "cnnf20-clean2": (None, 0.0),
    # the CNN under DDP, rank 1's GPU 10 % slower (6.9 %): its kernels, pace and the
    # compute stream agree
    "cnn20-slow10": (1, 6.9),
    # the transformer under DDP, clean: its GPUs wait on their CPUs' launches (each idles
    # 21-23 % of the span, by different amounts): the compute stream must stay shut
    "g20-clean1": (None, 0.0),
    # round 21, never seen by any rule (4 x H200, whole phases, the final library): a
    # neighbour on one rank's GPU (train.py hog: a stream of the job's running matrix
    # products PCT % of the time beside the step's kernels, as another process sharing the
    # GPU would). The CNN under FSDP, 50 % (loss 18.2 % against the run's clean phase) and
    # 25 % (8.7 %): its compute stream idles least; the transformer under DDP, 50 % (18.0 %)
    # and 25 %, which cost the launch-bound job nothing (its GPUs idle a fifth of the time:
    # the neighbour fills that), so nobody
    "cnnf21-hog50": (1, 18.2),
    "cnnf21-hog25": (2, 8.7),
    "cnnf21-clean1": (None, 0.0),
    "g21-hog50": (1, 18.0),
    "g21-hog25": (None, 0.0),
    # the transformer under DDP: rank 3 sleeping 10 % of its step (loss 7.4 % against the
    # run's three clean phases), named on its kernels; a clean phase. (Rank 1 sleeping 5 %
    # cost the job nothing measurable and is named at 6 %: not pinned, docs/analysis.md)
    "g21-stall10": (3, 7.4),
    "g21-clean1": (None, 0.0),
    # 4 x H200 (BENCHMARKS.md "round 23"), whole phases as fleetq saw them live; losses
    # against the mean of the run's clean phases. The transformer under DDP, torch.compile'd
    # (never tuned on): rank 1 sleeps 10 % of a step; a neighbour on rank 1's GPU half the
    # time (train.py hog:50), compiled and not
    "k23-stall10": (1, 3.6),
    "k23-hog50": (1, 7.4),
    "g23-hog50": (1, 13.1),
    # round 28: real NCCL 2.28.9 and PyTorch, 4 ranks sharing one H200 (train.py --share-gpu:
    # each rank its own NCCL host, the data over NCCL's sockets on loopback), the pipeline
    # (2 stages of 2 data-parallel ranks; 16 MB activations a micro-batch, past NCCL's
    # buffers), whole phases as fleetq saw them live; losses against the run's two clean
    # phases (7.16 steps/s). Rank 2 (stage 1) spinning 20 % of a step: live, rank 0 was
    # named, its stage-0 pair's all-reduce waiting on it, while rank 0 itself waited on
    # rank 2 in its Sends (4.64 s of the 10.9 against its sibling's 2.77; Recvs alike): a
    # Send outgrowing the buffers waits for its receiver. Rank 1 (stage 0) sleeping 20 %:
    # its own Send/Recv kernels took 4.9 % of the span more than its sibling's (the GPU is
    # shared), its stage-1 peer's 22.4 %: it holds that peer, named. A clean phase
    "sg28-pbusy20": (2, 10.6),
    "sg28-pstall20": (1, 14.9),
    "sg28-pclean2": (None, 0.0),
    # the MLP under FSDP on the same machine (a job bound by NCCL's sockets: every GPU ran
    # compute 1.2 % of the span): rank 2's GPU given extra work 20 % of a step (13.4 %
    # against the run's clean phases). Its compute stream idled 85.3 % of the span against
    # its peers' 98.8 %, past :busy_idle, and each op's kernels wait a transfer or two (no
    # op's median apart: z_gpu 0.7), but its peers' kernels over every op took 14.1 % of
    # the span more than its own (missed live); a clean phase
    "sg28-fgpu20": (2, 13.4),
    "sg28-fclean1": (None, 0.0),
}
# agents that count different threads in cpu_ns (meta cpu_work: since round 25 NCCL's own
# are left out; an older agent counted them, NCCL's spinning progress thread among them):
# one node's file says the new rule, the others' nothing (the old one): the CPU work is not
# compared, the verdict stands on its other signals; every file saying it: compared as ever
# the clean FSDP phase with rank 0's reduce-scatter kernels a third as long and its
# all-gathers longer by what those lost (two a reduce-scatter): over the sockets each op's
# kernels sit on one of two modes, and its peers' kernels over every op are no longer than
# its own (the busy 10 % phase of a second FSDP run named a clean rank so, live, beside the
# planted one: z_gpu 7.9, 4.7 %, its peers' kernels over every op 0.0 % longer): nobody
CASES["sg28-fclean1+flip"] = (None, 0.0)
CASES["ddp-gpu10s20+mixedcpu"] = CASES["ddp-gpu10s20"]
CASES["ddp-gpu10s20+newcpu"] = CASES["ddp-gpu10s20"]
# the same windows judged over fleetq's default newest 1000 seqs of each op (the DDP job's
# broadcast, one a step, reaches further back than its buckets)
CASES["d17-slow10+ms1000"] = CASES["d17-slow10"]
CASES["x19-slow5+ms1000"] = CASES["x19-slow5"]
# the CNN's broadcast (two a step) against its buckets (five) over the newest 500 seqs of
# each: the broadcasts kept reach back 160 steps, the buckets 100. Idle times taken over
# every kept kernel then span buckets no longer seen (its forward read 63.6 ms instead of
# 48.5, z_pace 2.8): from where every op is kept they do not. With a fixed bar
# (--effect-steps 0; this span is 73 steps) pace names it as over the whole phase. (Its
# window holds 802 bucket seqs: over the newest 1000 it is the whole phase)
CASES["cnn17-slow5+ms500"] = CASES["cnn17-slow5"]
# the same under a bar well above it (--min-effect 5, grown to 5.9 % for its 73 steps):
# nobody is named, and the clean verdict's closest rank is rank 1 on pace (3.5 %, where its
# kernels say 1.6 %)
CASES["cnn17-slow5+near"] = (None, 0.0)
NEAR = {"cnn17-slow5+near": (1, "pace"), "cnnf18-slow20": (3, "gpu")}
MAX_SEQS = {"d17-slow10+ms1000": 1000, "x19-slow5+ms1000": 1000, "cnn17-slow5+ms500": 500,
            "cnn17-slow5+near": 500}
MERGE_PARAMS = {"cnn17-slow5+ms500": ["effect_steps=0"],
                "cnn17-slow5+near": ["all_ranks=1", "min_effect=0.05"],
                "cnnf18-slow20": ["all_ranks=1"]}
# cases whose verdict must carry this signal among those that name the rank
SIGNALS = {"ddp-gpu10s20": "cpu", "ddp-gpu10s20+newcpu": "cpu", "d17-slow10": "pace",
           "x19-slow5": "pace", "d17-slow10+ms1000": "pace", "x19-slow5+ms1000": "pace",
           "cnn17-slow5": "pace", "cnn17-slow5+ms500": "pace",
           "cnn18-slow5s20": "pace", "cnnf20-slow20": "compute", "cnnf20-slow10": "compute",
           "cnn20-slow10": "compute", "cnnf21-hog50": "compute", "cnnf21-hog25": "compute",
           "g21-hog50": "compute", "sg28-fgpu20": "compute"}
# cases whose verdict must not carry this signal
NOSIGNALS = {"ddp-gpu10s20+mixedcpu": "cpu"}
# cases whose named rank is checked but not the size of its effect: rank 0 waits 28.8 % of
# the span for rank 1 in their all-reduce (before the send/recv rule too), while the job
# lost 7.3 %; not understood yet (a guess: part of that wait fills the pipeline's bubble)
# x8-slow20, l9-slow20: a GPU slower all through its step makes each bucket wait a little;
# the step's largest wait, the kernels' effect, says 8.2 % for a loss of 16.4 % and 3.5 % for
# 7.2 % (docs/analysis.md); cnnf20-slow10, cnnf21-hog25: under FSDP the compute stream's
# idle time says about half the loss (3.2 % for 6.4 %, 4.0 % for 8.7 %)
# k23-stall10: 10.5 % for a loss of 3.6 %, whose own error is some 2 points (the compiled
# job's clean phases ran 19.68 to 20.84 steps/s: a pacer slowed one of them)
EFFECT_OFF = {"pipe-stall10", "x8-slow20", "l9-slow20", "cnnf20-slow10", "cnnf21-hog25",
              "k23-stall10"}
IDLE_NS = 1_900_000_000
# the change a case makes to the real rows: (node index or None for every node, SQL)
CPU_WORK = ("INSERT OR REPLACE INTO meta (key, value) VALUES ('cpu_work', "
            "'every thread but those NCCL started, outside probed waits')")
EDITS = {
    "ddp-gpu10s20+mixedcpu": (0, CPU_WORK),
    "ddp-gpu10s20+newcpu": (None, CPU_WORK),
    "sg28-fclean1+flip": (0, "UPDATE nccl_kernels SET gpu_dur_ns = gpu_dur_ns + "
                             "(SELECT CAST(avg(gpu_dur_ns) / 3 AS INTEGER) FROM nccl_kernels "
                             "WHERE op = 'ReduceScatter') WHERE op = 'AllGather'; "
                             "UPDATE nccl_kernels SET gpu_dur_ns = gpu_dur_ns / 3 "
                             "WHERE op = 'ReduceScatter'"),
    "q4-stall20+v4": (None, "DELETE FROM nccl_kernels WHERE op IN ('Send', 'Recv'); "
                            "ALTER TABLE nccl_kernels DROP COLUMN peer"),
    "ddp-clean2+wait": (2, "UPDATE collectives SET sync_ns = max(0, sync_ns - 1200000) "
                          "WHERE sync_ns > 0"),
}
fails = 0


def load(case):
    name = case.split("+")[0]
    j = json.load(gzip.open(os.path.join(data, name + ".json.gz"), "rt"))
    files = []
    for k, node in enumerate(j["nodes"]):
        path = os.path.join(work, "%s.%d.db" % (case, k))
        if os.path.exists(path):
            os.unlink(path)
        db = sqlite3.connect(path)
        db.executescript(open(schema).read())
        for t, v in node["tables"].items():
            if t == "meta":
                db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                               v["rows"])
                continue
            q = "INSERT OR IGNORE INTO %s (%s) VALUES (%s)" % (
                t, ",".join(v["cols"]), ",".join("?" * len(v["cols"])))
            db.executemany(q, v["rows"])
        if case in EDITS and EDITS[case][0] in (k, None):
            db.executescript(EDITS[case][1])
        db.commit()
        db.close()
        files.append(path)
    end = j["end_ns"]
    if case == "ddp-clean2+idle":
        dbs = [sqlite3.connect(f) for f in files]
        last = min(d.execute("SELECT max(seq) FROM collectives").fetchone()[0] for d in dbs)
        for d in dbs:
            d.execute("DELETE FROM collectives WHERE seq > ?", (last,))
            d.execute("DELETE FROM nccl_kernels WHERE ts_ns > (SELECT max(ts_ns) "
                      "FROM collectives)")
        dbs[3].executescript(
            "CREATE TEMP TABLE x AS SELECT * FROM collectives ORDER BY ts_ns DESC LIMIT 1;"
            "UPDATE x SET ts_ns = %d, seq = seq + 1;"
            "INSERT INTO collectives SELECT * FROM x;" % (end + IDLE_NS - 50_000_000))
        for d in dbs:
            d.commit()
            d.close()
        end += IDLE_NS
    return j["start_ns"], end, files


# the evidence's likely cause (why.node.sql / why.merge.sql over the same window) for the
# planted rank, where the window holds the CUDA injection library's slices (gpu_busy; the
# files hold no NVML samples): its compute kernels tell a GPU slow at its own work (slowed by
# a spin, or shared with a neighbour: it idles less than its peers') from one that waited
# for its host (a sleep: it idles more), and no other rank gets either rule. Rank: as in
# CASES (g21-hog25, a neighbour that cost its job nothing, is no straggler but its GPU was
# shared all the same); None: a clean phase, no rank gets either rule (of the clean windows
# with slices, cnnf20-clean2 is left out: its rank 1 idled 4.9 points more than its peers'
# and gets host, which is what its GPU did; nobody is named there)
WHY = {"cnnf21-clean1": (None, None), "g20-clean1": (None, None), "g21-clean1": (None, None),
       "cnnf20-slow20": (1, "gpu_compute"), "cnnf20-slow10": (3, "gpu_compute"),
       "cnn20-slow10": (1, "gpu_compute"), "cnnf21-hog50": (1, "gpu_compute"),
       "cnnf21-hog25": (2, "gpu_compute"), "g21-hog50": (1, "gpu_compute"),
       "g21-hog25": (2, "gpu_compute"), "g21-stall10": (3, "host"),
       "k23-stall10": (1, "host"), "k23-hog50": (1, "gpu_compute"),
       "g23-hog50": (1, "gpu_compute")}

# REAL_CASES="a b": only those (for trying a change; the test runs every case)
only = os.environ.get("REAL_CASES", "").split()
for name, (target, loss) in CASES.items():
    if only and name not in only:
        continue
    start, end, files = load(name)
    r = subprocess.run([an_run, os.path.join(sql_dir, "stragglers.node.sql"),
                        os.path.join(sql_dir, "stragglers.merge.sql"),
                        "-p", "since_ns=%d" % start, "-p", "now_ns=%d" % end,
                        "-p", "max_seqs=%s" % MAX_SEQS.get(name, os.environ.get("REAL_MAX_SEQS", "0"))]
                       + [a for m in MERGE_PARAMS.get(name, []) for a in ("-m", m)] + files,
                       capture_output=True, text=True)
    if r.returncode:
        print("FAIL %s: an-run: %s" % (name, r.stderr.strip()))
        fails += 1
        continue
    rows = list(csv.DictReader(io.StringIO(r.stdout), delimiter="\t"))
    named = [x for x in rows if x["verdict"] != "ok"]
    def who(x):
        return int(x["job_rank"] if x.get("job_rank") not in (None, "", "NULL") else x["rank"])
    got = ", ".join("rank %s %s %s%%" % (who(x), x["signals"], x["effect_pct"])
                    for x in named) or "nobody"
    ok = True
    if target is None:
        ok = not named
    elif not named or who(named[0]) != target:
        ok = False
    elif name not in EFFECT_OFF:
        eff = float(named[0]["effect_pct"])
        # of the size of the loss the job measured: the peers' wait beyond the straggler's
        # also holds the slack it no longer waits (up to 2.5 times the loss on these, plus
        # the loss's own noise, about 0.5 points a phase); the sum over the step's buckets
        # was 3 to 17 times it
        ok = loss / 2 <= eff <= 2.5 * loss + 1.5
    if ok and name in SIGNALS:
        ok = SIGNALS[name] in named[0]["signals"].split(",")
    if ok and name in NOSIGNALS:
        ok = NOSIGNALS[name] not in named[0]["signals"].split(",")
    if name in NEAR:
        near = sorted((x for x in rows if x.get("near_signal") not in (None, "", "NULL")),
                      key=lambda x: -float(x["near_pct"]))
        got += "; closest: %s" % (", ".join("rank %s %s %s%%" % (
            who(x), x["near_signal"], x["near_pct"]) for x in near[:1]) or "none")
        ok = ok and bool(near) and (who(near[0]), near[0]["near_signal"]) == NEAR[name]
    if name in WHY:
        w = subprocess.run([an_run, os.path.join(sql_dir, "why.node.sql"),
                            os.path.join(sql_dir, "why.merge.sql"), "-p", "since_ns=%d" % start,
                            "-p", "max_seqs=%s" % MAX_SEQS.get(name, "0")] + files,
                           capture_output=True, text=True)
        wrows = list(csv.DictReader(io.StringIO(w.stdout), delimiter="\t"))
        want_rank, want = WHY[name]
        wr = [x for x in wrows if who(x) == want_rank]
        if want_rank is not None:
            cause = wr[0]["cause"] if len(wr) == 1 else "%d rows (%s)" % (
                len(wr), w.stderr.strip())
            got += "; why: rank %d %s" % (want_rank, cause)
            ok = ok and cause == want
        others = ["rank %d %s" % (who(x), x["cause"]) for x in wrows
                  if who(x) != want_rank and x["cause"] in ("gpu_compute", "host")]
        if others or not wrows:
            got += "; why elsewhere: %s" % (", ".join(others) or "no rows")
            ok = False
    print("%s %s: planted %s (loss %.1f%%): %s" % ("ok  " if ok else "FAIL", name,
                                                  "-" if target is None else "rank %d" % target,
                                                  loss, got))
    fails += not ok
sys.exit(1 if fails else 0)
