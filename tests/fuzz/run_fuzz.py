#!/usr/bin/env python3
"""Differential fuzzer: kiln.compile(fn) against eager PyTorch on generated programs.

    PYTHONPATH=python /usr/bin/python3 tests/fuzz/run_fuzz.py --seeds 0:10000 --jobs 2 --report /tmp/fuzz-report

Each seed's program (tests/fuzz/program_generator.py) is run eagerly on the
inputs of its five calls, then through kiln.compile(fn) on clones of the same
inputs, and the two are compared: results (structure, types, values, NaN
equal, requires_grad), the inputs' state afterwards (mutated tensors, the
list xs), which returned objects are the inputs themselves, exceptions
(same type), gradients of the inputs, and kiln's cache behaviour (a repeat
call hits, resized inputs retrace). A program kiln traced fully must also
work under fullgraph=True; one it fell back on must raise kiln.Unsupported
there. Programs that raise eagerly where they should not are discarded
(counted, not failures).

Seeds run in worker subprocesses (batches), so a crash or hang is reported
with its seed. Every failure gets a folder in the report directory with the
program, its inputs and what went wrong; rerun one with --repro SEED.

KILN_FUZZ_BACKEND picks the backend (default "inductor"),
KILN_FUZZ_CPU_KERNELS=0 turns off the inductor backend's CPU kernels
(kiln.config.cpu_kernels, on by default), and KILN_FUZZ_CPU_MATMUL picks
who computes matrix products (kiln.config.cpu_matmul; default "kiln", the
generated GEMM kernels, so that runs do not depend on timings).

The last line printed is the summary:
    fuzz: N programs, M traced fully, K fell back, F failures
"""
import argparse
import collections
import json
import linecache
import math
import os
import queue
import re
import select
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from program_generator import FEATURES, ROLES, generate  # noqa: E402

DEFAULT_TIMEOUT = 90


# ============================================================== worker side

class Failure(Exception):
    def __init__(self, kind, message, call=None, tb=None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.call = call
        self.tb = tb


class Mismatch(Exception):
    pass


def _torch():
    import torch
    return torch


def make_tensor(d, g):
    """A leaf tensor of the described shape/dtype/layout (contig, t, offset, strided)."""
    torch = _torch()
    dt = getattr(torch, d["dtype"])
    shape = list(d["shape"])
    lay = d.get("layout", "contig")
    if lay == "t" and len(shape) >= 2:
        v = torch.randn(shape[::-1], generator=g, dtype=dt).permute(*reversed(range(len(shape))))
    elif lay == "offset" and shape:
        v = torch.randn([shape[0] + 1] + shape[1:], generator=g, dtype=dt)[1:]
    elif lay == "strided" and shape:
        v = torch.randn(shape[:-1] + [shape[-1] * 2], generator=g, dtype=dt)[..., ::2]
    else:
        v = torch.randn(shape, generator=g, dtype=dt)
    v = v.detach()
    if d.get("param"):
        return torch.nn.Parameter(v)
    if lay == "nonleaf":
        return v.requires_grad_(True) * 1.0
    return v.requires_grad_(d["grad"])


def make_inputs(variant, seed, call):
    torch = _torch()
    g = torch.Generator().manual_seed(seed * 7919 + call * 104729 + 17)
    x = make_tensor(variant["x"], g)
    y = make_tensor(variant["y"], g)
    xs = [make_tensor(variant["xs"], g) for _ in range(variant["xs"]["len"])]
    for a in variant.get("alias", ()):
        if a == "y=x":
            y = x
        elif a == "xs0=x":
            xs[0] = x
        elif a == "xs1=xs0" and len(xs) >= 2:
            xs[1] = xs[0]
    if "dd" in variant:
        # the dict argument: values made in sorted key order (a key gets the same
        # value whatever the order), inserted in this call's key order
        d = variant["dd"]
        vals = {k: make_tensor(d, g) for k in sorted(d["keys"])}
        cls = collections.OrderedDict if d["type"] == "OrderedDict" else dict
        return (x, y, variant["n"], variant["flag"], xs, cls((k, vals[k]) for k in d["keys"]))
    return (x, y, variant["n"], variant["flag"], xs)


def clone_tensor(a, float32_as=None):
    """A copy with the same sizes, strides, storage offset, type and requires_grad;
    with `float32_as`, a float32 tensor becomes one of that dtype."""
    torch = _torch()
    dtype = float32_as if float32_as is not None and a.dtype == torch.float32 else a.dtype
    try:
        n = a.untyped_storage().nbytes() // a.element_size()
    except AttributeError:
        n = a.storage().size()
    buf = torch.zeros(max(n, 1), dtype=dtype)
    v = buf.as_strided(a.size(), a.stride(), a.storage_offset())
    v.copy_(a.detach())
    if isinstance(a, torch.nn.Parameter):
        return torch.nn.Parameter(v, requires_grad=a.requires_grad)
    if not a.is_leaf:
        return v.requires_grad_(True) * 1.0
    return v.requires_grad_(a.requires_grad)


def is_user_object(a):
    """An instance of a class defined by the program (a dataclass, a plain object...)."""
    return type(a).__module__.startswith("fuzz_") and hasattr(a, "__dict__") and not isinstance(a, type)


def copy_container(a, c):
    """A copy of container `a` of the same type (OrderedDict, defaultdict, Counter, deque,
    NamedTuple, dict/list subclasses, dataclasses and plain objects of the program),
    with c applied to its items; None when `a` is not a container."""
    t = type(a)
    if t is list:
        return [c(v) for v in a]
    if t is tuple:
        return tuple(c(v) for v in a)
    if t is dict:
        return {k: c(v) for k, v in a.items()}
    if t is collections.OrderedDict:
        return collections.OrderedDict((k, c(v)) for k, v in a.items())
    if t is collections.defaultdict:
        return collections.defaultdict(a.default_factory, ((k, c(v)) for k, v in a.items()))
    if t is collections.Counter:
        r = collections.Counter()
        for k, v in a.items():
            dict.__setitem__(r, k, c(v))
        return r
    if t is collections.deque:
        return collections.deque((c(v) for v in a), a.maxlen)
    if isinstance(a, tuple) and hasattr(a, "_fields"):
        return t._make(c(v) for v in a)
    if isinstance(a, dict):
        r = t.__new__(t)
        dict.update(r, ((k, c(v)) for k, v in a.items()))
    elif isinstance(a, list):
        r = t.__new__(t)
        list.extend(r, (c(v) for v in a))
    elif is_user_object(a):
        r = t.__new__(t)
    else:
        return None
    if hasattr(a, "__dict__"):
        r.__dict__.update({k: c(v) for k, v in vars(a).items()})
    return r


def snapshot(obj):
    """Deep copy of a result's tensors (aliasing kept) taken right after the call, so that
    later mutation of what the result aliases (globals, inputs) cannot change it.
    Container types are kept (OrderedDict stays OrderedDict, dataclasses stay
    dataclasses...)."""
    torch = _torch()
    memo = {}

    def c(a):
        if id(a) in memo:
            return memo[id(a)]
        if isinstance(a, torch.Tensor):
            r = a.detach().clone()
            r.requires_grad_(a.requires_grad)
        else:
            r = copy_container(a, c)
            if r is None:
                return a
        memo[id(a)] = r
        return r
    return c(obj)


def clone_args(args, float32_as=None):
    """Copies of the arguments keeping layouts and aliasing (an object passed twice is cloned once);
    `float32_as` as for clone_tensor."""
    torch = _torch()
    memo = {}

    def c(a):
        if id(a) in memo:
            return memo[id(a)]
        if isinstance(a, torch.Tensor):
            r = clone_tensor(a, float32_as)
        elif isinstance(a, list):
            r = [c(v) for v in a]
        elif isinstance(a, tuple):
            r = tuple(c(v) for v in a)
        elif isinstance(a, dict):
            r = type(a)((k, c(v)) for k, v in a.items())
        else:
            return a
        memo[id(a)] = r
        return r
    return tuple(c(a) for a in args)


def arg_objects(args):
    """path -> object for the caller-visible input objects."""
    x, y, _, _, xs = args[:5]
    out = {"x": x, "y": y, "xs": xs}
    for i, e in enumerate(xs):
        out[f"xs[{i}]"] = e
    if len(args) > 5:
        out["dd"] = args[5]
        for k, e in args[5].items():
            out[f"dd[{k!r}]"] = e
    return out


def orig_objects(args):
    """The input tensors whose identity and gradients are followed: xs's items, then
    the dict argument's values (in its key order)."""
    return list(args[4]) + (list(args[5].values()) if len(args) > 5 else [])


TOL = {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-9)}


