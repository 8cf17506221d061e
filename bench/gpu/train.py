# SPDX-License-Identifier: MIT
"""A real training job for torchrun, with faults planted phase by phase, for judging
`fleetq stragglers` on job shapes it was not written for (issue: DDP buckets from the
autograd thread, FSDP all-gathers prefetched on their own stream, sync every K steps).

The model: --layers Linear(--width, --width) layers with ReLU, batch --batch, SGD, TF32.
--shape ddp wraps it in DistributedDataParallel (one gradient bucket per layer, all-reduced
from the autograd thread); --shape fsdp shards every layer with FSDP2 (fully_shard: an
all-gather per layer in forward and backward, a reduce-scatter per layer in backward);
--model gpt swaps the MLP for a decoder-only transformer language model (--layers blocks of
width --width, --heads heads, --seq tokens, --vocab; bf16 autocast, cross-entropy on
next-token ids; FSDP shards each block); DDP then all-reduces it in its own ~25 MB buckets.
--model cnn swaps it for a ResNet-style image classifier (a stem convolution, --layers
residual blocks of two 3x3 convolutions with BatchNorm in four stages of --width, 2x, 4x and
8x channels, global pooling, 1000 classes; --batch images of --img pixels a side, bf16
autocast, channels-last): a GPU-bound job whose DDP also broadcasts the BatchNorm buffers
from rank 0 before every forward. --accum K (DDP) accumulates gradients over K micro-batches
a step (no_sync on the first K-1): one all-reduce per bucket every K backwards.
--shape pipeline splits the layers over 2 stages of world/2 data-parallel ranks each (rank =
stage * dp + d): --micro micro-batches go forward and their gradients back between the
stages by send/recv (GPipe order: all forwards, then all backwards), then one all-reduce of
the stage's gradients among its dp ranks. --blocking is for the environment:
CUDA_LAUNCH_BLOCKING=1 makes every launch, collectives included, return only when the
kernel is done (set by the caller; noted in the output).

Phases (--phases, comma-separated NAME=KIND[:PCT][/sK]): KIND is clean, stall (the main
thread sleeps PCT% of a step before its forward), busy (it spins on the CPU for that long)
or gpu (extra matrix products on that rank's GPU, PCT% of the GPU's step, queued before its
forward: a delay once a step), or slow (as much GPU time spread over the step: the GPU spins
after every layer's forward and before its backward, as a GPU slower all through the step
is, a throttled one; the calls a step and the GPU's spin rate are measured in the warm-up;
not the pipeline), or hog (a neighbour on that rank's GPU: a thread of the job runs
matrix products on a stream of its own PCT% of the time, as another process sharing the
GPU would: every kernel of the step competes with it for the SMs; what it costs the job
is measured, not set). Each
phase's line says what its fault added to the planted rank's step (planted_ms: GPU time for
gpu and slow, CPU time for stall and busy); /sK syncs every
K steps (loss.item(); default every step); @F starts the fault F of the way into the phase
(0.33: after a third of its steps) and the planted rank writes the wall-clock time of the
onset to ONSET_DIR/NAME (--onset-dir), for measuring time to detection. Each phase plants its fault on another rank
(phase i: rank i mod world, --target overrides). The step is measured in a clean warm-up.

After each phase every rank waits in a barrier while rank 0 runs the fleetq command in
$FQ_ANALYZE (a shell command; $FQ_SINCE holds the phase's length in seconds, $FQ_PHASE its
name) and appends one JSON line per phase to --out: name, kind, pct, sync, target, steps,
steps/s, seconds, its wall-clock start and end (ns), and each rank's wait in loss.item() a
step (ms; the rank that waits least paces the job, measured by the job, traced or not).
"""
import argparse, contextlib, json, os, subprocess, threading, time
import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--shape", choices=["ddp", "fsdp", "pipeline"], default="ddp")
ap.add_argument("--model", choices=["mlp", "gpt", "cnn"], default="mlp",
                help="gpt: a decoder-only transformer language model; cnn: a ResNet-style "
                "image classifier (ddp and fsdp)")
