"""Bytes the forward pass saves for the backward (activations, and the
inputs and weights autograd keeps), for one block of the GPT-like model of
examples/gpt.py: eager autograd against kiln's partitioner
(backend="aot_eager"), counted the same way for both, in one run.

Everything saved for backward passes through torch's saved-tensor hooks
(eager's nodes and kiln's autograd.Function alike); each distinct storage
counts once, with its size in bytes.

    python3 benchmarks/models/saved_activations.py [--width 64 --heads 4 --context 32 --batch 8]
"""
import argparse
import os
import platform
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import kiln  # noqa: E402
from gpt import Block  # noqa: E402


def saved_bytes(model, x):
    """Bytes of the distinct storages saved for backward by model(x)."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    out.sum().backward()
    return sum(storages.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    block = Block(args.width, args.heads, args.context)
    x = torch.randn(args.batch, args.context, args.width)
    eager = saved_bytes(block, x)
    compiled = kiln.compile(block, backend="aot_eager")
    compiled(x)  # compile outside the measured call
    ours = saved_bytes(compiled, x)
    s = kiln.stats()
    print(f"machine: {platform.machine()}, python {platform.python_version()}, torch {torch.__version__}")
    print(f"GPT block: width {args.width}, heads {args.heads}, context {args.context}, batch {args.batch}")
    print("| what | eager autograd | kiln (min-cut partitioner) | kiln / eager |")
    print("|---|---|---|---|")
    print(f"| bytes saved for backward | {eager} | {ours} | {ours / eager:.2f} |")
    if s["autograd_graphs"] == 0:
        print("note: the block fell back to eager autograd; kiln's partitioner did not run")
        return 1
    return 0 if ours <= eager else 1


if __name__ == "__main__":
    sys.exit(main())
