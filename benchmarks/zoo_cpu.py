#!/usr/bin/env python3
"""The model zoo on the CPU: kiln vs eager vs torch.compile side by side in
one process (fp32), on the small configs of tests/python/zoo/zoo_models.py.

    PYTHONPATH=python .venv/bin/python benchmarks/zoo_cpu.py [--models hf-gpt2,tv-swin] [--mode infer|train]
        [--set zoo|library] [--batch 4] [--rounds 3] [--repeat 10] [--constant-subgraphs-off]

--set library takes the models from tests/python/zoo/library_models.py
(the wider set zoo_capture.py measures; --models then names some of them).

Per model and mode (infer: a forward under no_grad; train: forward,
backward and an SGD step): the median step time of eager, kiln.compile and
torch.compile (default inductor backend) over interleaved rounds, the
first call of each compiler (kiln's kernel cache memory-only:
KILN_CACHE_DIR is set empty unless given; torch's own caches as they are),
kiln's graph breaks (kiln.explain, inference) and frames run eagerly over
the timed calls, and whether kiln's outputs (infer) or loss (train) equal
eager's. --batch repeats each input along dim 0 (the zoo's inputs are
tiny; a bigger batch weighs kernel quality over host time). Prints a
markdown table; figures go to docs/perf.md with the machine named.
torch's inductor fails on tv-swin's CPU code unless
torch._inductor.config.cpp.simdlen = 1 (pytorch/pytorch#179135): set here.
"""
import argparse
import os
import platform
import statistics
import sys
import time
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("KILN_CACHE_DIR", "")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python", "zoo"))

import torch  # noqa: E402
import torch._inductor.config  # noqa: E402

import kiln  # noqa: E402
import library_models  # noqa: E402
import zoo_models  # noqa: E402

MODEL_SETS = {"zoo": zoo_models, "library": library_models}

torch._inductor.config.cpp.simdlen = 1  # pytorch/pytorch#179135 (tv-swin)


def batched(value, batch):
    """`value` (a tensor, or tuples/dicts of them) repeated `batch` times along dim 0."""
    if isinstance(value, torch.Tensor):
        return value.repeat(batch, *([1] * (value.dim() - 1))) if value.dim() > 0 and batch > 1 else value
    if isinstance(value, tuple):
        return tuple(batched(v, batch) for v in value)
    if isinstance(value, dict):
        return {k: batched(v, batch) for k, v in value.items()}
    return value


def close(a, b, tol):
    ta, tb = zoo_models.tensors_of(a), zoo_models.tensors_of(b)
    return len(ta) == len(tb) > 0 and all(torch.allclose(x.float(), y.float(), rtol=tol, atol=tol)
                                          for x, y in zip(ta, tb))


