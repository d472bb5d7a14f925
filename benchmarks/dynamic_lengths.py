#!/usr/bin/env python3
"""Language models at varying sequence lengths or batch sizes (issue 24,
dynamic shapes): kiln (dynamic=None) beside torch.compile(dynamic=None),
eager, and kiln with static shapes, in one process on one device.

    PYTHONPATH=python .venv/bin/python benchmarks/dynamic_lengths.py [--device cuda] [--lengths 20]
        [--vary batch]

For a small GPT-2, Llama and BERT (transformers, random weights), a
forward at N random sequence lengths in [16, 512] (batch 2, no grad), or
with --vary batch a serving loop: N random batch sizes in [1, 32] at
length 128 with an attention mask (the first two sizes are not 1, so
size 1 comes after a dynamic graph exists). Pass 1 calls each size once
(compiles included), pass 2 calls each size again (steady state; best of
--repeat calls per size). Reports
compiles (kiln: frame traces, size instances and, on CUDA, kernels NVRTC
compiled; torch.compile: frames Dynamo compiled), whether outputs equal eager (rtol/atol 1e-3 on GPU,
1e-4 on CPU), pass-1 seconds and the pass-2 geomean of per-length times
as ratios: kiln dynamic / kiln static, torch.compile / kiln dynamic,
eager / kiln dynamic. Kiln static gets a cache limit above N so each
length has its own static graph (no eager runs). Prints a markdown table.
"""
import argparse
import math
import platform
import random
import time

import torch
import transformers

import kiln


def build(name, device):
    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=512,
                                         bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                                         attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config)
    elif name == "llama":
        config = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=128, vocab_size=100,
                                          max_position_embeddings=512)
        model = transformers.LlamaForCausalLM(config)
    elif name == "bert":
        config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                         intermediate_size=128, vocab_size=100, max_position_embeddings=512,
                                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = transformers.BertModel(config)
    elif name == "t5":
        # Encoder-decoder: generate() runs the encoder once and hands its
        # output object to every decoder step (Note [Dict-backed objects]).
        config = transformers.T5Config(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                       num_decoder_layers=2, num_heads=4, decoder_start_token_id=0,
                                       pad_token_id=0, eos_token_id=1, dropout_rate=0.0)
        model = transformers.T5ForConditionalGeneration(config)
    elif name == "mistral":
        # Sliding-window attention: the cache counts tokens in a Python int
        # (Note [Dynamic ints]).
        config = transformers.MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                            num_key_value_heads=2, intermediate_size=128, vocab_size=100,
                                            max_position_embeddings=512, sliding_window=256)
        model = transformers.MistralForCausalLM(config)
    else:
        raise SystemExit(f"unknown model {name!r}: gpt2, llama, bert, t5, mistral")
    return model.to(device).eval()


def output_of(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def run(model, inputs, device, repeat):
    """Pass 1 (each size once) seconds, pass-2 per-size best times, outputs."""
    outs = []
    total = 0.0
    with torch.no_grad():
        for kwargs in inputs:
            out, seconds = timed(lambda: output_of(model(**kwargs)), device)
            outs.append(out)
            total += seconds
        steady = []
        for kwargs in inputs:
            steady.append(min(timed(lambda: output_of(model(**kwargs)), device)[1] for _ in range(repeat)))
    return total, steady, outs


def make_inputs(vary, count, device):
    """(sizes, one kwargs dict per call) for the chosen axis."""
    if vary == "length":
        sizes = [random.randint(16, 512) for _ in range(count)]
        torch.manual_seed(1)
        return sizes, [{"input_ids": torch.randint(0, 100, (2, n), device=device)} for n in sizes]
    sizes = [random.randint(2, 32) for _ in range(2)] + [random.randint(1, 32) for _ in range(count - 2)]
    if 1 not in sizes:
        sizes[count // 2] = 1
    torch.manual_seed(1)
    inputs = []
    for b in sizes:
        mask = torch.ones(b, 128, dtype=torch.long, device=device)
        mask[0, :5] = 0
        inputs.append({"input_ids": torch.randint(0, 100, (b, 128), device=device), "attention_mask": mask})
    return sizes, inputs


def geomean_ratio(a, b):
    return math.exp(sum(math.log(x / y) for x, y in zip(a, b)) / len(a))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--models", default="gpt2,llama,bert")
    parser.add_argument("--vary", choices=["length", "batch"], default="length")
    parser.add_argument("--detail", action="store_true", help="print each size's steady ms per compiler")
    args = parser.parse_args()
    device = args.device
    tol = 1e-3 if device == "cuda" else 1e-4
    random.seed(1)
    lengths, inputs = make_inputs(args.vary, args.lengths, device)
    print(f"device: {torch.cuda.get_device_name() if device == 'cuda' else platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}; {args.vary}s {lengths}")
    print("| model | kiln traces | kiln size instances | kiln NVRTC kernels | kiln eager graphs | tc frames compiled "
          "| equal eager | pass 1 s: kiln / tc / eager | steady: kiln dyn / kiln static | steady: tc / kiln "
          "| steady: eager / kiln |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model = build(name, device)
        eager_total, eager_steady, expected = run(model, inputs, device, args.repeat)

        kiln.reset()
        kiln_total, kiln_steady, outs = run(kiln.compile(model), inputs, device, args.repeat)
        s = kiln.stats()
        equal = all(torch.allclose(a, b, rtol=tol, atol=tol) for a, b in zip(outs, expected))

        kiln.reset()
        limit = kiln.config.cache_size_limit
        kiln.config.cache_size_limit = len(lengths) + 4
        _, static_steady, _ = run(kiln.compile(model, dynamic=False), inputs, device, args.repeat)
        kiln.config.cache_size_limit = limit
        kiln.reset()

        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        tc_total, tc_steady, tc_outs = run(torch.compile(model), inputs, device, args.repeat)
        frames = torch._dynamo.utils.counters["frames"]["ok"]
        equal = equal and all(torch.allclose(a, b, rtol=tol, atol=tol) for a, b in zip(tc_outs, expected))
        torch._dynamo.reset()

        print(f"| {name} | {s['traces']} | {s['size_instances']} | {s['cuda_kernels_compiled']} | {s['prim_fallbacks']} "
              f"| {frames} | {equal} "
              f"| {kiln_total:.1f} / {tc_total:.1f} / {eager_total:.2f} "
              f"| {geomean_ratio(kiln_steady, static_steady):.2f} | {geomean_ratio(tc_steady, kiln_steady):.2f} "
              f"| {geomean_ratio(eager_steady, kiln_steady):.2f} |", flush=True)
        if args.detail:
            for size, k, st, t, e in zip(lengths, kiln_steady, static_steady, tc_steady, eager_steady):
                print(f"  {name} {args.vary} {size}: kiln {k * 1e3:.3f} ms, kiln static {st * 1e3:.3f}, "
                      f"tc {t * 1e3:.3f}, eager {e * 1e3:.3f}", flush=True)


if __name__ == "__main__":
    main()
