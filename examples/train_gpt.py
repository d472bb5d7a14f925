"""Trains the small GPT-like model of examples/gpt.py for 200 steps on the
CPU twice from the same initial weights and batches: eagerly, and compiled
by kiln with backend="aot_eager" (kiln's decomposition into prims, its
autograd and partitioner, run through torch). Prints both loss curves and
their largest relative difference.

    python3 examples/train_gpt.py [--steps 200] [--backend aot_eager]
"""
import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln  # noqa: E402
from gpt import GPT, batch, dataset  # noqa: E402


def train(model, steps, seed):
    data, _ = dataset()
    generator = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    start = time.perf_counter()
    for _ in range(steps):
        x, y = batch(data, generator)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--backend", default="aot_eager")
    args = parser.parse_args()
    torch.manual_seed(0)
    _, vocab = dataset()
    model = GPT(vocab)
    reference = copy.deepcopy(model)
    eager_losses, eager_time = train(reference, args.steps, seed=1)
    compiled = kiln.compile(model, backend=args.backend)
    kiln_losses, kiln_time = train(compiled, args.steps, seed=1)
    worst = max(abs(a - b) / abs(b) for a, b in zip(kiln_losses, eager_losses))
    for step in range(0, args.steps, max(1, args.steps // 10)):
        print(f"step {step:4d}  eager {eager_losses[step]:.6f}  kiln {kiln_losses[step]:.6f}")
    print(f"step {args.steps - 1:4d}  eager {eager_losses[-1]:.6f}  kiln {kiln_losses[-1]:.6f}")
    print(f"largest relative difference of the loss curves: {worst:.2e}")
    print(f"time: eager {eager_time:.2f} s, kiln {kiln_time:.2f} s (including compilation)")
    s = kiln.stats()
    print(f"kiln: {s['traces']} traces, {s['autograd_graphs']} graphs through kiln's autograd, "
          f"{s['prim_fallbacks']} fell back to eager")
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