def loosest_dtype(tensors, source=""):
    """The dtype of TOL with the widest tolerance among `tensors` and the
    dtypes the program's text casts to: a float64 gradient can pass through
    float32 math when a program mixes them (`t.to(torch.float32)` inside,
    seed 7826), and then carries float32 rounding (reduction order differs
    legitimately)."""
    torch = _torch()
    names = {str(t.dtype).replace("torch.", "") for t in tensors if isinstance(t, torch.Tensor)}
    names |= {name for name in TOL if f"torch.{name}" in source}
    if ".float()" in source:
        names.add("float32")
    known = [n for n in names if n in TOL]
    return max(known, key=lambda n: TOL[n][0]) if known else None


def compare(c, e, path, loosest=None, ref=None, scale=0.0):
    """Raises Mismatch where compiled `c` differs from eager `e`. `ref`, when
    given, is the same program's result computed in float64, and `scale` the
    largest magnitude among that run's outputs: a float32 value outside
    tolerance still passes when it is about as close to `ref` as eager's own
    (see within_eager_error)."""
    torch = _torch()
    if isinstance(e, torch.Tensor):
        if not isinstance(c, torch.Tensor):
            raise Mismatch(f"{path}: expected a Tensor, got {type(c).__name__}: {c!r}"[:2000])
        if c.shape != e.shape:
            raise Mismatch(f"{path}: shape {tuple(c.shape)} != eager {tuple(e.shape)}")
        if c.dtype != e.dtype:
            raise Mismatch(f"{path}: dtype {c.dtype} != eager {e.dtype}")
        if c.requires_grad != e.requires_grad:
            raise Mismatch(f"{path}: requires_grad {c.requires_grad} != eager {e.requires_grad}")
        rtol, atol = TOL.get(str(e.dtype).replace("torch.", ""), (None, None))
        if loosest is not None and rtol is not None and TOL[loosest][0] > rtol:
            rtol, atol = TOL[loosest]
        try:
            torch.testing.assert_close(c.detach(), e.detach(), rtol=rtol, atol=atol, equal_nan=True,
                                       check_stride=False)
        except AssertionError as err:
            if not within_eager_error(c, e, ref, scale, loosest):
                raise Mismatch(f"{path}: values differ: {err}") from None
        return
    if not same_type(c, e):
        raise Mismatch(f"{path}: type {type(c).__qualname__} != eager {type(e).__qualname__} "
                       f"(compiled {c!r}, eager {e!r})"[:2000])
    if isinstance(e, collections.defaultdict) and c.default_factory is not e.default_factory:
        raise Mismatch(f"{path}: defaultdict default_factory {c.default_factory!r} != eager {e.default_factory!r}")
    if isinstance(e, collections.deque) and c.maxlen != e.maxlen:
        raise Mismatch(f"{path}: deque maxlen {c.maxlen} != eager {e.maxlen}")
    if isinstance(e, (list, tuple, collections.deque)):
        if len(c) != len(e):
            raise Mismatch(f"{path}: length {len(c)} != eager {len(e)}")
        for i, (a, b) in enumerate(zip(c, e)):
            compare(a, b, f"{path}[{i}]", loosest, sub_ref(ref, lambda r: r[i], len(e)), scale)
    elif isinstance(e, dict):
        if list(c.keys()) != list(e.keys()):
            raise Mismatch(f"{path}: keys {list(c.keys())} != eager {list(e.keys())} (in order)")
        for k in e:
            compare(dict.__getitem__(c, k), dict.__getitem__(e, k), f"{path}[{k!r}]", loosest,
                    sub_ref(ref, lambda r: dict.__getitem__(r, k)), scale)
    elif isinstance(e, float):
        if math.isnan(e) and math.isnan(c):
            return
        # A Python float read from a tensor (t.sum().item()) carries the
        # tensor's rounding: a float32 reduction summed in another order
        # differs in its last bits (seed 688).
        rel, absolute = TOL.get(loosest, (1e-6, 1e-9)) if loosest else (1e-6, 1e-9)
        if not math.isclose(c, e, rel_tol=max(rel, 1e-6), abs_tol=max(absolute, 1e-9)) and c != e:
            raise Mismatch(f"{path}: {c!r} != eager {e!r}")
    elif is_user_object(e):
        pass
    elif c != e:
        raise Mismatch(f"{path}: {c!r} != eager {e!r}")
    if is_user_object(e) or (hasattr(e, "__dict__") and type(e).__module__.startswith("fuzz_")):
        # attributes of program-defined objects (dataclass fields, attributes set in fn,
        # attributes of dict/list subclass instances); compared by name
        ca, ea = vars(c), vars(e)
        if sorted(ca) != sorted(ea):
            raise Mismatch(f"{path}: attributes {sorted(ca)} != eager {sorted(ea)}")
        for k in sorted(ea):
            compare(ca[k], ea[k], f"{path}.{k}", loosest, sub_ref(ref, lambda r: vars(r)[k]), scale)


