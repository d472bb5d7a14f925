"""Helpers for traced ``with torch.autocast(...)`` blocks.

Graphs enter and leave autocast through ``enter``/``exit`` nodes. While
tracing, torch does not apply autocast to meta tensors (autocast keys follow
a tensor's backend, and meta has none), so ops inside a traced block infer
their results through ``infer``: each meta fake is wrapped in a tensor that
claims the real device, which puts autocast's dispatch key back in front of
the op; the op itself then runs on the meta tensors underneath.

``explicit_casts`` makes autocast's effect on one op visible: the casts it
applied to the op's inputs, checked by running the op again on the cast
inputs with autocast out of the way (Note [Explicit autocast casts] in
tracer/trace_autocast.cpp).
"""
import contextlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map as _pytree_map


def enter(device_type, dtype, enabled, cache_enabled):
    """Enters autocast as ``torch.autocast(...)`` would; returns the entered object."""
    ctx = torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    ctx.__enter__()
    return ctx


def exit(ctx):
    """Leaves an autocast block entered by ``enter``."""
    ctx.__exit__(None, None, None)


def tree_map(fn, tree):
    """torch's tree_map, with plain tuples, lists and dicts mapped here:
    every op inferred under autocast maps its arguments several times, and
    pytree's generic walk was a third of that time."""
    kind = type(tree)
    if kind is tuple:
        return tuple([tree_map(fn, item) for item in tree])
    if kind is list:
        return [tree_map(fn, item) for item in tree]
    if kind is dict:
        return {key: tree_map(fn, item) for key, item in tree.items()}
    if isinstance(tree, (tuple, list, dict)):
        return _pytree_map(fn, tree)
    return fn(tree)


# While explicit_casts runs: id(meta input) -> the dtype autocast cast it to.
_recorded_casts = None
# Autocast casts an op's inputs before the op runs; once any other op has
# been dispatched the op's own body has started, and a copy of an input
# there is the op's (SDPA's math backend upcasts bf16 inputs to float32
# inside), not autocast's.
_casts_closed = False
# True while an input's fake is being made (its clone is no op of the call).
_wrapping = False


class _TopLevelCalls(TorchFunctionMode):
    """Counts the torch calls a function makes at its own level (a mode is
    off while it handles a call, so calls inside one are not seen)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


class _DeviceFake(torch.Tensor):
    """A storage-less tensor that reports ``device`` and runs ops on its meta twin."""

    @staticmethod
    def __new__(cls, meta, device, is_input=False):
        fake = torch.Tensor._make_wrapper_subclass(
            cls, meta.size(), strides=meta.stride(), storage_offset=meta.storage_offset(),
            dtype=meta.dtype, device=device, requires_grad=meta.requires_grad)
        fake.meta_twin = meta
        fake.claimed_device = device
        fake.is_input = is_input
        return fake

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        global _casts_closed
        kwargs = kwargs or {}
        # A copy of one of the op's own inputs, before anything else ran, is
        # autocast casting it.
        if _recorded_casts is not None and not _casts_closed and not _wrapping:
            if (func is torch.ops.aten._to_copy.default and args and isinstance(args[0], _DeviceFake)
                    and args[0].is_input and kwargs.get("dtype") is not None):
                _recorded_casts[id(args[0].meta_twin)] = (args[0].meta_twin, kwargs["dtype"])
            else:
                _casts_closed = True
        device = next(t.claimed_device for t in _tensors((args, kwargs)) if isinstance(t, _DeviceFake))

        def unwrap(t):
            return t.meta_twin if isinstance(t, _DeviceFake) else t
        # Composite ops pass the claimed device on (to(dtype) calls
        # _to_copy(..., device=cuda)); underneath, everything is meta.
        if isinstance(kwargs.get("device"), torch.device) and kwargs["device"].type != "meta":
            kwargs = dict(kwargs, device=torch.device("meta"))
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        # Results claim the device too: a composite op (cross_entropy is
        # log_softmax then nll_loss) meets autocast again in its later steps.
        return tree_map(lambda t: _DeviceFake(t, device) if isinstance(t, torch.Tensor) and t.device.type == "meta"
                        else t, out)


class _MetaFactories(TorchDispatchMode):
    """Tensors a composite op makes from nothing on the claimed device (an
    SDPA backend's mask or scale, ``full(..., device=cuda)``) are made on
    meta and claim the device, like every other tensor of the inference."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if isinstance(device, torch.device) and device.type != "meta" and not any(
                isinstance(t, _DeviceFake) for t in _tensors((args, kwargs))):
            out = func(*args, **dict(kwargs, device=torch.device("meta")))
            return tree_map(lambda t: _DeviceFake(t, device) if isinstance(t, torch.Tensor) and t.device.type == "meta"
                            else t, out)
        return func(*args, **kwargs)


