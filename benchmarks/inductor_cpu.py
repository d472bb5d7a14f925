"""Issue 5's CPU inductor benchmarks, kiln (backend="inductor" with
kiln.config.cpu_kernels) side by side with torch eager in the
same run, 2 threads:

  gelu       gelu(x*y + 1) * 0.5 over 16M float32             target: kiln >= 4x eager
  softmax_ln layer_norm(softmax(x)) over 4096x4096 float32   target: kiln >= 2.5x eager
  gpt_step   forward + backward + SGD step of examples/gpt.py  target: kiln >= 1.2x eager
  sum        x.sum() over 16M float32 (a full reduction, split over threads)
  sum_rows   x.sum(1) over a [2, 8M] float32 (two long rows, split likewise)
  sum_cols   x.sum(0) over an [8M, 2] float32 (an outer reduction over two columns, split likewise)
  argmax     x.argmax() over 16M float32 (index and value partials, split likewise)
  layers64   64 x (Linear(10,10) -> ReLU -> sigmoid -> Linear(10,10) -> ReLU):
             first call in a fresh process with an empty kernel cache (cold,
             target <= 1 s) and in a second fresh process with that cache
             (warm, target <= 100 ms); measured around the first call inside
             the process, import times reported apart

One command (prints a table at the end):

    PYTHONPATH=python /usr/bin/python3 benchmarks/inductor_cpu.py [--quick] [--only gelu,layers64]

Times are medians over repetitions; eager and kiln alternate within each
repetition so that both see the same load. Every kiln result is checked
against eager before it is timed.
"""
import argparse
import atexit
import copy
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
THREADS = 2

# The kernels this process compiles go to a throwaway cache: the 64-layer
# benchmark measures the disk cache in processes of its own.
os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-bench-cache-")
atexit.register(shutil.rmtree, os.environ["KILN_CACHE_DIR"], True)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "examples"))
import kiln  # noqa: E402
from gpt import GPT, batch, dataset  # noqa: E402


def paired_medians(eager, compiled, reps, warmup):
    """Median seconds per call of eager() and compiled(), alternating."""
    for _ in range(warmup):
        eager()
        compiled()
    eager_times, kiln_times = [], []
    for _ in range(reps):
        start = time.perf_counter()
        eager()
        eager_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        compiled()
        kiln_times.append(time.perf_counter() - start)
    return statistics.median(eager_times), statistics.median(kiln_times)


def kernel_counts(before):
    """kiln's kernel counters since `before` (a kiln.stats() snapshot)."""
    now = kiln.stats()
    keys = ("kernels", "kernels_compiled", "kernel_cache_hits_memory", "kernel_cache_hits_disk",
            "prim_fallbacks", "gemm_kernels", "gemm_calls", "gemm_aten_calls")
    return {k: now[k] - before[k] for k in keys}


def bench_pointwise(name, fn, inputs, reps, rtol=1e-5, atol=1e-5):
    kiln.reset()
    before = kiln.stats()
    compiled = kiln.compile(fn, backend="inductor")
    torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=rtol, atol=atol)
    eager_s, kiln_s = paired_medians(lambda: fn(*inputs), lambda: compiled(*inputs), reps, warmup=1)
    return {"name": name, "eager_s": eager_s, "kiln_s": kiln_s, "counts": kernel_counts(before)}


def gelu_chain(x, y):
    return F.gelu(x * y + 1) * 0.5


def softmax_layer_norm(x):
    return F.layer_norm(torch.softmax(x, dim=-1), (x.shape[-1],))


def bench_gelu(reps):
    torch.manual_seed(0)
    n = 16 * 1024 * 1024
    result = bench_pointwise("gelu", gelu_chain, (torch.randn(n), torch.randn(n)), reps)
    result.update(label="gelu(x*y + 1) * 0.5, 16M float32", target=4.0)
    return result


def bench_softmax_ln(reps):
    torch.manual_seed(0)
    result = bench_pointwise("softmax_ln", softmax_layer_norm, (torch.randn(4096, 4096),), reps)
    result.update(label="layer_norm(softmax(x)), 4096x4096 float32", target=2.5)
    return result


def full_sum(x):
    return x.sum()


def row_sums(x):
    return x.sum(1)


