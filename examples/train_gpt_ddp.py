"""Trains the small GPT of examples/gpt.py under DistributedDataParallel,
eagerly and compiled by kiln, from the same weights and batches (each rank
its own), and checks that kiln gives eager DDP's losses and parameters.

    torchrun --nproc_per_node=2 examples/train_gpt_ddp.py [--steps 20] [--wrap inner|outer] [--backend inductor]
                                                          [--device cpu|cuda]

--wrap inner is DDP(kiln.compile(model)); outer is kiln.compile(DDP(model)).
CPU processes talk through gloo, GPUs (one per rank) through NCCL. Exits
with 1 when a loss or a parameter differs from eager DDP's by more than
--tolerance (relative).
"""
import argparse
import copy
import os
import sys

import torch
import torch.distributed as dist
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


def relative_difference(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--wrap", choices=["inner", "outer"], default="inner")
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
    eager_losses = train(DDP(reference, device_ids=ids), args.steps, rank, device)
    if args.wrap == "inner":
        compiled = DDP(kiln.compile(model, backend=args.backend), device_ids=ids)
    else:
        compiled = kiln.compile(DDP(model, device_ids=ids), backend=args.backend)
    kiln_losses = train(compiled, args.steps, rank, device)
    loss_diff = relative_difference(torch.tensor(kiln_losses), torch.tensor(eager_losses))
    param_diff = max(relative_difference(p.detach(), q.detach())
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