def sub_ref(ref, get, length=None):
    """The part of a float64 reference that matches a part of eager's result, or None
    where the reference's structure differs (the program took another path in float64)."""
    if ref is None:
        return None
    try:
        if length is not None and len(ref) != length:
            return None
        return get(ref)
    except Exception:  # noqa: BLE001 -- structure differs: no reference
        return None


# How much larger than eager float32's error a compiled float32 value's error
# may be, both measured against the float64 result of the same program.
FP64_ERROR_RATIO = 2.0


def within_eager_error(c, e, ref, scale, loosest=None):
    """True when float32 tensor `c` is about as accurate as eager's `e`, both measured
    against `ref`, the program run in float64, up to float32 rounding of the
    computation's largest magnitude (`scale`, the largest output). Fused
    kernels, reductions summed in another order and decomposed gradients round
    differently from eager; where the program is ill-conditioned (a softmax
    whose gradient cancels to zero, a difference of nearly equal sums) that
    difference exceeds any fixed elementwise tolerance although kiln's error is
    a few float32 ulps of the values involved, as eager's would be with other
    rounding luck. A wrong result is far from the float64 one and still fails.
    A float64 value may carry float32 rounding too (the gradient of a float64
    input cast to float32): its ulps are float32's where the program computes
    in a lower precision (`loosest`, the dtype whose tolerance compare used),
    else float64's. Without a usable reference, within_rounding_of_eager."""
    torch = _torch()
    if e.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        return False
    # a float64 value computed in a program with float32 math carries its rounding
    # (loosest: the loosest dtype the program computes in, see loosest_dtype)
    exact = e.dtype == torch.float64 and loosest in (None, "float64")
    eps = torch.finfo(torch.float64 if exact else torch.float32).eps
    if ref is None or not isinstance(ref, torch.Tensor) or ref.shape != e.shape:
        return within_rounding_of_eager(c, e, scale, eps)
    c, e, r = (t.detach().to(torch.float64) for t in (c, e, ref))
    finite = torch.isfinite(r)
    if not (same_non_finite(c, e) and torch.equal(finite, torch.isfinite(e))):
        return False
    if not finite.any():
        return True
    c, e, r = c[finite], e[finite], r[finite]
    rms = lambda t: t.pow(2).mean().sqrt().item()  # noqa: E731
    magnitude = max(scale, r.abs().max().item())
    # a reference far from eager is no reference (the float64 run took another
    # path: the program branches on a dtype)
    if rms(e - r) > REFERENCE_SANITY * magnitude:
        return within_rounding_of_eager(c, e, scale, eps)
    return rms(c - r) <= FP64_ERROR_RATIO * rms(e - r) + FP32_ULPS * eps * magnitude


def same_non_finite(c, e):
    """True when `c` has NaN exactly where eager's `e` has, and the same infinities."""
    torch = _torch()
    inf = torch.isinf(e)
    return (torch.equal(torch.isnan(c), torch.isnan(e)) and torch.equal(torch.isinf(c), inf)
            and torch.equal(c[inf], e[inf]))


def within_rounding_of_eager(c, e, scale, eps):
    """Where no float64 reference exists: True when `c` differs from eager's `e` by
    at most FP32_ULPS ulps of the largest magnitude (RMS), the rounding noise
    of another evaluation order. Implied by within_eager_error's rule whenever
    a reference exists (the triangle inequality), so never looser than it."""
    torch = _torch()
    c, e = (t.detach().to(torch.float64) for t in (c, e))
    if not same_non_finite(c, e):
        return False
    finite = torch.isfinite(e)
    if not finite.any():
        return True
    c, e = c[finite], e[finite]
    magnitude = max(scale or 0.0, e.abs().max().item())
    return (c - e).pow(2).mean().sqrt().item() <= FP32_ULPS * eps * magnitude


# float32 ulps of the largest magnitude a compiled value's error may reach
# beyond eager's (within_eager_error).
FP32_ULPS = 64
# eager's largest RMS error, relative to the largest magnitude, for which the
# float64 run still counts as a reference of the same computation
REFERENCE_SANITY = 0.05


