"""Compiled plain functions agree with eager PyTorch.

Functions the tracer is expected to handle go through conftest.check_compiled:
compiled with fullgraph=True (a tracing failure is a test failure, not a silent
eager fallback), called three times on fresh inputs, compared with eager each
time, and traced exactly once. The aliasing/mutation/side-effect tests at the
end use the default compile and check results, inputs and side effects only.
"""
import math
import types

import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import assert_same, check_compiled, clone_args, delta, stats, kiln_logs


def randn(*shape, dtype=torch.float32):
    return lambda: (torch.randn(*shape, dtype=dtype),)


def pos(*shape):
    """Strictly positive values, safe as divisors."""
    return torch.rand(*shape) + 0.5


# ---------------------------------------------------------------------------
# Arithmetic and comparison operators
# ---------------------------------------------------------------------------

def op_add(x, y):
    return x + y


def op_sub(x, y):
    return x - y


def op_mul(x, y):
    return x * y


def op_truediv(x, y):
    return x / y


def op_floordiv(x, y):
    return x // y


def op_mod(x, y):
    return x % y


def op_pow(x, y):
    return x.abs() ** y, x ** 2, x ** 3.0


def op_matmul(x, y):
    return x @ y.t()


def op_neg(x, y):
    return -x, -(x - y), +y


BINARY_OPS = [op_add, op_sub, op_mul, op_truediv, op_floordiv, op_mod, op_pow, op_matmul, op_neg]


@pytest.mark.parametrize("fn", BINARY_OPS, ids=lambda f: f.__name__)
def test_tensor_binary_ops_float(fn):
    check_compiled(fn, lambda: (torch.randn(4, 5), pos(4, 5)))


@pytest.mark.parametrize("fn", [op_add, op_sub, op_mul, op_truediv, op_floordiv, op_mod],
                         ids=lambda f: f.__name__)
def test_tensor_binary_ops_int64(fn):
    # int64 tensors: // and % are integer ops, / promotes to float.
    check_compiled(fn, lambda: (torch.randint(-20, 20, (3, 4)), torch.randint(1, 7, (3, 4))))


def cmp_ops(x, y):
    return (x > y, x < y, x >= y, x <= y, x == y, x != y,
            x > 0, x < 0.25, 0 < x, x == 1, x.abs() >= 0.5)


def test_comparisons_produce_bool_tensors():
    def make():
        x = torch.randn(3, 4)
        y = torch.randn(3, 4)
        y[0] = x[0]  # some equal elements so == / != / <= / >= see ties
        return x, y
    compiled = check_compiled(cmp_ops, make)
    outs = compiled(*make())
    assert all(o.dtype == torch.bool for o in outs)


def mixed_scalars(x):
    return x * 2 + 1.5 - x / 4, x * 0.5 - 3, (x + 1) * (x - 2.25)


def reflected_ops(x):
    y = x.abs() + 1
    return 1 - x, 2 / y, 2 ** x, 3 * x, 1.5 + x, 10 // y, 7 % y, 2.5 - x


def int_tensor_float_scalar(x):
    # int64 tensor with float scalars promotes to float32; with ints stays int64.
    return x * 1.5, x + 2, x / 2, x // 3, x - 0.25


def test_mixed_tensor_python_numbers():
    check_compiled(mixed_scalars, randn(5))


def test_reflected_ops():
    check_compiled(reflected_ops, randn(2, 3))


def test_int_tensor_with_python_scalars():
    check_compiled(int_tensor_float_scalar, lambda: (torch.randint(-9, 9, (6,)),))


def python_number_math(x):
    a = 3
    b = 4.5
    c = a * b + a // 2 - a % 2 + a ** 2 - b / 3
    d = -a + (a > 2) + (b <= 1.0)
    return x * c + d, c, d


def test_python_number_arithmetic_and_returns():
    # Non-tensor results (a float and an int) come back as the same Python values.
    check_compiled(python_number_math, randn(3))


# ---------------------------------------------------------------------------
# Constants, locals, globals, attribute loads, containers
# ---------------------------------------------------------------------------

