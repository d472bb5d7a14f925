"""Issue 5's CPU inductor benchmarks, kiln (backend="inductor" with
kiln.config.cpu_kernels) side by side with torch eager and torch.compile
(default mode: backend inductor, torch's C++/OpenMP CPU kernels) in the
same run, 2 threads:

  gelu       gelu(x*y + 1) * 0.5 over 16M float32             target: kiln >= 4x eager
  softmax_ln layer_norm(softmax(x)) over 4096x4096 float32   target: kiln >= 2.5x eager
  gpt_step   forward + backward + SGD step of examples/gpt.py  target: kiln >= 1.2x eager
  sum        x.sum() over 16M float32 (a full reduction, split over threads)
  sum_rows   x.sum(1) over a [2, 8M] float32 (two long rows, split likewise)
  sum_cols   x.sum(0) over an [8M, 2] float32 (an outer reduction over two columns, split likewise)
  argmax     x.argmax() over 16M float32 (index and value partials, split likewise)
  overhead   microseconds per call of tiny functions (x + 1 on one element,
             nn.Linear(8, 8) on a [1, 8] input, with and without grad), where
             the compilers' per-call cost (guards, dispatch) dominates
  layers64   64 x (Linear(10,10) -> ReLU -> sigmoid -> Linear(10,10) -> ReLU):
             first call in a fresh process with an empty kernel cache (cold,
             target <= 1 s) and in a second fresh process with that cache
             (warm, target <= 100 ms); measured around the first call inside
             the process, import times reported apart; the same for
             torch.compile (its TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR
             pointed at the fresh directory)

One command (prints a table at the end):

    PYTHONPATH=python .venv/bin/python benchmarks/inductor_cpu.py [--quick] [--only gelu,layers64]

Times are medians over repetitions; eager, kiln and torch.compile alternate
within each repetition so that all three see the same load. Every kiln and
torch.compile result is checked against eager before it is timed; the first
(compiling) calls are timed apart and reported in their own columns. Where
torch.compile fails, its column says "failed: <reason>" and the others are
still timed.
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
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
THREADS = 2

# The kernels this process compiles go to throwaway caches, kiln's and
# torch.compile's alike, so that both first calls are cold: the 64-layer
# benchmark measures the disk caches in processes of their own.
os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-bench-cache-")
atexit.register(shutil.rmtree, os.environ["KILN_CACHE_DIR"], True)
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-bench-inductor-cache-")
os.environ["TRITON_CACHE_DIR"] = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "triton")
atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], True)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "examples"))
import kiln  # noqa: E402
from gpt import GPT, batch, dataset  # noqa: E402


def paired_medians(fns, reps, warmup):
    """Median seconds per call of each of fns, called in turn within each repetition."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, these in zip(fns, times):
            start = time.perf_counter()
            fn()
            these.append(time.perf_counter() - start)
    return [statistics.median(these) for these in times]


def timed_first(call):
    """call()'s result and its time in seconds."""
    start = time.perf_counter()
    out = call()
    return out, time.perf_counter() - start


def failure(error):
    """'failed: <reason>' for a table cell, the full traceback on stderr."""
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    reason = f"{type(error).__name__}: {lines[0] if lines else ''}".replace("|", "/")
    return "failed: " + (reason if len(reason) <= 160 else reason[:157] + "...")


def dynamo_graphs():
    """Graphs torch.compile has compiled in this process so far."""
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def torch_compiled(step, check):
    """Calls step() (the first call of something built on torch.compile) and
    check(its result): {"tc_first_s": seconds} or {"tc_error": "failed: ..."}."""
    try:
        out, first = timed_first(step)
        check(out)
        return {"tc_first_s": first}
    except Exception as error:  # noqa: BLE001 - reported in the table, the others still run
        print("torch.compile failed:", file=sys.stderr)
        return {"tc_error": failure(error)}


def kernel_counts(before):
    """kiln's kernel counters since `before` (a kiln.stats() snapshot)."""
    now = kiln.stats()
    keys = ("kernels", "kernels_compiled", "kernel_cache_hits_memory", "kernel_cache_hits_disk",
            "prim_fallbacks", "gemm_kernels", "gemm_calls", "gemm_aten_calls")
    return {k: now[k] - before[k] for k in keys}


def timed_three(result, eager, kiln_call, tc_call, reps, warmup):
    """Interleaved medians of eager, kiln and (unless it failed) torch.compile, into result."""
    fns = [eager, kiln_call] + ([] if "tc_error" in result else [tc_call])
    medians = paired_medians(fns, reps, warmup)
    result.update(eager_s=medians[0], kiln_s=medians[1], tc_s=medians[2] if len(medians) > 2 else None)
    return result


