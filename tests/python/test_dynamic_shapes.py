"""Automatic dynamic shapes (kiln.compile(dynamic=None)): after a recompile
caused by a size change, the dim is traced symbolically, so a third size
reuses the graph. dynamic=True starts symbolic; dynamic=False never is.
See Note [Dynamic shapes] in tracer/dynamic_shapes.cpp."""
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import assert_same, stats, kiln_logs


def run_sizes(fn, make_args, sizes, **compile_kwargs):
    """Calls the compiled fn once per size, comparing with eager each time."""
    compiled = kiln.compile(fn, backend="eager", **compile_kwargs)
    for n in sizes:
        args = make_args(n)
        assert_same(compiled(*args), fn(*args))
    return stats()


def test_third_batch_size_does_not_recompile():
    def fn(x, w):
        return torch.relu(x @ w) * 2

    w = torch.randn(6, 5)
    s = run_sizes(fn, lambda n: (torch.randn(n, 6), w), [4, 8, 16, 5, 33])
    assert s["traces"] == 2 and s["recompiles"] == 1, s
    assert s["cache_hits"] == 3, s


def test_sizes_read_in_python_are_computed_at_run_time():
    def fn(x):
        b = x.shape[0]
        y = x.view(b, -1, 2).sum(-1)
        n = x.size(0) * x.size(1)
        return y.reshape(n // 2), x.numel(), len(x), x.shape

    s = run_sizes(fn, lambda n: (torch.randn(n, 6),), [3, 5, 9, 12])
    assert s["traces"] == 2 and s["cache_hits"] == 2, s


def test_returned_shape_keeps_torch_size_type():
    compiled = kiln.compile(lambda x: x.shape, backend="eager")
    for n in (2, 3, 4):
        out = compiled(torch.randn(n, 3))
        assert type(out) is torch.Size and out == torch.Size([n, 3])
    assert stats()["traces"] == 2


def test_module_batch_dimension():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4),
                                torch.nn.Softmax(dim=-1))
    compiled = kiln.compile(model, backend="eager")
    for n in (2, 7, 19, 64, 3):
        x = torch.randn(n, 8)
        assert_same(compiled(x), model(x))
    s = stats()
    assert s["traces"] == 2 and s["cache_hits"] == 3, s


def test_two_dynamic_dims_batch_and_sequence():
    def fn(x):
        b, t, c = x.shape
        flat = x.reshape(b * t, c)
        y = F.layer_norm(flat, (c,))
        return y.view(b, t, c).mean(1)

    s = run_sizes(fn, lambda n: (torch.randn(n, n + 1, 4),), [2, 3, 5, 8])
    assert s["traces"] == 2 and s["cache_hits"] == 2, s


def test_factories_and_concatenation_with_dynamic_sizes():
    def fn(x):
        pad = torch.zeros(x.shape[0], 2)
        ones = x.new_ones(x.shape)
        return torch.cat([x, pad], dim=1) + 1, ones * x

    s = run_sizes(fn, lambda n: (torch.randn(n, 3),), [2, 4, 6, 10])
    assert s["traces"] == 2 and s["cache_hits"] == 2, s


def test_equal_sizes_are_separate_symbols():
    def fn(x, y):
        return x.sum(0) + y.sum(0)

    compiled = kiln.compile(fn, backend="eager")
    for n, m in ((2, 2), (3, 3), (4, 4), (5, 7)):
        x, y = torch.randn(n, 3), torch.randn(m, 3)
        assert_same(compiled(x, y), fn(x, y))
    assert stats()["traces"] == 2


def test_mismatched_dynamic_sizes_raise_like_eager():
    def fn(x, y):
        return x + y

    compiled = kiln.compile(fn, backend="eager")
    for n in (2, 3, 4):
        x, y = torch.randn(n, 3), torch.randn(n, 3)
        assert_same(compiled(x, y), fn(x, y))
    x, y = torch.randn(5, 3), torch.randn(6, 3)
    with pytest.raises(RuntimeError, match="size of tensor a"):
        fn(x, y)
    with pytest.raises(RuntimeError, match="size of tensor a"):
        compiled(x, y)


def test_size_one_runs_the_dynamic_graph(capfd):
    # The dynamic trace holds where its symbol is 1 (Note [The size-one
    # point]): 1 needs no graph of its own, unlike under torch.compile.
    def fn(x, w):
        return torch.softmax(x @ w, -1) * x.shape[0] + x.sum(0, keepdim=True)

    w = torch.randn(3, 3)
    with kiln_logs("dynamic"):
        s = run_sizes(fn, lambda n: (torch.randn(n, 3), w), [2, 3, 1, 4, 1])
    assert s["traces"] == 2 and s["cache_hits"] == 3, s
    assert "guards admit it" in capfd.readouterr().err