def _input_fake(meta, device):
    """The fake of an input: a leaf like ``meta``, or, for an op's result (it
    has a grad_fn), a non-leaf, so that in-place ops on it are allowed as
    eagerly (F.relu(x, inplace=True) refuses a leaf that requires grad)."""
    global _wrapping
    if meta.is_leaf or not meta.requires_grad:
        return _DeviceFake(meta, device, is_input=True)
    # The fake must have meta's strides, or a composite op (reshape) decides
    # on the wrapper's strides what the meta twin cannot do (view an expanded
    # tensor). A clone is a non-leaf with dense strides, so clone the whole
    # storage and view it with meta's geometry.
    storage = torch.empty(meta.untyped_storage().nbytes() // meta.element_size(), dtype=meta.dtype, device="meta")
    storage.requires_grad_(True)
    _wrapping = True
    try:
        with torch.enable_grad():
            fake = _DeviceFake(storage, device).clone().as_strided(meta.size(), meta.stride(), meta.storage_offset())
    finally:
        _wrapping = False
    fake.meta_twin, fake.is_input = meta, True
    return fake


def infer(fn, args, kwargs, device, calls=None):
    """Runs ``fn`` on meta fakes as if they lived on ``device`` (under the current autocast);
    ``calls``, a _TopLevelCalls, counts fn's own torch calls."""
    def wrap(t):
        if isinstance(t, torch.Tensor) and t.device.type == "meta":
            return _input_fake(t, device)
        return t
    fake_args, fake_kwargs = tree_map(wrap, args), tree_map(wrap, kwargs)
    with _MetaFactories(), (calls if calls is not None else contextlib.nullcontext()):
        out = fn(*fake_args, **fake_kwargs)

    def unwrap(t):
        return t.meta_twin if isinstance(t, _DeviceFake) else t
    return tree_map(unwrap, out)


def _tensors(tree):
    found = []
    tree_map(lambda t: found.append(t) if isinstance(t, torch.Tensor) else None, tree)
    return found


def _dtypes(tree):
    return [t.dtype for t in _tensors(tree)]


def _cast(tree, casts):
    return tree_map(lambda t: t.to(casts[id(t)][1]) if isinstance(t, torch.Tensor) and id(t) in casts else t, tree)


# Note [Autocast casts cache]
# Finding an op's casts runs it twice, once through _DeviceFake's Python
# dispatch: ~0.4 ms an op, most of a trace under autocast (torchvision
# swin_t on the CPU: 70 ms traced without autocast, 600 ms with). The
# answer depends only on the op, the autocast state, the grad mode and
# its arguments' metadata and values (and which of them are one tensor),
# so it is kept per such key, each cast named by its tensor's first
# position among the arguments; ops of repeated blocks (a transformer's
# layers) then find theirs at once.
# Arguments other than tensors and plain constants make no key, nor does
# a method bound to a tensor.
_casts_cache = {}
_CACHE_LIMIT = 8192
_PLAIN = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _signature(tree, tensors):
    """A hashable stand-in for ``tree`` (tensors by their metadata,
    appended to ``tensors`` in order), or None when it has none."""
    if isinstance(tree, torch.Tensor):
        if tree.layout != torch.strided:  # sparse layouts have no strides to key on
            return None
        tensors.append(tree)
        return (torch.Tensor, tree.dtype, tuple(tree.shape), tree.stride(), tree.storage_offset(),
                tree.requires_grad, tree.is_leaf)
    if isinstance(tree, _PLAIN):
        return (type(tree), tree)
    if isinstance(tree, (tuple, list)):
        items = []
        for item in tree:
            sig = _signature(item, tensors)
            if sig is None:
                return None
            items.append(sig)
        return (type(tree), tuple(items))
    if isinstance(tree, dict):
        items = []
        for key, item in tree.items():
            sig = _signature(item, tensors)
            if sig is None or not isinstance(key, str):
                return None
            items.append((key, sig))
        return (dict, tuple(items))
    return None


def explicit_casts(fn, args, kwargs, device):
    """The casts that make ``fn(*args, **kwargs)`` under the current autocast
    an op on cast inputs: a list of (meta input, dtype), [] when autocast
    leaves the op alone, or None when no input casts reproduce autocast's
    result dtypes. ``args`` hold meta tensors standing for ``device``."""
    tensors = []
    signature = _signature((args, kwargs), tensors)
    # A method bound to a tensor would keep that tensor in the key.
    if signature is None or isinstance(getattr(fn, "__self__", None), torch.Tensor):
        return _find_explicit_casts(fn, args, kwargs, device)
    device_type = torch.device(device).type
    # Which positions hold the same tensor: mm(a, a) casts one object, mm(a, b) two.
    first = {}
    aliases = tuple(first.setdefault(id(t), k) for k, t in enumerate(tensors))
    key = (fn, device, torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type),
           torch.is_grad_enabled(), signature, aliases)
    try:
        known = _casts_cache.get(key)
    except TypeError:  # an unhashable op
        return _find_explicit_casts(fn, args, kwargs, device)
    if known is None:
        casts = _find_explicit_casts(fn, args, kwargs, device)
        if casts is None:
            known = (None,)
        elif all(id(t) in first for t, _ in casts):
            known = (tuple((first[id(t)], dtype) for t, dtype in casts),)
        else:
            return casts
        if len(_casts_cache) >= _CACHE_LIMIT:
            _casts_cache.clear()
        _casts_cache[key] = known
        return casts
    return None if known[0] is None else [(tensors[k], dtype) for k, dtype in known[0]]


