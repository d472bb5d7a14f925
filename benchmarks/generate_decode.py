#!/usr/bin/env python3
"""generate() with a KV cache (issue 24): eager vs kiln vs torch.compile,
the model's forward compiled, in one process on one device.

    PYTHONPATH=python .venv/bin/python benchmarks/generate_decode.py [--device cuda] [--models gpt2,llama]
        [--tokens 64] [--calls 4] [--mask] [--no-tc]

For the small GPT-2, Llama, T5 (encoder-decoder: `--models t5`) and
Mistral (sliding-window cache counting tokens in a Python int: `--models
mistral`, Note [Dynamic ints]) of dynamic_lengths.py (transformers, random weights, 2 layers, width 64),
greedy generate() of --tokens new tokens from a 16-token prompt
(with an all-ones attention_mask under --mask, as a tokenizer gives),
called --calls times per compiler on its own copy of the model: each
call's milliseconds, whether its tokens equal eager's, and kiln's traces,
size instances, graph breaks, eager frames and kernels after the calls.
The first call carries the compiles (kiln: the prefill's static graph and
the decoding step's static regions, compiled once, Note [Static regions];
with kiln.config.static_regions off the step compiles per cache length at
a length's second sighting, so the second call compiles the lengths the
first saw); the last call is the steady state. Prints a markdown table.
"""
import argparse
import copy
import platform
import time

import torch
import transformers

import kiln
from dynamic_lengths import build  # the same small GPT-2, Llama (512 positions), T5 and Mistral


def generate(model, ids, args):
    """One generate() call: (tokens, milliseconds)."""
    mask = torch.ones_like(ids) if args.mask else None
    with torch.no_grad():
        if ids.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=args.tokens, min_new_tokens=args.tokens,
                             do_sample=False, pad_token_id=0)
        if ids.is_cuda:
            torch.cuda.synchronize()
        return out, (time.perf_counter() - start) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--mask", action="store_true", help="pass an attention mask of ones")
    parser.add_argument("--no-tc", action="store_true", help="skip torch.compile")
    args = parser.parse_args()
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.machine()
    print(f"device: {device_name}, torch {torch.__version__}, transformers {transformers.__version__}; "
          f"{args.tokens} new tokens, mask {args.mask}")
    rows = []
    for name in args.models.split(","):
        model = build(name, args.device)
        ids = torch.randint(1, 100, (1, 16), device=args.device)
        reference, _ = generate(model, ids, args)
        eager = [generate(model, ids, args)[1] for _ in range(args.calls)]
        compilers = [("kiln", kiln.compile)] + ([] if args.no_tc else [("torch.compile", torch.compile)])
        for label, compile_fn in compilers:
            kiln.reset()
            compiled = copy.deepcopy(model)
            compiled.forward = compile_fn(compiled.forward)
            times, equal = [], True
            for _ in range(args.calls):
                out, ms = generate(compiled, ids, args)
                times.append(ms)
                equal = equal and torch.equal(out, reference)
            counts = ""
            if label == "kiln":
                s = kiln.stats()
                counts = (f"{s['traces']} traces, {s['size_instances']} instances, {s['graph_breaks']} breaks, "
                          f"{s['eager_runs']} eager frames, {s['kernels']} kernels")
            rows.append((name, label, " / ".join(f"{t:.1f}" for t in times), min(eager), equal, counts))
    print("| model | compiler | ms per call (1 / 2 / ...) | eager ms (best) | tokens equal | kiln counts |")
    print("|---|---|---|---|---|---|")
    for name, label, times, eager_ms, equal, counts in rows:
        print(f"| {name} | {label} | {times} | {eager_ms:.1f} | {equal} | {counts} |")


if __name__ == "__main__":
    main()
