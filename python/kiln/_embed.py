"""The Python half of libkiln, kiln's C++ embedding API (interpreter/embed/).

The C++ side calls these with the GIL held; what is easier to say in Python
(importing a file, walking an attribute path, reading a signature) lives here.
"""
import importlib.util
import inspect
import os
import sys

import torch

from .compile_api import compile as _compile
from .compile_api import stats


def load_file(path):
    """Imports the Python file at `path` as a module named after its stem.

    Loading the same file again returns the module already in sys.modules.
    """
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no Python file at {path}")
    name = os.path.splitext(os.path.basename(path))[0]
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == path:
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # Registered before running, as import does, so the file's own classes
    # (dataclasses, pickling) can find their module.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def resolve(module, dotted_name):
    """Returns module.<dotted_name>, naming the missing part when there is none."""
    obj = module
    walked = module.__name__
    for part in dotted_name.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{walked} has no attribute {part!r} (looking up "
                                 f"{dotted_name!r} in module {module.__name__!r})")
        obj = getattr(obj, part)
        walked = f"{walked}.{part}"
    if not callable(obj):
        raise TypeError(f"{module.__name__}.{dotted_name} is a {type(obj).__name__}, not callable")
    return obj


def positional_arity(fn):
    """Returns (fewest, most) positional arguments fn takes; most is -1 for
    *args; None when the signature cannot be read."""
    if isinstance(fn, torch.nn.Module):
        fn = fn.forward
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    fewest, most = 0, 0
    for parameter in signature.parameters.values():
        if parameter.kind == parameter.VAR_POSITIONAL:
            most = -1
        elif parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            if parameter.default is parameter.empty:
                fewest += 1
            if most != -1:
                most += 1
        elif parameter.kind == parameter.KEYWORD_ONLY and parameter.default is parameter.empty:
            return None  # needs a keyword: libkiln calls positionally, so let Python say why
    return fewest, most


def compile(fn, backend, fullgraph, dynamic):
    """kiln.compile with the options of a C++ kiln::CompileOptions."""
    return _compile(fn, backend=backend, fullgraph=fullgraph, dynamic=dynamic)
