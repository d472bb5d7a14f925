"""Focused corpus cases for the Python-language items of the tracer-breadth
issue that the topical test files cover only inside larger programs: one
small function per item, compared with eager over several calls, traced
into one graph (check_compiled) unless the case is about a graph break."""
import pytest
import torch
import torch.nn as nn

import kiln
from conftest import assert_same, check_compiled, clone_args, stats


def x34():
    return (torch.randn(3, 4),)


def test_while_loop_over_python_counter():
    def fn(x):
        i = 0
        while i < 3:
            x = x * 2 - i
            i += 1
        return x
    check_compiled(fn, x34)


def test_for_over_tuple_and_dict_items():
    scales = {"a": 2.0, "b": -1.0}

    def fn(x):
        for s in (1.0, 0.5):
            x = x * s
        for name, s in scales.items():
            x = x + s if name == "a" else x - s
        return x
    check_compiled(fn, x34)


def test_break_and_continue_in_loops():
    def fn(x):
        for i in range(10):
            if i % 2 == 0:
                continue
            if i > 5:
                break
            x = x + i
        return x
    check_compiled(fn, x34)


def test_loop_over_module_list_sequential_and_dict():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
            self.seq = nn.Sequential(nn.ReLU(), nn.Linear(4, 4))
            self.heads = nn.ModuleDict({"p": nn.Linear(4, 2), "q": nn.Linear(4, 3)})

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            for i, layer in enumerate(self.seq):
                x = layer(x) + i
            return {k: head(x) for k, head in self.heads.items()}
    net = Net()
    check_compiled(net.forward, x34)


def test_reversed_and_zip_over_lists():
    def fn(x):
        ws = [1.0, 2.0, 3.0]
        bs = [0.1, 0.2, 0.3]
        for w, b in zip(reversed(ws), bs):
            x = x * w + b
        return x
    check_compiled(fn, x34)


def test_closure_cells_read_and_written():
    def fn(x):
        total = x

        def add(y):
            nonlocal total
            total = total + y
            return total
        add(x)
        add(1.0)
        return total
    check_compiled(fn, x34)


def test_keyword_only_defaults_varargs_and_kwargs():
    def inner(a, *rest, scale=2.0, **extra):
        out = a * scale
        for r in rest:
            out = out + r
        return out - extra.get("shift", 0.0)

    def fn(x):
        return inner(x, x, 1.0, scale=3.0, shift=0.5) + inner(x)
    check_compiled(fn, x34)


def test_star_unpacking_and_nested_unpacking():
    def fn(x):
        a, *rest = x.unbind(0)
        (p, q), r = (rest[0], rest[1]), a
        first, *_, last = [p, q, r]
        return first + last
    check_compiled(fn, x34)


def test_dict_and_set_comprehensions_and_set_methods():
    def fn(x):
        names = {"a", "b"}
        names.add("c")
        names.discard("zz")
        d = {n: i for i, n in enumerate(sorted(names))}
        seen = {i % 2 for i in range(5)}
        both = names | {"d"}
        common = names.intersection({"a", "q"})
        extra = {*seen, 7}
        for n in set(["a", "a"]):
            x = x + len(n)
        return x * d["c"] + len(seen) + len(both) + len(common) + ("a" in names) + len(extra)
    check_compiled(fn, x34)


def test_set_argument_read_and_changed():
    def fn(x, tags):
        out = x * (2 if "double" in tags else 1)
        return out, sorted(tags | {"seen"})

    check_compiled(fn, lambda: (torch.randn(3), {"double", "b"}))

    def changes(x, tags):
        tags.add("new")  # a side effect on the caller's set: runs eagerly
        return x + len(tags)

    compiled = kiln.compile(changes)
    a, b = {"p"}, {"p"}
    assert_same(compiled(torch.ones(2), a), changes(torch.ones(2), b))
    assert a == b


def test_set_returned_is_new_each_call():
    def fn(x):
        s = {1, 2}
        s.add(3)
        return x + 1, s

    compiled = kiln.compile(fn)
    out1 = compiled(torch.ones(2))[1]
    out2 = compiled(torch.ones(2))[1]
    assert out1 == {1, 2, 3} and out2 == {1, 2, 3} and out1 is not out2
    assert stats()["traces"] == 1


