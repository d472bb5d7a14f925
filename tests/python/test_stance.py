"""kiln.set_stance: torch.compiler.set_stance's stances for kiln-compiled
functions (force_eager, eager_on_recompile, fail_on_recompile), as a call,
a context manager and a decorator."""
import pytest
import torch

import kiln


def f(x):
    return torch.relu(x) * 2 + 1


@pytest.fixture(autouse=True)
def default_stance():
    yield
    kiln.set_stance("default")


def test_force_eager_compiles_nothing_and_keeps_what_was_compiled():
    compiled = kiln.compile(f, dynamic=False)
    x = torch.randn(4)
    compiled(x)
    with kiln.set_stance("force_eager"):
        y = torch.randn(5)
        torch.testing.assert_close(compiled(y), f(y))
        assert kiln._C.get_stance() == "force_eager"
    assert kiln._C.get_stance() == "default"
    s = kiln.stats()
    assert s["traces"] == 1 and s["cache_hits"] == 0, s
    compiled(x)
    assert kiln.stats()["cache_hits"] == 1


def test_eager_on_recompile_runs_new_shapes_eagerly_and_cached_ones_compiled():
    compiled = kiln.compile(f, dynamic=False)
    x, y = torch.randn(4), torch.randn(6)
    compiled(x)
    kiln.set_stance("eager_on_recompile")
    torch.testing.assert_close(compiled(y), f(y))
    torch.testing.assert_close(compiled(x), f(x))
    s = kiln.stats()
    assert s["traces"] == 1 and s["recompiles"] == 0 and s["eager_runs"] == 1 and s["cache_hits"] == 1, s


def test_fail_on_recompile_names_the_guard_and_allows_the_first_compile():
    compiled = kiln.compile(f, dynamic=False)
    x = torch.randn(4)
    with kiln.set_stance("fail_on_recompile"):
        torch.testing.assert_close(compiled(x), f(x))  # the first compile is not a recompile
        with pytest.raises(kiln.RecompileError, match=r"would recompile.*size"):
            compiled(torch.randn(7))
        torch.testing.assert_close(compiled(x), f(x))
    z = torch.randn(7)
    torch.testing.assert_close(compiled(z), f(z))  # the default stance recompiles
    assert kiln.stats()["recompiles"] == 1


def test_as_a_decorator_the_stance_holds_only_inside():
    compiled = kiln.compile(f)

    @kiln.set_stance("force_eager")
    def run_eagerly(x):
        assert kiln._C.get_stance() == "force_eager"
        return compiled(x)

    assert kiln._C.get_stance() == "default"
    x = torch.randn(3)
    torch.testing.assert_close(run_eagerly(x), f(x))
    assert kiln.stats()["traces"] == 0
    assert kiln._C.get_stance() == "default"


def test_an_unknown_stance_is_named():
    with pytest.raises(ValueError, match=r"unknown stance 'eager'.*force_eager"):
        kiln.set_stance("eager")
    assert kiln._C.get_stance() == "default"