def run_model(name, mode, batch, rounds, repeat, options, model_set="zoo", randomness=False):
    model, args, kwargs = MODEL_SETS[model_set].build(name)
    args, kwargs = batched(args, batch), batched(kwargs, batch)
    train = mode == "train"
    if train and not randomness:
        model = zoo_models.without_randomness(model)
    model = model.train() if train else model.eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4) if train else None

    def step(m):
        out = m(*args, **kwargs)
        if not train:
            return out
        loss = zoo_models.loss_of(out)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def first_call(m):
        start = time.perf_counter()
        out = step(m)
        return out, time.perf_counter() - start

    grad = torch.enable_grad() if train else torch.no_grad()
    with grad:
        # The compared first steps all start from the same weights: the
        # SGD steps of the others are undone by restoring them.
        state = {k: v.clone() for k, v in model.state_dict().items()}
        expected, _ = first_call(model)
        model.load_state_dict(state)
        kiln.reset()
        kiln_model = kiln.compile(model, options=options)
        got, kiln_first = first_call(kiln_model)
        model.load_state_dict(state)
        torch._dynamo.reset()
        tc_model = torch.compile(model)
        tc_got, tc_first = first_call(tc_model)
        model.load_state_dict(state)
        samples = {"eager": [], "kiln": [], "tc": []}
        before = kiln.stats()
        for _ in range(rounds):  # interleaved, so drifts hit all three alike
            for key, m in (("eager", model), ("kiln", kiln_model), ("tc", tc_model)):
                for _ in range(repeat):
                    start = time.perf_counter()
                    step(m)
                    samples[key].append((time.perf_counter() - start) * 1e3)
        after = kiln.stats()
        # After the timed calls: explain's run leaves kernels in the memory
        # cache, which would have made kiln's first call look free.
        explained = kiln.explain(model)(*args, **kwargs) if not train else None
    tol = 1e-3
    medians = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "model": name, "mode": mode, "batch": batch,
        "eager_ms": medians["eager"], "kiln_ms": medians["kiln"], "tc_ms": medians["tc"],
        "kiln_vs_tc": medians["tc"] / medians["kiln"], "kiln_vs_eager": medians["eager"] / medians["kiln"],
        "kiln_first_s": kiln_first, "tc_first_s": tc_first,
        "breaks": explained.graph_break_count if explained else None,
        "eager_runs": after["eager_runs"] - before["eager_runs"],
        # Dropout and stochastic depth draw other numbers in each compiler.
        "ok": None if randomness else close(got, expected, tol),
        "tc_ok": None if randomness else close(tc_got, expected, tol),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(MODEL_SETS), default="zoo")
    parser.add_argument("--models", default=None, help="comma-separated names (default: the whole set)")
    parser.add_argument("--mode", choices=["infer", "train"], default="infer")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--with-randomness", action="store_true",
                        help="train with the models' dropout and stochastic depth as built (by default their "
                             "probabilities are set to 0, so steps can be compared with eager's)")
    parser.add_argument("--constant-subgraphs-off", action="store_true",
                        help="compile kiln with options={'constant_subgraphs': False}")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a kiln.compile option for every row (repeatable; true/false become bools)")
    ns = parser.parse_args()
    options = {"constant_subgraphs": False} if ns.constant_subgraphs_off else {}
    for text in ns.option:
        key, _, value = text.partition("=")
        options[key] = {"true": True, "false": False}.get(value.lower(), value)
    options = options or None
    warnings.filterwarnings("ignore")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, mode {ns.mode}, batch x{ns.batch}"
          f"{', with dropout and stochastic depth' if ns.with_randomness else ''}")
    print("| model | eager ms | kiln ms | torch.compile ms | kiln vs tc | kiln vs eager | first call kiln / tc "
          "| breaks | kiln eager runs | equal eager (kiln / tc) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    names = ns.models.split(",") if ns.models else list(MODEL_SETS[ns.set].MODELS)
    for name in names:
        try:
            r = run_model(name, ns.mode, ns.batch, ns.rounds, ns.repeat, options, ns.set, ns.with_randomness)
        except Exception as e:  # a row that fails says why; the others still run
            print(f"| {name} | failed: {type(e).__name__}: {str(e).splitlines()[0][:160]} |||||||||")
            continue
        ratios.append(r["kiln_vs_tc"])
        print(f"| {name} | {r['eager_ms']:.2f} | {r['kiln_ms']:.2f} | {r['tc_ms']:.2f} | {r['kiln_vs_tc']:.2f}x "
              f"| {r['kiln_vs_eager']:.2f}x | {r['kiln_first_s']:.1f} s / {r['tc_first_s']:.1f} s "
              f"| {'' if r['breaks'] is None else r['breaks']} | {r['eager_runs']} | {r['ok']} / {r['tc_ok']} |",
              flush=True)
    if ratios:
        geomean = statistics.geometric_mean(ratios)
        print(f"\ngeomean kiln vs torch.compile: {geomean:.2f}x over {len(ratios)} rows; "
              f"{sum(r >= 1 for r in ratios)} rows at or above it")


if __name__ == "__main__":
    main()
