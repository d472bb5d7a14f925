"""User passes over kiln's captured graphs.

    def my_pass(gm: torch.fx.GraphModule) -> torch.fx.GraphModule | None: ...
    model = kiln.compile(model, backend=kiln.passes.after_capture(my_pass))

`after_capture(*passes)` is a callable backend (kiln._fx): each graph kiln
captures reaches the passes as a torch.fx.GraphModule, with FX's graph API
to read and rewrite it (iterate `gm.graph.nodes`, `node.replace_all_uses_with`,
`gm.graph.inserting_after(node)` + `call_function`, `erase_node`). After
each pass the graph is verified (`Graph.lint`: every use defined before it,
no dangling node) and its code regenerated; then kiln compiles the result
like any function (decomposition, autograd, kernels under `backend`).
examples/user_pass.py fuses x * sigmoid(x) into a custom op this way.
Passes at later stages (after decomposition, before scheduling) are not
open yet: kiln's prim graphs have no Python API.
"""
from .compile_api import compile as _kiln_compile


class PassError(RuntimeError):
    """A user pass broke the graph it was given, or returned something else."""


def after_capture(*passes, backend="inductor", mode=None):
    """A kiln.compile backend running `passes` in order over each captured
    graph (a torch.fx.GraphModule; a pass returns the graph to go on with,
    or None when it rewrote `gm` in place), each checked after it, then
    compiling the result with kiln's `backend` and `mode`."""
    for p in passes:
        if not callable(p):
            raise TypeError(f"kiln.passes.after_capture: a pass must be callable, got {type(p).__name__}")

    def compile_graph(gm, example_inputs):
        for p in passes:
            name = getattr(p, "__name__", repr(p))
            result = p(gm)
            if result is not None:
                if not hasattr(result, "graph") or not hasattr(result, "recompile"):
                    raise PassError(f"kiln pass {name} returned {type(result).__name__}, not a GraphModule or None")
                gm = result
            try:
                gm.graph.lint()
            except Exception as error:
                raise PassError(f"kiln pass {name} left an invalid graph: {error}") from error
            gm.recompile()
        return _kiln_compile(gm.forward, backend=backend, mode=mode)

    compile_graph.__name__ = "after_capture(" + ", ".join(getattr(p, "__name__", "pass") for p in passes) + ")"
    return compile_graph
