"""Mappings and sequences of every type kiln models, built in the frame or
passed in, returned or mutated, at graph breaks and at the end of a frame,
on every backend: the compiled call returns what eager returns and leaves
the caller's objects exactly as eager does (issue 19).

The caller's OrderedDict used to lose its writes (they went into its dict
storage beneath its order links, so it iterated as empty and a later pop
raised KeyError); and a dict's key order was not guarded, so a loop over a
reordered dict replayed the first call's order."""
import io
import typing
from collections import Counter, OrderedDict, defaultdict, deque

import pytest
import enum

import torch

import kiln
from conftest import assert_same, stats

BACKENDS = ["eager", "aot_eager", "inductor"]


class ListSubclass(list):
    pass


class WrappingDict(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key, ("wrapped", value))


def snapshot(obj):
    """A comparable picture of a container: its type, items in order, and for
    tensors their values."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", obj.dtype, tuple(obj.shape), obj.detach().cpu().tolist())
    if isinstance(obj, dict):
        return (type(obj).__name__, [(k, snapshot(v)) for k, v in obj.items()])
    if isinstance(obj, (list, tuple, deque)):
        return (type(obj).__name__, [snapshot(v) for v in obj])
    return obj


def run_both(fn, make_args, backend, calls=2):
    """Calls fn eagerly and compiled on fresh arguments and compares results
    and the arguments' state afterwards, call by call."""
    compiled = kiln.compile(fn, backend=backend)
    for _ in range(calls):
        eager_args, kiln_args = make_args(), make_args()
        expected = fn(*eager_args)
        got = compiled(*kiln_args)
        assert snapshot(got) == snapshot(expected)
        assert type(got) is type(expected)
        assert snapshot(kiln_args) == snapshot(eager_args)
        for arg in kiln_args:
            if isinstance(arg, OrderedDict):
                # Order links and storage agree: every key pops.
                for key in list(arg):
                    arg.pop(key)
                assert len(arg) == 0


def ones():
    return torch.ones(2)


def built_ordered_dict(x):
    d = OrderedDict()
    d["out"] = x * 2
    return d


def written_argument(x, d):
    d["a"] = x * 2
    return x + 1


def deleted_and_written(x, d):
    del d["a"]
    d["c"] = x
    return x + 1


def popped(x, d):
    v = d.pop("a")
    return x + v


def moved_to_end(x, d):
    d.move_to_end("a")
    d["z"] = x
    return x + 1


def moved_to_front(x, d):
    d.move_to_end("b", last=False)
    return x + d["b"]


def popped_first(x, d):
    k, v = d.popitem(last=False)
    d[k + "2"] = x * v
    return x


def cleared_and_refilled(x, d):
    d.clear()
    d["q"] = x
    d.setdefault("r", 3)
    return x + 1


def copied(x, d):
    c = d.copy()
    c["new"] = x
    return c


def rebuilt(x, d):
    d2 = OrderedDict(d)
    d2["c"] = x
    return d2


def written_across_break(x, d):
    d["k"] = x
    print("break", file=io.StringIO())
    d.pop("a")
    d["m"] = x * 3
    return x


def iterated(x, d):
    out = x
    for k, v in d.items():
        out = out * v
        out = out + len(k)
    return out, list(d)


def defaultdict_counts(x, d):
    d["a"] += 1
    d["n"] += 2
    return x + 1


def per_device_outputs(x, d):
    # timm's FeatureHooks: outputs collected per device by forward hooks,
    # read out and cleared by the model's forward.
    d[x.device]["a"] = x * 2
    d[x.device]["b"] = x + 1
    out = d[x.device]
    d[x.device] = OrderedDict()
    return out["a"] + out["b"]


def counter_update(x, d):
    d["a"] += 1
    d.update(b=3)
    return x + 1


def deque_appends(x, d):
    d.append(x)
    d.appendleft(x * 2)
    return x + 1


def list_subclass_writes(x, items):
    items.append(x)
    items[0] = 5
    return x + 1


def custom_setitem(x, d):
    d["a"] = x
    return x + 1


def local_defaultdict(x):
    d = defaultdict(list)
    d["a"].append(x)
    d["b"].append(x * 2)
    return d


