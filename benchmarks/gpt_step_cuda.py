"""Issue 6's GPT training step on the GPU, kiln beside torch eager and
torch.compile in one run:

  python3 benchmarks/gpt_step_cuda.py [--repeat N] [--profile]

The model is examples/gpt.py's GPT with 6 layers, 6 heads, width 384,
context 256 and a 65-token vocabulary, on batches of 64 windows. One step
is the forward under torch.autocast("cuda", torch.bfloat16), cross_entropy
inside the model, backward, and a fused AdamW step outside the compiled
model. Each implementation runs in a fresh process with empty compile
caches: "first" is the first step's wall time up to
torch.cuda.synchronize() (the compile included; the CUDA context and
cuBLAS are started before the clock by an eager forward and backward),
"step" the median over 10 batches of 5 steps timed with CUDA events after
5 warm-up steps. The first losses (1%) and the losses after the timed
steps (10%: eager's own vary between runs by several percent) are compared
with eager's. --profile prints each
implementation's 15 costliest ops over 5 steps, by CUDA time and by CPU
time. Both compilers' steps are bound by host time, and the GPU machine's
host speed drifts by 20% and more between minutes, so --repeat N runs the
implementations N times, interleaved (eager, torch.compile, kiln, eager,
...), and reports each one's median step and first-call times, the ratio
being of medians; the spread shows how far to trust it.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

STEP_SCRIPT = r"""
import json, statistics, sys, time
import torch
sys.path.insert(0, sys.argv[3])
from gpt import GPT
impl, profile = sys.argv[1], sys.argv[2] == "1"
if impl == "kiln":
    import kiln
    kiln.config.cuda_kernels = True
torch.manual_seed(0)
model = GPT(65, width=384, heads=6, layers=6, context=256).cuda()
gen = torch.Generator(device="cuda").manual_seed(1)
batches = [(torch.randint(0, 65, (64, 256), device="cuda", generator=gen),
            torch.randint(0, 65, (64, 256), device="cuda", generator=gen)) for _ in range(4)]
# The CUDA context, cuBLAS and eager kernels start before the clock.
with torch.autocast("cuda", dtype=torch.bfloat16):
    model(*batches[0]).backward()
model.zero_grad(set_to_none=True)
torch.cuda.synchronize()
if impl == "kiln":
    call = kiln.compile(model, backend="inductor")
elif impl == "torch.compile":
    call = torch.compile(model)
else:
    call = model
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
count = [0]

def step():
    x, y = batches[count[0] % len(batches)]
    count[0] += 1
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = call(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss

start = time.perf_counter()
first_loss = step().item()
first = time.perf_counter() - start
for _ in range(5):
    step()
torch.cuda.synchronize()
times = []
for _ in range(10):
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(5):
        loss = step()
    end.record()
    end.synchronize()
    times.append(begin.elapsed_time(end) / 5)
result = {"first_s": first, "step_ms": statistics.median(times), "first_loss": first_loss,
          "last_loss": loss.item(), "steps": count[0]}
if impl == "kiln":
    result["stats"] = {k: v for k, v in kiln.stats().items() if v}
if profile:
    from torch.profiler import profile as prof, ProfilerActivity
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    averages = p.key_averages()
    result["profile"] = (averages.table(sort_by="cuda_time_total", row_limit=15, max_name_column_width=60) + "\n" +
                         averages.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60))
print("RESULT " + json.dumps(result))
"""

IMPLS = ("torch eager", "torch.compile", "kiln")


def run(impl, profile):
    examples = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    python_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
    with tempfile.TemporaryDirectory(prefix="kiln-gpt-") as cache:
        env = dict(os.environ, KILN_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=cache,
                   PYTHONPATH=os.pathsep.join(p for p in (python_dir, os.environ.get("PYTHONPATH")) if p))
        done = subprocess.run([sys.executable, "-c", STEP_SCRIPT, impl, "1" if profile else "0", examples],
                              env=env, capture_output=True, text=True, timeout=900)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    print(f"{impl} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return None


def summarize(runs):
    """One implementation's runs as one result: median step and first-call
    times, every run's step time, the first run's losses and profile; None
    when any run failed."""
    if not runs or not all(runs):
        return None
    import statistics
    result = dict(runs[0])
    result["step_ms"] = statistics.median(r["step_ms"] for r in runs)
    result["first_s"] = statistics.median(r["first_s"] for r in runs)
    result["step_ms_runs"] = [r["step_ms"] for r in runs]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="print the costliest CUDA kernels of each")
    parser.add_argument("--only", choices=IMPLS, action="append", help="run only these implementations")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs of each implementation")
    options = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("gpt_step_cuda.py: no CUDA device", file=sys.stderr)
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    impls = options.only or IMPLS
    runs = {impl: [] for impl in impls}
    for _ in range(max(1, options.repeat)):
        for impl in impls:
            runs[impl].append(run(impl, options.profile))
    results = {impl: summarize(rs) for impl, rs in runs.items()}
    status = 0 if all(results.values()) else 1
    eager, compiled = results.get("torch eager"), results.get("torch.compile")
    print(f"{'impl':14} {'first call':>11} {'step ms':>9} {'vs eager':>9} {'vs compile':>11} "
          f"{'first loss':>11} {'last loss':>10}  step ms of each run")
    for impl, r in results.items():
        if not r:
            continue
        vs_eager = f"{r['step_ms'] / eager['step_ms']:8.2f}x" if eager else "-"
        vs_compile = f"{r['step_ms'] / compiled['step_ms']:10.2f}x" if compiled else "-"
        print(f"{impl:14} {r['first_s']:10.2f}s {r['step_ms']:9.3f} {vs_eager:>9} {vs_compile:>11} "
              f"{r['first_loss']:11.5f} {r['last_loss']:10.5f}  "
              + " ".join(f"{ms:.2f}" for ms in r["step_ms_runs"]))
    print("(step time ratios: lower is faster; the issue asks kiln <= 0.95x torch.compile)")
    kiln_result = results.get("kiln")
    if kiln_result:
        print("kiln stats:", kiln_result.get("stats"))
        if eager:
            # The first step is the same computation; after 55 bf16 steps eager's own
            # loss varies between runs by several percent (atomic adds in the
            # embedding backward, cuBLAS), so the last one is checked loosely.
            for key, tolerance in (("first_loss", 0.01), ("last_loss", 0.1)):
                if abs(kiln_result[key] - eager[key]) > tolerance * abs(eager[key]):
                    print(f"kiln's {key} {kiln_result[key]:.5f} is not eager's {eager[key]:.5f}")
                    status = 1
    for impl, r in results.items():
        if r and "profile" in r:
            print(f"\n== {impl}: 5 steps\n{r['profile']}")
    return status


if __name__ == "__main__":
    sys.exit(main())
