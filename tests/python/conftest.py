"""Shared fixtures and helpers for kiln's Python test corpus.

Every test starts from a clean kiln (``kiln.reset()``) with the default
configuration, and compares what a compiled callable returns against what
plain eager PyTorch returns for the same inputs.
"""
import atexit
import contextlib
import inspect
import math
import os
import shutil
import sys
import tempfile

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import kiln

# Kernels compiled by the tests go to a throwaway disk cache rather than the
# user's ~/.cache/kiln (tests of the cache itself choose their own).
if "KILN_CACHE_DIR" not in os.environ:
    _test_cache_dir = tempfile.mkdtemp(prefix="kiln-test-cache-")
    os.environ["KILN_CACHE_DIR"] = _test_cache_dir
    atexit.register(shutil.rmtree, _test_cache_dir, True)
# Trace counts must not depend on what earlier processes learned (Note
# [Dynamic profiles]): tests of the profiles turn them on for themselves.
os.environ.setdefault("KILN_DYNAMIC_PROFILES", "0")

STAT_KEYS = (
    "traces",
    "cache_hits",
    "cache_misses",
    "recompiles",
    "graph_breaks",
    "unsupported",
    "eager_runs",
    "cache_limit_hits",
)


# The inductor backend, which most tests get by default, compiles CPU
# kernels (kiln.config.cpu_kernels); KILN_TEST_CPU_KERNELS=0 runs the whole
# corpus with them off (inductor then replays graphs through torch).
CPU_KERNELS = os.environ.get("KILN_TEST_CPU_KERNELS", "1") != "0"
# Matrix products run kiln's generated GEMM kernels everywhere ("kiln"),
# not the "auto" policy's timed choice, so that what runs does not depend
# on the machine's load; KILN_TEST_CPU_MATMUL=auto or aten runs the suite so.
CPU_MATMUL = os.environ.get("KILN_TEST_CPU_MATMUL", "kiln")

# KILN_TEST_DEVICE=cuda runs the corpus on CUDA tensors (issue 6): torch's
# default device becomes CUDA, so the tensors the tests make are CUDA
# tensors, and the inductor backend compiles CUDA kernels for them.
TEST_DEVICE = os.environ.get("KILN_TEST_DEVICE", "cpu")
if TEST_DEVICE != "cpu":
    if not hasattr(torch, "set_default_device"):
        raise RuntimeError(f"KILN_TEST_DEVICE={TEST_DEVICE} needs torch >= 2.0 "
                           f"(torch.set_default_device); this is torch {torch.__version__}")
    torch.set_default_device(TEST_DEVICE)
# Graphs on CUDA tensors compile CUDA kernels (kiln.config.cuda_kernels, on
# by default); KILN_TEST_CUDA_KERNELS=0 runs the suite with them off.
CUDA_KERNELS = os.environ.get("KILN_TEST_CUDA_KERNELS", "1") != "0"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cpu_semantics(why): the test checks CPU-only behaviour (CPU autocast, an "
        "out-of-bounds index raising at the call, numpy, CPU graphs); under KILN_TEST_DEVICE its "
        "tensors are still made on the CPU")
    config.addinivalue_line(
        "markers", "timing_dependent_kernels(why): which kernels the test generates depends on thread "
        "timing; they are left out of the kernel replay manifest")


@pytest.fixture(autouse=True)
def kernel_manifest_pause(request):
    """Leave the kernels of a timing_dependent_kernels test out of the kernel
    replay manifest (Note [Kernel replay] in inductor/kernel_manifest.cpp)."""
    if request.node.get_closest_marker("timing_dependent_kernels") is None:
        yield
        return
    os.environ["KILN_KERNEL_MANIFEST_PAUSE"] = "1"
    try:
        yield
    finally:
        del os.environ["KILN_KERNEL_MANIFEST_PAUSE"]


@pytest.fixture(autouse=True)
def cpu_semantics_device(request):
    """Run a cpu_semantics test with the CPU as torch's default device."""
    if TEST_DEVICE == "cpu" or request.node.get_closest_marker("cpu_semantics") is None:
        yield
        return
    with torch.device("cpu"):
        yield