def constants_and_locals(x):
    a = x + 1
    b = a * 2
    a = b - x  # rebinding a local
    c = 7
    return a, b, c, "tag", None, 2.5, True


def test_constants_and_locals():
    check_compiled(constants_and_locals, randn(4))


GLOBAL_SCALE = 3.0
GLOBAL_OFFSET = 2
GLOBAL_WEIGHT = torch.randn(4, 4)
GLOBAL_CFG = types.SimpleNamespace(alpha=0.5, beta=-1.0, name="cfg")


def uses_globals(x):
    return (x @ GLOBAL_WEIGHT) * GLOBAL_SCALE + GLOBAL_OFFSET


def test_globals():
    check_compiled(uses_globals, randn(3, 4))


def attribute_loads(x):
    # attributes of a global object, of a tensor, and of the torch module
    y = x * GLOBAL_CFG.alpha + GLOBAL_CFG.beta
    return y.to(torch.float64), x.shape, x.dtype, x.ndim, GLOBAL_CFG.name, x.T


def test_attribute_loads():
    check_compiled(attribute_loads, randn(2, 3))


def build_tuple(x, y):
    t = (x, y, x + y)
    return t, t[0] * t[2], t[-1]


def build_list(x, y):
    lst = [x, x * 2, y]
    lst.append(x - y)
    return lst, lst[0] + lst[2], lst[3]


def nested_containers(x, y):
    pair = (x * 2, [y, y + 1])
    return {"pair": pair, "first": pair[1][0] - pair[0], "n": len(pair[1])}


def dict_return(x, y):
    d = {"sum": x + y, "prod": x * y}
    d["diff"] = d["sum"] - 2 * y
    return d


def unpacking(x, y):
    a, b = x, y
    (c, d), e = (a + b, a - b), a * b
    first, *rest = [c, d, e]
    return first, rest, len(rest)


@pytest.mark.parametrize("fn", [build_tuple, build_list, nested_containers, dict_return, unpacking],
                         ids=lambda f: f.__name__)
def test_containers(fn):
    check_compiled(fn, lambda: (torch.randn(3), torch.randn(3)))


# ---------------------------------------------------------------------------
# torch.* functions with positional and keyword arguments
# ---------------------------------------------------------------------------

def torch_add_alpha(x, y):
    return torch.add(x, y, alpha=2), torch.add(x, 3), torch.sub(x, y, alpha=0.5)


def torch_sum_dims(x, y):
    return torch.sum(x, dim=1, keepdim=True), torch.sum(x), torch.sum(x, 0), torch.mean(y, dim=(0, 1))


def torch_cat_stack(x, y):
    return torch.cat([x, y], dim=0), torch.cat((x, y), 1), torch.stack([x, y]), torch.stack((x, y), dim=2)


def torch_where(x, y):
    return torch.where(x > 0, x, y), torch.where(y < 0, torch.zeros_like(y), y)


def torch_matmul(x, y):
    return torch.matmul(x, y.t()), torch.mm(x, y.transpose(0, 1))


def torch_softmax_clamp(x, y):
    return (torch.softmax(x, dim=-1), torch.clamp(x, min=-0.5, max=0.5),
            torch.clamp(y, min=0.0), torch.clamp(y, max=0.1), torch.log_softmax(y, 1))


def torch_factories(x, y):
    z = torch.zeros(3, 4, dtype=torch.float64)
    o = torch.ones(x.shape, dtype=x.dtype)
    r = torch.arange(0, 4, dtype=torch.float32)
    i = torch.arange(12).reshape(3, 4)
    f = torch.full((3, 4), 2.5)
    return z + x.double(), o * y, x + r, i, i.dtype, f - x, torch.zeros_like(x, dtype=torch.int32)


TORCH_FN_CASES = [torch_add_alpha, torch_sum_dims, torch_cat_stack, torch_where,
                  torch_matmul, torch_softmax_clamp, torch_factories]


@pytest.mark.parametrize("fn", TORCH_FN_CASES, ids=lambda f: f.__name__)
def test_torch_functions(fn):
    check_compiled(fn, lambda: (torch.randn(3, 4), torch.randn(3, 4)))


