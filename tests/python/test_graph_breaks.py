"""Graph breaks that resume in CPython: the code around an untraceable
instruction is compiled, the instruction runs in CPython, and a resume
function (traced in its turn) continues the frame."""
import io
import contextlib

import pytest
import torch

import kiln
from conftest import assert_same, stats

LOG = []


def helper_with_print(t):
    print("helper sees", tuple(t.shape))
    return t * 3


def break_in_inlined_call(x):
    y = x + 1
    z = helper_with_print(y)
    return z - 1


def break_at_item(x):
    s = x.abs().sum().item()
    return x / s, s


def break_inside_call_arguments(x):
    # The outer call's [NULL, callable] sit below the break at .item().
    return max(x.relu().sum().item(), 0.5) * x


def break_on_tensor_branch(x, n):
    y = x * n
    if y.sum() > 0:
        z = y + 10
    else:
        z = y - 10
    return z.relu()


def break_with_container_state(x):
    parts = [x, x * 2]
    meta = {"scale": 3, "parts": parts}
    print("containers", len(parts))
    parts.append(x * 3)
    return sum(parts) * meta["scale"], len(meta["parts"])


def two_breaks(x):
    a = x + 1
    print("first")
    b = a * 2
    print("second")
    return a + b


def break_then_python_values(x, k=2, *, bias=1.0):
    y = x * k
    print("k is", k)
    return y + bias, k


CASES = [
    (break_in_inlined_call, lambda: (torch.randn(3),), {}),
    (break_at_item, lambda: (torch.randn(4) + 0.1,), {}),
    (break_inside_call_arguments, lambda: (torch.randn(3),), {}),
    (break_on_tensor_branch, lambda: (torch.randn(3), 2), {}),
    (break_with_container_state, lambda: (torch.randn(2),), {}),
    (two_breaks, lambda: (torch.randn(2),), {}),
    (break_then_python_values, lambda: (torch.randn(2),), {"k": 3, "bias": 0.5}),
]


def run_captured(fn, *args, **kwargs):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args, **kwargs)
    return result, out.getvalue()


@pytest.mark.parametrize("fn,make_args,kwargs", CASES, ids=[c[0].__name__ for c in CASES])
def test_break_matches_eager(fn, make_args, kwargs):
    compiled = kiln.compile(fn)
    for _ in range(3):
        args = make_args()
        got, printed = run_captured(compiled, *[a.clone() if torch.is_tensor(a) else a for a in args],
                                    **kwargs)
        want, printed_eager = run_captured(fn, *args, **kwargs)
        assert_same(got, want)
        assert printed == printed_eager  # the untraced instruction ran exactly once
    s = stats()
    assert s["graph_breaks"] >= 1, s
    assert s["eager_runs"] == 0 and s["unsupported"] == 0, s
    assert s["cache_hits"] >= 1, s


def test_break_counts_in_explain():
    out = kiln.explain(two_breaks)(torch.randn(2))
    assert out.graph_count == 3, out
    assert out.graph_break_count == 2, out
    assert all("print() writes to stdout" in reason for reason in out.break_reasons)
    assert all("test_graph_breaks.py:" in reason for reason in out.break_reasons)


def test_branch_explain_has_condition_graph_and_both_branches():
    out = kiln.explain(break_on_tensor_branch)(torch.ones(3), 2)
    assert out.graph_break_count == 1
    assert "operator.gt" in out.graphs[0]
    assert "operator.add" in out.graphs[1]  # the branch taken: y + 10
    out = kiln.explain(break_on_tensor_branch)(-torch.ones(3), 2)
    assert "operator.sub" in out.graphs[1]


def test_fullgraph_still_raises_at_a_break():
    compiled = kiln.compile(two_breaks, fullgraph=True)
    with pytest.raises(kiln.Unsupported, match="print"):
        with contextlib.redirect_stdout(io.StringIO()):
            compiled(torch.randn(2))


def test_break_inside_loop_runs_frame_eagerly():
    def loop(x, xs):
        acc = x
        for t in xs:
            acc = acc + t
            if acc.sum() > 0:
                acc = acc * 0.5
        return acc

    compiled = kiln.compile(loop)
    x, xs = torch.randn(3), [torch.randn(3) for _ in range(50)]
    assert_same(compiled(x, xs), loop(x, xs))
    out = kiln.explain(loop)(x, xs)
    assert out.graph_count == 0
    assert "inside a loop" in out.break_reasons[0]


