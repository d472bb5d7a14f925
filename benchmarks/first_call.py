#!/usr/bin/env python3
"""Where the first compiled call of one GPU zoo model goes (issue 23's
first-call target): a warm eager step, then kiln's first step with
KILN_LOGS=perf (or --logs) printing each phase (trace, decomposition,
joint graph and partition, inductor passes with their plan, lower,
compile and emit times, NVRTC worker compiles), then a second step.

    KILN_CACHE_DIR= python3 benchmarks/first_call.py tv-swin_t --mode train [--logs perf,kernels]

KILN_CACHE_DIR= (empty) turns the disk kernel cache off, so every kernel
compiles (a cold first call); KILN_NVRTC_WORKERS sets the NVRTC worker
processes. Models, inputs and the training loss are benchmarks/zoo_gpu.py's
(bf16 autocast, CUDA). The last line gives the first and second step times.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import kiln  # noqa: E402
import zoo_gpu  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=sorted(zoo_gpu.MODELS))
    ap.add_argument("--mode", choices=("train", "infer"), default="train")
    ap.add_argument("--logs", default="perf", help="KILN_LOGS channels during the first call")
    opts = ap.parse_args()
    model, _, step = zoo_gpu.model_and_step(opts.model, opts.mode)
    train = opts.mode == "train"

    with torch.enable_grad() if train else torch.no_grad():
        step(model)
        torch.cuda.synchronize()
        compiled = kiln.compile(model)
        kiln._C.set_logs(opts.logs)
        start = time.perf_counter()
        step(compiled)
        torch.cuda.synchronize()
        first = time.perf_counter() - start
        kiln._C.set_logs("")
        start = time.perf_counter()
        step(compiled)
        torch.cuda.synchronize()
        second = time.perf_counter() - start
    print(f"{opts.model} {opts.mode}: first call {first:.2f} s, second {second * 1e3:.1f} ms", file=sys.stderr)


if __name__ == "__main__":
    main()