def noisy(x):
    return x + torch.randn(x.shape), torch.rand(2, dtype=torch.float64)


def test_randn_matches_under_same_seed():
    compiled = kiln.compile(noisy, fullgraph=True)
    x = torch.randn(3, 4)
    for seed in (0, 1, 1234):
        torch.manual_seed(seed)
        out_c = compiled(x)
        out_c2 = compiled(x)  # RNG state must advance exactly as in eager
        torch.manual_seed(seed)
        out_e = noisy(x)
        out_e2 = noisy(x)
        assert_same(out_c, out_e)
        assert_same(out_c2, out_e2)
        assert not torch.equal(out_c[0], out_c2[0])
    assert stats()["traces"] == 1


# ---------------------------------------------------------------------------
# Tensor methods
# ---------------------------------------------------------------------------

def tensor_reductions(x):
    return x.relu(), x.sum(dim=0), x.sum(), x.mean(), x.mean(1, keepdim=True), x.max(), x.abs().sqrt()


def tensor_views(x):
    return (x.view(4, -1), x.reshape(-1), x.reshape(2, 2, 6), x.transpose(0, 1),
            x.unsqueeze(0), x.unsqueeze(-1).squeeze(-1), x.t(), x.flatten(),
            x.view(2, 2, 6).permute(2, 0, 1), x.contiguous())


def tensor_conversions(x):
    return x.softmax(-1), x.to(torch.float64), x.float(), x.double().float(), x.long(), x.to(dtype=torch.float16)


def size_arithmetic(x):
    n = x.size(0) * x.shape[1] + x.dim() - x.numel() // 2
    return x * x.size(0) + x.shape[1] - x.dim() + x.numel(), n, x.size(), x.shape[-1]


@pytest.mark.parametrize("fn", [tensor_reductions, tensor_views, tensor_conversions, size_arithmetic],
                         ids=lambda f: f.__name__)
def test_tensor_methods(fn):
    check_compiled(fn, randn(4, 6))


def test_permute_3d():
    def permute3(x):
        return x.permute(1, 0, 2), x.permute(2, 1, 0).reshape(4, -1), x.transpose(1, 2).sum(-1)
    check_compiled(permute3, randn(2, 3, 4))


# ---------------------------------------------------------------------------
# torch.nn.functional
# ---------------------------------------------------------------------------

def f_relu(x):
    return F.relu(x)


def f_gelu(x):
    return F.gelu(x)


def f_gelu_tanh(x):
    return F.gelu(x, approximate='tanh')


def f_silu(x):
    return F.silu(x)


def f_softmax(x):
    return F.softmax(x, dim=1), F.log_softmax(x, dim=-1)


def f_dropout_eval(x):
    return F.dropout(x, p=0.5, training=False)


@pytest.mark.parametrize("fn", [f_relu, f_gelu, f_gelu_tanh, f_silu, f_softmax, f_dropout_eval],
                         ids=lambda f: f.__name__)
def test_functional_activations(fn):
    check_compiled(fn, randn(3, 5))


def f_layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5), F.layer_norm(x, [8])


def test_functional_layer_norm():
    check_compiled(f_layer_norm, lambda: (torch.randn(4, 8), torch.randn(8), torch.randn(8)))


def f_linear(x, w, b):
    return F.linear(x, w, b), F.linear(x, w)


def test_functional_linear():
    check_compiled(f_linear, lambda: (torch.randn(5, 3), torch.randn(7, 3), torch.randn(7)))


def f_losses(x, y, target):
    return F.mse_loss(x, y), F.cross_entropy(x, target), F.mse_loss(x, y, reduction='sum')


def test_functional_losses():
    check_compiled(f_losses, lambda: (torch.randn(6, 4), torch.randn(6, 4), torch.randint(0, 4, (6,))))


# ---------------------------------------------------------------------------
# Inlining of user functions
# ---------------------------------------------------------------------------

def _scale(x, factor=2.0, bias=0.0):
    return x * factor + bias