def test_resume_traceback_points_at_user_line():
    def fails_after_break(x):
        y = x + 1
        print("before")
        return y.view(7)  # invalid view: raises in the resume function

    compiled = kiln.compile(fails_after_break)
    with pytest.raises(RuntimeError) as info:
        with contextlib.redirect_stdout(io.StringIO()):
            compiled(torch.randn(3))
    frames = [(f.filename, f.lineno) for f in __import__("traceback").extract_tb(info.tb)]
    line = fails_after_break.__code__.co_firstlineno + 3
    assert (__file__, line) in frames, frames


def test_break_graph_results_not_retraced():
    compiled = kiln.compile(two_breaks)
    with contextlib.redirect_stdout(io.StringIO()):
        for _ in range(5):
            compiled(torch.randn(2))
    s = stats()
    assert s["traces"] == 3, s  # the frame and its two resume functions
    assert s["cache_hits"] == 12, s


def make_scaled(scale):
    def scaled(x):
        y = x * scale
        print("scaled")
        return y + scale
    return scaled


def closure_defined_before_break(x, k):
    def add_k(t):
        return t + k
    y = add_k(x)
    print("between")
    return add_k(y) * 2


def captured_argument(x):
    def shift(t):
        return t - x.mean()
    print("captured")
    return shift(x * 2)


@pytest.mark.parametrize("fn,args", [
    (make_scaled(3.0), (torch.randn(2),)),
    (closure_defined_before_break, (torch.randn(2), 5.0)),
    (captured_argument, (torch.randn(3),)),
], ids=["free_variable", "closure_before_break", "captured_argument"])
def test_breaks_in_frames_with_cells(fn, args):
    compiled = kiln.compile(fn)
    for _ in range(3):
        got, printed = run_captured(compiled, *args)
        want, printed_eager = run_captured(fn, *args)
        assert_same(got, want)
        assert printed == printed_eager
    s = stats()
    assert s["graph_breaks"] >= 1 and s["eager_runs"] == 0, s


def rebinds_captured_argument(x):
    t1 = x
    x = x * 0.5

    def inner():
        return t1 + x

    s = x.sum().item()  # graph break after the cell of x changed
    return t1, inner(), s


def test_cell_rebound_before_break_keeps_old_references():
    # Found by the fuzzer: rebuilding values that read a cell must happen
    # before the cell's new contents are written back.
    compiled = kiln.compile(rebinds_captured_argument)
    for _ in range(2):
        x = torch.randn(3)
        assert_same(compiled(x), rebinds_captured_argument(x))
    assert stats()["graph_breaks"] >= 1


def enumerate_from_one(x, xs):
    return [(i, e + x) for i, e in enumerate(xs, 1)]


def layout_of_intermediate(x):
    y = torch.abs(x)
    return y.is_contiguous(), y.stride()


def test_enumerate_start_and_layout_queries():
    compiled = kiln.compile(enumerate_from_one, fullgraph=True)
    xs = [torch.randn(2) for _ in range(3)]
    x = torch.randn(2)
    assert_same(compiled(x, xs), enumerate_from_one(x, xs))
    # Meta kernels may lay results out differently from CPU kernels: the
    # layout of an intermediate result is asked of CPython, at a break.
    x = torch.randn(1, 4, 4).permute(2, 1, 0)
    assert kiln.compile(layout_of_intermediate)(x) == layout_of_intermediate(x)


def sliding_chunks(x, weight):
    # Longformer's _chunk: overlapping windows by as_strided over the
    # strides of a reshaped projection.
    h = torch.nn.functional.linear(x, weight).transpose(1, 2).reshape(x.shape[0] * 4, 16)
    h = h.view(h.size(0), 2, 8)
    size, stride = list(h.size()), list(h.stride())
    size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
    return h.as_strided(size=size, stride=stride).sum(-1)


def test_layout_of_values_made_by_layout_exact_ops_is_answered_in_the_graph():
    # Note [Layouts the trace can answer]
    x, weight = torch.randn(2, 16, 4), torch.randn(4, 4)
    compiled = kiln.compile(sliding_chunks, fullgraph=True)
    assert_same(compiled(x, weight), sliding_chunks(x, weight))


