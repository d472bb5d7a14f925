"""kiln.explain and kiln.trace_dump: what tracing a call produces."""
from dataclasses import dataclass, field
from typing import List

from . import _C


@dataclass
class ExplainOutput:
    """Graphs and graph breaks of one traced call."""
    graphs: List[str] = field(default_factory=list)
    break_reasons: List[str] = field(default_factory=list)

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.break_reasons)

    def __str__(self):
        lines = [f"graphs: {self.graph_count}", f"graph breaks: {self.graph_break_count}"]
        lines += [f"  break: {reason}" for reason in self.break_reasons]
        for i, graph in enumerate(self.graphs):
            lines.append(f"--- graph {i} ---")
            lines.append(graph.rstrip())
        return "\n".join(lines)


def _unwrap(fn):
    return getattr(fn, "_kiln_original", None) or getattr(fn, "_fn", None) or fn


def explain(fn):
    """Returns a callable that runs fn once, traced afresh, and returns an ExplainOutput."""
    target = _unwrap(fn)

    def run(*args, **kwargs):
        _, graphs, reasons = _C.explain(target, args, kwargs)
        return ExplainOutput(graphs=list(graphs), break_reasons=list(reasons))
    return run


def trace_dump(fn, *args, **kwargs):
    """Runs fn(*args, **kwargs) traced afresh; returns the trace dump text
    (per frame: bytecode, graph, guards, breaks) used by golden files."""
    _, text = _C.trace_dump(_unwrap(fn), args, kwargs)
    return text