def calls_with_defaults(x):
    return _scale(x), _scale(x, 3.0), _scale(x, bias=1.0), _scale(x, bias=-1.0, factor=0.5)


def _inner(x, k):
    return torch.tanh(x) * k


def _middle(x, k=2):
    return _inner(x + 1, k) - _inner(x, k=k + 1)


def calls_two_levels(x):
    return _middle(x) + _middle(x, k=5)


def _kwonly(x, *, alpha, beta=1.0):
    return x * alpha + beta


def _split(x):
    return x.relu(), -x


def calls_kwonly_and_unpacks(x):
    pos_part, neg = _split(x)
    return _kwonly(pos_part, alpha=3.0) + _kwonly(neg, alpha=0.5, beta=-2.0)


def calls_lambda_and_closure(x):
    k = 4
    sq = lambda t: t * t  # noqa: E731

    def add_k(t):
        return t + k

    return add_k(sq(x))


@pytest.mark.parametrize("fn", [calls_with_defaults, calls_two_levels,
                                calls_kwonly_and_unpacks, calls_lambda_and_closure],
                         ids=lambda f: f.__name__)
def test_inlined_user_functions(fn):
    check_compiled(fn, randn(3, 3))


# ---------------------------------------------------------------------------
# Control flow on Python values, loops, calling conventions
# ---------------------------------------------------------------------------

def python_loop(x):
    acc = x
    for i in range(3):
        acc = acc * 2 + i
    total = 0
    for t in (x, acc):
        total = total + t.sum()
    return acc, total


def test_loops_over_python_values():
    check_compiled(python_loop, randn(4))


def shape_branch(x):
    if x.shape[0] > 2:
        return x.sum(0)
    return x.mean(0)


def test_branch_on_shape():
    check_compiled(shape_branch, randn(3, 2))
    kiln.reset()
    check_compiled(shape_branch, randn(2, 2))


def with_defaults(x, scale=2.0, shift=None):
    y = x * scale
    if shift is not None:
        y = y + shift
    return y


def test_compiled_function_defaults_and_kwargs():
    compiled = kiln.compile(with_defaults, fullgraph=True)
    x = torch.randn(3)
    s = torch.randn(3)
    for args, kwargs in [((x,), {}), ((x,), {}), ((x, 3.0), {}), ((x,), {"scale": 3.0}),
                         ((x,), {"shift": s}), ((x,), {"shift": s, "scale": -1.0})]:
        assert_same(compiled(*args, **kwargs), with_defaults(*args, **kwargs))
    assert stats()["unsupported"] == 0


def varargs(*xs, **kw):
    out = xs[0]
    for t in xs[1:]:
        out = out + t
    return out * kw.get("scale", 1.0)


def test_varargs_and_kwargs():
    compiled = kiln.compile(varargs, fullgraph=True)
    for _ in range(3):
        a, b, c = torch.randn(2), torch.randn(2), torch.randn(2)
        assert_same(compiled(a, b, c, scale=2.0), varargs(a, b, c, scale=2.0))
        assert_same(compiled(a, b), varargs(a, b))


def mutates_input(x, y):
    x.add_(1)
    y.mul_(2)
    return x * y


def test_inplace_mutation_of_inputs_visible_to_caller():
    compiled = kiln.compile(mutates_input, fullgraph=True)
    for _ in range(3):
        x, y = torch.randn(4), torch.randn(4)
        xc, yc = clone_args((x, y))
        assert_same(compiled(xc, yc), mutates_input(x, y))
        assert_same(xc, x)
        assert_same(yc, y)


def test_lambda_and_bound_method():
    class Holder:
        def __init__(self):
            self.k = 3.0

        def apply(self, x):
            return torch.sigmoid(x) * self.k

    h = Holder()
    compiled_method = kiln.compile(h.apply, fullgraph=True)
    compiled_lambda = kiln.compile(lambda t: t.exp() - 1, fullgraph=True)
    for _ in range(3):
        x = torch.randn(5)
        assert_same(compiled_method(x), h.apply(x))
        assert_same(compiled_lambda(x), x.exp() - 1)