def attention_layout(q):
    # Flash attention lays its result out otherwise on the GPU than meta.
    y = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    return y * 2, y.stride()


def test_layout_after_an_op_the_trace_cannot_vouch_for_breaks_naming_it():
    q = torch.randn(1, 2, 4, 8)
    explained = kiln.explain(attention_layout)(q)
    assert explained.graph_break_count == 1
    assert "made through F.scaled_dot_product_attention" in explained.break_reasons[0], explained.break_reasons
    out, ref = kiln.compile(attention_layout)(q), attention_layout(q)
    assert_same(out[0], ref[0])
    assert out[1] == ref[1]


def list_in_cell_mutated_across_break(x):
    lst = [x > 0]
    lst.append(x.sum().item())  # .item() breaks while lst.append waits on the stack

    def inner():
        return lst[1]

    return lst[1], inner(), len(lst)


def test_object_identity_kept_between_cells_and_stack():
    # Found by the fuzzer: the list in a cell and the list whose append is
    # pending on the stack must be one object after the break.
    compiled = kiln.compile(list_in_cell_mutated_across_break)
    for _ in range(2):
        x = torch.randn(3)
        assert_same(compiled(x), list_in_cell_mutated_across_break(x))
    assert stats()["graph_breaks"] >= 1


def _fills_its_own_containers(x):
    parts = {}
    parts["a"] = x * 2
    seen = set()
    seen.add("a")
    order = []
    order.append("a")
    id(x)  # not traced: the graph breaks
    return parts["a"] + len(order)


def _appends_to_callers_list(x, acc):
    acc.append(1)
    id(x)
    return x + len(acc)


def test_changes_to_containers_the_call_made_do_not_block_a_break():
    # Note [Changes of new values]: the callee fills containers it made
    # before the untraced call; running the call again remakes them, so the
    # caller breaks at the call rather than running eagerly.
    def fn(x):
        y = x.sin()
        z = _fills_its_own_containers(y)
        return z.cos()

    x = torch.randn(4)
    got = kiln.compile(fn)(x)
    torch.testing.assert_close(got, fn(x))
    assert stats()["graph_breaks"] >= 1, stats()  # fn broke at the call; it ran eagerly before


def test_changes_to_the_callers_containers_still_block_a_break():
    # A list that existed before the call: a break would append twice.
    def fn(x):
        acc = []
        y = _appends_to_callers_list(x.sin(), acc)
        return y, len(acc)

    x = torch.randn(4)
    got, n = kiln.compile(fn)(x)
    want, n_want = fn(x)
    torch.testing.assert_close(got, want)
    assert n == n_want == 1
    assert stats()["unsupported"] >= 1  # fn ran eagerly, as it must


def test_explain_counts_graphs_with_ops_apart_from_frames_that_only_call():
    """A break inside a nested call breaks the caller at the call; frames
    that only pass the call on trace graphs without ops, which Dynamo's
    graph_count would not count: op_graph_count leaves them out."""
    def inner(x):
        y = x + 1
        print("inner")
        return y * 2

    def middle(x):
        return inner(x)

    def outer(x):
        return middle(x)

    with contextlib.redirect_stdout(io.StringIO()):
        out = kiln.explain(outer)(torch.randn(2))
    assert out.graph_count > out.op_graph_count, out
    assert out.op_graph_count == 2, out  # x + 1 before the print, * 2 after it
    assert "with ops" in str(out)


def test_a_frame_whose_result_cannot_leave_a_graph_is_named_at_its_line():
    # A break in a layer called from a loop runs the looping frame eagerly;
    # torch's ModuleList.__iter__ is then a frame of its own whose result,
    # an iterator, no graph can return: its reason names its file and line.
    class Layer(torch.nn.Module):
        def forward(self, x):
            x = x.sin()
            print("a break")
            return x.cos()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Layer(), Layer()])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    with contextlib.redirect_stdout(io.StringIO()):
        out = kiln.explain(Model())(torch.randn(4))
    iterator = [r for r in out.break_reasons if "Iterator" in r]
    assert iterator and all(r.split(":")[1].isdigit() and "what the frame returns" in r for r in iterator), \
        out.break_reasons