CASES = [
    ("built OrderedDict", built_ordered_dict, lambda: (ones(),)),
    ("written OrderedDict", written_argument, lambda: (ones(), OrderedDict())),
    ("written dict", written_argument, lambda: (ones(), {})),
    ("del + write", deleted_and_written, lambda: (ones(), OrderedDict(a=1, b=2))),
    ("pop", popped, lambda: (ones(), OrderedDict(a=1, b=2))),
    ("move_to_end", moved_to_end, lambda: (ones(), OrderedDict(a=1, b=2))),
    ("move_to_end(last=False)", moved_to_front, lambda: (ones(), OrderedDict(a=1, b=2))),
    ("popitem(last=False)", popped_first, lambda: (ones(), OrderedDict(a=1, b=2))),
    ("clear + setdefault", cleared_and_refilled, lambda: (ones(), OrderedDict(a=1, b=2))),
    ("copy keeps the type", copied, lambda: (ones(), OrderedDict(a=1, b=2))),
    ("OrderedDict(d)", rebuilt, lambda: (ones(), OrderedDict(a=1, b=2))),
    ("writes across a break", written_across_break, lambda: (ones(), OrderedDict(a=1))),
    ("iteration order", iterated, lambda: (ones(), OrderedDict(b=2, a=3))),
    ("defaultdict", defaultdict_counts, lambda: (ones(), defaultdict(int, a=1))),
    ("defaultdict by device", per_device_outputs, lambda: (ones(), defaultdict(OrderedDict))),
    ("defaultdict with a device key", per_device_outputs,
     lambda: (ones(), defaultdict(OrderedDict, {torch.device("cpu"): OrderedDict(z=1)}))),
    ("Counter", counter_update, lambda: (ones(), Counter(a=1))),
    ("deque", deque_appends, lambda: (ones(), deque([1]))),
    ("list subclass", list_subclass_writes, lambda: (ones(), ListSubclass([1]))),
    ("dict subclass __setitem__", custom_setitem, lambda: (ones(), WrappingDict())),
    ("built defaultdict", local_defaultdict, lambda: (ones(),)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,fn,make_args", CASES, ids=[c[0] for c in CASES])
def test_mapping_matches_eager(backend, name, fn, make_args):
    run_both(fn, make_args, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mapping", [dict, OrderedDict])
def test_key_order_is_guarded(backend, mapping):
    def keys_in_order(x, d):
        out = []
        for k in d:
            out.append(k)
        return x + 1, out

    compiled = kiln.compile(keys_in_order, backend=backend)
    assert compiled(ones(), mapping(a=1, b=2))[1] == ["a", "b"]
    assert compiled(ones(), mapping(b=2, a=1))[1] == ["b", "a"]
    reordered = mapping(a=1, b=2)
    if mapping is OrderedDict:
        reordered.move_to_end("a")
    else:
        reordered["a"] = reordered.pop("a")
    assert compiled(ones(), reordered)[1] == ["b", "a"]
    assert stats()["recompiles"] >= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_defaultdict_factory_is_guarded(backend):
    def fill(x, d):
        return x + len(d["k"])

    compiled = kiln.compile(fill, backend=backend)
    assert compiled(ones(), defaultdict(list)).tolist() == [1.0, 1.0]
    assert compiled(ones(), defaultdict(lambda: [1, 2])).tolist() == [3.0, 3.0]
    with pytest.raises(KeyError):
        compiled(ones(), defaultdict(None))


def test_key_order_guard_is_listed():
    def first_key(x, d):
        return x + 1, next(iter(d))

    dump = kiln.trace_dump(first_key, ones(), OrderedDict(a=1, b=2))
    assert "DictKeys L['d'] collections.OrderedDict keys=('a', 'b')" in dump


class Stats(typing.NamedTuple):
    mean: torch.Tensor
    std: torch.Tensor


def namedtuple_across_break(y):
    st = Stats(y, y * 2)
    d = dict(a=st)
    print("break", file=io.StringIO())
    return st.mean + st.std, d


def ordered_copy_across_break(a, b):
    od = OrderedDict({"d": a})
    od2 = od.copy()
    od.update([("f", b)])  # a list of pairs: a graph break
    return od2, od


def shared_containers(x):
    d = {"a": x * 2}
    items = [x]
    return d, [d, items], items


@pytest.mark.parametrize("backend", BACKENDS)
def test_types_survive_graph_breaks(backend):
    y = torch.randn(3)
    got, got_d = kiln.compile(namedtuple_across_break, backend=backend)(y)
    torch.testing.assert_close(got, y * 3)
    assert type(got_d["a"]) is Stats
    a, b = torch.randn(2), torch.randn(2)
    od2, od = kiln.compile(ordered_copy_across_break, backend=backend)(a, b)
    assert type(od2) is OrderedDict and type(od) is OrderedDict
    assert list(od2) == ["d"] and list(od) == ["d", "f"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_container_returned_twice_is_one_object(backend):
    x = torch.randn(2)
    d, pair, items = kiln.compile(shared_containers, backend=backend)(x)
    assert pair[0] is d and pair[1] is items
    torch.testing.assert_close(d["a"], x * 2)


def unary_plus_aliases(x):
    t = x[1:] * 2
    return {"o": t}, [+t], +x


@pytest.mark.parametrize("backend", BACKENDS)
def test_unary_plus_of_a_tensor_is_the_tensor(backend):
    # torch.positive returns its argument: `+t is t` (fuzz seed 5225).
    x = torch.randn(3)
    d, items, plus_x = kiln.compile(unary_plus_aliases, backend=backend)(x)
    assert items[0] is d["o"] and plus_x is x


def defaultdict_counted(x):
    counts = defaultdict(int, a=1)
    for key in ("a", "b", "a"):
        counts[key] += 1
    groups = defaultdict(list)
    groups["even"].append(x * 2)
    groups["odd"].append(x + 1)
    groups["even"].append(x * 4)
    return x * counts["a"] + counts["b"], counts, groups, groups.copy()


def defaultdict_across_break(x):
    groups = defaultdict(list)
    groups["a"].append(x * 2)
    print("a break")  # the resumed code rebuilds the defaultdict with its factory
    groups["b"].append(x + 1)
    return groups


def defaultdict_without_factory(x):
    d = defaultdict(None, a=x)
    return d["a"] * 2, d


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [defaultdict_counted, defaultdict_across_break, defaultdict_without_factory])
def test_defaultdict_built_in_the_frame(backend, fn, capsys):
    # Missing keys are filled by the factory while tracing; results are
    # defaultdicts with the same factory as eager's.
    run_both(fn, lambda: (ones(),), backend)
    got = kiln.compile(fn, backend=backend)(ones())
    want = fn(ones())
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        if isinstance(w, defaultdict):
            assert g.default_factory is w.default_factory
    if fn is not defaultdict_across_break:
        assert kiln.explain(fn)(ones()).graph_break_count == 0


class _Backend(str, enum.Enum):
    NATIVE = "native"
    FLASH = "flash"


_DTYPE_DOWNCAST = {torch.float64: torch.float32, torch.float32: torch.float32}
_BACKEND_SCALE = {_Backend.NATIVE: 2.0, _Backend.FLASH: 3.0}
_SELECTED = _Backend.NATIVE


def _keyed_by_dtype_and_enum(x):
    # diffusers' idioms: a dtype-to-dtype table, a registry keyed by enum members
    y = x.to(_DTYPE_DOWNCAST[x.dtype])
    return y * _BACKEND_SCALE[_SELECTED] + _BACKEND_SCALE.get(_Backend.FLASH, 0.0)


def test_dicts_keyed_by_dtypes_and_enum_members():
    x = torch.randn(3, dtype=torch.float64)
    compiled = kiln.compile(_keyed_by_dtype_and_enum, fullgraph=True)
    assert_same(compiled(x), _keyed_by_dtype_and_enum(x))
    global _SELECTED
    _SELECTED = _Backend.FLASH  # a guarded global: recompiles, reads the new key
    try:
        assert_same(compiled(x), _keyed_by_dtype_and_enum(x))
    finally:
        _SELECTED = _Backend.NATIVE
    assert stats()["recompiles"] == 1


VALIDATORS = {typing.Union: "union", list: "list", typing.Sequence: "sequence"}
FIELD = int | None
OPTIONAL = typing.Optional[int]


def test_dicts_keyed_by_typing_forms():
    # huggingface_hub's strict dataclasses pick a validator by a field
    # type's origin: keys that compare by identity (typing.Union), and the
    # attributes of typing's C objects (`int | None`), which never change.
    def fn(x):
        kind = VALIDATORS.get(typing.get_origin(OPTIONAL))
        args = typing.get_args(FIELD)
        return x + len(kind) + len(args)

    compiled = kiln.compile(fn, fullgraph=True)
    x = torch.randn(3)
    assert_same(compiled(x), fn(x))


class _StateCache:
    def __init__(self, n):
        self.states = dict.fromkeys(range(n))
        self.ready = dict.fromkeys(range(n), False)


def test_dict_fromkeys_builds_a_dict_in_the_trace():
    # transformers' linear-attention cache layers start their state dicts
    # with dict.fromkeys (RecurrentGemma: 11 graph breaks before).
    def f(x, n):
        cache = _StateCache(n)
        cache.states[0] = x * 2
        cache.ready[1] = True
        shared = dict.fromkeys(["a", "b"], [])
        shared["a"].append(1)  # one value object under every key, as in Python
        return cache.states[0] + len(shared["b"]), list(cache.ready.items())

    x = torch.randn(3)
    assert_same(kiln.compile(f)(x, 3), f(x, 3))
    s = kiln.stats()
    assert (s["traces"], s["graph_breaks"]) == (1, 0), s


def test_dict_fromkeys_of_a_subclass_is_not_modelled():
    class Named(dict):
        pass

    def f(x):
        d = Named.fromkeys(["a"], 2)
        return x * d["a"], type(d).__name__

    x = torch.randn(3)
    assert_same(kiln.compile(f)(x), f(x))


def merged_kwargs(x, **kwargs):
    # transformers' Mamba2: fused_kwargs = kwargs | {"dt_limit": ...}.
    merged = kwargs | {"scale": 2.0}
    ordered = OrderedDict(a=1) | {"b": 2}
    kwargs |= {"shift": 3.0}
    return x * merged["scale"] + merged["shift"] + kwargs["shift"] + len(ordered), type(ordered) is OrderedDict


def test_dict_union_and_in_place_union():
    compiled = kiln.compile(merged_kwargs, fullgraph=True)
    x = torch.randn(4)
    assert_same(compiled(x, shift=1.0), merged_kwargs(x, shift=1.0))
