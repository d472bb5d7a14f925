"""kiln: a tracing JIT for PyTorch programs.

    model = kiln.compile(model)

See README.md and docs/architecture.md in the repository.
"""
import os as _os
import sys as _sys

from . import _C
from .errors import RecompileError, Unsupported
from . import config
from .compile_api import allow_in_graph, compile, disable, is_compiling, reset, set_stance, stats
from .explain import ExplainOutput, explain, trace_dump
from .marks import mark_dynamic, mark_static

__all__ = ["compile", "disable", "allow_in_graph", "is_compiling", "reset", "set_stance", "stats", "explain",
           "mark_dynamic", "mark_static",
           "trace_dump", "config", "Unsupported", "RecompileError", "ExplainOutput"]

_C.set_error_types(Unsupported, RecompileError)
# torch.compile(backend="kiln") also works through the entry point setup.sh
# installs; where Dynamo is loaded already, register without it.
if "torch._dynamo" in _sys.modules:
    from . import dynamo_backend as _dynamo_backend
    _dynamo_backend.register()
if _os.environ.get("KILN_LOGS"):
    _unknown = _C.set_logs(_os.environ["KILN_LOGS"])
    if _unknown:
        raise ValueError(f"KILN_LOGS names unknown channels: {_unknown} "
                         f"(known: {', '.join(_C.log_channels())}, all)")