ap.add_argument("--seq", type=int, default=1024, help="tokens a sequence (gpt)")
ap.add_argument("--heads", type=int, default=16, help="attention heads (gpt)")
ap.add_argument("--vocab", type=int, default=32000, help="vocabulary (gpt)")
ap.add_argument("--img", type=int, default=112, help="pixels a side (cnn)")
ap.add_argument("--accum", type=int, default=1,
                help="micro-batches a step, gradients accumulated (ddp)")
ap.add_argument("--compile", action="store_true",
                help="torch.compile the model (after DDP's wrapping: its optimizer splits the "
                "graph at the buckets; fused Triton kernels, far fewer launches a step)")
ap.add_argument("--micro", type=int, default=4, help="micro-batches a step (pipeline)")
ap.add_argument("--onset-dir", default="")
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--width", type=int, default=4096)
ap.add_argument("--batch", type=int, default=4096)
ap.add_argument("--steps", type=int, default=300, help="steps a phase")
ap.add_argument("--phase-seconds", type=float, default=0,
                help="steps a phase: as many as this long takes in the clean warm-up")
ap.add_argument("--warmup", type=int, default=40)
ap.add_argument("--phases", default="clean=clean")
ap.add_argument("--target", type=int, default=-1)
ap.add_argument("--cgroup-parent", default="",
                help="move each rank into PARENT/nodeLOCAL_RANK (cgroup v2) before NCCL starts")
ap.add_argument("--out", default="")
ap.add_argument("--bind", default="",
                help="numa: each rank on the cores of its GPU's NUMA node (local_cpulist); "
                     "split: each rank on its own share of those cores (split:K: the shares "
                     "rotated by K ranks)")
ap.add_argument("--kernels-dir", default="",
                help="profile each phase's last --kernels-steps steps (torch.profiler, CUDA "
                "kernels) and write every kernel's start, length, stream and whether it is "
                "NCCL's to DIR/PHASE.rankR.json.gz: what the compute stream did, which no "
                "collective shows (an experiment beside fleetq, not part of it)")
ap.add_argument("--kernels-steps", type=int, default=20)
ap.add_argument("--share-gpu", action="store_true",
                help="more ranks than GPUs: rank LOCAL_RANK runs on GPU LOCAL_RANK mod the "
                "GPUs seen, each rank its own NCCL host (NCCL_HOSTID, which NCCL's duplicate-GPU "
                "check keys on), so NCCL moves the data over its socket transport on loopback; "
                "for a machine of one GPU. The ranks' kernels share that GPU's time: a rank's "
                "slower GPU is its own extra work, and every rank's step is slower")
a = ap.parse_args()
if a.kernels_dir:
    os.makedirs(a.kernels_dir, exist_ok=True)