def _float64_everywhere():
    """A TorchFunctionMode under which float32 tensors and float32 dtype arguments
    of every torch call are read as float64 (an in-place op's own tensor stays
    what it is), so a program mixing its float64 inputs with float32 module
    weights or casting to float32 runs in float64 throughout."""
    torch = _torch()
    from torch.overrides import TorchFunctionMode

    def widen(a):
        if a is torch.float32:
            return torch.float64
        if isinstance(a, torch.Tensor) and a.dtype == torch.float32:
            return a.double()
        return a

    class Float64Everywhere(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = {k: widen(v) for k, v in (kwargs or {}).items()}
            if func is torch.Tensor.float:
                func = torch.Tensor.double
            name = getattr(func, "__name__", "")
            in_place = name.endswith("_") and not name.startswith("__")
            args = tuple(a if in_place and k == 0 else widen(a) for k, a in enumerate(args))
            return func(*args, **kwargs)

    return Float64Everywhere()


def float64_reference(prog, source, upto, everywhere=False):
    """(output snapshot, input snapshot, gradients, largest output magnitude) of call `upto` of the program run
    eagerly with its float32 inputs in float64 (calls before it replayed the same
    way, for programs with state); where that raises (float32 weights or casts
    meet the float64 inputs), again with every torch call in float64
    (_float64_everywhere); None when that raises too."""
    fn, ns = load_program(prog, source, real_kiln=False)
    for i, var in enumerate(prog.variants[:upto + 1]):
        args = clone_args(make_inputs(var, prog.seed, i), float32_as=_torch().float64)
        orig = orig_objects(args)
        if prog.drift:
            apply_drift(ns, i)
        if everywhere:
            with _float64_everywhere():
                out, exc = call(fn, args, var.get("no_grad", False))
        else:
            out, exc = call(fn, args, var.get("no_grad", False))
        if i < upto:
            continue
        if exc is not None:
            return None if everywhere else float64_reference(prog, source, upto, everywhere=True)
        snap = (snapshot(out), snapshot(args))
        grads, gerr = grads_of(out, [args[0], args[1]] + orig)
        torch = _torch()
        finite = [o[torch.isfinite(o)] for _, o in leaves(snap[0]) if isinstance(o, torch.Tensor)]
        scale = max((o.abs().max().item() for o in finite if o.numel()), default=0.0)
        return snap[0], snap[1], grads if gerr is None else None, scale
    return None


def same_type(c, e):
    """Exact type equality; classes of the program compare by module and qualified name
    (eager and compiled run in separate module namespaces made from the same text)."""
    tc, te = type(c), type(e)
    if tc is te:
        return True
    return (te.__module__.startswith("fuzz_") and tc.__module__ == te.__module__
            and tc.__qualname__ == te.__qualname__)


def leaves(obj, path="out", stack=()):
    """(path, object) for the tensors and mutable containers inside a result, paths as
    get_path reads them ('out[0]['a'].field[1]'). An object met twice is walked twice
    (as before: the gradient sum counts it twice in eager and compiled alike); only
    cycles stop the walk."""
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        yield path, obj
        return
    if id(obj) in stack:
        return
    stack = stack + (id(obj),)
    if isinstance(obj, (list, tuple, collections.deque)):
        if not isinstance(obj, tuple):
            yield path, obj
        for i, v in enumerate(obj):
            yield from leaves(v, f"{path}[{i}]", stack)
    elif isinstance(obj, dict):
        yield path, obj
        for k, v in list(obj.items()):
            yield from leaves(v, f"{path}[{k!r}]", stack)
    if hasattr(obj, "__dict__") and type(obj).__module__.startswith("fuzz_") and not isinstance(obj, type):
        if not isinstance(obj, (list, dict)):
            yield path, obj
        for k, v in list(vars(obj).items()):
            yield from leaves(v, f"{path}.{k}", stack)


def get_path(obj, path):
    """Follows 'out[0]['a'][1].attr' style paths."""
    for m in re.finditer(r"\[([^\]]+)\]|\.(\w+)", path):
        if m.group(2) is not None:
            obj = getattr(obj, m.group(2))
            continue
        key = m.group(1)
        key = int(key) if key.lstrip("-").isdigit() else key.strip("'")
        obj = dict.__getitem__(obj, key) if isinstance(obj, dict) else obj[key]
    return obj


def check_identity(c_out, e_out, c_args, e_args):
    """Returned objects that are inputs (or repeated) in eager must be so compiled."""
    e_ids = {id(o): p for p, o in arg_objects(e_args).items()}
    c_objs = arg_objects(c_args)
    seen = {}
    for path, o in leaves(e_out):
        try:
            co = get_path(c_out, path[3:])
        except Exception:
            continue
        if id(o) in e_ids:
            want = c_objs[e_ids[id(o)]]
            if co is not want:
                raise Mismatch(f"{path}: eager returns the input {e_ids[id(o)]} itself, "
                               f"compiled returns a different object")
        if id(o) in seen:
            first_path, first_c = seen[id(o)]
            if co is not first_c:
                raise Mismatch(f"{path}: eager returns the same object as {first_path}, compiled does not")
        else:
            seen[id(o)] = (path, co)


def check_state(c_args, e_snap, c_orig, e_orig, e_args, loosest=None, ref=None, scale=0.0):
    """Inputs after the call: tensor values, the list xs and which of its items are original.
    `loosest` as for the outputs: a float64 written into an input may come
    through float32 math (an exp whose last bit differs between libms).
    `ref`: the inputs after the float64 run, as for compare."""
    def part(i):
        return sub_ref(ref, lambda r: r[i], len(e_snap))
    compare(c_args[0], e_snap[0], "x (after call)", loosest, part(0), scale)
    compare(c_args[1], e_snap[1], "y (after call)", loosest, part(1), scale)
    compare(c_args[4], e_snap[4], "xs (after call)", loosest, part(4), scale)
    if len(e_args) > 5:
        # the dict argument: type, keys in order, values
        compare(c_args[5], e_snap[5], "dd (after call)", loosest, part(5), scale)
    e_ids = {id(o): i for i, o in enumerate(e_orig)}
    c_ids = {id(o): i for i, o in enumerate(c_orig)}

    def what(ids, o):
        return f"original input #{ids[id(o)]}" if id(o) in ids else "a new tensor"
    for j, (ce, ee) in enumerate(zip(c_args[4], e_args[4])):
        if e_ids.get(id(ee)) != c_ids.get(id(ce)):
            raise Mismatch(f"xs[{j}] (after call): eager holds {what(e_ids, ee)}, compiled holds {what(c_ids, ce)}")
    if len(e_args) > 5:
        for k, ee in e_args[5].items():
            ce = dict.get(c_args[5], k)
            if e_ids.get(id(ee)) != c_ids.get(id(ce)):
                raise Mismatch(f"dd[{k!r}] (after call): eager holds {what(e_ids, ee)}, "
                               f"compiled holds {what(c_ids, ce)}")


def grads_of(out, inputs):
    """(grads or None, exception type name or None) of sum(outputs) w.r.t. inputs that need grad."""
    torch = _torch()
    want = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    outs = [o for _, o in leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not want or not outs:
        return None, None
    try:
        loss = sum(o.double().sum() for o in outs)
        gs = torch.autograd.grad(loss, want, allow_unused=True)
        return [None if g is None else g.detach() for g in gs], None
    except Exception as e:  # noqa: BLE001
        return None, GradError(e)


class GradError(str):
    """An exception's type name that also keeps its message (for reports);
    compares as the name, since messages may differ between eager and kiln."""

    def __new__(cls, exc):
        self = super().__new__(cls, type(exc).__name__)
        self.text = str(exc)[:500]
        return self


class KilnShim:
    """What the eager reference sees as `kiln`: compile and disable return the function."""

    @staticmethod
    def compile(fn=None, **kwargs):
        return fn if fn is not None else (lambda f: f)

    @staticmethod
    def disable(fn):
        return fn


def load_program(prog, source=None, real_kiln=True):
    """A fresh module namespace running the program's text; returns (fn, namespace).
    `kiln` is predefined there: the real package, or a shim for the eager reference."""
    src = prog.source if source is None else source
    filename = f"<fuzz:{prog.seed}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    if real_kiln:
        import kiln
    ns = {"__name__": f"fuzz_{prog.seed}", "kiln": kiln if real_kiln else KilnShim}
    exec(compile(src, filename, "exec"), ns)
    return ns["fn"], ns


STATE_NAMES = ("STATE", "HIST", "STEP", "BUF", "CFG", "SCALER")

# Values of module globals per call when a program has drift on (call 0, 1, 4: base values).
DRIFT_BASE = {"SCALE": 0.5, "CONFIG.eps": 0.001, "OFFSETS": (1.0, -2.0, 0.25), "CFG.scale": 0.5,
              "BIAS": 0.5, "SCALER.s": 0.5, "SCALER.shift": 0.0}
DRIFT = {2: {"SCALE": 1.25, "CONFIG.eps": 0.01, "CFG.scale": 2.0, "BIAS": -1.0, "SCALER.s": 1.5},
         3: {"SCALE": -0.5, "OFFSETS": (0.5, 3.0, -1.0), "CFG.scale": 0.25, "SCALER.shift": 0.25}}


def apply_drift(ns, call):
    vals = dict(DRIFT_BASE)
    vals.update(DRIFT.get(call, {}))
    for k, v in vals.items():
        obj, _, attr = k.partition(".")
        if obj not in ns:
            continue
        if obj == "BIAS":
            ns["BIAS"].fill_(v)
        elif not attr:
            ns[obj] = v
        elif isinstance(ns[obj], dict):
            ns[obj][attr] = v
        else:
            setattr(ns[obj], attr, v)


def module_state(ns):
    """Copy of the program's mutable module globals."""
    torch = _torch()
    out = {}
    for k in STATE_NAMES:
        if k not in ns:
            continue
        v = ns[k]
        if isinstance(v, torch.Tensor):
            out[k] = v.detach().clone()
        elif hasattr(v, "__dict__") and not isinstance(v, (dict, list)):
            out[k] = dict(vars(v))
        elif isinstance(v, (dict, list)):
            out[k] = type(v)(v)
        else:
            out[k] = v
    return out


def call(fn, args, no_grad=False):
    torch = _torch()
    try:
        if no_grad:
            with torch.no_grad():
                return fn(*args), None
        return fn(*args), None
    except Exception as e:  # noqa: BLE001
        return None, e


BREAK_ADDR = re.compile(r"0x[0-9a-f]+")


def normalize_reason(r):
    r = re.sub(r"^<fuzz:\d+>:\d+: ", "", r)
    r = BREAK_ADDR.sub("0x..", r)
    r = re.sub(r"<[^<>]* object at 0x\.\.>", "<object>", r)
    r = r.split("\n")[0]
    return r[:160]


def check_program(prog, source=None, verbose=False):
    """Runs one program; returns a result dict (never raises for program errors)."""
    import torch
    import kiln
    kiln.config.cpu_kernels = os.environ.get("KILN_FUZZ_CPU_KERNELS", "1") != "0"
    kiln.config.cpu_matmul = os.environ.get("KILN_FUZZ_CPU_MATMUL", "kiln")
    res = {"seed": prog.seed, "status": "ok", "features": prog.features}
    fn, ns_e = load_program(prog, source, real_kiln=False)
    fn_c, ns_c = load_program(prog, source)
    must_not_raise = {0, 1, 4}

    # ---- eager, twice: a program whose eager behaviour does not repeat (a torch bug or
    # uninitialized memory in some kernel) cannot be judged
    def run_eager(fn, ns):
        runs = []
        for i, var in enumerate(prog.variants):
            args = make_inputs(var, prog.seed, i)
            eargs = clone_args(args)
            orig = orig_objects(eargs)
            if prog.drift:
                apply_drift(ns, i)
            out, exc = call(fn, eargs, var.get("no_grad", False))
            state = module_state(ns)
            if exc is not None and (i in must_not_raise or not prog.expect_raise):
                res["status"] = "discard"
                res["discard"] = (f"call {i}: {type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0] if str(exc) else ''}")[:200]
                return None
            grads = gerr = None
            snap = None
            if exc is None:
                snap = (snapshot(out), snapshot(eargs))
                grads, gerr = grads_of(out, [eargs[0], eargs[1]] + orig)
            runs.append((args, eargs, orig, out, exc, grads, gerr, state, snap))
        return runs

    eager = run_eager(fn, ns_e)
    if eager is None:
        return res
    fn2, ns_e2 = load_program(prog, source, real_kiln=False)
    again = run_eager(fn2, ns_e2)
    if again is None:
        res["discard"] = "eager nondeterministic: " + res["discard"]
        return res
    for i, (a, b) in enumerate(zip(eager, again)):
        try:
            if type(a[4]) is not type(b[4]):
                raise Mismatch(f"exception {type(a[4]).__name__} vs {type(b[4]).__name__}")
            if a[8] is not None:
                compare(b[8][0], a[8][0], "out")
                compare(b[8][1], a[8][1], "args")
            compare(b[7], a[7], "module globals")
            if a[6] != b[6] or (a[5] is None) != (b[5] is None):
                raise Mismatch("backward")
            if a[5] is not None:
                compare(b[5], a[5], "grads")
        except Mismatch as m:
            res["status"] = "discard"
            res["discard"] = f"call {i}: eager nondeterministic: {str(m).splitlines()[0]}"[:200]
            return res

    # ---- a value outside tolerance is judged again against the program run in float64
    float64_runs = {}

    def with_float64_reference(i, check):
        """Runs check(None); where it finds a mismatch, check(reference of call i)."""
        try:
            check(None)
        except Mismatch:
            if i not in float64_runs:
                float64_runs[i] = float64_reference(prog, source, i)
            if float64_runs[i] is None:
                raise
            check(float64_runs[i])
            res["float64_judged"] = res.get("float64_judged", 0) + 1

    # ---- compiled
    kiln.reset()
    compiled = kiln.compile(fn_c, backend=os.environ.get("KILN_FUZZ_BACKEND", "inductor"))
    unsupported_per_call = []
    try:
        for i, (args, eargs, eorig, eout, eexc, egrads, egerr, estate, esnap) in enumerate(eager):
            cargs = clone_args(args)
            corig = orig_objects(cargs)
            if prog.drift:
                apply_drift(ns_c, i)
            before = kiln.stats()
            cout, cexc = call(compiled, cargs, prog.variants[i].get("no_grad", False))
            after = kiln.stats()
            d = {k: after[k] - before.get(k, 0) for k in after}
            unsupported_per_call.append(d["unsupported"] + d.get("graph_breaks", 0))
            res.setdefault("deltas", []).append(d)
            where = f"call {i} ({ROLES[i]})"
            try:
                compare(module_state(ns_c), estate, "module globals (after call)")
            except Mismatch as m:
                raise Failure("mismatch", f"{where}: {m}", i)
            if eexc is not None:
                if cexc is None:
                    raise Failure("missing-exception", f"{where}: eager raised {type(eexc).__name__}: {eexc}; "
                                  "compiled returned normally", i)
                if type(cexc) is not type(eexc):
                    raise Failure("exception-type", f"{where}: eager raised {type(eexc).__name__}: {eexc}; "
                                  f"compiled raised {type(cexc).__name__}: {cexc}", i,
                                  "".join(traceback.format_exception(cexc)))
                continue
            if cexc is not None:
                raise Failure("kiln-exception", f"{where}: compiled raised {type(cexc).__name__}: {cexc}", i,
                              "".join(traceback.format_exception(cexc)))
            try:
                loosest = loosest_dtype([cargs[0], cargs[1]] + orig_objects(cargs))
                with_float64_reference(i, lambda r: compare(cout, esnap[0], "out", loosest, r and r[0],
                                                            r and r[3]))
                check_identity(cout, eout, cargs, eargs)
                with_float64_reference(i, lambda r: check_state(cargs, esnap[1], corig, eorig, eargs,
                                                                loosest, r and r[1], r and r[3]))
            except Mismatch as m:
                raise Failure("mismatch", f"{where}: {m}", i)
            cgrads, cgerr = grads_of(cout, [cargs[0], cargs[1]] + corig)
            # Eager refuses a backward through a value it saved and the program
            # then wrote in place; kiln computes graphs out of place
            # (functionalized) and gets the gradient right. By design, and
            # torch.compile does the same, so not a failure.
            if egerr and not cgerr and "modified by an inplace operation" in egerr.text:
                egerr = egrads = None
            # Eager refuses a backward through an op torch has no derivative
            # for (floor_divide) even when only zero gradients reach it (its
            # input came from sign()); kiln's autograd drops paths whose
            # gradient is identically zero and never asks. Its gradients are
            # the right ones; nothing to compare against.
            if egerr and not cgerr and "is not implemented" in egerr.text and "derivative for" in egerr.text:
                egerr = egrads = None
            if egerr != cgerr:
                detail = "; ".join(f"{who}: {err.text}" for who, err in (("eager", egerr), ("compiled", cgerr)) if err)
                raise Failure("grad", f"{where}: backward: eager {egerr or 'ok'}, compiled {cgerr or 'ok'} ({detail})", i)
            if egrads is not None:
                if cgrads is None:
                    raise Failure("grad", f"{where}: compiled outputs do not require grad", i)
                try:
                    inputs = [cargs[0], cargs[1]] + list(corig)
                    gl = loosest_dtype(inputs, prog.source if source is None else source)
                    with_float64_reference(i, lambda r: compare(list(cgrads), list(egrads), "grads", gl,
                                                                r and r[2], r and r[3]))
                except Mismatch as m:
                    raise Failure("grad", f"{where}: {m}", i)
        fully = sum(unsupported_per_call) == 0
        res["traced_fully"] = fully
        res["fell_back"] = not fully
        res["unsupported"] = sum(d["unsupported"] for d in res["deltas"])
        res["graph_breaks"] = sum(d.get("graph_breaks", 0) for d in res["deltas"])
        if fully and not prog.stateful:
            ds = res["deltas"]
            same_layout = [json.dumps(v, sort_keys=True) == json.dumps(prog.variants[0], sort_keys=True)
                           for v in prog.variants]
            if ds[1]["traces"] != 0 or ds[1]["cache_hits"] < 1:
                raise Failure("cache", f"call 1 (repeat, same shapes): expected a cache hit, stats delta {ds[1]}", 1)
            if prog.variants[2]["x"]["shape"] != prog.variants[0]["x"]["shape"] and ds[2]["cache_misses"] < 1:
                raise Failure("cache", f"call 2 (resized x): expected a cache miss, stats delta {ds[2]}", 2)
            if eager[4][4] is None and same_layout[4] and (ds[4]["traces"] != 0 or ds[4]["cache_hits"] < 1):
                raise Failure("cache", f"call 4 (base shapes again): expected a cache hit, stats delta {ds[4]}", 4)

        # ---- fullgraph=True on the base call
        kiln.reset()
        fn_f, ns_f = load_program(prog, source)
        cf = kiln.compile(fn_f, fullgraph=True, backend=os.environ.get("KILN_FUZZ_BACKEND", "inductor"))
        if prog.drift:
            apply_drift(ns_f, 0)
        args, eargs, eorig, eout = eager[0][:4]
        eout = eager[0][8][0]
        cargs = clone_args(args)
        cout, cexc = call(cf, cargs)
        if unsupported_per_call[0] == 0:
            if cexc is not None:
                raise Failure("fullgraph", f"call 0 traced fully by default but fullgraph=True raised "
                              f"{type(cexc).__name__}: {cexc}", 0, "".join(traceback.format_exception(cexc)))
            try:
                loosest = loosest_dtype([cargs[0], cargs[1]] + orig_objects(cargs))
                with_float64_reference(0, lambda r: compare(cout, eout, "out", loosest, r and r[0], r and r[3]))
            except Mismatch as m:
                raise Failure("fullgraph", f"fullgraph=True call 0: {m}", 0)
        else:
            if not isinstance(cexc, kiln.Unsupported):
                what = "returned normally" if cexc is None else f"raised {type(cexc).__name__}: {cexc}"
                raise Failure("fullgraph", f"call 0 fell back by default but fullgraph=True {what} "
                              "(expected kiln.Unsupported)", 0,
                              "".join(traceback.format_exception(cexc)) if cexc else None)
            res["break_reason"] = normalize_reason(str(cexc))
    except Failure as f:
        res["status"] = "fail"
        res["kind"] = f.kind
        res["message"] = f.message[:4000]
        res["call"] = f.call
        if f.tb:
            res["traceback"] = f.tb[-6000:]
    except Exception as e:  # noqa: BLE001 -- kiln's machinery raising in the harness itself
        res["status"] = "fail"
        res["kind"] = "harness-exception"
        res["message"] = f"{type(e).__name__}: {e}"[:4000]
        res["traceback"] = traceback.format_exc()[-6000:]
    finally:
        kiln.reset()
    res.pop("deltas", None) if not verbose else None
    return res


def worker_main(args):
    import warnings
    warnings.simplefilter("ignore")
    import torch  # noqa: F401
    import kiln  # noqa: F401
    lo, hi = parse_range(args.seeds)
    exclude = tuple(x for x in args.exclude.split(",") if x)
    out = sys.stdout
    for seed in range(lo, hi):
        out.write(f"START {seed}\n")
        out.flush()
        try:
            prog = generate(seed, exclude)
            res = check_program(prog)
        except Exception as e:  # noqa: BLE001
            res = {"seed": seed, "status": "fail", "kind": "harness-exception",
                   "message": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-6000:]}
        out.write("RESULT " + json.dumps(res) + "\n")
        out.flush()
    out.write("DONE\n")
    out.flush()


# ============================================================== parent side

def parse_range(s):
    if ":" in s:
        a, b = s.split(":")
        return int(a), int(b)
    return int(s), int(s) + 1


def run_chunk(lo, hi, opts, results, lock, progress):
    """Runs seeds [lo, hi) in worker processes, restarting after crashes."""
    seed = lo
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    while seed < hi:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seeds", f"{seed}:{hi}",
               "--exclude", opts.exclude]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                             bufsize=1)
        err_chunks = []

        def drain_err():
            for line in p.stderr:
                err_chunks.append(line)
                if len(err_chunks) > 400:
                    del err_chunks[:200]
        t_err = threading.Thread(target=drain_err, daemon=True)
        t_err.start()
        current = None
        started = time.time()
        done = False
        while True:
            r, _, _ = select.select([p.stdout], [], [], 1.0)
            if r:
                line = p.stdout.readline()
                if not line:
                    break
                line = line.rstrip("\n")
                if line.startswith("START "):
                    current = int(line.split()[1])
                    started = time.time()
                elif line.startswith("RESULT "):
                    res = json.loads(line[7:])
                    with lock:
                        results.append(res)
                        progress()
                    seed = res["seed"] + 1
                    current = None
                elif line == "DONE":
                    done = True
            elif current is not None and time.time() - started > opts.timeout:
                p.kill()
                p.wait()
                with lock:
                    results.append({"seed": current, "status": "fail", "kind": "timeout",
                                    "message": f"no result after {opts.timeout} s (hang?)",
                                    "stderr": "".join(err_chunks)[-4000:]})
                    progress()
                seed = current + 1
                break
        rc = p.wait()
        t_err.join(timeout=5)
        if done:
            break
        if current is not None and not (seed > current):
            sig = -rc if rc < 0 else None
            with lock:
                results.append({"seed": current, "status": "fail", "kind": "crash",
                                "message": f"worker died (exit code {rc}"
                                           + (f", signal {sig}" if sig else "") + ")",
                                "stderr": "".join(err_chunks)[-6000:]})
                progress()
            seed = current + 1
        elif current is None and seed < hi and not done:
            # died between seeds (startup failure?)
            with lock:
                results.append({"seed": seed, "status": "fail", "kind": "crash",
                                "message": f"worker died before a seed started (exit code {rc})",
                                "stderr": "".join(err_chunks)[-6000:]})
                progress()
            seed += 1


