"""Issue 6's overhead-bound benchmark: a 4-layer MLP (Linear 1024->1024 +
GELU each) at batch 1, inference, per call, on the GPU:

  torch eager | torch.compile(mode="reduce-overhead") | kiln (inductor) |
  kiln mode="reduce-overhead" (CUDA graphs)       target: kiln <= 50 us

One command, side by side in one process:

    python3 benchmarks/cuda_overhead.py [--calls 2000] [--reps 7]

Each variant's result is checked against eager first. A repetition runs
`calls` calls back to back and synchronizes once; per-call time is the
repetition's time over `calls` (the calls are launch-bound, so this is
what a serving loop sees). The table reports medians over repetitions and
each variant's first call (compile) time.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn as nn

import kiln


def model():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(1024, 1024), nn.GELU()]
    return nn.Sequential(*layers).cuda().eval()


def per_call_us(fn, x, calls, reps):
    times = []
    with torch.no_grad():
        for _ in range(reps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--no-torch-compile", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("cuda_overhead.py: needs a CUDA device")
    m = model()
    x = torch.randn(1, 1024, device="cuda")
    with torch.no_grad():
        reference = m(x)
    variants = [("torch eager", m)]
    if not args.no_torch_compile:
        variants.append(("torch.compile reduce-overhead", torch.compile(m, mode="reduce-overhead")))
    variants.append(("kiln inductor", kiln.compile(m)))
    variants.append(("kiln reduce-overhead", kiln.compile(m, mode="reduce-overhead")))
    rows = []
    for name, fn in variants:
        with torch.no_grad():
            torch.cuda.synchronize()
            start = time.perf_counter()
            out = fn(x)
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            for _ in range(10):  # warm up (captures happen here)
                out = fn(x)
            torch.cuda.synchronize()
        torch.testing.assert_close(out, reference, rtol=1e-3, atol=1e-3)
        rows.append((name, first, per_call_us(fn, x, args.calls, args.reps)))
    eager_us = rows[0][2]
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, batch 1, 4 x (Linear 1024 + GELU)")
    print(f"{'variant':32s} {'first call':>11s} {'per call':>10s} {'vs eager':>9s}")
    for name, first, us in rows:
        print(f"{name:32s} {first * 1e3:9.1f} ms {us:8.1f} us {eager_us / us:8.2f}x")
    kiln_us = rows[-1][2]
    print(f"kiln reduce-overhead: {kiln_us:.1f} us per call (target <= 50 us): "
          f"{'met' if kiln_us <= 50 else 'NOT met'}")
    print(f"kiln counters: {kiln.stats()}")


if __name__ == "__main__":
    main()