if a.cgroup_parent:
    with open(os.path.join(a.cgroup_parent, "node%s" % os.environ.get("LOCAL_RANK", "0"),
                           "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def cpulist(text):
    cpus = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


if a.bind:
    # (before NCCL and CUDA start their threads, which inherit it)
    import glob

    def sysfs(path):
        with open(path) as f:
            return f.read().strip()

    lr, nl = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    # NVIDIA's 3D controllers, in CUDA's default order (by PCI bus id)
    gpus = sorted(d for d in glob.glob("/sys/bus/pci/devices/*")
                  if sysfs(d + "/vendor") == "0x10de" and sysfs(d + "/class").startswith("0x0302"))
    near = [sysfs(g + "/local_cpulist") for g in gpus[:nl]]
    allowed = os.sched_getaffinity(0)
    local_cpus = [c for c in cpulist(near[lr]) if c in allowed] if lr < len(near) else []
    local_cpus = local_cpus or sorted(allowed)
    if a.bind.startswith("split") and lr < len(near):
        peers = [i for i, n in enumerate(near) if n == near[lr]]
        # (split:K: the shares rotated by K ranks, to tell a rank's pace from its cores')
        rot = int(a.bind.partition(":")[2] or 0)
        k, share = (peers.index(lr) + rot) % len(peers), len(local_cpus) // len(peers)
        local_cpus = local_cpus[k * share:(k + 1) * share] or local_cpus
    for t in os.listdir("/proc/self/task"):  # (threads import torch started)
        os.sched_setaffinity(int(t), local_cpus)
    print("fq-train: rank %d bound to cpus %s (%s)" % (lr, ",".join(map(str, local_cpus)),
                                                      gpus[lr] if lr < len(gpus) else "?"),
          flush=True)

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
local = int(os.environ.get("LOCAL_RANK", "0"))
if a.share_gpu:
    os.environ["NCCL_HOSTID"] = "fq-share-gpu-%d" % local
    os.environ.setdefault("NCCL_NET", "Socket")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    local %= torch.cuda.device_count()
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank, world = dist.get_rank(), dist.get_world_size()



class GPT(torch.nn.Module):
    """A decoder-only transformer LM: token and position embeddings, --layers pre-norm
    blocks (causal self-attention and a 4x MLP), a final norm and the vocabulary head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(a.vocab, a.width)
        self.pos = torch.nn.Parameter(torch.randn(a.seq, a.width) * 0.02)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(a.width, a.heads, 4 * a.width, dropout=0.0,
                                             batch_first=True, norm_first=True)
            for _ in range(a.layers))
        self.norm = torch.nn.LayerNorm(a.width)
        self.head = torch.nn.Linear(a.width, a.vocab, bias=False)
        # not a buffer: DDP would broadcast it every step
        self.mask = torch.nn.Transformer.generate_square_subsequent_mask(a.seq, device="cuda")

    def forward(self, tok):
        h = self.emb(tok) + self.pos
        for b in self.blocks:
            h = b(h, src_mask=self.mask, is_causal=True)
        return self.head(self.norm(h))


class Block(torch.nn.Module):
    """A residual block: two 3x3 convolutions with BatchNorm; a 1x1 projection where the
    width or the stride changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.proj = None if cin == cout and stride == 1 else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.body(x) + (x if self.proj is None else self.proj(x)))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn, w = torch.nn, a.width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w),
                                  nn.ReLU())
        blocks, cin = [], w
        for i in range(a.layers):
            cout = w * 2 ** min(3, i * 4 // a.layers)
            blocks.append(Block(cin, cout, 2 if cout != cin else 1))
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, 1000)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


if a.model != "mlp" and a.shape == "pipeline":
    raise SystemExit("fq-train: --model %s is for --shape ddp or fsdp" % a.model)
if a.compile and (a.shape != "ddp" or "=slow" in a.phases):
    raise SystemExit("fq-train: --compile is for --shape ddp, without slow phases")
if a.accum > 1 and a.shape != "ddp":
    raise SystemExit("fq-train: --accum is for --shape ddp")
if a.model == "gpt":
    model = GPT().cuda()
elif a.model == "cnn":
    model = CNN().cuda()
    if a.shape == "ddp":
        # (FSDP shards parameters by their first dimension: kept contiguous there)
        model = model.to(memory_format=torch.channels_last)
else:
    layers = []
    nlayers = a.layers // 2 if a.shape == "pipeline" else a.layers
    for _ in range(nlayers):
        layers += [torch.nn.Linear(a.width, a.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()
pp_prev = pp_next = dpg = None
if a.shape == "pipeline":
    dp = world // 2
    stage = rank // dp
    groups = [dist.new_group(list(range(s * dp, (s + 1) * dp))) for s in range(2)]
    dpg = groups[stage]
    pp_prev = rank - dp if stage == 1 else None
    pp_next = rank + dp if stage == 0 else None
elif a.shape == "ddp":
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
else:
    from torch.distributed.fsdp import fully_shard
    for m in (model.blocks if a.model != "mlp" else model):
        if isinstance(m, (torch.nn.Linear, torch.nn.TransformerEncoderLayer, Block)):
            fully_shard(m)
    fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
x = torch.randn(a.batch, a.width, device="cuda")
if a.model == "gpt":
    # a few batches of token ids, taken in turn (next-token targets are the ids shifted)
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    toks = [torch.randint(0, a.vocab, (a.batch, a.seq + 1), device="cuda", generator=g)
            for _ in range(4)]
if a.model == "cnn":
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    imgs = [(torch.randn(a.batch, 3, a.img, a.img, device="cuda", generator=g)
             .to(memory_format=torch.channels_last),
             torch.randint(0, 1000, (a.batch,), device="cuda", generator=g)) for _ in range(4)]
extra = torch.randn(2048, 2048, device="cuda")
# the "slow" fault: after every hooked layer's forward and, through a hook on its output's
# gradient, before its backward, this rank's GPU spins for slow_n clock cycles (one kernel,
# torch.cuda._sleep): GPU time alone, one launch a call whatever the amount (extra matrix
# products cost their launches' CPU time too, and sized by a product timed outside the model
# they cost a CNN's step under autocast a tenth of their time). The warm-up counts the calls
# a step and measures the GPU's cycles a second from two spins of different lengths queued
# back to back (so that what a launch costs beside its spin cancels out): slow_calls, slow_hz
slow_n = [0]
slow_count = [0]  # hooked calls, counted while measuring


def slow_work(*_):
    """a hooked call's spin (as a tensor hook it returns None: the gradient unchanged)"""
    slow_count[0] += 1
    if slow_n[0]:
        torch.cuda._sleep(slow_n[0])


def slow_fwd(_mod, _inp, out):
    slow_work()
    if slow_n[0] and isinstance(out, torch.Tensor) and out.requires_grad:
        out.register_hook(slow_work)


hooked = 0
# (only when a phase asks for it: tried under DDP, not under FSDP's sharded modules)
if a.shape != "pipeline" and "=slow" in a.phases:
    for m in (model.module if a.shape == "ddp" else model).modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.TransformerEncoderLayer, Block)) and \
                not (a.model != "mlp" and isinstance(m, torch.nn.Linear)):
            m.register_forward_hook(slow_fwd)
            hooked += 1


