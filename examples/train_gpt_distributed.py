"""Trains the small GPT of examples/gpt.py data-parallel (DDP or FSDP2),
eagerly and compiled by kiln, from the same weights and batches (each rank
its own), and checks that kiln gives the eager run's losses and parameters.

    torchrun --nproc_per_node=2 examples/train_gpt_distributed.py [--steps 20]
                                                                  [--wrap inner|outer|blocks|fsdp|fsdp-module|
                                                                          fsdp-module-after-shard]
                                                                  [--backend inductor] [--device cpu|cuda]
                                                                  [--bench] [--compare-tc] [--profile DIR]
                                                                  [--bucket-cap-mb MB] [--uneven-step N]

--wrap inner is DDP(kiln.compile(model)); outer is kiln.compile(DDP(model));
blocks is DDP of the model with each transformer block's forward compiled
(one autograd graph per block, so DDP's all-reduces of one block's
gradients can run while earlier blocks' backward computes);
fsdp is FSDP2's per-block pattern: fully_shard each transformer block and
compile its forward (`block.forward = kiln.compile(block.forward)`: FSDP's
hooks, which all-gather and free the parameters around the forward, run
eagerly around the compiled graph), then fully_shard the model;
fsdp-module compiles each block as a module instead, `kiln.compile(block)`
in the block's place, and fully_shards the compiled block (torchtitan's
order with torch.compile); fsdp-module-after-shard fully_shards each block
first and compiles it after. The eager run uses the same wrapping without
kiln. CPU processes talk through gloo, GPUs (one per rank) through NCCL.
Exits with 1 when a loss or a parameter differs from the eager run's by
more than --tolerance (relative).

--bench trains a larger GPT (6 layers, width 512, 256 tokens of context,
random tokens, bf16 autocast on the GPU) and prints each rank's median
step time after --warmup steps; --compare-tc adds torch.compile under the
same wrapping (for fsdp, each block's forward; for fsdp-module, each block) to
the timings.

--uneven-step N trains rank 1 alone on shorter sequences at step N, so
that one rank recompiles while the other does not.

--profile DIR records 5 more steps of each run with torch.profiler (GPU
only; left out of the timings), writes their traces to DIR (open them in
Perfetto) and prints how much of the collectives' GPU time (NCCL kernels)
overlaps other kernels. A collective kernel starts when it is launched and
spins until every rank has joined, so a rank that is ahead also counts the
others' lateness.
"""
import argparse
import contextlib
import copy
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln  # noqa: E402
from gpt import GPT, batch, dataset  # noqa: E402


BENCH = dict(width=512, heads=8, layers=6, context=256)


def batches(args, rank, vocab):
    """This rank's batch maker, by step: windows of the example text, or
    random tokens under --bench; shorter ones on rank 1 at --uneven-step."""
    data, _ = dataset()
    generator = torch.Generator().manual_seed(1000 + rank)
    context = BENCH["context"] if args.bench else 16

    def make(step):
        length = context - 4 if step == args.uneven_step and rank == 1 else context
        if not args.bench:
            return batch(data, generator, context=length)
        x = torch.randint(0, vocab, (args.batch, length + 1), generator=generator)
        return x[:, :-1].contiguous(), x[:, 1:].contiguous()
    return make


