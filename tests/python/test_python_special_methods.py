"""Objects whose classes implement container protocols in Python
(__getitem__, __contains__, __len__), as transformers' attention and mask
registries do, and class attributes read through type(self): inlined and
guarded, so the graph does not break there."""
import functools
import types
import typing

import torch

import kiln
from conftest import stats


class Registry:
    _global = {"relu": torch.relu}

    def __init__(self):
        self._local = {}

    def __getitem__(self, key):
        if key in self._local:
            return self._local[key]
        return self._global[key]

    def __contains__(self, key):
        return key in self._local or key in self._global

    def __len__(self):
        return len(self._local) + len(self._global)


REGISTRY = Registry()


class Block(torch.nn.Module):
    def forward(self, x):
        scale = type(self).helper
        return scale(x) + len(REGISTRY)

    @staticmethod
    def helper(x):
        return x * 2


def uses_registry(x, block):
    if "relu" in REGISTRY and "missing" not in REGISTRY:
        x = REGISTRY["relu"](x)
    return block(x)


def test_python_container_protocols_and_class_attributes_trace_whole():
    x = torch.randn(3)
    block = Block()
    compiled = kiln.compile(uses_registry, fullgraph=True)
    torch.testing.assert_close(compiled(x, block), uses_registry(x, block))
    REGISTRY._local["relu"] = torch.sigmoid  # read through the inlined __getitem__: guarded
    original = Block.__dict__["helper"]
    Block.helper = staticmethod(lambda t: t * 3)  # the class attribute: guarded
    try:
        torch.testing.assert_close(compiled(x, block), uses_registry(x, block))
        assert stats()["recompiles"] == 1
    finally:
        REGISTRY._local.clear()
        Block.helper = original


class Chunked(torch.nn.Module):
    def chunk(self, x):
        return x * 2

    def forward(self, x):
        step = self.chunk
        bump = lambda t: t + 1  # noqa: E731
        if isinstance(step, types.MethodType) and isinstance(bump, types.FunctionType):
            return bump(step(x))
        return x


def test_isinstance_of_bound_methods_and_local_functions():
    model = Chunked()
    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(model, fullgraph=True)(x), model(x))


def masks_with_dtype_limits(x):
    return x.clamp(min=torch.finfo(x.dtype).min / 2) + torch.finfo(x.dtype).eps + torch.iinfo(torch.int8).max


def test_torch_finfo_and_iinfo_fold_per_dtype():
    compiled = kiln.compile(masks_with_dtype_limits, fullgraph=True)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(4, dtype=dtype)
        torch.testing.assert_close(compiled(x), masks_with_dtype_limits(x))


def with_counter(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)  # `fn` lives in wrapper's closure
        print("", end="")  # a graph break inside the wrapper
        return out + 1
    return wrapper


class Decorated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    @with_counter
    def forward(self, x):
        return self.lin(x).relu()


def test_a_decorated_forward_reads_its_closure_across_a_break():
    # The wrapper's closure is re-read through its class's dict, so the
    # graph break inside it resumes instead of running the frame eagerly.
    model = Decorated()
    x = torch.randn(2, 3)
    compiled = kiln.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        torch.testing.assert_close(compiled(x), model(x))
    assert stats()["unsupported"] == 0


def passes_through(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


def scaled_getter(scale):
    def getter(self):
        return self.w * scale
    return getter


class ClosuresThroughTheClass(torch.nn.Module):
    # A closure reached through a staticmethod (transformers' BEiT), a
    # property getter (torch's parametrizations: wav2vec2's weight norm) and
    # a decorated __getitem__ (typing's List[...], timm's CrossViT) reads its
    # cells through the class dict's entry.
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))

    @staticmethod
    @passes_through
    def positions(n):
        return torch.arange(n)

    def forward(self, x):
        return x + self.positions(4) + self.scaled + DOUBLES[3]


class Doubles:
    @passes_through
    def __getitem__(self, n):
        return n * 2


DOUBLES = Doubles()
ClosuresThroughTheClass.scaled = property(scaled_getter(3.0))


def test_closures_reached_through_class_descriptors_do_not_break():
    model = ClosuresThroughTheClass()
    x = torch.randn(4)
    explained = kiln.explain(model)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    with torch.no_grad():
        torch.testing.assert_close(kiln.compile(model)(x), model(x))


def annotated_list(x):
    # timm's CrossViT: torch.jit.annotate(List[torch.Tensor], []) (typing's
    # cached __getitem__, then annotate, which returns its value).
    parts = torch.jit.annotate(typing.List[torch.Tensor], [])
    parts.append(x + 1)
    return torch.cat(parts)


def test_jit_annotate_returns_its_value():
    x = torch.randn(3)
    explained = kiln.explain(annotated_list)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    torch.testing.assert_close(kiln.compile(annotated_list)(x), annotated_list(x))
