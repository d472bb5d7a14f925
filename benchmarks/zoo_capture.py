#!/usr/bin/env python3
"""Capture of the zoo models, kiln beside torch.compile on the same torch.

    PYTHONPATH=python .venv/bin/python benchmarks/zoo_capture.py [--models hf-gpt2,...] [--train]
        [--set zoo|library]

For every model of tests/python/zoo/zoo_models.py (or, with --set library,
of tests/python/zoo/library_models.py: 70 more transformers, timm,
torchvision and diffusers models), one inference call (or,
with --train, a forward and backward): graphs and graph breaks kiln makes
(kiln.explain; graphs with ops, as Dynamo counts them, and in parentheses
every traced frame) and torch.compile's Dynamo makes (torch._dynamo.explain),
whether the compiled outputs equal eager's, and the first-call time of
kiln.compile and torch.compile (backend inductor, the default) measured in
the same process (torch.compile's only with --first-call). With
--front-ends, also the two crossings of issue 26: kiln's compiler behind
Dynamo's capture (torch.compile(model, backend="kiln")) and torch's
inductor behind kiln's capture (kiln.compile(model, backend=compile_fx)),
each checked against eager with its first-call time. Prints a markdown
table (docs/perf.md keeps it).
"""
import argparse
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python", "zoo"))

import torch  # noqa: E402

import kiln  # noqa: E402
import kiln.dynamo_backend  # noqa: E402
import library_models  # noqa: E402
import zoo_models  # noqa: E402

MODEL_SETS = {"zoo": zoo_models, "library": library_models}


def close(a, b):
    ta, tb = zoo_models.tensors_of(a), zoo_models.tensors_of(b)
    return len(ta) == len(tb) > 0 and all(torch.allclose(x, y, rtol=1e-3, atol=1e-3) for x, y in zip(ta, tb))


def timed_first(step, compiled):
    """(output, seconds) of the first call of `compiled`."""
    start = time.perf_counter()
    out = step(compiled)
    return out, time.perf_counter() - start


def measure(name, train, first_call, front_ends=False, models=zoo_models):
    model, args, kwargs = models.build(name)
    if train:
        model = zoo_models.without_randomness(model).train()
    else:
        model.eval()

    def step(m):
        out = m(*args, **kwargs)
        if train:
            zoo_models.loss_of(out).backward()
        return out

    context = torch.enable_grad() if train else torch.no_grad()
    with context:
        expected = step(model)
        kiln.reset()
        explained = kiln.explain(model)(*args, **kwargs)
        kiln.reset()
        start = time.perf_counter()
        got = step(kiln.compile(model))
        kiln_first = time.perf_counter() - start
        torch._dynamo.reset()
        dynamo = torch._dynamo.explain(model)(*args, **kwargs)
        tc_out, tc_first = None, float("nan")
        if first_call:
            torch._dynamo.reset()
            start = time.perf_counter()
            tc_out = step(torch.compile(model))
            tc_first = time.perf_counter() - start
        crossings = {}
        if front_ends:
            from torch._inductor.compile_fx import compile_fx
            torch._dynamo.reset()
            kiln.reset()
            out, seconds = timed_first(step, torch.compile(model, backend=kiln.dynamo_backend.backend))
            crossings["kiln_behind_dynamo"] = (close(out, expected), seconds)
            kiln.reset()
            out, seconds = timed_first(step, kiln.compile(model, backend=compile_fx))
            # A graph kiln could not hand over runs eagerly (a prim fallback).
            crossings["inductor_behind_kiln"] = (close(out, expected) and kiln.stats()["prim_fallbacks"] == 0, seconds)
    return {**crossings,
        "name": name,
        "kiln_graphs": explained.op_graph_count,
        "kiln_frames": explained.graph_count,
        "kiln_breaks": explained.graph_break_count,
        "tc_graphs": dynamo.graph_count,
        "tc_breaks": dynamo.graph_break_count,
        "kiln_ok": close(got, expected),
        "tc_ok": close(tc_out, expected) if tc_out is not None else None,
        "kiln_first_s": kiln_first,
        "tc_first_s": tc_first,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=sorted(MODEL_SETS), default="zoo", help="which models: the zoo, or the wider library set")
    ap.add_argument("--models", default=None, help="comma-separated names (default: the whole set)")
    ap.add_argument("--train", action="store_true", help="a forward and backward instead of inference")
    ap.add_argument("--front-ends", action="store_true",
                    help="also torch.compile(backend='kiln') and kiln.compile(backend=compile_fx)")
    ap.add_argument("--first-call", action="store_true",
                    help="also time torch.compile's first call (inductor compiles C++ kernels: minutes on 2 cores)")
    opts = ap.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    models = MODEL_SETS[opts.set]
    for name in (opts.models.split(",") if opts.models else list(models.MODELS)):
        try:
            rows.append(measure(name, opts.train, opts.first_call, opts.front_ends, models))
        except Exception as exc:  # a model that fails is a row, not the end of the table
            rows.append({"name": name, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"})
        print(rows[-1], file=sys.stderr, flush=True)
    mode = "training step" if opts.train else "inference"
    print(f"| model ({mode}) | kiln graphs / breaks (traced frames) | torch.compile graphs / breaks "
          f"| equal to eager (kiln, tc) | first call kiln | first call torch.compile |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['name']} | error: {r['error']} | | | | |")
            continue
        print(f"| {r['name']} | {r['kiln_graphs']} / {r['kiln_breaks']} ({r['kiln_frames']}) "
              f"| {r['tc_graphs']} / {r['tc_breaks']} "
              f"| {r['kiln_ok']}, {r['tc_ok']} | {r['kiln_first_s']:.2f} s | {r['tc_first_s']:.2f} s |")
    crossed = [r for r in rows if "kiln_behind_dynamo" in r]
    if crossed:
        print(f"\n| model ({mode}) | torch.compile(backend='kiln'): equal, first call "
              f"| kiln.compile(backend=compile_fx): equal, first call |")
        print("|---|---|---|")
        for r in crossed:
            (a_ok, a_s), (b_ok, b_s) = r["kiln_behind_dynamo"], r["inductor_behind_kiln"]
            print(f"| {r['name']} | {a_ok}, {a_s:.2f} s | {b_ok}, {b_s:.2f} s |")


if __name__ == "__main__":
    main()
