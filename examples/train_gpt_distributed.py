"""Trains the small GPT of examples/gpt.py data-parallel (DDP or FSDP2),
eagerly and compiled by kiln, from the same weights and batches (each rank
its own), and checks that kiln gives the eager run's losses and parameters.

    torchrun --nproc_per_node=2 examples/train_gpt_distributed.py [--wrap inner|outer|fsdp] [--steps 20]
                                                                  [--backend inductor] [--device cpu|cuda]
                                                                  [--bench] [--compare-tc]

--wrap inner is DDP(kiln.compile(model)); outer is kiln.compile(DDP(model));
fsdp is FSDP2's per-block pattern: fully_shard each transformer block and
compile its forward (`block.forward = kiln.compile(block.forward)`: FSDP's
hooks, which all-gather and free the parameters around the forward, run
eagerly around the compiled graph), then fully_shard the model. The eager
run uses the same wrapping without kiln. CPU processes talk through gloo,
GPUs (one per rank) through NCCL. Exits with 1 when a loss or a parameter
differs from the eager run's by more than --tolerance (relative).

--bench trains a larger GPT (6 layers, width 512, 256 tokens of context,
random tokens, bf16 autocast on the GPU) and prints each rank's median
step time after --warmup steps; --compare-tc adds torch.compile under the
same wrapping (for fsdp, each block's forward) to the timings.
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
BENCH_BATCH = 16


def batches(args, rank, vocab):
    """This rank's batch maker: windows of the example text, or random tokens under --bench."""
    data, _ = dataset()
    generator = torch.Generator().manual_seed(1000 + rank)
    if not args.bench:
        return lambda: batch(data, generator)

    def random_tokens():
        x = torch.randint(0, vocab, (BENCH_BATCH, BENCH["context"] + 1), generator=generator)
        return x[:, :-1].contiguous(), x[:, 1:].contiguous()
    return random_tokens


def train(model, args, rank, device, vocab):
    """(losses, step times in ms) of args.steps SGD steps on this rank's batches."""
    next_batch = batches(args, rank, vocab)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, times = [], []
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if args.bench and device.type == "cuda"
                else contextlib.nullcontext())
    for _ in range(args.steps):
        x, y = next_batch()
        start = time.perf_counter()
        with autocast:
            loss = model(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # waits for the step
        times.append((time.perf_counter() - start) * 1e3)
    return losses, times


def wrap(model, how, compiler, backend, device_ids):
    """`model` wrapped for data parallelism as --wrap says, compiled by
    `compiler` ("kiln", "torch.compile" or None for eager)."""
    if compiler == "kiln":
        compile_ = lambda fn: kiln.compile(fn, backend=backend)  # noqa: E731
    elif compiler == "torch.compile":
        compile_ = torch.compile
    else:
        compile_ = lambda fn: fn  # noqa: E731
    if how == "inner":
        return DDP(compile_(model), device_ids=device_ids)
    if how == "outer":
        return compile_(DDP(model, device_ids=device_ids))
    for block in model.blocks:
        fully_shard(block)
        block.forward = compile_(block.forward)
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
    parser.add_argument("--wrap", choices=["inner", "outer", "fsdp"], default="inner")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bench", action="store_true", help="a larger GPT, random tokens, bf16 on the GPU, timings")
    parser.add_argument("--compare-tc", action="store_true", help="also time torch.compile under the same wrapping")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the timings")
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
    eager_losses, eager_times = train(wrap(reference, args.wrap, None, args.backend, ids), args, rank, device, vocab)
    timed = {"eager": eager_times}
    if args.compare_tc:
        _, timed["torch.compile"] = train(wrap(tc_model, args.wrap, "torch.compile", args.backend, ids), args, rank,
                                          device, vocab)
    kiln_losses, timed["kiln"] = train(wrap(model, args.wrap, "kiln", args.backend, ids), args, rank, device, vocab)
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
    sys.stdout.write(line + "\n")  # one write: the ranks share the terminal
    sys.stdout.flush()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