@pytest.mark.parametrize("case", ["branch", "squeeze", "constant"])
def test_size_one_that_changes_the_code_stays_specialized(case, capfd):
    def fn(x):
        if case == "branch":
            # A comparison whose answer at 1 is not the traced one.
            return x * 2 if x.shape[0] > 1 else x - 1
        if case == "squeeze":
            # The result's rank is another at 1.
            return x.squeeze() + 1
        # A size constant at the sample points, another at 1.
        return x[:2].shape[0] * x

    with kiln_logs("dynamic"):
        s = run_sizes(fn, lambda n: (torch.randn(n, 3),), [4, 6, 1, 5, 1])
    # 4: static; 6: dynamic (>= 2 only); 1: its own trace; 5 and 1 hit.
    assert s["traces"] == 3 and s["cache_hits"] == 2, s
    assert "size 1 stays specialized" in capfd.readouterr().err


def test_size_one_is_admitted_only_with_every_symbol_one(capfd):
    def fn(x, y):
        return x.sum(1) @ y

    def args(n, m):
        return torch.randn(n, m), torch.randn(n, 2)

    compiled = kiln.compile(fn, backend="eager")
    for n, m in [(3, 4), (5, 6), (1, 1), (7, 2)]:
        a = args(n, m)
        assert_same(compiled(*a), fn(*a))
    assert stats()["traces"] == 2, stats()
    with kiln_logs("recompiles"):
        # (1, 6) is a combination the trace never checked.
        a = args(1, 6)
        assert_same(compiled(*a), fn(*a))
    assert stats()["traces"] == 3, stats()
    assert "mix 1 with other sizes" in capfd.readouterr().err


