"""Helpers for traced ``with torch.autocast(...)`` blocks.

Graphs enter and leave autocast through ``enter``/``exit`` nodes. While
tracing, torch does not apply autocast to meta tensors (autocast keys follow
a tensor's backend, and meta has none), so ops inside a traced block infer
their results through ``infer``: each meta fake is wrapped in a tensor that
claims the real device, which puts autocast's dispatch key back in front of
the op; the op itself then runs on the meta tensors underneath.
"""
import torch
from torch.utils._pytree import tree_map


def enter(device_type, dtype, enabled, cache_enabled):
    """Enters autocast as ``torch.autocast(...)`` would; returns the entered object."""
    ctx = torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    ctx.__enter__()
    return ctx


def exit(ctx):
    """Leaves an autocast block entered by ``enter``."""
    ctx.__exit__(None, None, None)


class _DeviceFake(torch.Tensor):
    """A storage-less tensor that reports ``device`` and runs ops on its meta twin."""

    @staticmethod
    def __new__(cls, meta, device):
        fake = torch.Tensor._make_wrapper_subclass(
            cls, meta.size(), strides=meta.stride(), storage_offset=meta.storage_offset(),
            dtype=meta.dtype, device=device, requires_grad=meta.requires_grad)
        fake.meta_twin = meta
        return fake

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(t):
            return t.meta_twin if isinstance(t, _DeviceFake) else t
        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


def infer(fn, args, kwargs, device):
    """Runs ``fn`` on meta fakes as if they lived on ``device`` (under the current autocast)."""
    def wrap(t):
        if isinstance(t, torch.Tensor) and t.device.type == "meta":
            return _DeviceFake(t, device)
        return t
    out = fn(*tree_map(wrap, args), **tree_map(wrap, kwargs))

    def unwrap(t):
        return t.meta_twin if isinstance(t, _DeviceFake) else t
    return tree_map(unwrap, out)