if a.compile:
    model = torch.compile(model)


def parse_phase(spec):
    name, _, rest = spec.partition("=")
    rest, _, onset = rest.partition("@")
    rest, _, sync = rest.partition("/")
    kind, _, pct = rest.partition(":")
    return dict(name=name, kind=kind, pct=float(pct or 0),
                sync=int(sync[1:]) if sync.startswith("s") else 1,
                onset=float(onset or 0))


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def pp_step():
    """One pipeline step; returns a tensor whose .item() synchronizes."""
    mb = a.batch // a.micro
    held = []
    for m in range(a.micro):
        if pp_prev is None:
            inp = x[m * mb:(m + 1) * mb]
        else:
            inp = torch.empty(mb, a.width, device="cuda")
            dist.recv(inp, src=pp_prev)
            inp.requires_grad_()
        out = model(inp)
        if pp_next is not None:
            dist.send(out.detach().contiguous(), dst=pp_next)
        held.append((inp, out))
    loss = None
    for inp, out in held:
        if pp_next is None:
            loss = out.square().mean()
            loss.backward()
        else:
            g = torch.empty_like(out)
            dist.recv(g, src=pp_next)
            out.backward(g)
        if pp_prev is not None:
            dist.send(inp.grad.contiguous(), dst=pp_prev)
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    if dpg is not None and world // 2 > 1:
        dist.all_reduce(flat, group=dpg)
    return flat[:1] if loss is None else loss