def bench_pointwise(name, fn, inputs, reps, rtol=1e-5, atol=1e-5):
    kiln.reset()
    before = kiln.stats()
    want = fn(*inputs)
    check = lambda out: torch.testing.assert_close(out, want, rtol=rtol, atol=atol)  # noqa: E731
    compiled = kiln.compile(fn, backend="inductor")
    out, kiln_first = timed_first(lambda: compiled(*inputs))
    check(out)
    graphs = dynamo_graphs()
    tc = torch.compile(fn)
    result = {"name": name, "kiln_first_s": kiln_first, **torch_compiled(lambda: tc(*inputs), check)}
    result["tc_graphs"] = dynamo_graphs() - graphs
    timed_three(result, lambda: fn(*inputs), lambda: compiled(*inputs), lambda: tc(*inputs), reps, warmup=1)
    result["counts"] = kernel_counts(before)
    return result


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
    tc_model = copy.deepcopy(eager_model)
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
    tc_step = stepper(tc_model, torch.compile(tc_model))
    # Same weights, same batch: the first losses must agree before timing.
    # The first steps (kiln's and torch.compile's compile their forward and
    # backward graphs) are timed apart.
    want = eager_step()
    check = lambda loss: torch.testing.assert_close(loss, want, rtol=1e-4, atol=1e-5)  # noqa: E731
    loss, kiln_first = timed_first(kiln_step)
    check(loss)
    graphs = dynamo_graphs()
    result = {"name": "gpt_step", "label": "GPT-like training step (fwd+bwd+SGD), examples/gpt.py",
              "target": 1.2, "kiln_first_s": kiln_first, **torch_compiled(tc_step, check)}
    result["tc_graphs"] = dynamo_graphs() - graphs
    timed_three(result, eager_step, kiln_step, tc_step, reps, warmup=2)
    result["counts"] = kernel_counts(before)
    return result


def add_one(x):
    return x + 1


def bench_overhead(reps):
    """Per-call cost: microseconds per call of tiny functions, batches of calls
    of eager, kiln and torch.compile interleaved, median over batches."""
    calls = 200 if reps < 20 else 1000
    torch.manual_seed(0)
    linear = nn.Linear(8, 8)
    cases = [("x + 1, 1-element float32", add_one, torch.ones(1), torch.enable_grad),
             ("nn.Linear(8, 8), [1, 8] input, grad mode", linear, torch.randn(1, 8), torch.enable_grad),
             ("nn.Linear(8, 8), [1, 8] input, torch.no_grad()", linear, torch.randn(1, 8), torch.no_grad)]
    rows = []
    for label, fn, x, mode in cases:
        kiln.reset()
        with mode():
            want = fn(x)
            check = lambda out: torch.testing.assert_close(out, want)  # noqa: E731
            # Each compiler gets its own copy of a module (same weights).
            compiled = kiln.compile(copy.deepcopy(fn) if isinstance(fn, nn.Module) else fn, backend="inductor")
            out, kiln_first = timed_first(lambda: compiled(x))
            check(out)
            graphs = dynamo_graphs()
            tc = torch.compile(copy.deepcopy(fn) if isinstance(fn, nn.Module) else fn)
            result = {"label": label, "calls": calls, "kiln_first_s": kiln_first,
                      **torch_compiled(lambda: tc(x), check)}
            graphs_compiled = dynamo_graphs() - graphs

            def batch_of(call):
                def run():
                    with mode():
                        for _ in range(calls):
                            call(x)
                return run
            before = kiln.stats()
            graphs = dynamo_graphs()
            timed_three(result, batch_of(fn), batch_of(compiled), batch_of(tc), reps, warmup=2)
            after = kiln.stats()
        for key in ("eager_s", "kiln_s", "tc_s"):
            if result[key] is not None:
                result[key] /= calls
        # Only cache hits may be timed: no new traces, recompiles or graphs.
        new = {k: after[k] - before[k] for k in ("traces", "recompiles", "cache_misses", "eager_runs")}
        if any(new.values()):
            raise RuntimeError(f"overhead {label}: kiln did more than hit its cache while timed: {new}")
        if dynamo_graphs() != graphs:
            raise RuntimeError(f"overhead {label}: torch.compile compiled new graphs while timed")
        result["kiln_hits_per_call"] = (after["cache_hits"] - before["cache_hits"]) / ((reps + 2) * calls)
        result["tc_graphs"] = graphs_compiled
        rows.append(result)
    return {"name": "overhead", "cases": rows}


