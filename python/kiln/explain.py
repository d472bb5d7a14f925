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

    @property
    def op_graph_count(self) -> int:
        """Graphs holding at least one op (a node that is no input): what
        torch._dynamo.explain's graph_count counts, since Dynamo makes no
        graph for a frame without ops. graph_count counts every traced
        frame's graph, such as that of a frame which only calls a function
        that breaks."""
        return sum(1 for graph in self.graphs if _has_ops(graph))

    def __str__(self):
        lines = [f"graphs: {self.graph_count} ({self.op_graph_count} with ops)",
                 f"graph breaks: {self.graph_break_count}"]
        lines += [f"  break: {reason}" for reason in self.break_reasons]
        for i, graph in enumerate(self.graphs):
            lines.append(f"--- graph {i} ---")
            lines.append(graph.rstrip())
        return "\n".join(lines)


def _has_ops(graph: str) -> bool:
    """True when the graph text has a node other than an input."""
    return any(line.startswith("%") and not line.split(" = ", 1)[-1].startswith("input ")
               for line in graph.splitlines())


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