def test_branch_on_size_specializes_and_stays_correct():
    def fn(x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    s = run_sizes(fn, lambda n: (torch.randn(n, 3),), [2, 3, 6, 7, 2])
    # The second trace meets the branch and stays static from then on.
    assert s["traces"] == 4 and s["cache_hits"] == 1, s
    assert s["unsupported"] == 0


def test_comparison_of_sizes_is_guarded_not_specialized(capfd):
    def fn(x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    compiled = kiln.compile(fn, backend="eager")
    with kiln_logs("recompiles"):
        for n in [5, 6, 7, 9, 2]:
            x = torch.randn(n, 3)
            assert_same(compiled(x), fn(x))
    s = stats()
    # 5: static; 6: dynamic, with the guard s0 > 4 (True at 6, 12, 18);
    # 7 and 9 reuse it; 2 fails the guard and is traced again.
    assert s["traces"] == 3 and s["cache_hits"] == 2, s
    assert "size relation s0 > 4 is False" in capfd.readouterr().err


def test_size_relation_of_an_expression():
    def fn(x, y):
        n = x.shape[0] * 2
        if n == y.shape[0]:
            return x.sum() + y.sum()
        return x.mean()

    compiled = kiln.compile(fn, backend="eager", dynamic=True)
    for n, m in [(3, 6), (5, 10), (4, 8), (4, 9), (6, 12)]:
        x, y = torch.randn(n), torch.randn(m)
        assert_same(compiled(x, y), fn(x, y))
    # (3, 6) traces 2*s0 == s1 True; (4, 9) fails it and traces the other
    # branch, whose guard (False) (6, 12) fails: the first entry runs.
    assert stats()["traces"] == 2, stats()


def test_range_over_a_dynamic_size_specializes():
    def fn(x):
        total = x[0]
        for i in range(1, x.shape[0]):
            total = total + x[i]
        return total

    s = run_sizes(fn, lambda n: (torch.randn(n, 3),), [2, 3, 4])
    assert s["traces"] == 3, s


def test_dynamic_false_recompiles_every_size():
    def fn(x):
        return x.sum(0)

    s = run_sizes(fn, lambda n: (torch.randn(n, 3),), [2, 3, 4, 5], dynamic=False)
    assert s["traces"] == 4 and s["recompiles"] == 3, s


def test_dynamic_true_is_symbolic_from_the_first_trace():
    def fn(x):
        return x.view(x.shape[0], -1).softmax(-1)

    s = run_sizes(fn, lambda n: (torch.randn(n, n + 1, 3),), [2, 3, 4, 5], dynamic=True)
    assert s["traces"] == 1 and s["cache_hits"] == 3, s


def test_dynamic_true_leaves_module_parameters_static():
    lin = torch.nn.Linear(4, 3)
    compiled = kiln.compile(lin, backend="eager", dynamic=True)
    for n in (2, 5, 9):
        x = torch.randn(n, 4)
        assert_same(compiled(x), lin(x))
    assert stats()["traces"] == 1
    text = kiln.explain(lin.forward)(torch.randn(3, 4)).graphs[0]
    assert "f32[3, 4]" in text  # explain traces one call: static


def test_non_contiguous_inputs_stay_static():
    def fn(x):
        return x * 3

    s = run_sizes(fn, lambda n: (torch.randn(3, n).t(),), [2, 3, 4])
    assert s["traces"] == 3, s


def test_graph_break_with_dynamic_sizes():
    def fn(x):
        y = x * 2
        print("break", end="")
        return y.sum(0) + x.shape[1]

    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        s = run_sizes(fn, lambda n: (torch.randn(n, 3),), [2, 4, 8, 16])
    assert s["unsupported"] == 0, s
    # Each part (the frame up to print, the resume function) traces twice
    # at most: static, then dynamic.
    assert s["traces"] == 4 and s["cache_hits"] == 4, s


def test_dynamic_size_live_at_a_break_specializes_but_stays_correct():
    def fn(x):
        b = x.shape[0]
        print("break", end="")
        return x.reshape(b, -1) * b

    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        s = run_sizes(fn, lambda n: (torch.randn(n, 2, 2),), [2, 4, 8])
    assert s["unsupported"] == 0, s


def test_guard_failure_explains_dynamic_dims(capfd):
    def fn(x):
        return x.squeeze() + 1

    compiled = kiln.compile(fn, backend="eager")
    compiled(torch.randn(2, 3))
    compiled(torch.randn(4, 3))
    with kiln_logs("recompiles"):
        compiled(torch.randn(1, 3))
    assert stats()["traces"] == 3
    assert "dynamic dim s0 was traced for sizes >= 2" in capfd.readouterr().err


@pytest.mark.cpu_semantics("the expected text prints CPU tensors")
def test_dynamic_graph_names_symbols():
    def fn(x, w):
        return torch.cat([x, x]) * x.shape[0], x @ w

    from kiln import _C
    _, text = _C.trace_dump(fn, (torch.randn(4), torch.randn(4, 1)), {}, False, True)
    assert "input L['x'] : f32[s0]" in text, text
    assert "input L['w'] : f32[s1, 1]" in text, text
    assert "f32[2*s0]" in text, text
    assert "Tensor.size(%0, 0)" in text, text
    assert "TensorMatch L['x'] f32[s0] (dynamic dims >= 2 or all 1, contiguous)" in text, text


def test_random_factory_with_dynamic_size_draws_only_at_run_time():
    def fn(x):
        return x + torch.randn(x.shape[0], 3)

    compiled = kiln.compile(fn, backend="eager")
    for n in (2, 4, 6, 10):
        x = torch.randn(n, 3)
        torch.manual_seed(n)
        got = compiled(x)
        torch.manual_seed(n)
        assert_same(got, fn(x))
    assert stats()["traces"] == 2


def marked_sizes(fn, sizes, mark, **compile_kwargs):
    """Like run_sizes, each call's fresh argument marked by `mark`."""
    def make(n):
        x = torch.randn(n, 6)
        mark(x)
        return (x,)
    return run_sizes(fn, make, sizes, **compile_kwargs)


@pytest.mark.parametrize("mark", [lambda x: kiln.mark_dynamic(x, 0), lambda x: torch._dynamo.mark_dynamic(x, 0),
                                  lambda x: kiln.mark_dynamic(x, -2)],
                         ids=["kiln", "torch", "negative dim"])
def test_marked_dynamic_dim_is_symbolic_from_the_first_trace(mark):
    def fn(x):
        return torch.relu(x).sum(-1) * x.shape[0]

    s = marked_sizes(fn, [3, 5, 9], mark)
    assert s["traces"] == 1 and s["recompiles"] == 0 and s["cache_hits"] == 2, s


def test_marked_dynamic_wins_over_dynamic_false():
    s = marked_sizes(lambda x: x.sum(0), [3, 5, 9], lambda x: kiln.mark_dynamic(x, 0), dynamic=False)
    assert s["traces"] == 1, s


def test_marked_static_dim_recompiles_each_size():
    # Automatic dynamic would make dim 0 symbolic at the second size.
    s = marked_sizes(lambda x: x * 2, [3, 5, 9, 12], lambda x: kiln.mark_static(x, 0))
    assert s["traces"] == 4 and s["recompiles"] == 3, s
    s_torch = marked_sizes(lambda x: x * 3, [3, 5, 9], lambda x: torch._dynamo.mark_static(x))
    assert s_torch["traces"] - s["traces"] == 3, s_torch


def test_marked_dim_the_code_needs_static_warns_and_stays_correct():
    def fn(x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    with pytest.warns(UserWarning, match=r"marked dynamic \(L\['x'\] dim 0\) were traced with static sizes"):
        s = marked_sizes(fn, [3, 6], lambda x: kiln.mark_dynamic(x, 0))
    assert s["traces"] == 2, s


def test_mark_errors_name_the_problem():
    with pytest.raises(IndexError, match="kiln.mark_dynamic: dim 2 is out of range for a tensor of 2 dims"):
        kiln.mark_dynamic(torch.randn(2, 3), 2)
    with pytest.raises(TypeError, match="kiln.mark_static: expected a tensor, got list"):
        kiln.mark_static([1, 2], 0)


@pytest.mark.parametrize("make, why", [(lambda: torch.randn(3, 4).t(), "not contiguous"),
                                       (lambda: torch.randn(1, 4), "its size is 1")])
def test_marks_that_cannot_hold_warn(make, why):
    x = make()
    kiln.mark_dynamic(x, 0)
    with pytest.warns(UserWarning, match=rf"L\['x'\] dim 0 is marked dynamic but stays static: .*{why}"):
        assert_same(kiln.compile(lambda x: x * 2, backend="eager")(x), x * 2)


def test_isinstance_of_a_dynamic_size_is_that_of_an_int():
    def fn(x):
        n = x.shape[0]
        if isinstance(n, torch.Tensor):
            return x * 0
        assert isinstance(n, int)
        return x * n

    s = run_sizes(fn, lambda n: (torch.randn(n, 3),), [2, 3, 4, 5])
    assert s["traces"] == 2 and s["cache_hits"] == 2, s


def test_slice_with_a_dynamic_bound():
    buffer = torch.arange(64.0).reshape(1, 64)

    def fn(x):
        n = x.shape[1]
        return x + buffer[:, :n], x[:, 1 : n - 1].sum(1)

    s = run_sizes(fn, lambda n: (torch.randn(2, n),), [4, 6, 9, 12])
    assert s["traces"] == 2 and s["cache_hits"] == 2, s


def _kv_step(cache, new, mask):
    # The shape of transformers' masking utilities in a decode step: the
    # mask is one longer than the cache, and code compares the two.
    full = torch.cat([cache, new], dim=0)
    kv_length = cache.shape[0] + new.shape[0]
    if mask.shape[0] > kv_length:
        mask = mask[-kv_length:]
    return full * mask[:, None]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_sizes_linked_by_an_offset_stay_dynamic(backend, capfd):
    compiled = kiln.compile(_kv_step, backend=backend)
    new = torch.randn(1, 4)
    with kiln_logs("dynamic"):
        for length in [8, 9, 12, 10, 20, 15]:
            args = (torch.randn(length, 4), new, torch.rand(length + 1))
            assert_same(compiled(*args), _kv_step(*args))
    # The second length makes both dims dynamic; at scaled sample points the
    # mask outgrows the cache (18 > 17) and the branch differs, so the
    # trace is redone at shifted points, which keep mask == cache + 1.
    s = stats()
    assert s["traces"] == 2 and s["cache_hits"] == 4, s
    assert "shifted sample points" in capfd.readouterr().err
    # A mask longer than that takes the other branch: a new trace, correct.
    args = (torch.randn(7, 4), new, torch.rand(11))
    assert_same(compiled(*args), _kv_step(*args))


def _padded_mask_step(mask, cache):
    # transformers' mask utilities: the mask viewed as (batch, -1) and
    # turned to bool, its length compared with the cache's.
    mask = mask.view(cache.shape[0], -1).to(torch.bool)
    kv_length = cache.shape[1] + 1
    if (padding := kv_length - mask.shape[-1]) > 0:
        mask = F.pad(mask, (0, padding))
    if mask.shape[-1] > kv_length:
        mask = mask[:, :kv_length]
    return cache.sum(-1) * 2, mask.float().sum(-1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_sizes_of_converted_and_viewed_inputs_stay_exact(backend, capfd):
    # The mask's length is compared with the cache's after a view and a
    # conversion; at shifted points a fitted dim could not tell s0 from
    # s1 + 1 and the frame specialized at every length (Note [Exact dims
    # through shape rules]).
    compiled = kiln.compile(_padded_mask_step, backend=backend)
    with kiln_logs("dynamic"):
        for length in [16, 17, 18, 19, 23, 30]:
            args = (torch.ones(length + 1), torch.randn(1, length, 4))
            assert_same(compiled(*args), _padded_mask_step(*args))
    s = stats()
    assert s["traces"] == 2 and s["cache_hits"] == 4, s
    err = capfd.readouterr().err
    assert "shifted sample points" in err and "size relation s0 > s1+1 is False: guarded" in err, err
    # A mask two longer than the cache takes the slicing branch: a new
    # trace, equal to eager.
    args = (torch.ones(12), torch.randn(1, 10, 4))
    assert_same(compiled(*args), _padded_mask_step(*args))


class _Positions(torch.nn.Module):
    # BERT's embeddings: a fixed buffer of positions sliced by the length.
    def __init__(self):
        super().__init__()
        self.register_buffer("position_ids", torch.arange(16).expand((1, -1)))
        self.table = torch.nn.Embedding(16, 3)

    def forward(self, x):
        n = x.shape[1]
        positions = self.position_ids[:, :n]
        return x + self.table(positions), self.position_ids[:, :n].sum()


def test_slice_of_a_buffer_by_a_dynamic_length_stays_dynamic(capfd):
    module = _Positions()
    compiled = kiln.compile(module, backend="eager")
    with kiln_logs("dynamic"):
        for n in [4, 6, 9, 12, 16, 7]:
            x = torch.randn(2, n, 3)
            assert_same(compiled(x), module(x))
    # 6 is traced dynamic: its sample points (12, 18) pass the 16 positions,
    # where the slice would clamp; the buffer's fakes are made long enough
    # and the bound is guarded within the buffer.
    s = stats()
    assert s["traces"] == 2 and s["cache_hits"] == 4, s
    assert "s0 <= 16 is True: guarded (a slice bound within a buffer)" in capfd.readouterr().err


def test_slice_past_a_buffer_clamps_like_eager():
    buf = torch.arange(16.0)

    def fn(x):
        return x.sum() + buf[: x.shape[0]].sum()

    # 20 passes the buffer: the guard fails and the clamped slice is traced.
    s = run_sizes(fn, lambda n: (torch.randn(n),), [4, 6, 9, 20, 12, 24])
    assert s["traces"] == 3, s


class _Cache:
    # A KV cache as generate() keeps one: empty until the first call fills it.
    def __init__(self):
        self.keys = None


def _decode_step(x, cache, w):
    k = x @ w
    cache.keys = k if cache.keys is None else torch.cat([cache.keys, k])
    return torch.softmax(k @ cache.keys.T, -1) @ cache.keys


def _decode(fn, prompt, steps, w):
    cache = _Cache()
    outs = [fn(prompt, cache, w)]
    for _ in range(steps):
        outs.append(fn(outs[-1][-1:] @ w.T, cache, w))
    return outs


def test_a_cache_that_arrives_after_a_size_change_is_traced_dynamic(capfd):
    # The prefill (length 6) fills the cache; the first decoding step (length
    # 1) meets it as a new tensor of length 6, the size that just changed,
    # so it is traced dynamic there and the later steps reuse that graph
    # (Note [Sizes that change together]).
    w = torch.randn(4, 8)
    prompt = torch.randn(6, 4)
    compiled = kiln.compile(_decode_step, backend="eager")
    with kiln_logs("dynamic"):
        outs = _decode(compiled, prompt, 6, w)
    for got, want in zip(outs, _decode(_decode_step, prompt, 6, w)):
        assert_same(got, want)
    s = stats()
    assert s["traces"] == 2 and s["recompiles"] == 1, s
    assert "L['cache'].keys dim 0 is new and has a size that changed" in capfd.readouterr().err


def _wrong_guess_step(x, table):
    # A new input whose only dim of the changed size (8) is the one the
    # matmul needs static: the guess must not cost a graph or a result.
    return x @ table if table is not None else x.sum(0)


def test_a_wrong_guess_of_a_size_that_changed_costs_nothing():
    compiled = kiln.compile(_wrong_guess_step, backend="eager")
    table = torch.randn(8, 3)
    calls = [(torch.randn(5, 8), None), (torch.randn(8, 8), table), (torch.randn(9, 8), table),
             (torch.randn(12, 8), table)]
    for args in calls:
        assert_same(compiled(*args), _wrong_guess_step(*args))
    # The prefill-like first call is static; the second (5 -> 8 rows) guesses
    # table's dim 0 (8 rows), which x's 8 columns need equal: that attempt
    # specializes, the trace keeps table static, and later row counts reuse it.
    s = stats()
    assert s["traces"] == 2, s
