# SPDX-License-Identifier: MIT
"""All-reduce step loop for torchrun: the GPU workload fleetq traces on real hardware.

Each step: optional CPU delay on one rank (a planted straggler), a small matmul,
one all_reduce, then torch.cuda.synchronize() (where NCCL's wait shows up).
Rank 0 writes a JSON summary: steps, wall time, steps/s, and each rank's count.
"""
import argparse, json, os, time
import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=2000)
ap.add_argument("--warmup", type=int, default=50)
ap.add_argument("--numel", type=int, default=1 << 20)
ap.add_argument("--delay-rank", type=int, default=-1)
ap.add_argument("--delay-ms", type=float, default=0.0)
ap.add_argument("--delay-from", type=int, default=0, help="step at which the delay starts")
ap.add_argument("--mm-size", type=int, default=1024, help="matmul size: compute per step")
ap.add_argument("--mm-reps", type=int, default=1)
ap.add_argument("--cgroup-parent", default="",
                help="move each rank into PARENT/nodeLOCAL_RANK (cgroup v2) before NCCL starts")
ap.add_argument("--p2p-every", type=int, default=0,
                help="every N steps also a ring send/recv through dist.batch_isend_irecv "
                     "(one ncclGroupStart/End with an ncclSend and an ncclRecv)")
ap.add_argument("--out", default="")
a = ap.parse_args()

if a.cgroup_parent:
    with open(os.path.join(a.cgroup_parent, "node%s" % os.environ.get("LOCAL_RANK", "0"),
                           "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", rank))
torch.cuda.set_device(local)
x = torch.ones(a.numel, device="cuda")
m = torch.randn(a.mm_size, a.mm_size, device="cuda")
calls = 0
p2p_groups = 0
y = torch.zeros(a.numel, device="cuda")

def step(i):
    global calls, p2p_groups
    if rank == a.delay_rank and i >= a.delay_from and a.delay_ms > 0:
        time.sleep(a.delay_ms / 1e3)
    for _ in range(a.mm_reps):
        torch.mm(m, m)
    dist.all_reduce(x)
    calls += 1
    if a.p2p_every > 0 and i % a.p2p_every == 0 and world > 1:
        ops = [dist.P2POp(dist.isend, x, (rank + 1) % world),
               dist.P2POp(dist.irecv, y, (rank - 1) % world)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        p2p_groups += 1
    torch.cuda.synchronize()

for i in range(a.warmup):
    step(-1)
dist.barrier()
torch.cuda.synchronize()
t0 = time.perf_counter()
onset_ns = time.time_ns()
for i in range(a.steps):
    step(i)
t1 = time.perf_counter()
counts = [0] * world
dist.all_gather_object(counts, calls)
groups = [0] * world
dist.all_gather_object(groups, p2p_groups)
if rank == 0:
    res = {"world": world, "steps": a.steps, "warmup": a.warmup, "seconds": t1 - t0,
           "steps_per_s": a.steps / (t1 - t0), "all_reduce_calls_per_rank": counts,
           "p2p_groups_per_rank": groups, "delay_rank": a.delay_rank, "delay_ms": a.delay_ms, "loop_start_ns": onset_ns}
    print(json.dumps(res))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f)
dist.barrier()
dist.destroy_process_group()