def _inner_compiled_body(x):
    return x.cos() + 1


_inner_compiled = kiln.compile(_inner_compiled_body)


def calls_compiled(x):
    return _inner_compiled(x) * 2


def test_compiled_calling_compiled():
    compiled = kiln.compile(calls_compiled)
    for _ in range(3):
        x = torch.randn(3)
        assert_same(compiled(x), calls_compiled(x))


def test_no_grad_and_autograd_through_compiled():
    def f(x, w):
        return (x @ w).tanh().sum(dim=1)

    compiled = kiln.compile(f, fullgraph=True)
    for _ in range(3):
        x = torch.randn(3, 4)
        w = torch.randn(4, 2, requires_grad=True)
        wc = w.detach().clone().requires_grad_(True)
        out_c, out_e = compiled(x, wc), f(x, w)
        assert_same(out_c, out_e)
        assert out_c.requires_grad and out_e.requires_grad
        out_c.sum().backward()
        out_e.sum().backward()
        assert_same(wc.grad, w.grad)
    with torch.no_grad():
        out_c = compiled(x, wc)
        out_e = f(x, w)
    assert_same(out_c, out_e)
    assert out_c.requires_grad is False


# ---------------------------------------------------------------------------
# Aliasing, views and mutation: compiled code must see memory as eager does
# ---------------------------------------------------------------------------

def mutate_then_read_other(x, y):
    x.add_(1)
    return y * 2


def test_same_tensor_passed_twice_after_tracing_distinct():
    compiled = kiln.compile(mutate_then_read_other)
    x, y = torch.randn(3), torch.randn(3)
    assert_same(compiled(x.clone(), y.clone()), mutate_then_read_other(x, y))  # traced on distinct tensors
    for _ in range(3):
        a = torch.randn(3)
        a_e = a.clone()
        out_c = compiled(a, a)      # y aliases x: sees the add_
        out_e = mutate_then_read_other(a_e, a_e)
        assert_same(out_c, out_e)
        assert_same(a, a_e)


def test_overlapping_view_inputs():
    def f(x, y):
        x.mul_(2)
        return y + 0

    compiled = kiln.compile(f)
    assert_same(compiled(torch.ones(2), torch.ones(2)), torch.ones(2))
    for _ in range(3):
        base = torch.randn(4)
        base_e = base.clone()
        assert_same(compiled(base[:2], base[1:3]), f(base_e[:2], base_e[1:3]))
        assert_same(base, base_e)


def view_then_mutate(x):
    v = x.view(-1)
    x.add_(1)
    x[0] = 5.0
    x[1].mul_(3)
    return v * 1, x.sum()


def test_views_see_later_mutations_and_setitem():
    compiled = kiln.compile(view_then_mutate)
    for _ in range(3):
        x = torch.randn(3, 2)
        x_e = x.clone()
        assert_same(compiled(x), view_then_mutate(x_e))
        assert_same(x, x_e)


def test_output_identity_and_aliasing():
    def ident(x):
        return x

    def twice(x):
        y = x * 2
        return y, y

    def flat_view(x):
        return x.view(-1)

    def transposed(x):
        return x.t(), x.t() + 1

    c_ident, c_twice = kiln.compile(ident), kiln.compile(twice)
    c_view, c_t = kiln.compile(flat_view), kiln.compile(transposed)
    for _ in range(3):
        x = torch.randn(2, 3)
        assert c_ident(x) is x
        a, b = c_twice(x)
        assert a is b
        v = c_view(x)
        v.add_(100)  # a returned view shares the input's memory, as in eager
        assert bool((x > 50).all())
        outs = c_t(x)
        assert [o.stride() for o in outs] == [o.stride() for o in transposed(x)]


def indexing(x, i):
    return (x[0], x[:, 1], x[1:3], x[..., 0], x[:, None], x[:, ::2], x[-1, -1],
            x[i], x.index_select(0, i))


def test_tensor_indexing():
    check_compiled(indexing, lambda: (torch.randn(4, 6), torch.tensor([0, 3, 3])))