# The 64-layer model's process: times the first call of the compiled model,
# kiln's (argv[2] == "kiln") or torch.compile's ("torch").
LAYERS_SCRIPT = """
import json, statistics, sys, time
start = time.perf_counter()
import torch
import torch.nn as nn
torch_imported = time.perf_counter()
mode, compiler = sys.argv[1], sys.argv[2]
if compiler == "kiln":
    import kiln
    kiln.config.cpu_kernels = True
kiln_imported = time.perf_counter()
torch.set_num_threads(%(threads)d)
torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Sigmoid(), nn.Linear(10, 10),
                                      nn.ReLU()) for _ in range(64)])
x = torch.randn(32, 10)
grad = mode == "grad"
compiled = kiln.compile(model, backend="inductor") if compiler == "kiln" else torch.compile(model)
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
if compiler == "kiln":
    stats = kiln.stats()
else:
    from torch._dynamo.utils import counters
    stats = {"unique_graphs": counters["stats"]["unique_graphs"],
             "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
             "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"]}
print(json.dumps({"import_torch": torch_imported - start, "import_kiln": kiln_imported - torch_imported,
                  "first_call": first, "steady_call": steady, "eager_call": eager, "stats": stats}))
""" % {"threads": THREADS}


def run_layers_process(cache_dir, mode, compiler="kiln"):
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir, TORCHINDUCTOR_CACHE_DIR=cache_dir,
               TRITON_CACHE_DIR=os.path.join(cache_dir, "triton"))
    env.pop("KILN_LOGS", None)
    done = subprocess.run([sys.executable, "-c", LAYERS_SCRIPT, mode, compiler], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"64-layer {compiler} process failed:\n" + done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_layers64(reps):
    """Per grad mode and compiler, `reps` pairs of fresh processes (cold, then
    warm with the cold one's cache directory), kiln's and torch.compile's
    pairs alternating. A torch.compile failure is recorded, not raised."""
    results = {}
    for mode in ("grad", "no_grad"):
        runs = {"cold": [], "warm": [], "tc_cold": [], "tc_warm": [], "tc_error": None}
        for _ in range(reps):
            with tempfile.TemporaryDirectory(prefix="kiln-bench-64-") as cache_dir:
                runs["cold"].append(run_layers_process(cache_dir, mode, "kiln"))
                runs["warm"].append(run_layers_process(cache_dir, mode, "kiln"))
            if runs["tc_error"]:
                continue
            with tempfile.TemporaryDirectory(prefix="kiln-bench-64-inductor-") as cache_dir:
                try:
                    runs["tc_cold"].append(run_layers_process(cache_dir, mode, "torch"))
                    runs["tc_warm"].append(run_layers_process(cache_dir, mode, "torch"))
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    print(str(error), file=sys.stderr)
                    lines = str(error).strip().splitlines()
                    reason = (lines[-1] if lines else repr(error)).replace("|", "/")
                    runs["tc_error"] = "failed: " + (reason if len(reason) <= 160 else reason[:157] + "...")
        results[mode] = runs
    return {"name": "layers64", "runs": results}


BENCHMARKS = {"gelu": bench_gelu, "softmax_ln": bench_softmax_ln, "sum": bench_sum, "sum_rows": bench_sum_rows,
              "sum_cols": bench_sum_cols, "argmax": bench_argmax,
              "gpt_step": bench_gpt, "overhead": bench_overhead, "layers64": bench_layers64}


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


def warm_up_compilers():
    """One throwaway compile with each compiler, so that one-time costs (torch
    importing dynamo and inductor and building its C++ prelude, kiln setting up
    LLVM) don't land on whichever benchmark runs first. Returns a line."""
    def tiny(x):
        return (x * 2).relu() - 1
    x = torch.randn(4)
    _, kiln_s = timed_first(lambda: kiln.compile(tiny, backend="inductor")(x))
    try:
        _, tc_s = timed_first(lambda: torch.compile(tiny)(x))
        tc = ms(tc_s)
    except Exception as error:  # noqa: BLE001 - each benchmark reports its own failure
        tc = failure(error)
    kiln.reset()
    return f"one-time warm-up compile in this process (not in any column): kiln {ms(kiln_s)}, torch.compile {tc}"


def verdict(met):
    return "met" if met else "NOT met"


def ms(seconds):
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def ratio(slower, faster):
    """slower / faster as 'N.NNx', '-' where either is missing."""
    return "-" if slower is None or faster is None else f"{slower / faster:.2f}x"


def med(runs, key):
    return statistics.median(run[key] for run in runs)


def spread(runs):
    return f"range {ms(min(r['first_call'] for r in runs))}-{ms(max(r['first_call'] for r in runs))}"


def layers_rows(result):
    """Cold and warm rows per grad mode: medians over result["reps"] fresh-cache pairs of processes."""
    rows = []
    for mode, label in (("grad", "grad mode (fwd+bwd graphs)"), ("no_grad", "torch.no_grad()")):
        runs = result["runs"][mode]
        for which, target in (("cold", 1.0), ("warm", 0.1)):
            these, tc_runs = runs[which], runs["tc_" + which]
            first = med(these, "first_call")
            s = these[0]["stats"]
            if runs["tc_error"]:
                tc_cell, tc_first, tc_note = runs["tc_error"], None, ""
            else:
                tc_first = med(tc_runs, "first_call")
                t = tc_runs[0]["stats"]
                tc_cell = ms(tc_first)
                tc_note = (f"; torch.compile: {spread(tc_runs)}, {t['unique_graphs']} graphs, FX graph cache "
                           f"hits {t['fxgraph_cache_hit']}, misses {t['fxgraph_cache_miss']}, import torch "
                           f"{ms(med(tc_runs, 'import_torch'))}, later calls {ms(med(tc_runs, 'steady_call'))}")
            rows.append([f"64 layers, {which} first call, {label}", ms(med(these, "eager_call")) + " per call",
                         ms(first), tc_cell, "-", ratio(tc_first, first), f"<= {ms(target)}",
                         verdict(first <= target), "(kiln column)", "(torch.compile column)",
                         f"median of {result['reps']} processes each; kiln: {spread(these)}, kernels: compiled "
                         f"{s['kernels_compiled']}, memory hits {s['kernel_cache_hits_memory']}, "
                         f"disk hits {s['kernel_cache_hits_disk']}; import torch "
                         f"{ms(med(these, 'import_torch'))}, kiln {ms(med(these, 'import_kiln'))}; "
                         f"later calls {ms(med(these, 'steady_call'))}" + tc_note])
    return rows


def timed_row(label, r, target, notes):
    """A row of a benchmark timed in this process: eager, kiln, torch.compile."""
    tc_cell = r["tc_error"] if r.get("tc_error") else ms(r["tc_s"])
    speedup = r["eager_s"] / r["kiln_s"]
    return [label, ms(r["eager_s"]), ms(r["kiln_s"]), tc_cell, f"{speedup:.2f}x", ratio(r.get("tc_s"), r["kiln_s"]),
            "-" if target is None else f">= {target}x", "-" if target is None else verdict(speedup >= target),
            ms(r["kiln_first_s"]), "-" if r.get("tc_error") else ms(r["tc_first_s"]),
            notes + ("" if r.get("tc_error") else f"; torch.compile: {r['tc_graphs']} graphs")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated benchmark names")
    parser.add_argument("--json", help="also write the raw results to this file")
    args = parser.parse_args()
    if not kiln._C.cpu_kernels_available():
        sys.exit("this kiln build has no LLVM code generation (KILN_WITH_LLVM=OFF)")
    names = args.only.split(",")
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        sys.exit(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    torch.set_num_threads(THREADS)
    kiln.config.cpu_kernels = True
    reps = {"gelu": 5 if args.quick else 15, "softmax_ln": 3 if args.quick else 9,
            "sum": 10 if args.quick else 30, "sum_rows": 10 if args.quick else 30,
            "sum_cols": 10 if args.quick else 30, "argmax": 10 if args.quick else 30,
            "gpt_step": 10 if args.quick else 40, "overhead": 15 if args.quick else 50,
            "layers64": 1 if args.quick else 5}
    load_before = os.getloadavg()
    warm_up = None
    if any(name != "layers64" for name in names):
        print("warming up both compilers ...", file=sys.stderr, flush=True)
        warm_up = warm_up_compilers()
    results = []
    for name in names:
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
        if result["name"] == "overhead":
            for case in result["cases"]:
                rows.append(timed_row(f"per call: {case['label']}", case, None,
                                      f"median of {result['reps']} batches of {case['calls']} calls; kiln "
                                      f"{case['kiln_hits_per_call']:g} cache hits per call, nothing else"))
            continue
        c = result["counts"]
        rows.append(timed_row(result["label"], result, result["target"],
                              f"median of {result['reps']}; {c['kernels']} kernel nodes and {c['gemm_kernels']} "
                              f"GEMM nodes ({c['kernels_compiled']} compiled; GEMM calls: {c['gemm_calls']} "
                              f"generated, {c['gemm_aten_calls']} torch), {c['prim_fallbacks']} graphs fell back "
                              "to eager"))
    header = ["benchmark", "torch eager", "kiln", "torch.compile", "kiln vs eager", "kiln vs torch.compile",
              "target", "verdict", "kiln first call", "torch.compile first call", "notes"]
    print()
    print("machine: " + machine())
    print(f"load average: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before, "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after")
    import torch._inductor.config as inductor_config
    cxx = inductor_config.cpp.cxx
    print(f"torch.compile: torch {torch.__version__}, default mode (backend inductor: C++/OpenMP CPU kernels, "
          f"compiler {cxx[-1] if isinstance(cxx, tuple) else cxx}), caches in throwaway directories "
          "(TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR)")
    if warm_up:
        print(warm_up)
    print("times are medians; eager, kiln and torch.compile alternate within each repetition; "
          "ratios are the other's time over kiln's (above 1: kiln is faster)")
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
