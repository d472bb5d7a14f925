"""The CPU kernel cache across processes (inductor/cpu/kernel_cache.h): a
model of identical layers compiles each distinct kernel once (the others are
memory hits), a second process loads every kernel from the disk cache and
compiles none, damaged or foreign entries are detected, recompiled and
rewritten, the directory is created private and refused when others may
write it, KILN_CACHE_DIR="" turns the disk cache off, and concurrent
processes filling one directory leave only whole entries. Each process
checks its model's output against eager torch."""
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

import kiln

pytestmark = pytest.mark.skipif(not kiln._C.cpu_kernels_available(),
                                reason="this build has no LLVM code generation")

# Layers of Linear(10, 10) -> ReLU -> Sigmoid -> Linear(10, 10) -> ReLU, as
# in issue 5's 64-layer model; prints kiln.stats() as JSON.
MODEL = textwrap.dedent("""
    import json, sys
    import torch, torch.nn as nn
    import kiln
    kiln.config.cpu_kernels = True
    torch.manual_seed(0)
    layers, training = int(sys.argv[1]), sys.argv[2] == "train"
    model = nn.Sequential(*[nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Sigmoid(),
                                          nn.Linear(10, 10), nn.ReLU()) for _ in range(layers)])
    x = torch.randn(8, 10)
    compiled = kiln.compile(model, backend="inductor")
    if training:
        out = compiled(x)
        out.sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).sum().backward()
        for g, p in zip(grads, model.parameters()):
            torch.testing.assert_close(g, p.grad)
    else:
        with torch.no_grad():
            out = compiled(x)
    torch.testing.assert_close(out, model(x))
    print(json.dumps(kiln.stats()))
""")

CACHE_STATS = ("kernels", "gemm_kernels", "kernels_compiled", "kernel_cache_hits_memory",
               "kernel_cache_hits_disk", "kernel_cache_rejected")


def environment(**overrides):
    env = dict(os.environ)
    for name in ("KILN_CACHE_DIR", "XDG_CACHE_HOME", "KILN_LOGS"):
        env.pop(name, None)
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_model(env, layers=4, mode="infer"):
    """Runs MODEL in a fresh process; returns (its cache counters, its stderr)."""
    done = subprocess.run([sys.executable, "-c", MODEL, str(layers), mode], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: stats[k] for k in CACHE_STATS}, done.stderr


def entries(directory):
    return sorted(f for f in os.listdir(directory) if f.endswith(".kernel"))


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_identical_layers_compile_once_and_a_second_process_hits_the_disk(tmp_path):
    cache = tmp_path / "cache"
    env = environment(KILN_CACHE_DIR=str(cache))
    first, _ = run_model(env)
    assert first["kernels_compiled"] >= 1 and first["kernel_cache_hits_disk"] == 0, first
    # Kernel nodes and GEMM nodes (both Linears of a layer share one GEMM
    # spec) come from the cache. Four identical layers: the first layer
    # compiles every distinct kernel, the other three only hit memory.
    nodes = first["kernels"] + first["gemm_kernels"]
    assert first["gemm_kernels"] == 4 * 2, first
    assert nodes == first["kernels_compiled"] + first["kernel_cache_hits_memory"], first
    assert 4 * first["kernels_compiled"] <= nodes, first
    assert mode_of(cache) == 0o700
    assert len(entries(cache)) == first["kernels_compiled"]
    assert all(mode_of(cache / name) == 0o600 for name in entries(cache))
    second, _ = run_model(env)
    assert second["kernels_compiled"] == 0, second
    assert second["kernel_cache_hits_disk"] == first["kernels_compiled"], second
    assert second["kernel_cache_hits_memory"] == first["kernel_cache_hits_memory"], second
    assert second["kernel_cache_rejected"] == 0, second


def test_compile_threads_compile_the_same_kernels_once(tmp_path):
    # Forward and backward kernels of 3 identical layers, compiled in turn
    # and on 4 threads (more than this machine may have cores): each process
    # checks its results against eager; both compile each distinct kernel
    # once and take the repeats from memory.
    counts = []
    for threads in ("1", "4"):
        env = environment(KILN_CACHE_DIR="", KILN_COMPILE_THREADS=threads)
        stats, _ = run_model(env, layers=3, mode="train")
        counts.append(stats)
    assert counts[0] == counts[1], counts
    assert counts[0]["kernels_compiled"] >= 2 and counts[0]["kernel_cache_hits_memory"] > 0, counts
    env = environment(KILN_CACHE_DIR="", KILN_COMPILE_THREADS="many", KILN_LOGS="kernels")
    stats, stderr = run_model(env, layers=1)
    assert "KILN_COMPILE_THREADS=many is no positive number: ignored" in stderr


def test_training_kernels_come_from_the_disk_too(tmp_path):
    env = environment(KILN_CACHE_DIR=str(tmp_path / "cache"))
    first, _ = run_model(env, layers=2, mode="train")
    second, _ = run_model(env, layers=2, mode="train")
    assert first["kernels_compiled"] >= 2, first
    assert second["kernels_compiled"] == 0, second
    assert second["kernel_cache_hits_disk"] == first["kernels_compiled"], second