@pytest.fixture(autouse=True)
def kiln_clean():
    """Drop all compiled code and counters before each test; restore config after."""
    saved_limit = kiln.config.cache_size_limit
    saved_kernels = kiln.config.cpu_kernels
    saved_cuda_kernels = kiln.config.cuda_kernels
    saved_matmul = kiln.config.cpu_matmul
    kiln.config.cpu_kernels = CPU_KERNELS
    kiln.config.cuda_kernels = CUDA_KERNELS
    kiln.config.cpu_matmul = CPU_MATMUL
    kiln.reset()
    torch.manual_seed(0)
    yield
    kiln.config.cache_size_limit = saved_limit
    kiln.config.cpu_kernels = saved_kernels
    kiln.config.cuda_kernels = saved_cuda_kernels
    kiln.config.cpu_matmul = saved_matmul
    kiln.reset()


class CountOps(TorchDispatchMode):
    """Counts the aten ops called inside the block, by name."""

    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def ops_of(compiled, *args):
    """compiled(*args) after a first call that compiles it, and the aten
    ops that call ran (CountOps counts)."""
    compiled(*args)
    with CountOps() as ops:
        out = compiled(*args)
    return out, ops.counts


def assert_one_kernel(fn, *args, absent=("cat",)):
    """fn compiled whole equals eager, runs as one kiln kernel, and calls
    none of the aten ops in `absent` (a rotary embedding's cat or stack)."""
    out, ops = ops_of(kiln.compile(fn, fullgraph=True), *args)
    assert_same(out, fn(*args))
    assert not set(absent) & set(ops), ops
    assert kiln.stats()["kernels"] == 1, kiln.stats()


@contextlib.contextmanager
def kiln_logs(channels):
    """KILN_LOGS channels (comma-separated) on for the block, all off after;
    an unknown channel fails the test."""
    assert kiln._C.set_logs(channels) == "", channels
    try:
        yield
    finally:
        kiln._C.set_logs("")


def assert_same(compiled_out, eager_out, path="out"):
    """Assert a compiled result equals the eager result, structure and values.

    Tensors are compared with torch.testing.assert_close (dtype, device, shape
    and values, NaN equal to NaN); tuples, lists and dicts must be of the same type and be
    equal element by element (dict keys in the same order); Python scalars
    must be of the same type and equal (floats within assert_close tolerance).
    """
    if isinstance(eager_out, torch.Tensor):
        assert isinstance(compiled_out, torch.Tensor), (
            f"{path}: expected a Tensor, got {type(compiled_out).__name__}")
        assert compiled_out.shape == eager_out.shape, (
            f"{path}: shape {tuple(compiled_out.shape)} != {tuple(eager_out.shape)}")
        torch.testing.assert_close(compiled_out, eager_out, equal_nan=True,
                                   msg=lambda m: f"{path}: {m}")
        return
    assert type(compiled_out) is type(eager_out), (
        f"{path}: type {type(compiled_out).__name__} != {type(eager_out).__name__}")
    if isinstance(eager_out, (tuple, list)):
        assert len(compiled_out) == len(eager_out), (
            f"{path}: length {len(compiled_out)} != {len(eager_out)}")
        for i, (c, e) in enumerate(zip(compiled_out, eager_out)):
            assert_same(c, e, f"{path}[{i}]")
    elif isinstance(eager_out, dict):
        assert list(compiled_out.keys()) == list(eager_out.keys()), (
            f"{path}: keys {list(compiled_out.keys())} != {list(eager_out.keys())}")
        for k in eager_out:
            assert_same(compiled_out[k], eager_out[k], f"{path}[{k!r}]")
    elif isinstance(eager_out, float):
        if math.isnan(eager_out):
            assert math.isnan(compiled_out), f"{path}: {compiled_out} != nan"
        else:
            torch.testing.assert_close(compiled_out, eager_out, msg=lambda m: f"{path}: {m}")
    else:
        assert compiled_out == eager_out, f"{path}: {compiled_out!r} != {eager_out!r}"