def bench_sum(reps):
    torch.manual_seed(0)
    # Millions of float32 terms: summation orders differ by ~1e-4 relative.
    result = bench_pointwise("sum", full_sum, (torch.randn(16 * 1024 * 1024),), reps, rtol=1e-3, atol=1e-1)
    result.update(label="x.sum(), 16M float32", target=None)
    return result


def bench_sum_rows(reps):
    torch.manual_seed(0)
    result = bench_pointwise("sum_rows", row_sums, (torch.randn(2, 8 * 1024 * 1024),), reps, rtol=1e-3, atol=1e-1)
    result.update(label="x.sum(1), [2, 8M] float32", target=None)
    return result


def column_sums(x):
    return x.sum(0)


def bench_sum_cols(reps):
    torch.manual_seed(0)
    result = bench_pointwise("sum_cols", column_sums, (torch.randn(8 * 1024 * 1024, 2),), reps, rtol=1e-3, atol=1e-1)
    result.update(label="x.sum(0), [8M, 2] float32", target=None)
    return result


def full_argmax(x):
    return x.argmax()


def bench_argmax(reps):
    torch.manual_seed(0)
    result = bench_pointwise("argmax", full_argmax, (torch.randn(16 * 1024 * 1024),), reps, rtol=0, atol=0)
    result.update(label="x.argmax(), 16M float32", target=None)
    return result


