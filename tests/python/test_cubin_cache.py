"""The CUDA cubin cache across processes (inductor/cuda/cubin_cache.h): a
second process running the same CUDA kernels loads every cubin from the
disk cache and runs NVRTC for none; damaged or foreign entries are
detected, recompiled and rewritten. Each process checks its results against
eager torch. Needs a GPU: skipped where torch sees none (the C++ tests in
tests/cpp/inductor/cuda/test_cubin_cache.cpp cover the cache without one)."""
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest
import torch

import kiln

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

# A softmax, a pointwise chain and an outer sum: several CUDA kernels;
# prints kiln.stats() as JSON.
MODEL = textwrap.dedent("""
    import json
    import torch
    import kiln
    kiln.config.cuda_kernels = True
    torch.manual_seed(0)

    def f(x, y):
        return torch.softmax(x * y + 1, -1) * 2, torch.sigmoid(x - y).sum(0)

    x = torch.randn(64, 300, device="cuda")
    y = torch.randn(64, 300, device="cuda")
    got = kiln.compile(f, backend="inductor")(x, y)
    for g, w in zip(got, f(x, y)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    print(json.dumps(kiln.stats()))
""")

CACHE_STATS = ("kernels", "cuda_kernels_compiled", "cuda_kernel_cache_hits_disk", "kernels_compiled",
               "kernel_cache_hits_disk", "kernel_cache_rejected")


def environment(**overrides):
    env = dict(os.environ)
    for name in ("KILN_CACHE_DIR", "XDG_CACHE_HOME", "KILN_LOGS"):
        env.pop(name, None)
    env.update(overrides)
    return env


def run_model(env):
    """Runs MODEL in a fresh process; returns (its cache counters, its stderr)."""
    done = subprocess.run([sys.executable, "-c", MODEL], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: stats[k] for k in CACHE_STATS}, done.stderr


def cubins(directory):
    return sorted(f for f in os.listdir(directory) if f.endswith(".cubin"))


@pytest.fixture(autouse=True)
def cuda_kernels():
    assert kiln._C.cuda_kernels_available(), "a GPU but no NVRTC or CUDA driver for kiln"


def test_second_process_runs_no_nvrtc(tmp_path):
    cache = tmp_path / "a" / "cache"
    env = environment(KILN_CACHE_DIR=str(cache))
    first, _ = run_model(env)
    assert first["kernels"] >= 2 and first["cuda_kernels_compiled"] >= 2, first
    assert first["cuda_kernel_cache_hits_disk"] == 0, first
    assert len(cubins(cache)) == first["cuda_kernels_compiled"]
    assert sorted(os.listdir(cache)) == cubins(cache), "temporary files left behind"
    for path in (tmp_path / "a", cache):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    second, _ = run_model(env)
    assert second["cuda_kernels_compiled"] == 0 and second["kernels_compiled"] == 0, second
    assert second["cuda_kernel_cache_hits_disk"] == first["cuda_kernels_compiled"], second
    assert second["kernel_cache_hits_disk"] == first["cuda_kernels_compiled"], second
    assert second["kernel_cache_rejected"] == 0, second


def truncate(data, _):
    return data[:len(data) // 2]


def flip_cubin_byte(data, _):
    at = len(data) - 40  # inside the cubin, after the 92-byte header
    return data[:at] + bytes([data[at] ^ 0x04]) + data[at + 1:]


def other_format_version(data, _):
    return data[:8] + bytes([data[8] + 1]) + data[9:]


def empty(data, _):
    return b""


def foreign(_, other):
    return other  # another entry's file under this entry's name


@pytest.mark.parametrize("damage", [truncate, flip_cubin_byte, other_format_version, empty, foreign])
def test_damaged_cubins_are_recompiled_and_rewritten(tmp_path, damage):
    cache = tmp_path / "cache"
    env = environment(KILN_CACHE_DIR=str(cache), KILN_LOGS="cache")
    run_model(env)
    names = cubins(cache)
    assert len(names) >= 2, names
    good = {name: (cache / name).read_bytes() for name in names}
    for i, name in enumerate(names):
        (cache / name).write_bytes(damage(good[name], good[names[(i + 1) % len(names)]]))
    second, log = run_model(env)
    assert second["kernel_cache_rejected"] == len(names), (second, log)
    assert second["cuda_kernels_compiled"] == len(names), second
    assert second["cuda_kernel_cache_hits_disk"] == 0, second
    assert log.count("rejected (") == len(names), log
    assert cubins(cache) == names
    assert {name: (cache / name).read_bytes() for name in names} == good, "rewritten whole"
    third, _ = run_model(env)
    assert third["cuda_kernel_cache_hits_disk"] == len(names) and third["cuda_kernels_compiled"] == 0, third


# Six reductions of six differently shaped inputs: six kernels, compiled a
# few to an NVRTC program (Note [Kernels compiled together]).
SIX_KERNELS = textwrap.dedent("""
    import json
    import torch
    import kiln
    kiln.config.cuda_kernels = True
    torch.manual_seed(0)

    def f(*xs):
        return [torch.tanh(x * (i + 2)).sum(-1) for i, x in enumerate(xs)]

    xs = [torch.randn(32 + i, 64 + 8 * i, device="cuda") for i in range(6)]
    got = kiln.compile(f, backend="inductor")(*xs)
    for g, w in zip(got, f(*xs)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    print(json.dumps(kiln.stats()))
""")


def test_kernels_compiled_together_load_from_the_disk_in_a_new_process(tmp_path):
    # One NVRTC worker's worth of parallelism (in process): the six kernels
    # go three to a program; a second process loads each from its own entry.
    env = environment(KILN_CACHE_DIR=str(tmp_path), KILN_NVRTC_WORKERS="0")
    first = json.loads(subprocess.run([sys.executable, "-c", SIX_KERNELS], env=env, capture_output=True, text=True,
                                      timeout=300, check=True).stdout.strip().splitlines()[-1])
    assert first["cuda_kernels_compiled"] == 6, first
    assert first["cuda_nvrtc_programs"] == 2, first
    assert len(cubins(tmp_path)) == 6
    second = json.loads(subprocess.run([sys.executable, "-c", SIX_KERNELS], env=env, capture_output=True, text=True,
                                       timeout=300, check=True).stdout.strip().splitlines()[-1])
    assert second["cuda_kernels_compiled"] == 0 and second["cuda_nvrtc_programs"] == 0, second
    assert second["cuda_kernel_cache_hits_disk"] == 6, second
