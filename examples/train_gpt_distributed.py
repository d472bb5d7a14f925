"""Trains the small GPT of examples/gpt.py data-parallel (DDP or FSDP2),
eagerly and compiled by kiln, from the same weights and batches (each rank
its own), and checks that kiln gives the eager run's losses and parameters.

    torchrun --nproc_per_node=2 examples/train_gpt_distributed.py [--wrap inner|outer|fsdp] [--steps 20]
                                                                  [--backend inductor] [--device cpu|cuda]

--wrap inner is DDP(kiln.compile(model)); outer is kiln.compile(DDP(model));
fsdp is FSDP2's per-block pattern: fully_shard each transformer block and
compile its forward (`block.forward = kiln.compile(block.forward)`: FSDP's
hooks, which all-gather and free the parameters around the forward, run
eagerly around the compiled graph), then fully_shard the model. The eager
run uses the same wrapping without kiln. CPU processes talk through gloo,
GPUs (one per rank) through NCCL. Exits with 1 when a loss or a parameter
differs from the eager run's by more than --tolerance (relative).
"""
import argparse
import copy
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln  # noqa: E402
from gpt import GPT, batch, dataset  # noqa: E402


def train(model, steps, rank, device):
    """Losses of `steps` SGD steps on this rank's batches."""
    data, _ = dataset()
    generator = torch.Generator().manual_seed(1000 + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x, y = batch(data, generator)
        loss = model(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def wrap(model, how, compiled, backend, device_ids):
    """`model` wrapped for data parallelism as --wrap says, with kiln where `compiled`."""
    compile_ = (lambda fn: kiln.compile(fn, backend=backend)) if compiled else (lambda fn: fn)
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
    args = parser.parse_args()
    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    _, vocab = dataset()
    model = GPT(vocab).to(device)
    reference = copy.deepcopy(model)
    ids = [device.index] if cuda else None
    eager_losses = train(wrap(reference, args.wrap, False, args.backend, ids), args.steps, rank, device)
    kiln_losses = train(wrap(model, args.wrap, True, args.backend, ids), args.steps, rank, device)
    loss_diff = relative_difference(torch.tensor(kiln_losses), torch.tensor(eager_losses))
    param_diff = max(relative_difference(local(p.detach()), local(q.detach()))
                     for p, q in zip(model.parameters(), reference.parameters()))
    ok = loss_diff <= args.tolerance and param_diff <= args.tolerance
    s = kiln.stats()
    line = (f"rank {rank} ({args.wrap}): loss {eager_losses[0]:.4f} -> {eager_losses[-1]:.4f} eager, "
          f"{kiln_losses[0]:.4f} -> {kiln_losses[-1]:.4f} kiln; largest relative difference: losses {loss_diff:.1e}, "
          f"parameters {param_diff:.1e}; kiln: {s['traces']} traces, {s['graph_breaks']} breaks, "
          f"{s['autograd_graphs']} autograd graphs, {s['prim_fallbacks']} prim fallbacks")
    sys.stdout.write(line + "\n")  # one write: the ranks share the terminal
    sys.stdout.flush()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
