"""kiln's traced graphs as torch.fx GraphModules, for backends given as a
callable: kiln.compile(fn, backend=my_backend) calls
my_backend(gm, example_inputs) with each graph kiln captured, exactly
torch.compile's custom-backend contract, and runs what it returns
(runtime/callable_backend_executor.cpp builds the graph description this
module turns into FX). Not a public API."""
import operator
import threading

import torch
import torch.fx


# Constants FX's generated code spells as literals.
_LITERALS = (bool, int, float, complex, str, torch.dtype, torch.device, torch.layout, torch.memory_format, slice)


class Ref:
    """A reference to node `index` of a kiln graph inside an argument."""
    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


def _placeholder_name(text, taken):
    name = "".join(c if c.isalnum() else "_" for c in text).strip("_") or "input"
    if name[0].isdigit():
        name = "_" + name
    base, k = name, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


_named = {}


# FX writes these as augmented assignments (`a += b`), which fail when `a`
# is a constant (a Python number accumulated into: `0 += t`).
_INPLACE_OPERATORS = {getattr(operator, name) for name in (
    "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor", "ilshift",
    "irshift", "imatmul")}


def _nameable(target):
    """`target`, or a Python function calling it where FX's code generation
    cannot name it (a builtin of no module: kiln's rebuild_object, which
    builds recorded objects such as a model's output dataclass) or would
    write it as an augmented assignment."""
    if target not in _INPLACE_OPERATORS:
        try:
            torch.fx.node._get_qualified_name(target)
            return target
        except Exception:
            pass
    if target not in _named:
        def call(*args, **kwargs):
            return target(*args, **kwargs)
        name = "".join(c if c.isalnum() else "_" for c in getattr(target, "__name__", "call"))
        call.__name__ = call.__qualname__ = f"kiln_{name}"
        _named[target] = call
    return _named[target]


def graph_module(inputs, nodes, output):
    """The torch.fx.GraphModule of a kiln graph: `inputs` are (node index,
    source text) pairs, `nodes` (node index, target callable, args tuple,
    kwargs dict) calls in order, `output` the returned structure; node
    values appear as Ref objects anywhere inside args, kwargs and output."""
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    constants = []
    values = {}
    taken = set()

    def arg(a):
        if isinstance(a, Ref):
            return values[a.index]
        if a is None or a is Ellipsis or isinstance(a, _LITERALS):
            return a
        if type(a) is tuple:
            return tuple(arg(x) for x in a)
        if type(a) is list:
            return [arg(x) for x in a]
        if type(a) is dict:
            return {k: arg(v) for k, v in a.items()}
        if isinstance(a, tuple):
            # FX writes any tuple as a literal: a torch.Size or namedtuple
            # is rebuilt by a call, so its type survives.
            make = getattr(type(a), "_make", type(a))
            return graph.call_function(make, (tuple(arg(x) for x in a),))
        # Any other constant (a class, a module, an object) is an attribute
        # of the GraphModule: FX's code can hold only literals.
        name = f"_kiln_constant_{len(constants)}"
        constants.append(a)
        object.__setattr__(root, name, a)
        return graph.get_attr(name)

    for index, text in inputs:
        values[index] = graph.placeholder(_placeholder_name(text, taken))
    for index, target, args, kwargs in nodes:
        values[index] = graph.call_function(_nameable(target), arg(args), arg(kwargs))
    graph.output(arg(output))
    return torch.fx.GraphModule(root, graph)


class CompiledByBackend:
    """Runs a kiln graph through `backend(gm, example_inputs)`'s result,
    compiled on the first call with that call's inputs as the examples."""

    def __init__(self, backend, gm, returns_tuple):
        self.backend = backend
        self.gm = gm
        self.returns_tuple = returns_tuple
        self.compiled = None
        self.lock = threading.Lock()

    def __call__(self, *inputs):
        compiled = self.compiled
        if compiled is None:
            with self.lock:
                if self.compiled is None:
                    made = self.backend(self.gm, list(inputs))
                    if not callable(made):
                        raise TypeError(f"kiln.compile: backend {getattr(self.backend, '__name__', self.backend)!r} "
                                        f"returned {type(made).__name__}, not a callable")
                    self.compiled = made
                compiled = self.compiled
        result = compiled(*inputs)
        # torch's compilers give a tuple output back as a list.
        return tuple(result) if self.returns_tuple and type(result) is list else result


def compile_with(backend, inputs, nodes, output):
    """The runner of a kiln graph (described as for graph_module) through
    the user's `backend`."""
    return CompiledByBackend(backend, graph_module(inputs, nodes, output), type(output) is tuple)
