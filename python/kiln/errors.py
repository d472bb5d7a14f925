"""Exceptions kiln raises."""


class Unsupported(RuntimeError):
    """fullgraph=True met code kiln cannot trace; the message says where and why."""