def write_failure(report, res, exclude):
    seed = res["seed"]
    d = os.path.join(report, f"seed-{seed}")
    os.makedirs(d, exist_ok=True)
    try:
        prog = generate(seed, exclude)
        with open(os.path.join(d, "program.py"), "w") as f:
            f.write(prog.source)
        with open(os.path.join(d, "inputs.txt"), "w") as f:
            f.write(prog.describe_inputs() + "\n")
    except Exception as e:  # noqa: BLE001
        with open(os.path.join(d, "program.py"), "w") as f:
            f.write(f"# could not regenerate: {e}\n")
    with open(os.path.join(d, "failure.txt"), "w") as f:
        f.write(f"seed: {seed}\nkind: {res.get('kind')}\ncall: {res.get('call')}\n")
        f.write(f"message: {res.get('message')}\n")
        ex = ("--exclude " + ",".join(exclude) + " ") if exclude else ""
        f.write(f"repro: PYTHONPATH=python /usr/bin/python3 tests/fuzz/run_fuzz.py --repro {seed} {ex}\n")
        if res.get("traceback"):
            f.write("\n--- traceback ---\n" + res["traceback"])
        if res.get("stderr"):
            f.write("\n--- worker stderr (tail) ---\n" + res["stderr"])
    return d


def summarize(results):
    n = sum(1 for r in results if r["status"] != "discard")
    fully = sum(1 for r in results if r.get("traced_fully"))
    fell = sum(1 for r in results if r.get("fell_back"))
    fails = [r for r in results if r["status"] == "fail"]
    disc = [r for r in results if r["status"] == "discard"]
    return n, fully, fell, fails, disc


