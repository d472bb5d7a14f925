"""Exceptions kiln raises."""


class Unsupported(RuntimeError):
    """fullgraph=True met code kiln cannot trace; the message says where and why."""


class RecompileError(RuntimeError):
    """A call needed a recompile under kiln.set_stance("fail_on_recompile"); the
    message names the function and the guard that failed."""