def truncate(data, _):
    return data[:len(data) // 2]


def flip_payload_byte(data, _):
    at = len(data) - 40  # inside the object code, after the 92-byte header
    return data[:at] + bytes([data[at] ^ 0x04]) + data[at + 1:]


def other_format_version(data, _):
    return data[:8] + bytes([data[8] + 1]) + data[9:]


def empty(data, _):
    return b""


def foreign(_, other):
    return other  # another entry's file under this entry's name


@pytest.fixture(scope="module")
def good_entries(tmp_path_factory):
    """The entries one process writes for the 4-layer model: {file name: bytes}."""
    cache = tmp_path_factory.mktemp("good") / "cache"
    run_model(environment(KILN_CACHE_DIR=str(cache)))
    names = entries(cache)
    assert len(names) >= 2, names
    return {name: (cache / name).read_bytes() for name in names}


@pytest.mark.parametrize("damage", [truncate, flip_payload_byte, other_format_version, empty, foreign])
def test_damaged_entries_are_recompiled_and_rewritten(tmp_path, good_entries, damage):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    names = sorted(good_entries)
    for i, name in enumerate(names):
        (cache / name).write_bytes(damage(good_entries[name], good_entries[names[(i + 1) % len(names)]]))
    env = environment(KILN_CACHE_DIR=str(cache), KILN_LOGS="cache")
    second, log = run_model(env)
    assert second["kernel_cache_rejected"] == len(names), (second, log)
    assert second["kernels_compiled"] == len(names) and second["kernel_cache_hits_disk"] == 0, second
    assert log.count("rejected (") == len(names), log
    assert entries(cache) == names
    third, _ = run_model(env)
    assert third["kernel_cache_hits_disk"] == len(names) and third["kernels_compiled"] == 0, third
    assert third["kernel_cache_rejected"] == 0, third


def test_empty_cache_dir_turns_the_disk_cache_off(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = environment(KILN_CACHE_DIR="", HOME=str(home))
    first, _ = run_model(env)
    second, _ = run_model(env)
    assert first["kernels_compiled"] >= 1
    assert second["kernels_compiled"] == first["kernels_compiled"], second
    assert second["kernel_cache_hits_disk"] == 0
    assert os.listdir(home) == []


def test_default_directory_follows_xdg_then_home(tmp_path):
    xdg = tmp_path / "xdg"
    first, _ = run_model(environment(XDG_CACHE_HOME=str(xdg), HOME=str(tmp_path / "unused")))
    assert len(entries(xdg / "kiln")) == first["kernels_compiled"]
    assert mode_of(xdg) == 0o700 and mode_of(xdg / "kiln") == 0o700
    assert not (tmp_path / "unused").exists()
    home = tmp_path / "home"
    second, _ = run_model(environment(HOME=str(home)))
    assert second["kernels_compiled"] == first["kernels_compiled"]
    assert len(entries(home / ".cache" / "kiln")) == second["kernels_compiled"]
    assert mode_of(home / ".cache" / "kiln") == 0o700


def foreign_directory(tmp_path):
    if os.geteuid() == 0:
        path = tmp_path / "foreign"
        path.mkdir(mode=0o700)
        os.chown(path, 65534, 65534)  # nobody
        return path
    return "/"  # root's, and this user is not root


@pytest.mark.parametrize("kind", ["group-writable", "world-writable", "foreign"])
def test_unsafe_directories_are_refused(tmp_path, kind):
    if kind == "foreign":
        directory = foreign_directory(tmp_path)
        expected = "owned by uid"
    else:
        directory = tmp_path / kind
        directory.mkdir()
        os.chmod(directory, 0o770 if kind == "group-writable" else 0o707)
        expected = "writable by other users"
    env = environment(KILN_CACHE_DIR=str(directory), KILN_LOGS="cache")
    first, log = run_model(env)
    assert "disk cache off" in log and expected in log, log
    second, _ = run_model(env)
    assert first["kernels_compiled"] >= 1
    assert second["kernels_compiled"] == first["kernels_compiled"] and second["kernel_cache_hits_disk"] == 0
    assert entries(directory) == []


def test_concurrent_processes_leave_only_whole_entries(tmp_path):
    cache = tmp_path / "cache"
    env = environment(KILN_CACHE_DIR=str(cache))
    processes = [subprocess.Popen([sys.executable, "-c", MODEL, "4", "infer"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
    compiled = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        compiled.append(json.loads(out.strip().splitlines()[-1])["kernels_compiled"])
    names = sorted(os.listdir(cache))
    assert names == entries(cache), "temporary files left behind: %s" % names
    assert len(names) == max(compiled)
    after, _ = run_model(env)
    assert after["kernel_cache_hits_disk"] == len(names), after
    assert after["kernel_cache_rejected"] == 0 and after["kernels_compiled"] == 0, after
