"""Issue 6's compile-time benchmark on the GPU: the 64-layer model of issue 5
(each layer Linear(10,10) -> ReLU -> sigmoid -> Linear(10,10) -> ReLU) on
CUDA, first call of the compiled whole model, kiln beside torch.compile in
one run:

  python3 benchmarks/cuda_compile_time.py [--reps N]

Each measurement is a fresh process with an empty cache directory (kiln's
KILN_CACHE_DIR, torch's TORCHINDUCTOR_CACHE_DIR), so "cold" means nothing
compiled before; the first call is timed up to torch.cuda.synchronize().
kiln runs backend="inductor" with kiln.config.cuda_kernels;
torch.compile its default inductor backend. The result of the first call
is checked against eager in the same process.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch

SCRIPT = """
import json, statistics, sys, time
import torch
import torch.nn as nn
compiler, mode = sys.argv[1], sys.argv[2]
if compiler == "kiln":
    import kiln
    kiln.config.cuda_kernels = True
torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Sigmoid(), nn.Linear(10, 10),
                                      nn.ReLU()) for _ in range(64)]).cuda()
x = torch.randn(32, 10, device="cuda")
model(x)  # CUDA context, cuBLAS handle and eager kernels loaded before the clock starts
torch.cuda.synchronize()
compiled = kiln.compile(model, backend="inductor") if compiler == "kiln" else torch.compile(model)
with torch.set_grad_enabled(mode == "grad"):
    first = time.perf_counter()
    out = compiled(x)
    torch.cuda.synchronize()
    first = time.perf_counter() - first
    torch.testing.assert_close(out, model(x))
    times = []
    for _ in range(20):
        t = time.perf_counter()
        compiled(x)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
stats = kiln.stats() if compiler == "kiln" else {}
print(json.dumps({"first_call": first, "steady_call": statistics.median(times), "stats": stats}))
"""


def run_process(compiler, mode, perf_log=False):
    with tempfile.TemporaryDirectory(prefix="kiln-cuda-compile-") as cache_dir:
        python_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
        path = os.pathsep.join(p for p in (python_dir, os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, KILN_CACHE_DIR=cache_dir, TORCHINDUCTOR_CACHE_DIR=cache_dir, PYTHONPATH=path)
        env.pop("KILN_LOGS", None)
        if perf_log:
            env["KILN_LOGS"] = "perf"
        done = subprocess.run([sys.executable, "-c", SCRIPT, compiler, mode], env=env,
                              capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{compiler} {mode} process failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["log"] = [line for line in done.stderr.splitlines() if line.startswith("[kiln:perf]")]
    return result


def print_perf_log(mode):
    """Where a cold first call's time goes: kiln's KILN_LOGS=perf lines, slowest first."""
    run = run_process("kiln", mode, perf_log=True)
    print(f"\nKILN_LOGS=perf of one cold kiln process ({mode}), first call {run['first_call'] * 1e3:.0f} ms; "
          f"{len(run['log'])} lines, the 25 slowest:")
    def ms(line):
        try:
            return float(line.rsplit(": ", 1)[1].split(" ms")[0])
        except (IndexError, ValueError):
            return 0.0
    for line in sorted(run["log"], key=ms, reverse=True)[:25]:
        print("  " + line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="fresh processes per configuration")
    parser.add_argument("--perf-log", action="store_true", help="also show where one cold kiln call's time goes")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("cuda_compile_time.py: no CUDA device", file=sys.stderr)
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| model | compiler | grad mode | cold first call (median) | runs | steady call | target |")
    print("|---|---|---|---|---|---|---|")
    configs = [("kiln", "grad"), ("kiln", "no_grad"), ("torch.compile", "grad")]
    for compiler, mode in configs:
        runs = [run_process("kiln" if compiler == "kiln" else "torch", mode) for _ in range(args.reps)]
        first = statistics.median(r["first_call"] for r in runs)
        steady = statistics.median(r["steady_call"] for r in runs)
        target = "<= 1 s" if compiler == "kiln" else ""
        each = ", ".join("%.0f" % (r["first_call"] * 1e3) for r in runs)
        print(f"| 64 layers | {compiler} | {mode} | {first * 1e3:.0f} ms | {each} | {steady * 1e6:.0f} us | {target} |")
        if compiler == "kiln":
            print(f"  kiln stats: {json.dumps(runs[0]['stats'])}")
    if args.perf_log:
        print_perf_log("no_grad")
    return 0


if __name__ == "__main__":
    sys.exit(main())
