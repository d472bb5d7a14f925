#!/usr/bin/env python3
"""The GPU model zoo: full-size real models, kiln vs eager vs torch.compile
side by side in one process (bf16 autocast, CUDA).

    python3 benchmarks/zoo_gpu.py --models hf-gpt2,hf-bert --mode infer [--json out.json]

Per model and mode (infer: a forward under no_grad; train: forward,
backward and an SGD step): the median step time of eager, kiln.compile and
torch.compile (default inductor backend) over interleaved repeats, the first
call of each compiler, kiln's graph breaks, recompiles and frames run
eagerly over the timed calls, the host time per call (until the step
returns, before the GPU finishes), the peak GPU memory of one call, and whether kiln's outputs (infer) or loss
(train) match eager's within bf16 tolerance. Prints a markdown table; the
figures go to docs/perf.md with the GPU named.
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python", "zoo"))

import torch  # noqa: E402

import kiln  # noqa: E402
import kiln.dynamo_backend  # noqa: E402
from zoo_models import loss_of, tensors_of, without_randomness  # noqa: E402

BATCH_TEXT, SEQ = 8, 512
BATCH_IMAGE = 32


def _tokens(vocab):
    return (torch.randint(0, vocab, (BATCH_TEXT, SEQ), device="cuda"),)


def _images(size=224):
    return (torch.randn(BATCH_IMAGE, 3, size, size, device="cuda"),)


def hf_gpt2():
    import transformers
    return transformers.GPT2LMHeadModel(transformers.GPT2Config()), _tokens(50257)


def hf_bert():
    import transformers
    return transformers.BertModel(transformers.BertConfig()), _tokens(30522)


def hf_llama():
    import transformers
    config = transformers.LlamaConfig(num_hidden_layers=6, hidden_size=1024, num_attention_heads=16,
                                      num_key_value_heads=8, intermediate_size=2816, vocab_size=32000)
    return transformers.LlamaForCausalLM(config), _tokens(32000)


def hf_t5():
    import transformers
    return transformers.T5EncoderModel(transformers.T5Config()), _tokens(32128)


def hf_distilbert():
    import transformers
    return transformers.DistilBertModel(transformers.DistilBertConfig()), _tokens(30522)


def hf_vit():
    import transformers
    return transformers.ViTModel(transformers.ViTConfig()), _images()


def _timm(name):
    import timm
    return timm.create_model(name, pretrained=False), _images()


def _tv(name):
    import torchvision
    return getattr(torchvision.models, name)(weights=None), _images()


MODELS = {
    "hf-gpt2": hf_gpt2,
    "hf-bert": hf_bert,
    "hf-llama-6l": hf_llama,
    "hf-t5-encoder": hf_t5,
    "hf-distilbert": hf_distilbert,
    "hf-vit-base": hf_vit,
    "timm-resnet50": lambda: _timm("resnet50"),
    "timm-efficientnet_b0": lambda: _timm("efficientnet_b0"),
    "timm-convnext_tiny": lambda: _timm("convnext_tiny"),
    "timm-vit_small": lambda: _timm("vit_small_patch16_224"),
    "tv-resnet50": lambda: _tv("resnet50"),
    "tv-mobilenet_v3_large": lambda: _tv("mobilenet_v3_large"),
    "tv-convnext_tiny": lambda: _tv("convnext_tiny"),
    "tv-vit_b_16": lambda: _tv("vit_b_16"),
    "tv-swin_t": lambda: _tv("swin_t"),
}


def timed(fn, repeat):
    """Per call: (ms until the GPU finished, ms until `fn` returned on the host)."""
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        host = time.perf_counter()
        torch.cuda.synchronize()
        times.append(((time.perf_counter() - start) * 1e3, (host - start) * 1e3))
    return times


def peak_memory_mb(fn):
    """Peak GPU memory allocated during one call of `fn`, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def write_profile(path, fn, steps=3):
    """torch.profiler's table of `steps` calls of `fn`, by GPU time, into `path`."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    with open(path, "w") as f:
        f.write(f"# {steps} calls\n")
        f.write(averages.table(sort_by="self_device_time_total", row_limit=60, max_name_column_width=90))
        f.write("\n# by host time\n")
        f.write(averages.table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=90))


def model_and_step(name, mode, randomness=False):
    """(model on the GPU, its inputs, step): step(m) runs one inference or training step
    (forward, loss, backward, SGD) of m, the model or a compiled version of
    it, under bf16 autocast, on the model's zoo inputs."""
    torch.manual_seed(0)
    model, args = MODELS[name]()
    model = model.cuda()
    train = mode == "train"
    if train and not randomness:
        model = without_randomness(model)
    model = model.train() if train else model.eval()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4) if train else None

    def step(m):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = m(*args)
            if not train:
                return out
            loss = loss_of(out)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()
    return model, args, step