def python_calls(function_name, fn, *args, file_suffix=""):
    """fn(*args), and how many Python frames of functions named
    `function_name` (in files ending with `file_suffix`) ran meanwhile: the
    calls a compiled call makes into Python, which sys.setprofile sees."""
    calls = []

    def profiler(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name == function_name and code.co_filename.endswith(file_suffix):
            calls.append(1)

    sys.setprofile(profiler)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(None)
    return result, len(calls)


def stats():
    """kiln.stats() restricted to the documented counters (all must exist)."""
    s = kiln.stats()
    missing = [k for k in STAT_KEYS if k not in s]
    assert not missing, f"kiln.stats() lacks {missing}: {s}"
    return {k: s[k] for k in STAT_KEYS}


def delta(before, after):
    return {k: after[k] - before[k] for k in STAT_KEYS}


def clone_args(args):
    """Deep-ish copy of an argument tuple so compiled and eager runs never share tensors."""
    def c(a):
        if isinstance(a, torch.Tensor):
            return a.detach().clone().requires_grad_(a.requires_grad)
        if isinstance(a, tuple) and hasattr(type(a), "_make"):  # namedtuple
            return type(a)._make(c(x) for x in a)
        if isinstance(a, tuple):
            return tuple(c(x) for x in a)
        if isinstance(a, list):
            return [c(x) for x in a]
        if isinstance(a, dict):
            return {k: c(v) for k, v in a.items()}
        return a
    return tuple(c(a) for a in args)


def fx_round_trip(gm, example_inputs):
    """A callable backend (kiln._fx) that runs kiln's graph as the
    torch.fx.GraphModule it was handed: the round trip the FX conversion
    must survive."""
    return gm.forward


# KILN_TEST_BACKEND=fx runs check_compiled's corpus through fx_round_trip
# (tests/python/test_fx.py runs test_compile_functions.py so).
TEST_BACKEND = os.environ.get("KILN_TEST_BACKEND")


def check_compiled(fn, make_args, calls=3, fullgraph=True, **compile_kwargs):
    """Compile ``fn`` and compare it with eager on ``calls`` fresh inputs.

    ``make_args()`` returns a fresh argument tuple (same shapes and dtypes each
    time). The function must trace into exactly one graph on the first call and
    hit the cache on every later call; nothing may run eagerly.
    """
    if TEST_BACKEND == "fx":
        compile_kwargs["backend"] = fx_round_trip
    compiled = kiln.compile(fn, fullgraph=fullgraph, **compile_kwargs)
    before = stats()
    for i in range(calls):
        args = make_args()
        eager_args = clone_args(args)
        out_c = compiled(*args)
        out_e = fn(*eager_args)
        assert_same(out_c, out_e, f"call {i}")
    d = delta(before, stats())
    assert d["traces"] == 1, f"expected one trace, got stats delta {d}"
    assert d["cache_hits"] == calls - 1, f"expected {calls - 1} cache hits, got stats delta {d}"
    assert d["recompiles"] == 0, d
    assert d["unsupported"] == 0, d
    assert d["eager_runs"] == 0, d
    return compiled


def line_of(fn, marker):
    """Absolute line number (in fn's file) of the first source line of fn containing marker."""
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if marker in line:
            return start + i
    raise AssertionError(f"marker {marker!r} not in source of {fn.__name__}")


def where(fn, marker):
    """'file.py:LINE' for the line of fn holding marker, as kiln should report it."""
    return f"{os.path.basename(fn.__code__.co_filename)}:{line_of(fn, marker)}"


def train_gpt_under_autocast(device, backend, loss_tol, grad_tol):
    """Two forward+backward passes of examples/gpt.py's GPT (small) under
    bf16 autocast on `device`, eager and kiln(backend) side by side from the
    same weights: float32 losses within loss_tol, every parameter's gradient
    within grad_tol of its largest entry. Returns kiln's counters."""
    import copy
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from gpt import GPT
    torch.manual_seed(0)
    eager_model = GPT(65, width=48, heads=6, layers=2, context=32).to(device)
    kiln_model = copy.deepcopy(eager_model)
    compiled = kiln.compile(kiln_model, backend=backend)
    x = torch.randint(0, 65, (4, 32), device=device)
    y = torch.randint(0, 65, (4, 32), device=device)
    for _ in range(2):
        with torch.autocast(device, dtype=torch.bfloat16):
            want, got = eager_model(x, y), compiled(x, y)
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=loss_tol, atol=loss_tol)
        want.backward()
        got.backward()
    for (name, p), q in zip(eager_model.named_parameters(), kiln_model.parameters()):
        scale = p.grad.abs().max().item() + 1e-6
        assert (p.grad - q.grad).abs().max().item() <= grad_tol * scale, name
    return kiln.stats()