def parent_main(opts):
    lo, hi = parse_range(opts.seeds)
    exclude = tuple(x for x in opts.exclude.split(",") if x)
    for x in exclude:
        if x not in FEATURES:
            sys.exit(f"unknown feature {x!r}; known: {', '.join(sorted(FEATURES))}")
    if opts.report:
        os.makedirs(opts.report, exist_ok=True)
    chunks = queue.Queue()
    for a in range(lo, hi, opts.batch):
        chunks.put((a, min(hi, a + opts.batch)))
    results, lock = [], threading.Lock()
    t0 = time.time()
    last = [t0]
    total = hi - lo
    written = set()

    def progress():
        r = results[-1]
        if r["status"] == "fail":
            where = ""
            if opts.report and r["seed"] not in written:
                written.add(r["seed"])
                where = " -> " + write_failure(opts.report, r, exclude)
            print(f"FAIL seed {r['seed']}: {r.get('kind')}: {r.get('message', '')[:300]}{where}",
                  file=sys.stderr, flush=True)
        now = time.time()
        if not opts.quiet and now - last[0] > opts.progress:
            last[0] = now
            n, fully, fell, fails, disc = summarize(results)
            print(f"[{len(results)}/{total} seeds, {now - t0:.0f} s, {len(results) / (now - t0):.1f}/s] "
                  f"{fully} full, {fell} fell back, {len(fails)} failures, {len(disc)} discarded",
                  file=sys.stderr, flush=True)

    def runner():
        while True:
            try:
                a, b = chunks.get_nowait()
            except queue.Empty:
                return
            run_chunk(a, b, opts, results, lock, progress)
    threads = [threading.Thread(target=runner) for _ in range(opts.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    n, fully, fell, fails, disc = summarize(results)
    kinds = collections.Counter(r.get("kind") for r in fails)
    reasons = collections.Counter(r["break_reason"] for r in results if r.get("break_reason"))
    dreasons = collections.Counter(re.sub(r"\d+", "#", r["discard"].split(":", 1)[1].strip())[:100]
                                   for r in disc)
    feats = collections.Counter(f for r in results for f in r.get("features", []))
    with_breaks = sum(1 for r in results if r.get("graph_breaks"))
    with_unsup = sum(1 for r in results if r.get("unsupported"))
    summary = {
        "fell_back_with_graph_breaks": with_breaks, "fell_back_with_unsupported_frames": with_unsup,
        "seeds": [lo, hi], "exclude": list(exclude), "elapsed_s": round(elapsed, 1),
        "programs": n, "traced_fully": fully, "fell_back": fell, "failures": len(fails),
        "discarded": len(disc), "failure_kinds": dict(kinds),
        "failed_seeds": sorted(r["seed"] for r in fails),
        "break_reasons": dict(reasons.most_common()), "discard_reasons": dict(dreasons.most_common()),
        "features": dict(feats.most_common()),
        # programs where a float32 value outside tolerance passed only because it is as
        # close to the float64 result as eager's (within_eager_error)
        "float64_judged_seeds": sorted(r["seed"] for r in results if r.get("float64_judged")),
    }
    if opts.report:
        with open(os.path.join(opts.report, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        with open(os.path.join(opts.report, "results.jsonl"), "w") as f:
            for r in sorted(results, key=lambda r: r["seed"]):
                f.write(json.dumps(r) + "\n")
    if not opts.quiet:
        print(f"elapsed {elapsed:.0f} s ({(hi - lo) / max(elapsed, 1e-9):.1f} seeds/s); "
              f"{len(disc)} discarded (eager raised); of the programs that fell back, {with_breaks} had "
              f"graph breaks (resumed in CPython), {with_unsup} had frames run wholly eagerly; "
              f"{len(summary['float64_judged_seeds'])} passed against the float64 reference",
              file=sys.stderr)
        if kinds:
            print("failure kinds: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()), file=sys.stderr)
            print("failed seeds: " + " ".join(map(str, summary["failed_seeds"][:50])), file=sys.stderr)
        for r, c in reasons.most_common(8):
            print(f"  fallback x{c}: {r}", file=sys.stderr)
    print(f"fuzz: {n} programs, {fully} traced fully, {fell} fell back, {len(fails)} failures", flush=True)
    return 1 if fails else 0


def repro_main(opts):
    import warnings
    warnings.simplefilter("ignore")
    exclude = tuple(x for x in opts.exclude.split(",") if x)
    prog = generate(opts.repro, exclude)
    source = None
    if opts.source:
        with open(opts.source) as f:
            source = f.read()
    if opts.json_only:
        res = check_program(prog, source)
        print(json.dumps(res))
        return 0
    print(source if source is not None else prog.source)
    print(prog.describe_inputs())
    res = check_program(prog, source, verbose=True)
    for k in ("traceback",):
        if k in res:
            print(res.pop(k))
    print(json.dumps(res, indent=1))
    return 1 if res["status"] == "fail" else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0:100", help="range LO:HI (HI excluded) or one seed")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=250, help="seeds per worker process")
    ap.add_argument("--report", default=None, help="directory for failure reports and summary.json")
    ap.add_argument("--exclude", default="", help="comma-separated generator features to leave out: "
                    + ", ".join(sorted(FEATURES)))
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per program")
    ap.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--repro", type=int, default=None, help="run one seed in this process, verbosely")
    ap.add_argument("--source", default=None, help="with --repro: run this (edited) program text instead")
    ap.add_argument("--json-only", action="store_true", help="with --repro: print only the result as JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.worker:
        worker_main(opts)
        return 0
    if opts.repro is not None:
        return repro_main(opts)
    return parent_main(opts)


if __name__ == "__main__":
    sys.exit(main())