def parse_variant(text):
    """"conv_layout=keep" -> {"conv_layout": "keep"} (true/false become bools): kiln.compile options."""
    key, _, value = text.partition("=")
    return {key: {"true": True, "false": False}.get(value.lower(), value)}


def run_model(name, mode, repeat, rounds, profile_dir=None, host_log=False, behind_tc=False, variants=(),
              randomness=False):
    model, args, step = model_and_step(name, mode, randomness)
    train = mode == "train"

    def first_call(m):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = step(m)
        torch.cuda.synchronize()
        return out, time.perf_counter() - start

    grad = torch.enable_grad() if train else torch.no_grad()
    with grad:
        expected, _ = first_call(model)
        kiln.reset()
        explained = kiln.explain(model)(*args) if not train else None
        kiln.reset()
        kiln_model = kiln.compile(model)
        got, kiln_first = first_call(kiln_model)
        torch._dynamo.reset()
        tc_model = torch.compile(model)
        _, tc_first = first_call(tc_model)
        samples = {"eager": [], "kiln": [], "torch.compile": []}
        if behind_tc:  # kiln's compiler behind Dynamo's capture (kiln.dynamo_backend)
            torch._dynamo.reset()
            kiln_tc_model = torch.compile(model, backend=kiln.dynamo_backend.backend)
            kiln_tc_got, kiln_tc_first = first_call(kiln_tc_model)
            samples["kiln behind tc"] = []
        variant_models, variant_got, variant_first = {}, {}, {}
        for v in variants:  # kiln with other options, timed in the same rounds
            variant_models[v] = kiln.compile(model, options=parse_variant(v))
            variant_got[v], variant_first[v] = first_call(variant_models[v])
            samples["kiln " + v] = []
        before = kiln.stats()
        for _ in range(rounds):  # interleaved, so drifts hit all three alike
            samples["eager"] += timed(lambda: step(model), repeat)
            samples["kiln"] += timed(lambda: step(kiln_model), repeat)
            samples["torch.compile"] += timed(lambda: step(tc_model), repeat)
            if behind_tc:
                samples["kiln behind tc"] += timed(lambda: step(kiln_tc_model), repeat)
            for v, m in variant_models.items():
                samples["kiln " + v] += timed(lambda: step(m), repeat)
        after = kiln.stats()
        compilers = {"eager": model, "kiln": kiln_model, "tc": tc_model}
        peaks = {k: peak_memory_mb(lambda: step(m)) for k, m in compilers.items()}
        if host_log:  # one warm kiln step with the executors' per-label host times (stderr)
            print(f"== {name} {mode}: one kiln step, KILN_LOGS=perf", file=sys.stderr, flush=True)
            kiln._C.set_logs("perf")
            step(kiln_model)
            torch.cuda.synchronize()
            kiln._C.set_logs("")
        if profile_dir:
            for k, m in compilers.items():
                write_profile(os.path.join(profile_dir, f"{name}-{mode}-{k}.txt"), lambda: step(m))
    want, have = tensors_of(expected), tensors_of(got)
    # Training steps move the weights; the first (compared) step saw the same ones.
    ok = len(want) == len(have) > 0 and all(
        torch.allclose(a.float(), b.float(), rtol=5e-2, atol=5e-2) for a, b in zip(have, want))
    medians = {k: statistics.median(t for t, _ in v) for k, v in samples.items()}
    host = {k: statistics.median(h for _, h in v) for k, v in samples.items()}
    extra = {}
    if behind_tc:
        have_tc = tensors_of(kiln_tc_got)
        extra = {"kiln_behind_tc_ms": medians["kiln behind tc"],
                 "kiln_behind_tc_vs_tc": medians["torch.compile"] / medians["kiln behind tc"],
                 "kiln_behind_tc_first_s": kiln_tc_first,
                 "kiln_behind_tc_ok": len(want) == len(have_tc) > 0 and all(
                     torch.allclose(a.float(), b.float(), rtol=5e-2, atol=5e-2) for a, b in zip(have_tc, want))}
    if variants:
        extra["variants"] = {v: {
            "ms": medians["kiln " + v], "vs_tc": medians["torch.compile"] / medians["kiln " + v],
            "host_ms": host["kiln " + v], "first_s": variant_first[v],
            "ok": len(want) == len(tensors_of(variant_got[v])) > 0 and all(
                torch.allclose(a.float(), b.float(), rtol=5e-2, atol=5e-2)
                for a, b in zip(tensors_of(variant_got[v]), want))} for v in variants}
    return {**extra,
        "model": name, "mode": mode, "gpu": torch.cuda.get_device_name(),
        "eager_ms": medians["eager"], "kiln_ms": medians["kiln"], "tc_ms": medians["torch.compile"],
        "kiln_vs_tc": medians["torch.compile"] / medians["kiln"], "kiln_vs_eager": medians["eager"] / medians["kiln"],
        "eager_host_ms": host["eager"], "kiln_host_ms": host["kiln"], "tc_host_ms": host["torch.compile"],
        "eager_peak_mb": peaks["eager"], "kiln_peak_mb": peaks["kiln"], "tc_peak_mb": peaks["tc"],
        "kiln_first_s": kiln_first, "tc_first_s": tc_first,
        "breaks": explained.graph_break_count if explained else None,
        "recompiles": after["recompiles"] - before["recompiles"], "eager_runs": after["eager_runs"] - before["eager_runs"],
        "ok": None if randomness else ok,  # dropout draws differ between compilers
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--mode", choices=["infer", "train"], default="infer")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="write torch.profiler tables of 3 steps of each compiler per model into DIR")
    ap.add_argument("--behind-tc", action="store_true",
                    help="also time torch.compile(model, backend=kiln.dynamo_backend.backend): kiln behind Dynamo")
    ap.add_argument("--host-log", action="store_true",
                    help="log (stderr) where the host time of one warm kiln step goes, per executor step label")
    ap.add_argument("--with-randomness", action="store_true",
                    help="train with the models' dropout and stochastic depth as built (default: probabilities 0, "
                         "so the first step compares with eager's)")
    ap.add_argument("--variant", action="append", default=[], metavar="OPTION=VALUE",
                    help="also time kiln.compile(model, options={OPTION: VALUE}) in the same rounds "
                         "(repeatable; e.g. conv_layout=keep)")
    opts = ap.parse_args()
    if opts.profile:
        os.makedirs(opts.profile, exist_ok=True)
    warnings.filterwarnings("ignore")
    rows = []
    for name in opts.models.split(","):
        try:
            rows.append(run_model(name, opts.mode, opts.repeat, opts.rounds, opts.profile, opts.host_log,
                                  opts.behind_tc, opts.variant, opts.with_randomness))
        except Exception as exc:  # a failing model is a row of the table, not its end
            rows.append({"model": name, "mode": opts.mode, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("| model | mode | eager ms | kiln ms | torch.compile ms | kiln vs tc | kiln vs eager | first call kiln / tc "
          "| host ms kiln / tc | peak MiB kiln / tc | breaks | recompiles, eager runs | matches eager |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['mode']} | error: {r['error']} |||||||||||")
            continue
        print(f"| {r['model']} | {r['mode']} | {r['eager_ms']:.2f} | {r['kiln_ms']:.2f} | {r['tc_ms']:.2f} "
              f"| {r['kiln_vs_tc']:.2f}x | {r['kiln_vs_eager']:.2f}x | {r['kiln_first_s']:.1f} s / {r['tc_first_s']:.1f} s "
              f"| {r['kiln_host_ms']:.2f} / {r['tc_host_ms']:.2f} | {r['kiln_peak_mb']:.0f} / {r['tc_peak_mb']:.0f} "
              f"| {r['breaks']} | {r['recompiles']}, {r['eager_runs']} | {r['ok']} |")
    varied = [r for r in rows if "variants" in r]
    if varied:
        print("\n| model | mode | kiln ms | kiln variant | variant ms | variant vs tc | first call | host ms | matches eager |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in varied:
            for v, x in r["variants"].items():
                print(f"| {r['model']} | {r['mode']} | {r['kiln_ms']:.2f} | {v} | {x['ms']:.2f} | {x['vs_tc']:.2f}x "
                      f"| {x['first_s']:.1f} s | {x['host_ms']:.2f} | {x['ok']} |")
    behind = [r for r in rows if "kiln_behind_tc_ms" in r]
    if behind:
        print("\n| model | mode | kiln behind torch.compile ms | vs torch.compile | first call | matches eager |")
        print("|---|---|---|---|---|---|")
        for r in behind:
            print(f"| {r['model']} | {r['mode']} | {r['kiln_behind_tc_ms']:.2f} | {r['kiln_behind_tc_vs_tc']:.2f}x "
                  f"| {r['kiln_behind_tc_first_s']:.1f} s | {r['kiln_behind_tc_ok']} |")


if __name__ == "__main__":
    main()
