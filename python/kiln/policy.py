"""Compile policies of the kiln binary: --compile=marked|modules|none.

- marked (the default): only what kiln.compile wraps is compiled.
- modules: every nn.Module call is compiled. Module.__call__ is replaced by
  a function that, outside any kiln.compile'd or kiln.disable'd call, runs
  the original Module.__call__ under one compile config per module class
  (so the report has a line per class). Inside one (a compiled module's
  submodules, a kiln.compile'd function, a kiln.disable'd one) it calls the
  original directly: the enclosing trace already covers the submodule, which
  is inlined into its parent's graph, never compiled again on its own.
- none: kiln.compile returns its argument unchanged, for A/B timings.
"""
import os

import torch

from . import _C

POLICIES = ("marked", "modules", "none")

_policy = "marked"
_original_module_call = None
_compiled_by_class = {}


def policy() -> str:
    """The compile policy in force ("marked" unless the kiln binary set another)."""
    return _policy


def set_policy(name: str) -> None:
    """Switches the compile policy; "modules" compiles every nn.Module call from now on."""
    global _policy
    if name not in POLICIES:
        raise ValueError(f"unknown compile policy {name!r}; choose one of: " + ", ".join(POLICIES))
    if name == "modules":
        _install_module_calls()
    _policy = name


def module_label(module) -> str:
    """Names a module's class and forward for reports: "MLP.forward (mlp.py:12)"."""
    cls = type(module)
    code = getattr(getattr(cls, "forward", None), "__code__", None)
    where = f" ({os.path.basename(code.co_filename)}:{code.co_firstlineno})" if code else ""
    return f"{cls.__qualname__}.forward{where}"


def _install_module_calls():
    global _original_module_call
    if _original_module_call is not None:
        return
    original = torch.nn.Module.__call__
    _original_module_call = original
    in_context = _C.in_context
    compiled_by_class = _compiled_by_class

    def __call__(self, *args, **kwargs):
        if in_context():
            return original(self, *args, **kwargs)
        compiled = compiled_by_class.get(type(self))
        if compiled is None:
            compiled = _C.compiled(original, "eager", False, None, module_label(self))
            compiled_by_class[type(self)] = compiled
        return compiled(self, *args, **kwargs)

    __call__.__qualname__ = "Module.__call__"
    __call__.__doc__ = original.__doc__
    torch.nn.Module.__call__ = __call__