def bench_gpt(reps):
    torch.manual_seed(0)
    data, vocab = dataset()
    x, y = batch(data, torch.Generator().manual_seed(1))
    eager_model = GPT(vocab)
    kiln_model = copy.deepcopy(eager_model)
    kiln.reset()
    before = kiln.stats()
    compiled = kiln.compile(kiln_model, backend="inductor")

    def stepper(model, call):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)

        def step():
            loss = call(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss
        return step

    eager_step, kiln_step = stepper(eager_model, eager_model), stepper(kiln_model, compiled)
    # Same weights, same batch: the first losses must agree before timing.
    torch.testing.assert_close(kiln_step(), eager_step(), rtol=1e-4, atol=1e-5)
    eager_s, kiln_s = paired_medians(eager_step, kiln_step, reps, warmup=2)
    return {"name": "gpt_step", "label": "GPT-like training step (fwd+bwd+SGD), examples/gpt.py",
            "eager_s": eager_s, "kiln_s": kiln_s, "target": 1.2, "counts": kernel_counts(before)}


# The 64-layer model's process: times the first call of the compiled model.
LAYERS_SCRIPT = """
import json, statistics, sys, time
start = time.perf_counter()
import torch
import torch.nn as nn
torch_imported = time.perf_counter()
import kiln
kiln_imported = time.perf_counter()
torch.set_num_threads(%(threads)d)
kiln.config.cpu_kernels = True
torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Sigmoid(), nn.Linear(10, 10),
                                      nn.ReLU()) for _ in range(64)])
x = torch.randn(32, 10)
grad = sys.argv[1] == "grad"
compiled = kiln.compile(model, backend="inductor")
with torch.set_grad_enabled(grad):
    first = time.perf_counter()
    out = compiled(x)
    first = time.perf_counter() - first
    torch.testing.assert_close(out, model(x))
    def median(fn):
        times = []
        for _ in range(20):
            t = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - t)
        return statistics.median(times)
    steady, eager = median(compiled), median(model)
print(json.dumps({"import_torch": torch_imported - start, "import_kiln": kiln_imported - torch_imported,
                  "first_call": first, "steady_call": steady, "eager_call": eager,
                  "stats": kiln.stats()}))
""" % {"threads": THREADS}


def run_layers_process(cache_dir, mode):
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir)
    env.pop("KILN_LOGS", None)
    done = subprocess.run([sys.executable, "-c", LAYERS_SCRIPT, mode], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError("64-layer process failed:\n" + done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_layers64(reps):
    results = {}
    for mode in ("grad", "no_grad"):
        cold, warm = [], []
        for _ in range(reps):
            with tempfile.TemporaryDirectory(prefix="kiln-bench-64-") as cache_dir:
                cold.append(run_layers_process(cache_dir, mode))
                warm.append(run_layers_process(cache_dir, mode))
        results[mode] = {"cold": cold, "warm": warm}
    return {"name": "layers64", "runs": results}


BENCHMARKS = {"gelu": bench_gelu, "softmax_ln": bench_softmax_ln, "sum": bench_sum, "sum_rows": bench_sum_rows,
              "sum_cols": bench_sum_cols, "argmax": bench_argmax,
              "gpt_step": bench_gpt, "layers64": bench_layers64}


def machine():
    model = "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "?"
    return (f"{model}, {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {THREADS} threads, kiln {commit or '?'}")


def verdict(met):
    return "met" if met else "NOT met"


def ms(seconds):
    return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def med(runs, key):
    return statistics.median(run[key] for run in runs)


def layers_rows(result):
    """Cold and warm rows per grad mode: medians over result["reps"] fresh-cache pairs of processes."""
    rows = []
    for mode, label in (("grad", "grad mode (fwd+bwd graphs)"), ("no_grad", "torch.no_grad()")):
        runs = result["runs"][mode]
        cold, warm = runs["cold"], runs["warm"]
        for which, these, target in (("cold", cold, 1.0), ("warm", warm, 0.1)):
            first = med(these, "first_call")
            s = these[0]["stats"]
            rows.append([f"64 layers, {which} first call, {label}", ms(med(these, "eager_call")) + " per call",
                         ms(first), "-", f"<= {ms(target)}", verdict(first <= target),
                         f"median of {result['reps']} processes (range {ms(min(r['first_call'] for r in these))}"
                         f"-{ms(max(r['first_call'] for r in these))}); kernels: compiled {s['kernels_compiled']}, "
                         f"memory hits {s['kernel_cache_hits_memory']}, "
                         f"disk hits {s['kernel_cache_hits_disk']}; import torch "
                         f"{ms(med(these, 'import_torch'))}, kiln {ms(med(these, 'import_kiln'))}; "
                         f"later calls {ms(med(these, 'steady_call'))}"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated benchmark names")
    parser.add_argument("--json", help="also write the raw results to this file")
    args = parser.parse_args()
    if not kiln._C.cpu_kernels_available():
        sys.exit("this kiln build has no LLVM code generation (KILN_WITH_LLVM=OFF)")
    torch.set_num_threads(THREADS)
    kiln.config.cpu_kernels = True
    reps = {"gelu": 5 if args.quick else 15, "softmax_ln": 3 if args.quick else 9,
            "sum": 10 if args.quick else 30, "sum_rows": 10 if args.quick else 30,
            "sum_cols": 10 if args.quick else 30, "argmax": 10 if args.quick else 30,
            "gpt_step": 10 if args.quick else 40, "layers64": 1 if args.quick else 5}
    load_before = os.getloadavg()
    results = []
    for name in args.only.split(","):
        print(f"running {name} ...", file=sys.stderr, flush=True)
        result = BENCHMARKS[name](reps[name])
        result["reps"] = reps[name]
        results.append(result)
    load_after = os.getloadavg()

    rows = []
    for result in results:
        if result["name"] == "layers64":
            rows += layers_rows(result)
            continue
        speedup = result["eager_s"] / result["kiln_s"]
        c = result["counts"]
        target = result["target"]
        rows.append([result["label"], ms(result["eager_s"]), ms(result["kiln_s"]), f"{speedup:.2f}x",
                     "-" if target is None else f">= {target}x", "-" if target is None else verdict(speedup >= target),
                     f"median of {result['reps']}; {c['kernels']} kernel nodes and {c['gemm_kernels']} GEMM "
                     f"nodes ({c['kernels_compiled']} compiled; GEMM calls: {c['gemm_calls']} generated, "
                     f"{c['gemm_aten_calls']} torch), {c['prim_fallbacks']} graphs fell back to eager"])
    header = ["benchmark", "torch eager", "kiln", "kiln vs eager", "target", "verdict", "notes"]
    print()
    print("machine: " + machine())
    print(f"load average: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before, "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after")
    print("torch.compile: " + ("not measured by this harness" if hasattr(torch, "compile") else
                               f"not available (torch {torch.__version__} predates it); issue 5 quotes "
                               "14.9 s cold / 11.3 s warm for the 64-layer model"))
    print("times are medians; eager and kiln alternate within each repetition")
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": machine(), "load": [load_before, load_after], "results": results}, out,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
