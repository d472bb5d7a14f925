"""Tracing time of the 64-layer model (each layer Linear(10,10) -> ReLU ->
sigmoid -> Linear(10,10) -> ReLU), kiln beside torch.compile in one run.

Time to trace = first call after a reset minus a steady-state call, median
over repetitions. torch.compile runs with backend="eager" so that both
numbers are tracing (Dynamo) rather than code generation.

    .venv/bin/python benchmarks/models/trace_time.py [--repeat 7]
"""
import argparse
import platform
import statistics
import time
import warnings

import torch
from torch import nn

import kiln


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 10)
        self.fc2 = nn.Linear(10, 10)

    def forward(self, x):
        return torch.relu(self.fc2(torch.sigmoid(torch.relu(self.fc1(x)))))


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(*[Layer() for _ in range(64)])


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def steady(fn, x, n=50):
    times = []
    for _ in range(n):
        times.append(timed(fn, x)[0])
    return statistics.median(times)


def measure_kiln(model, x, repeat):
    samples = []
    for _ in range(repeat):
        kiln.reset()
        compiled = kiln.compile(model, backend="eager")
        first, out = timed(compiled, x)
        samples.append(first - steady(compiled, x, 10))
        torch.testing.assert_close(out, model(x))
    stats = kiln.stats()
    assert stats["traces"] == 1 and stats["graph_breaks"] == 0, stats
    return statistics.median(samples), steady(compiled, x)


def measure_torch_compile(model, x, repeat):
    from torch import _dynamo
    samples = []
    for _ in range(repeat):
        _dynamo.reset()
        compiled = torch.compile(model, backend="eager")
        first, out = timed(compiled, x)
        samples.append(first - steady(compiled, x, 10))
        torch.testing.assert_close(out, model(x))
    return statistics.median(samples), steady(compiled, x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    model = make_model()
    x = torch.randn(4, 10)
    eager = steady(model, x)
    kiln_trace, kiln_call = measure_kiln(model, x, args.repeat)
    tc_trace, tc_call = measure_torch_compile(model, x, args.repeat)
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"torch {torch.__version__}, 1 thread")
    print("| what | kiln | torch.compile (backend=eager) | eager |")
    print("|---|---|---|---|")
    tc = lambda v: f"{v * 1e3:.1f} ms"
    print(f"| trace the 64-layer model (median of {args.repeat}) | {kiln_trace * 1e3:.1f} ms | "
          f"{tc(tc_trace)} | - |")
    tcc = "n/a" if tc_call is None else f"{tc_call * 1e6:.0f} µs"
    print(f"| steady-state call | {kiln_call * 1e6:.0f} µs | {tcc} | {eager * 1e6:.0f} µs |")
    print(f"trace-time ratio torch.compile / kiln: {tc_trace / kiln_trace:.1f}x")


if __name__ == "__main__":
    main()