def merged(intervals):
    """Sorted, disjoint intervals covering the same points as `intervals`."""
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def shared_length(a, b):
    """Length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def collective_overlap(profile):
    """(ms of collective kernels, share of them overlapping other GPU work,
    ms the GPU ran anything) of a profiled run."""
    collectives, others = [], []
    for event in profile.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        span = (event.time_range.start, event.time_range.end)
        (collectives if "nccl" in event.name.lower() else others).append(span)
    anything = merged(collectives + others)
    collectives, others = merged(collectives), merged(others)
    busy = sum(end - start for start, end in collectives)
    gpu = sum(end - start for start, end in anything)
    return busy / 1e3, (shared_length(collectives, others) / busy if busy else 0.0), gpu / 1e3


def train(model, args, rank, device, vocab, name):
    """(losses, step times in ms, collective overlap or None) of args.steps
    SGD steps on this rank's batches; under --profile, 5 more steps are
    recorded by the profiler (left out of the times)."""
    next_batch = batches(args, rank, vocab)
    profiled = 5 if args.profile and device.type == "cuda" else 0
    profiler = None
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, times = [], []
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if args.bench and device.type == "cuda"
                else contextlib.nullcontext())
    for step in range(args.steps + profiled):
        if profiled and step == args.steps:
            torch.cuda.synchronize(device)
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                          torch.profiler.ProfilerActivity.CUDA])
            profiler.__enter__()
        x, y = next_batch(step)
        start = time.perf_counter()
        with autocast:
            loss = model(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # waits for the step
        if step < args.steps:
            times.append((time.perf_counter() - start) * 1e3)
    if profiler is None:
        return losses, times, None
    profiler.__exit__(None, None, None)
    os.makedirs(args.profile, exist_ok=True)
    profiler.export_chrome_trace(os.path.join(args.profile, f"{args.wrap}-{name}-rank{rank}.json.gz"))
    busy, share, gpu = collective_overlap(profiler)
    return losses, times, (busy / profiled, share, gpu / profiled)


def wrap(model, how, compiler, backend, device_ids, bucket_cap_mb=25.0):
    """`model` wrapped for data parallelism as --wrap says, compiled by
    `compiler` ("kiln", "torch.compile" or None for eager)."""
    if compiler == "kiln":
        compile_ = lambda fn: kiln.compile(fn, backend=backend)  # noqa: E731
    elif compiler == "torch.compile":
        compile_ = torch.compile
    else:
        compile_ = lambda fn: fn  # noqa: E731
    if how == "inner":
        return DDP(compile_(model), device_ids=device_ids, bucket_cap_mb=bucket_cap_mb)
    if how == "outer":
        return compile_(DDP(model, device_ids=device_ids, bucket_cap_mb=bucket_cap_mb))
    if how.startswith("fsdp-module"):
        for i, block in enumerate(model.blocks):
            if how == "fsdp-module-after-shard":
                fully_shard(block)
            block = compile_(block)
            if how == "fsdp-module":
                fully_shard(block)
            model.blocks[i] = block
        fully_shard(model)
        return model
    for block in model.blocks:
        if how == "fsdp":
            fully_shard(block)
        block.forward = compile_(block.forward)
    if how == "blocks":
        return DDP(model, device_ids=device_ids, bucket_cap_mb=bucket_cap_mb)
    fully_shard(model)
    return model


def local(t):
    """This rank's part of a parameter (its shard under FSDP2)."""
    return t.to_local() if hasattr(t, "to_local") else t


def relative_difference(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--wrap", default="inner",
                        choices=["inner", "outer", "blocks", "fsdp", "fsdp-module", "fsdp-module-after-shard"])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bench", action="store_true", help="a larger GPT, random tokens, bf16 on the GPU, timings")
    parser.add_argument("--compare-tc", action="store_true", help="also time torch.compile under the same wrapping")
    parser.add_argument("--uneven-step", type=int, default=-1,
                        help="rank 1 alone trains this step on shorter sequences (a recompile on one rank)")
    parser.add_argument("--batch", type=int, default=16, help="sequences a rank's step takes under --bench")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's gradient bucket size")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the timings")
    parser.add_argument("--profile", metavar="DIR", help="GPU: traces of 5 more steps, collectives' overlap")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    _, vocab = dataset()
    model = GPT(vocab, **(BENCH if args.bench else {})).to(device)
    reference = copy.deepcopy(model)
    tc_model = copy.deepcopy(model) if args.compare_tc else None
    ids = [device.index] if cuda else None
    timed, overlaps = {}, {}

    def run(compiler, m, name):
        return train(wrap(m, args.wrap, compiler, args.backend, ids, args.bucket_cap_mb), args, rank, device, vocab,
                     name)
    eager_losses, timed["eager"], overlaps["eager"] = run(None, reference, "eager")
    if args.compare_tc:
        _, timed["torch.compile"], overlaps["torch.compile"] = run("torch.compile", tc_model, "tc")
    kiln_losses, timed["kiln"], overlaps["kiln"] = run("kiln", model, "kiln")
    loss_diff = relative_difference(torch.tensor(kiln_losses), torch.tensor(eager_losses))
    param_diff = max(relative_difference(local(p.detach()), local(q.detach()))
                     for p, q in zip(model.parameters(), reference.parameters()))
    ok = loss_diff <= args.tolerance and param_diff <= args.tolerance
    s = kiln.stats()
    line = (f"rank {rank} ({args.wrap}): loss {eager_losses[0]:.4f} -> {eager_losses[-1]:.4f} eager, "
          f"{kiln_losses[0]:.4f} -> {kiln_losses[-1]:.4f} kiln; largest relative difference: losses {loss_diff:.1e}, "
          f"parameters {param_diff:.1e}; kiln: {s['traces']} traces, {s['graph_breaks']} breaks, "
          f"{s['autograd_graphs']} autograd graphs, {s['prim_fallbacks']} prim fallbacks")
    if args.bench or args.compare_tc:
        line += "; median step ms: " + ", ".join(
            f"{name} {statistics.median(times[args.warmup:] or times):.2f}" for name, times in timed.items())
    if args.profile and cuda:
        line += "; GPU busy ms/step, of it collectives (share overlapping compute): " + ", ".join(
            f"{name} {gpu:.2f}, {busy:.2f} ({share:.0%})" for name, (busy, share, gpu) in overlaps.items())
    sys.stdout.write(line + "\n")  # one write: the ranks share the terminal
    sys.stdout.flush()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