def micro(i):
    """One micro-batch's forward and loss."""
    if a.model == "gpt":
        t = toks[i % len(toks)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(t[:, :-1])
        return torch.nn.functional.cross_entropy(logits.float().reshape(-1, a.vocab),
                                                 t[:, 1:].reshape(-1))
    if a.model == "cnn":
        img, lab = imgs[i % len(imgs)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(img)
        return torch.nn.functional.cross_entropy(logits.float(), lab)
    return model(x).square().mean()


# the "hog" fault: a neighbour on this rank's GPU, aiming at hog_on[0] of the GPU's time in
# bursts of four bf16 products of 4096 (about a millisecond on an H200) on a stream of its
# own, each followed by a sleep sized on the burst's GPU time (CUDA events, not the wall
# clock: the thread shares the job's GIL, and taking it back after a burst can take
# longer than the burst). Its real share also loses what that GIL wait adds to each cycle;
# what it costs the job is measured, not set
hog_on = [0.0]


def hog_loop():
    torch.cuda.set_device(local)
    s = torch.cuda.Stream()
    hx = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while True:
        f = hog_on[0]
        if f <= 0:
            time.sleep(0.01)
            continue
        with torch.cuda.stream(s):
            e0.record(s)
            for _ in range(4):
                torch.mm(hx, hx)
            e1.record(s)
        e1.synchronize()
        time.sleep(min(0.1, e0.elapsed_time(e1) / 1e3 * (1 - f) / f))


if "=hog" in a.phases:
    threading.Thread(target=hog_loop, daemon=True).start()


def step(i, fault, sync_every):
    kind, amount = fault
    hog_on[0] = amount if kind == "hog" else 0.0
    if kind == "stall" and amount > 0:
        time.sleep(amount)
    elif kind == "busy" and amount > 0:
        spin(amount)
    slow_n[0] = int(amount) if kind == "slow" else 0
    if kind == "gpu" and amount > 0:
        for _ in range(int(amount)):
            torch.mm(extra, extra)
    if a.shape == "pipeline":
        loss = pp_step()
    else:
        for k in range(a.accum):
            # (gradients of the first accum-1 micro-batches stay local)
            with (model.no_sync() if k < a.accum - 1 else contextlib.nullcontext()):
                loss = micro(i * a.accum + k)
                loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if (i + 1) % sync_every == 0:
        t = time.perf_counter()
        loss.item()
        sync_s[0] += time.perf_counter() - t


# this rank's time waiting in loss.item() in the current phase: the rank that waits least
# paces the job (measured by the job itself, with or without fleetq)
sync_s = [0.0]


def kernels_out(prof, path):
    """every CUDA kernel of a profile: [start µs from the first, length µs, stream, NCCL's]"""
    import gzip, tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as tf:
        prof.export_chrome_trace(tf.name)
        ev = json.load(open(tf.name))["traceEvents"]
    ks = [e for e in ev if e.get("cat") == "kernel" and "dur" in e]
    t0 = min((e["ts"] for e in ks), default=0)
    rows = [[round(e["ts"] - t0, 3), round(e["dur"], 3), e.get("args", {}).get("stream", -1),
             1 if "nccl" in e["name"].lower() else 0] for e in ks]
    with gzip.open(path, "wt") as f:
        json.dump({"t0_us": t0, "kernels": sorted(rows)}, f)


def timed(n, fault=("clean", 0), sync_every=1, onset=0, onset_file="", kern_path=""):
    torch.cuda.synchronize()
    dist.barrier()
    prof = None
    t0 = time.perf_counter()
    for i in range(n):
        if onset and i == onset and onset_file and fault[1]:
            with open(onset_file, "w") as f:
                f.write("%.6f\n" % time.time())
        if kern_path and i == max(0, n - a.kernels_steps):
            try:
                prof = torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CUDA])
                prof.start()
            except Exception as e:  # (the experiment must not end the job)
                print("fq-train: rank %d: --kernels-dir: %r" % (rank, e), flush=True)
                prof = None
        step(i, fault if i >= onset else ("clean", 0), sync_every)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    if prof is not None:
        try:
            prof.stop()
            # written after the phase's fleetq command: its window ends with the phase
            profiled.append((prof, kern_path))
        except Exception as e:
            print("fq-train: rank %d: --kernels-dir: %r" % (rank, e), flush=True)
    return secs


profiled = []


def write_profiled():
    while profiled:
        prof, path = profiled.pop()
        try:
            kernels_out(prof, path)
        except Exception as e:
            print("fq-train: rank %d: --kernels-dir: %r" % (rank, e), flush=True)


# warm-up, then the clean step and the cost of one extra matrix product, on every rank
timed(a.warmup)
step_s = timed(a.warmup) / a.warmup
torch.cuda.synchronize()
ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ev0.record()
for _ in range(50):
    torch.mm(extra, extra)
ev1.record()
torch.cuda.synchronize()
mm_s = ev0.elapsed_time(ev1) / 1e3 / 50
# the slow fault: the hooked calls a step, and the GPU's spin rate (the second spin's time
# less the first's, over the cycles it adds)
slow_calls, slow_hz = 0.0, 0.0
if hooked:
    slow_count[0] = 0
    timed(4, ("slow", 1))
    slow_calls = slow_count[0] / 4
    e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    torch.cuda.synchronize()
    torch.cuda._sleep(1_000_000)  # (the GPU busy, so the timed spins queue behind it)
    e[0].record()
    torch.cuda._sleep(2_000_000)
    e[1].record()
    torch.cuda._sleep(6_000_000)
    e[2].record()
    torch.cuda.synchronize()
    slow_hz = 4_000_000 / ((e[1].elapsed_time(e[2]) - e[0].elapsed_time(e[1])) / 1e3)
