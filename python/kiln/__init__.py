"""kiln: a tracing JIT for PyTorch programs.

    model = kiln.compile(model)

See README.md and docs/architecture.md in the repository.
"""
import os as _os

from . import _C
from .errors import Unsupported
from . import config
from .compile_api import compile, disable, reset, stats
from .explain import ExplainOutput, explain, trace_dump

__all__ = ["compile", "disable", "reset", "stats", "explain", "trace_dump", "config",
           "Unsupported", "ExplainOutput"]

_C.set_unsupported_error(Unsupported)
if _os.environ.get("KILN_LOGS"):
    _unknown = _C.set_logs(_os.environ["KILN_LOGS"])
    if _unknown:
        raise ValueError(f"KILN_LOGS names unknown channels: {_unknown} "
                         f"(known: {', '.join(_C.log_channels())}, all)")