def causal_attention(q, k, v):
    n = q.size(-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


def chunks(x):
    a, b = x.chunk(2, dim=-1)
    return a * b, x.split(1, dim=0), torch.unbind(x), x.shape[0] * x.shape[1]


@pytest.mark.parametrize("fn,make", [
    (causal_attention, lambda: (torch.randn(2, 5, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8))),
    (chunks, lambda: (torch.randn(2, 4),)),
], ids=["causal_attention", "chunk_split_unbind"])
def test_realistic_snippets(fn, make):
    check_compiled(fn, make)


def spelled_out_operators(x, y):
    # Operator methods called by name and devices built in the function, as
    # Dynamo's generated graph code writes them.
    z = x.__add__(y).__mul__(2).__rsub__(1.5)
    here = torch.device("cpu")
    also = torch.device(type="cpu", index=None)
    w = torch.arange(3, device=here).to(also)
    return x.__eq__(0), z.__neg__().__abs__(), x.__getitem__((slice(None), 0)), x.__matmul__(y.t()), w, here


def test_spelled_out_operators_and_devices():
    check_compiled(spelled_out_operators, lambda: (torch.randn(3, 3).round(), torch.randn(3, 3)))


def comprehensions(x):
    squares = [x * i for i in range(3)]
    table = {k: x + k for k in range(2)}
    return squares, table, sum(t.sum() for t in squares)


def test_comprehensions_and_generators():
    compiled = kiln.compile(comprehensions)
    for _ in range(3):
        x = torch.randn(2)
        assert_same(compiled(x), comprehensions(x))


SIDE_LOG = []


def appends_to_global(x):
    SIDE_LOG.append(x.shape[0])
    return x + len(SIDE_LOG)


def test_side_effects_on_globals_and_objects_happen_once():
    compiled = kiln.compile(appends_to_global)
    x = torch.randn(2)
    SIDE_LOG.clear()
    outs_c = [compiled(x) for _ in range(3)]
    log_c = list(SIDE_LOG)
    SIDE_LOG.clear()
    outs_e = [appends_to_global(x) for _ in range(3)]
    assert_same(outs_c, outs_e)
    assert log_c == SIDE_LOG == [2, 2, 2]

    counter = types.SimpleNamespace(n=0)

    def bumps(x):
        counter.n = counter.n + 1
        return x * counter.n

    compiled = kiln.compile(bumps)
    outs_c = [compiled(x) for _ in range(3)]
    assert counter.n == 3
    counter.n = 0
    assert_same(outs_c, [bumps(x) for _ in range(3)])


class Config:
    def __init__(self):
        self.reads = 0

    @property
    def scale(self):
        self.reads += 1  # a side effect eager runs exactly once per access
        return 2.0


def test_property_getter_runs_once_per_access():
    cfg = Config()

    def f(x):
        return x * cfg.scale

    compiled = kiln.compile(f)
    for i in range(1, 4):
        x = torch.randn(3)
        assert_same(compiled(x), x * 2.0)
        assert cfg.reads == i, f"property ran {cfg.reads} times in {i} compiled calls"


# F.linear's and unary pointwise ops' result metadata come from kiln's own
# rules in the plain case (Note [Own metas]); every other case from torch's
# meta tensors.
LINEAR_CASES = {
    "2d": lambda: (torch.randn(5, 4), torch.randn(3, 4), torch.randn(3)),
    "3d_no_bias": lambda: (torch.randn(2, 5, 4), torch.randn(3, 4), None),
    "1d_input": lambda: (torch.randn(4), torch.randn(3, 4), torch.randn(3)),
    "transposed_input": lambda: (torch.randn(4, 5).t(), torch.randn(3, 4), torch.randn(3)),
    "grad_weight": lambda: (torch.randn(2, 5, 4), torch.randn(3, 4, requires_grad=True), None),
    "grad_bias_only": lambda: (torch.randn(5, 4), torch.randn(3, 4), torch.randn(3, requires_grad=True)),
    "float64": lambda: (torch.randn(5, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64), None),
    "broadcast_bias": lambda: (torch.randn(5, 4), torch.randn(3, 4), torch.randn(1)),
}


@pytest.mark.parametrize("name", sorted(LINEAR_CASES))
def test_linear_metadata_matches_eager(name):
    def linear(x, w, b):
        return F.linear(x, w, b)

    compiled = kiln.compile(linear, fullgraph=True)
    for _ in range(2):
        args = LINEAR_CASES[name]()
        out_c, out_e = compiled(*clone_args(args)), linear(*args)
        assert_same(out_c, out_e)
        assert out_c.stride() == out_e.stride()
        assert out_c.requires_grad == out_e.requires_grad


def test_linear_shape_mismatch_raises_like_eager():
    def linear(x, w):
        return F.linear(x, w)

    x, w = torch.randn(5, 4), torch.randn(3, 6)
    with pytest.raises(RuntimeError) as eager_error:
        linear(x, w)
    with pytest.raises(RuntimeError) as kiln_error:
        kiln.compile(linear)(x, w)
    assert "cannot be multiplied" in str(eager_error.value)
    assert "cannot be multiplied" in str(kiln_error.value)


UNARY_OPS = {
    "F.relu": F.relu, "F.relu_inplace_false": lambda x: F.relu(x, inplace=False), "torch.sigmoid": torch.sigmoid,
    "Tensor.tanh": lambda x: x.tanh(), "F.gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "F.silu": F.silu,
    "torch.exp": torch.exp, "Tensor.abs": lambda x: x.abs(), "torch.sqrt": lambda x: torch.sqrt(x.abs()),
    "F.leaky_relu": F.leaky_relu, "F.elu_alpha": lambda x: F.elu(x, alpha=0.5),
}
UNARY_INPUTS = {
    "contiguous": lambda: torch.randn(4, 6),
    "transposed": lambda: torch.randn(6, 4).t(),
    "float64_grad": lambda: torch.randn(3, 5, dtype=torch.float64, requires_grad=True),
    "scalar": lambda: torch.randn(()),
}


@pytest.mark.parametrize("op", sorted(UNARY_OPS))
@pytest.mark.parametrize("inputs", sorted(UNARY_INPUTS))
def test_unary_metadata_matches_eager(op, inputs):
    fn = UNARY_OPS[op]

    def unary(x):
        return fn(x) * 2

    compiled = kiln.compile(unary, fullgraph=True)
    for _ in range(2):
        x = UNARY_INPUTS[inputs]()
        out_c, out_e = compiled(*clone_args((x,))), unary(x)
        assert_same(out_c, out_e)
        assert out_c.stride() == out_e.stride()
        assert out_c.requires_grad == out_e.requires_grad


def test_relu_of_an_integer_tensor_keeps_its_dtype():
    check_compiled(lambda x: F.relu(x) + torch.relu(x), lambda: (torch.randint(-5, 5, (4, 3)),))


def test_compiler_is_compiling_is_true_while_tracing():
    # Library code keeps a graph-capture path under torch.compiler.is_compiling()
    # (Note [Compiler queries]); kiln's trace takes it, eager code does not.
    def fn(x):
        if torch.compiler.is_compiling():
            return x * 2
        return x * 3

    x = torch.ones(3)
    assert torch.equal(fn(x), x * 3)
    assert torch.equal(kiln.compile(fn, fullgraph=True)(x), x * 2)


def test_api_usage_logging_runs_while_tracing_and_leaves_no_node():
    # torchvision's ops call torch._C._log_api_usage_once on every call; it
    # runs once while tracing and the graph holds no call of it.
    def fn(x):
        torch._C._log_api_usage_once("kiln.tests.usage")
        return x + 1

    x = torch.ones(3)
    kiln.reset()
    explained = kiln.explain(fn)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert "_log_api_usage_once" not in "".join(explained.graphs)
    assert torch.equal(kiln.compile(fn, fullgraph=True)(x), x + 1)


def test_a_torch_compiler_disabled_function_is_no_part_of_the_graph():
    # torch.compiler.disable (and torch._dynamo.disable) keep a function out
    # of the caller's graph: the call breaks it and runs in CPython.
    @torch.compiler.disable
    def helper(x):
        return x.sin()

    def fn(x):
        return helper(x * 2) + 1

    x = torch.randn(3)
    kiln.reset()
    explained = kiln.explain(fn)(x)
    assert explained.graph_break_count >= 1
    assert any("torch.compiler.disable" in r for r in explained.break_reasons), explained.break_reasons
    assert not any("sin" in g for g in explained.graphs[:1]), explained.graphs
    assert torch.allclose(kiln.compile(fn)(x), fn(x))


def test_a_torch_compiler_disabled_function_and_what_it_calls_run_untraced():
    # The marker holds for the function's own frame and every frame it runs
    # (tracer/disabled_code.h), as torch.compile's disable(recursive=True).
    def nested(x):
        return x.exp() + 1

    @torch._dynamo.disable
    def helper(x):
        return nested(x.sin()) * 2

    def fn(x):
        return helper(x * 3).cos()

    x = torch.randn(4)
    kiln.reset()
    explained = kiln.explain(fn)(x)
    assert not any("exp" in g or "sin" in g for g in explained.graphs), explained.graphs
    kiln.reset()
    compiled = kiln.compile(fn)
    assert torch.allclose(compiled(x), fn(x))
    assert kiln.stats()["traces"] == 2  # fn, and its resume after the call


def test_a_disabled_function_called_from_an_untraced_frame_runs_untraced(capfd):
    # Once a trace has met torch's disable marker, the marker's wrapper code
    # itself turns kiln's compile context off (tracer/disabled_code.h), so
    # a disabled function called from a frame kiln runs in CPython is not
    # traced either.
    def nested(x):
        return x.exp() + 1

    @torch.compiler.disable
    def first(x):
        return x * 2

    @torch.compiler.disable
    def second(x):
        return nested(x.sin()) * 2

    def meets_the_marker(x):
        return first(x) + 1

    def runs_in_cpython(x):
        locals()  # kiln cannot trace this frame
        return second(x)

    def fn(x):
        return runs_in_cpython(x * 3).cos()

    x = torch.randn(4)
    kiln.compile(meets_the_marker)(x)
    with kiln_logs("graph"):
        got = kiln.compile(fn)(x)
    err = capfd.readouterr().err
    assert "graph for second" not in err and "graph for nested" not in err, err
    assert torch.allclose(got, fn(x))


def test_to_the_tensors_own_device_is_traced():
    # `y.to(x.device)` (GPT-2's position embeddings): the device is positional.
    def fn(x):
        positions = torch.arange(x.shape[-1], device=x.device)
        return x + positions.to(x.device) + (x * 2).to("cpu", torch.float64).to(x.dtype)

    check_compiled(fn, lambda: (torch.randn(2, 3),))


def test_memory_formats_and_layouts_are_constants():
    # torch.memory_format and torch.layout values pass to torch calls as
    # constants (PhiMoE's router: empty_like(..., memory_format=
    # torch.legacy_contiguous_format) broke its training graph 22 times).
    def f(x):
        a = torch.empty_like(x, memory_format=torch.legacy_contiguous_format).fill_(2.0)
        b = x.contiguous(memory_format=torch.contiguous_format)
        c = torch.zeros(2, 3, layout=torch.strided)
        same = x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x.t()
        return a * b + c.sum(), same * 1

    x = torch.randn(2, 3)
    assert_same(kiln.compile(f)(x), f(x))
    s = kiln.stats()
    assert (s["traces"], s["graph_breaks"]) == (1, 0), s


def builtin_types_as_dtypes(x):
    # torch takes int, float and bool as dtypes (transformers' masking
    # utils: torch.zeros(batch_size, device=device, dtype=int)).
    n = x.shape[0]
    return x + torch.zeros(n, dtype=int), torch.ones(n, dtype=float), torch.zeros(n, dtype=bool), x.to(int)


def test_builtin_types_are_dtypes():
    check_compiled(builtin_types_as_dtypes, lambda: (torch.randn(3),))
