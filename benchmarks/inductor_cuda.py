"""Issue 6's CUDA kernel benchmarks, kiln beside torch eager and torch.compile
in one run, on the first GPU:

  python3 benchmarks/inductor_cuda.py [--sweep]

  gelu(x * y + 1) * 0.5 over 64M float32 (3 tensors' bytes moved)
  softmax then layer_norm (affine) over 16384 x 4096 float32 (input read
  once, output written once)

Each is timed with CUDA events around 10 back-to-back calls, after warm-up
calls, and the median of 15 such batches is reported as time per call and
effective TB/s (those bytes over that time). kiln runs backend="inductor"
with kiln.config.cuda_kernels, in the default mode and with
mode="max-autotune" (each kernel times its launch configurations at its
first launch and keeps the fastest: the candidates and their times are
printed, KILN_LOGS=autotune). Results are checked against eager first.

--sweep also times the softmax->layer_norm kernel in every one of its
launch configurations (Note [CUDA launch configurations]), each forced in
turn, and prints their TB/s, the default marked, so the default heuristic
can be compared with the others.
"""
import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

import kiln

CALLS = 10
BATCHES = 15
WARMUP = 5


def gelu_chain(x, y):
    return F.gelu(x * y + 1) * 0.5


def softmax_layer_norm(x, w, b):
    return F.layer_norm(torch.softmax(x, -1), (x.shape[-1],), w, b)


def median_ms(fn, args):
    for _ in range(WARMUP):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(BATCHES):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS):
            fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / CALLS)
    return statistics.median(times)


def sweep(name, fn, args, nbytes, want):
    """Times fn's one CUDA kernel in each of its launch configurations."""
    print(f"\n{name}: every launch configuration of its kernel (default first)")
    print(f"{'#':>3} {'configuration':44} {'ms/call':>9} {'TB/s':>7}")
    status, index, count = 0, 0, 1
    try:
        while index < count:
            kiln._C.force_cuda_launch_candidate(index)
            kiln.reset()
            compiled = kiln.compile(fn, backend="inductor")
            try:
                got = compiled(*args)
                forced = kiln._C.forced_cuda_launches()
                if len(forced) != 1:
                    print(f"expected one CUDA kernel, got {forced}")
                    return 1
                _, _, count, config = forced[0]
                torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-5)
                ms = median_ms(compiled, args)
                mark = " (default)" if index == 0 else ""
                print(f"{index:3} {config + mark:44} {ms:9.3f} {nbytes / ms / 1e9:7.2f}")
            except Exception as error:  # noqa: BLE001 - reported, the others still run
                print(f"{index:3} failed: {type(error).__name__}: {str(error)[:300]}")
                status = 1
            index += 1
    finally:
        kiln._C.force_cuda_launch_candidate(-1)
    return status


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true",
                        help="also time every launch configuration of the softmax->layer_norm kernel")
    options = parser.parse_args()
    if not torch.cuda.is_available():
        print("inductor_cuda.py: no CUDA device", file=sys.stderr)
        return 1
    kiln.config.cuda_kernels = True
    torch.manual_seed(0)
    n = 64 * 1024 * 1024
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    rows, cols = 16384, 4096
    a = torch.randn(rows, cols, device="cuda")
    w, b = torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda")
    cases = [
        ("gelu(x*y+1)*0.5, 64M f32", gelu_chain, (x, y), 3 * n * 4),
        ("softmax->layer_norm, 16384x4096 f32", softmax_layer_norm, (a, w, b), 2 * rows * cols * 4),
    ]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'benchmark':38} {'impl':14} {'ms/call':>9} {'TB/s':>7} {'vs eager':>9} {'vs compile':>11}")
    status = 0
    with torch.no_grad():
        for name, fn, args, nbytes in cases:
            impls = [("torch eager", fn)]
            try:
                impls.append(("torch.compile", torch.compile(fn)))
            except Exception as error:  # noqa: BLE001 - reported, the others still run
                print(f"torch.compile unavailable: {error}")
            kiln.reset()
            impls.append(("kiln", kiln.compile(fn, backend="inductor")))
            impls.append(("kiln autotune", kiln.compile(fn, backend="inductor", mode="max-autotune")))
            want = fn(*args)
            results = {}
            for label, impl in impls:
                try:
                    if label == "kiln autotune":
                        kiln._C.set_logs("autotune")  # the candidates' times, on stderr
                        sys.stderr.flush()
                    try:
                        got = impl(*args)
                    finally:
                        kiln._C.set_logs("")
                    torch.cuda.synchronize()
                    sys.stderr.flush()
                    torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-5)
                    results[label] = median_ms(impl, args)
                except Exception as error:  # noqa: BLE001
                    print(f"{name}: {label} failed: {type(error).__name__}: {str(error)[:300]}")
                    status = 1
            if "kiln" in results and kiln.stats()["kernels"] == 0:
                print(f"{name}: kiln ran no CUDA kernel: {kiln.stats()}")
                status = 1
            for label, ms in results.items():
                eager = results.get("torch eager")
                compiled = results.get("torch.compile")
                vs_eager = f"{eager / ms:8.2f}x" if eager else "-"
                vs_compile = f"{compiled / ms:10.2f}x" if compiled else "-"
                print(f"{name:38} {label:14} {ms:9.3f} {nbytes / ms / 1e9:7.2f} {vs_eager:>9} {vs_compile:>11}")
        if options.sweep:
            name, fn, args, nbytes = cases[1]
            status |= sweep(name, fn, args, nbytes, fn(*args))
    return status


if __name__ == "__main__":
    sys.exit(main())