# every rank plants the same amounts: rank 0's measurements
cal = torch.tensor([step_s, mm_s, slow_calls, slow_hz], device="cuda", dtype=torch.float64)
dist.broadcast(cal, 0)
step_s, mm_s, slow_calls, slow_hz = cal.tolist()
if a.phase_seconds > 0:
    a.steps = max(50, round(a.phase_seconds / step_s))
if rank == 0:
    print("fq-train: %s %s, %d ranks, step %.2f ms, extra matmul %.3f ms, slow: %g calls a "
          "step, %.3f GHz, %d steps a phase%s" %
          (a.shape, a.model, world, step_s * 1e3, mm_s * 1e3, slow_calls, slow_hz / 1e9, a.steps,
           ", CUDA_LAUNCH_BLOCKING=1" if os.environ.get("CUDA_LAUNCH_BLOCKING") == "1" else ""),
          flush=True)

for idx, spec in enumerate(s for s in a.phases.split(",") if s):
    p = parse_phase(spec)
    target = a.target if a.target >= 0 else idx % world
    amount = 0.0
    if p["kind"] in ("stall", "busy"):
        amount = p["pct"] / 100 * step_s
    elif p["kind"] == "gpu":
        amount = round(p["pct"] / 100 * step_s / mm_s)
    elif p["kind"] == "hog":
        amount = min(1.0, p["pct"] / 100)
    elif p["kind"] == "slow":
        if not hooked or not slow_calls:
            raise SystemExit("fq-train: slow needs a hooked layer (not --shape pipeline)")
        if a.shape == "fsdp":
            print("fq-train: slow under FSDP is untried", flush=True)
        # cycles a call
        amount = max(1000, round(p["pct"] / 100 * step_s * slow_hz / slow_calls))
    fault = (p["kind"], amount if rank == target else 0)
    t0 = time.time()
    onset = int(p["onset"] * a.steps)
    sync_s[0] = 0.0
    secs = timed(a.steps, fault, p["sync"], onset,
                 os.path.join(a.onset_dir, p["name"]) if a.onset_dir else "",
                 os.path.join(a.kernels_dir, "%s.rank%d.json.gz" % (p["name"], rank))
                 if a.kernels_dir else "")
    hog_on[0] = 0.0  # (the neighbour leaves with its phase)
    waits = torch.zeros(world, device="cuda", dtype=torch.float64)
    waits[rank] = sync_s[0]
    dist.all_reduce(waits)
    dist.barrier()
    if rank == 0:
        rec = dict(p, target=target if p["kind"] != "clean" else -1, steps=a.steps,
                   steps_per_s=round(a.steps / secs, 2), seconds=round(secs, 3),
                   shape=a.shape, model=a.model, ranks=world, step_ms=round(step_s * 1e3, 3),
                   start_ns=int(t0 * 1e9), end_ns=int((t0 + secs) * 1e9),
                   sync_ms_per_step=[round(w * 1e3 / a.steps, 3) for w in waits.tolist()],
                   # what the fault adds to the planted rank's step (its GPU's or CPU's time)
                   planted_ms=round(1e3 * amount * {
                       "slow": slow_calls / slow_hz if slow_hz else 0, "gpu": mm_s, "hog": 0.0}.get(
                       p["kind"], 1.0), 3) if p["kind"] != "clean" else 0.0)
        cmd = os.environ.get("FQ_ANALYZE")
        if cmd:
            env = dict(os.environ, FQ_SINCE="%.1f" % max(1.0, time.time() - t0 - 0.5),
                       FQ_PHASE=p["name"], FQ_TARGET=str(rec["target"]),
                       FQ_STEPS_PER_S=str(rec["steps_per_s"]),
                       # the job's own pacer: the rank that waited least in its synchronize
                       FQ_PACER=str(rec["sync_ms_per_step"].index(min(rec["sync_ms_per_step"]))))
            r = subprocess.run(["bash", "-c", cmd], env=env)
            rec["fleetq_rc"] = r.returncode
        print("fq-train: " + json.dumps(rec), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
    dist.barrier()
    write_profiled()  # (the next phase's timed() starts with a barrier)

dist.destroy_process_group()
