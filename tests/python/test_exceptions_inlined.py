"""Exceptions raised and caught inside inlined calls (Note [Exceptions in
inlined frames], tracer/trace_exceptions.cpp).

Library code asks questions by trying (`try: torch.cuda.is_current_stream_capturing()
except Exception: ...`, a config attribute probed in a try, a dict lookup
caught as KeyError). When what raises depends only on guarded or fixed
values, the trace follows the handler and the frame stays one graph; guards
keep the answer valid on later calls.
"""
import pytest
import torch

import kiln
from conftest import assert_same, check_compiled, delta, stats


class Settings:
    pass


def accelerator_capturing():
    try:
        return torch.cuda.is_current_stream_capturing()
    except Exception:
        return False


def probe(cfg, name):
    try:
        return getattr(cfg, name)
    except AttributeError:
        return None


def lookup(d, key):
    try:
        return d[key]
    except KeyError as e:
        return len(e.args) * 10


def check_positive(v):
    if v < 0:
        raise ValueError("negative: %d" % v)
    return v


def positive_or_message(v):
    try:
        return check_positive(v)
    except (TypeError, ValueError) as e:
        return str(e)


def test_caught_exceptions_stay_in_one_graph():
    def fn(x, d):
        y = x * 2
        if not accelerator_capturing():
            y = y + 1
        y = y + lookup(d, "missing") + lookup(d, "a")
        return y * len(positive_or_message(-x.shape[0]))

    d = {"a": 1}
    check_compiled(fn, lambda: (torch.randn(3, 2), d))


def test_missing_attribute_probe_is_guarded():
    def fn(x, cfg):
        v = probe(cfg, "scale")
        return x * 3 if v is None else x * v

    cfg = Settings()
    compiled = kiln.compile(fn, fullgraph=True)
    x = torch.randn(4)
    assert_same(compiled(x, cfg), fn(x, cfg))
    cfg.scale = 5.0
    before = stats()
    assert_same(compiled(x, cfg), fn(x, cfg))
    assert delta(before, stats())["recompiles"] == 1
    del cfg.scale
    assert_same(compiled(x, cfg), fn(x, cfg))


def test_missing_module_attribute_probe():
    lin = torch.nn.Linear(3, 3)

    def fn(x):
        act = probe(lin, "activation")
        y = lin(x)
        return y if act is None else act(y)

    check_compiled(fn, lambda: (torch.randn(2, 3),))


def test_finally_and_reraise_in_callee():
    def inner(v, seen):
        try:
            if v > 1:
                raise KeyError(v)
            return v
        finally:
            seen.append(v)  # runs on both paths, then the KeyError goes on

    def outer(v):
        seen = []
        try:
            return inner(v, seen) + len(seen)
        except KeyError:
            return -len(seen)

    def fn(x):
        return x * outer(x.shape[0]) + x * outer(1)

    check_compiled(fn, lambda: (torch.randn(3),))


def test_raise_from_and_bare_raise():
    def convert(v):
        try:
            return {"a": 1}[v]
        except KeyError as e:
            raise ValueError("unknown " + v) from e

    def again(v):
        try:
            return convert(v)
        except ValueError:
            try:
                raise
            except ValueError as e:
                return 7 if isinstance(e.__cause__, KeyError) else 0

    check_compiled(lambda x: x * again("b"), lambda: (torch.randn(2),))


def test_uncaught_exception_still_raises():
    def fn(x):
        return x * check_positive(x.shape[0] - 5)

    compiled = kiln.compile(fn)
    with pytest.raises(ValueError, match="negative: -3"):
        compiled(torch.randn(2))


def test_exception_leaving_a_with_block_is_not_traced_through():
    def inner(x):
        with torch.no_grad():
            raise RuntimeError("inside")

    def fn(x):
        try:
            inner(x)
        except RuntimeError:
            pass
        return x * 2, torch.is_grad_enabled()

    compiled = kiln.compile(fn)
    x = torch.randn(2, requires_grad=True)
    out, enabled = compiled(x)
    assert enabled is True
    assert out.requires_grad
    assert_same(out, x * 2)


def test_hasattr_on_tensors_answers_from_the_class():
    def fn(x):
        y = x + 1
        a = 2 if hasattr(x, "jax") else 3
        b = 4 if hasattr(y, "shape") else 5
        return y * a * b

    check_compiled(fn, lambda: (torch.randn(3),))
