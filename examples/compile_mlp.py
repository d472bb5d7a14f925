"""Compile a small MLP with kiln on CPU and compare it with eager torch.

Prints the compile time, eager vs compiled time per call, the graphs kiln
traced and the graph breaks it hit, and checks that compiled output matches
eager output (exit code 1 if it does not).

Run after ./setup.sh:  python3 examples/compile_mlp.py
"""

import statistics
import sys
import time

import torch

import kiln

BATCH, DIM, HIDDEN, CLASSES = 32, 128, 256, 10
TIMED_CALLS = 200


class Block(torch.nn.Module):
    """Pre-norm feed-forward block with a residual connection."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, hidden)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(self.act(self.up(self.norm(x))))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(DIM, DIM)
        self.block1 = Block(DIM, HIDDEN)
        self.block2 = Block(DIM, HIDDEN)
        self.norm = torch.nn.LayerNorm(DIM)
        self.head = torch.nn.Linear(DIM, CLASSES)

    def forward(self, x):
        x = self.embed(x)
        x = self.block2(self.block1(x))
        return self.head(self.norm(x))


def call_ns(fn, x):
    start = time.perf_counter_ns()
    fn(x)
    return time.perf_counter_ns() - start


def median_call_ns(fn, x, calls):
    return statistics.median(call_ns(fn, x) for _ in range(calls))


def ms(ns):
    return ns / 1e6


def main():
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(BATCH, DIM)
    print(f"kiln example: MLP (Linear, LayerNorm, GELU, residual), input {tuple(x.shape)}, "
          f"CPU, torch {torch.__version__}")

    with torch.no_grad():
        # Warm eager first, so that the compiled model's first call does not
        # also pay torch's own first-call costs (allocator, thread pool).
        for _ in range(10):
            model(x)
        eager_ns = median_call_ns(model, x, TIMED_CALLS)

        compiled = kiln.compile(model)
        first_ns = call_ns(compiled, x)
        compiled_ns = median_call_ns(compiled, x, TIMED_CALLS)

        expected = model(x)
        actual = compiled(x)

    print(f"compile time (first call - steady call): {ms(first_ns - compiled_ns):.1f} ms")
    print(f"eager:    {ms(eager_ns):.3f} ms/call (median of {TIMED_CALLS})")
    print(f"compiled: {ms(compiled_ns):.3f} ms/call (median of {TIMED_CALLS})")
    print(f"speed ratio (eager / compiled): {eager_ns / compiled_ns:.2f}x")

    stats = kiln.stats()
    print("kiln stats: " + ", ".join(f"{name}={value}" for name, value in sorted(stats.items())))

    with torch.no_grad():
        explanation = kiln.explain(model)(x)
    print(f"graphs: {explanation.graph_count}")
    for index, graph in enumerate(explanation.graphs):
        print(f"--- graph {index} ---")
        print(graph.rstrip())
    print(f"graph breaks: {explanation.graph_break_count}")
    for reason in explanation.break_reasons:
        print(f"  - {reason}")

    # Tolerances leave room for generated kernels that reassociate sums; the
    # eager backend matches bit for bit.
    if actual.shape != expected.shape:
        print(f"FAIL: compiled output has shape {tuple(actual.shape)}, eager {tuple(expected.shape)}",
              file=sys.stderr)
        return 1
    max_diff = (actual - expected).abs().max().item()
    if not torch.allclose(actual, expected, rtol=1e-4, atol=1e-5):
        print(f"FAIL: compiled output differs from eager (max abs diff {max_diff:.3e})", file=sys.stderr)
        return 1
    print(f"OK: compiled output matches eager (max abs diff {max_diff:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
