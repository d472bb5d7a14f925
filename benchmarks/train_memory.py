"""Where a training step's GPU memory goes: the peak of the forward, what
the forward leaves for the backward, and the peak of the backward, for
eager, kiln.compile and torch.compile side by side (bf16 autocast, CUDA).

    python3 benchmarks/train_memory.py [--layers 4] [--live] [--model timm-resnet50]
                                       [--checkpointing off|on|reentrant]

The model is a stack of conv-BN-ReLU blocks (ResNet's pattern, 32x64x56x56
activations), or with --model a model of the GPU zoo (benchmarks/zoo_gpu.py,
its inputs and training loss, gradients set to None before each step as
the zoo's step does). --checkpointing turns on a transformers model's
gradient checkpointing (torch.utils.checkpoint around each layer, with or
without reentrancy). Each row also gives the median step time. --live replays torch's allocator trace of one kiln step and
lists the blocks alive at its peak, by size and the Python line that
allocated them (where a compiled graph's values are made).
"""
import argparse
import collections
import statistics
import time

import torch
import torch.nn as nn

import kiln


def conv_stack(layers):
    def block():
        return nn.Sequential(nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                             nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
    return nn.Sequential(*[block() for _ in range(layers)]).cuda()


def phases(model, x, loss=lambda y: y.float().sum(), fresh_grads=False):
    """(forward peak, allocated after the forward, backward peak) in MiB over what was allocated before;
    with fresh_grads the gradients are dropped first (set to None, as the zoo's training step does)."""
    if fresh_grads:
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = loss(model(*x) if isinstance(x, tuple) else model(x))
    torch.cuda.synchronize()
    forward_peak, after_forward = torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base
    torch.cuda.reset_peak_memory_stats()
    y.backward()
    torch.cuda.synchronize()
    return forward_peak / 2**20, after_forward / 2**20, (torch.cuda.max_memory_allocated() - base) / 2**20


def step_ms(model, x, loss, fresh_grads, steps=10):
    """Median wall time of a training step (forward and backward), in ms."""
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        if fresh_grads:
            model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = loss(model(*x) if isinstance(x, tuple) else model(x))
        y.backward()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def live_at_peak(model, x, loss, fresh_grads):
    """Prints the allocator blocks alive at the peak of one step of `model`."""
    torch.cuda.memory._record_memory_history(max_entries=400000, stacks="python")
    phases(model, x, loss, fresh_grads)
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    live, current, peak, at_peak = {}, 0, 0, {}
    for event in (e for trace in snapshot["device_traces"] for e in trace):
        if event["action"] == "alloc":
            live[event["addr"]] = event
            current += event["size"]
            if current > peak:
                peak, at_peak = current, dict(live)
        elif event["action"] == "free_requested" and event["addr"] in live:
            current -= live.pop(event["addr"])["size"]
    print(f"peak {peak / 2**20:.1f} MiB, {len(at_peak)} blocks alive")
    blocks = collections.Counter()
    for event in at_peak.values():
        frames = [f for f in event.get("frames", []) if "torch/" not in f["filename"]][:2]
        where = " <- ".join(f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}" for f in frames)
        blocks[(round(event["size"] / 2**20, 2), where)] += 1
    for (mib, where), n in sorted(blocks.items(), key=lambda kv: -kv[0][0] * kv[1])[:20]:
        print(f"{n:4d} x {mib:8.2f} MiB  {where}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4, help="conv-BN-ReLU blocks (two convolutions each)")
    ap.add_argument("--live", action="store_true", help="list the blocks alive at kiln's peak")
    ap.add_argument("--model", default=None, help="a model of benchmarks/zoo_gpu.py instead of the conv stack")
    ap.add_argument("--checkpointing", choices=["off", "on", "reentrant"], default="off",
                    help="a transformers model's gradient checkpointing (with --model)")
    opts = ap.parse_args()
    torch.manual_seed(0)
    loss = lambda y: y.float().sum()  # noqa: E731
    if opts.model:
        import zoo_gpu
        from zoo_models import loss_of, without_randomness
        model, x = zoo_gpu.MODELS[opts.model]()
        model, loss = without_randomness(model.cuda()).train(), loss_of
        if opts.checkpointing != "off":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": opts.checkpointing == "reentrant"})
    else:
        model = conv_stack(opts.layers)
        x = torch.randn(32, 64, 56, 56, device="cuda")
    compiled = {"eager": model, "kiln": kiln.compile(model), "torch.compile": torch.compile(model)}
    fresh = opts.model is not None
    for m in compiled.values():  # compile and warm up
        phases(m, x, loss, fresh)
        phases(m, x, loss, fresh)
    print(f"checkpointing {opts.checkpointing}")
    print("| compiler | forward peak MiB | after forward MiB | backward peak MiB | step ms |")
    print("|---|---|---|---|---|")
    for name, m in compiled.items():
        print("| {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} |".format(name, *phases(m, x, loss, fresh),
                                                                step_ms(m, x, loss, fresh)))
    if opts.live:
        live_at_peak(compiled["kiln"], x, loss, fresh)


if __name__ == "__main__":
    main()