def test_list_and_tuple_methods():
    def fn(x):
        xs = [x, x * 2]
        xs.append(x * 3)
        xs.insert(0, x - 1)
        last = xs.pop()
        t = (1, 2, 2, 3)
        return last + xs[0] * t.count(2) + t.index(3)
    check_compiled(fn, x34)


def test_sorted_any_all_min_max():
    def fn(x):
        sizes = sorted([x.shape[1], x.shape[0]], reverse=True)
        ok = all(s > 0 for s in sizes) and not any(s > 100 for s in sizes)
        return x * max(sizes) - min(sizes) if ok else x
    check_compiled(fn, x34)


def test_abs_sum_range_getattr_hasattr():
    class Cfg:
        eps = 0.5

    cfg = Cfg()

    def fn(x):
        eps = getattr(cfg, "eps") if hasattr(cfg, "eps") else 0.0
        return abs(x) + sum(range(4)) + eps + sum([x, x])
    check_compiled(fn, x34)


def test_branch_on_dtype_dim_and_shape():
    def fn(x):
        if x.dtype == torch.float32 and x.dim() == 2:
            y = x.t() if x.shape[0] < x.shape[1] else x
        else:
            y = x
        return y * 2
    check_compiled(fn, x34)


def test_classmethod_staticmethod_property():
    class Scaler:
        factor = 3.0

        @classmethod
        def scaled(cls, t):
            return t * cls.factor

        @staticmethod
        def shift(t):
            return t + 1

        @property
        def double(self):
            return self.factor * 2

    s = Scaler()

    def fn(x):
        return Scaler.shift(x) * s.double + Scaler.scaled(x) + s.scaled(x)
    check_compiled(fn, x34)


def test_super_in_module_forward():
    class Base(nn.Module):
        def forward(self, x):
            return x * 2

    class Child(Base):
        def forward(self, x):
            return super().forward(x) + 1

    check_compiled(Child().forward, x34)


def test_fstring_of_shape_used_as_dict_key():
    def fn(x):
        table = {"3x4": 2.0, "4x3": -1.0}
        return x * table[f"{x.shape[0]}x{x.shape[1]}"]
    check_compiled(fn, x34)


def test_try_except_that_does_not_raise():
    def fn(x):
        try:
            y = x * 2
        except ValueError:
            y = x
        finally:
            y = y + 1
        return y
    check_compiled(fn, x34)


def test_inplace_ops_on_inputs_match_eager_state():
    def fn(x, y):
        x.add_(y)
        x[0] = 1.0
        y.mul_(2)
        return x.sum() + y.sum()

    compiled = kiln.compile(fn)
    for _ in range(3):
        args = (torch.randn(3, 4), torch.randn(3, 4))
        eager_args = clone_args(args)
        assert_same(compiled(*args), fn(*eager_args))
        assert_same(args, eager_args)
    assert stats()["traces"] == 1


def test_item_and_tolist_break_and_stay_correct():
    def fn(x):
        y = x * 2
        n = y.sum().item()
        vals = y[0].tolist()
        return y + n + vals[0]

    compiled = kiln.compile(fn)
    for _ in range(3):
        x = torch.randn(3, 4)
        assert_same(compiled(x), fn(x))
    assert stats()["graph_breaks"] >= 1 and stats()["unsupported"] == 0


def test_branch_on_tensor_value_breaks_and_stays_correct():
    def fn(x):
        y = x + 1
        if y.sum() > 0:
            return y * 2
        return y - 2

    compiled = kiln.compile(fn)
    for sign in (1.0, -1.0, 1.0, -1.0):
        x = torch.rand(3, 4) * sign
        assert_same(compiled(x), fn(x))
    assert stats()["graph_breaks"] >= 1 and stats()["unsupported"] == 0


@pytest.mark.cpu_semantics("Tensor.numpy() needs CPU tensors")
def test_numpy_breaks_and_stays_correct():
    def fn(x):
        y = x * 2
        a = y.numpy()
        return y + float(a[0, 0])

    compiled = kiln.compile(fn)
    for _ in range(3):
        x = torch.randn(3, 4)
        assert_same(compiled(x), fn(x))
    assert stats()["unsupported"] == 0