def _find_explicit_casts(fn, args, kwargs, device):
    """explicit_casts without its cache."""
    global _recorded_casts, _casts_closed
    _recorded_casts, _casts_closed = {}, False
    calls = _TopLevelCalls()
    try:
        out = infer(fn, args, kwargs, device, calls)
        casts = _recorded_casts
    finally:
        _recorded_casts, _casts_closed = None, False
    want = _dtypes(out)

    def reproduces(casts):
        # Meta tensors escape autocast, so this runs the op as it is. A set
        # of casts the op rejects (mixed dtypes) is not autocast's.
        try:
            return _dtypes(fn(*_cast(args, casts), **_cast(kwargs, casts))) == want
        except RuntimeError:
            return False
    if reproduces(casts):
        return list(casts.values())
    # A composite op may copy an input itself before any other op shows:
    # SDPA's math backend upcasts bf16 inputs to float32 inside, which
    # looks like autocast's float32 policy. Such up-casts are dropped when
    # the op without them is what autocast ran, and only for one torch call
    # (a Python composite's own up-cast at its level is followed by inner
    # ops autocast casts again, which no input cast expresses); autocast's
    # casts to its lower-precision dtype are never dropped.
    kept = {k: (t, d) for k, (t, d) in casts.items()
            if not (d == torch.float32 and t.dtype in (torch.float16, torch.bfloat16))}
    if calls.count == 1 and len(kept) < len(casts) and reproduces(kept):
        return list(kept.values())
    # Ops autocast runs with dtype= set (sum, prod, cumsum, softmax on
    # some versions) compute in the result's dtype: casting their floating
    # inputs to it is the same op. Only when autocast cast no input: a
    # composite that also ran a lower-precision op (a matmul) would
    # otherwise run it in float32.
    floats = {t.dtype for t in _tensors(out) if t.is_floating_point()}
    if not casts and len(floats) == 1:
        dtype = floats.pop()
        widened = {id(t): (t, dtype) for t in _tensors((args, kwargs))
                   if t.is_floating_point() and t.dtype != dtype}
        if reproduces(widened):
            return list(widened.values())
    return None
