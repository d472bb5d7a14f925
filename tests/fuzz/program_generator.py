"""Random Python programs over tensors for kiln's differential fuzzer.

``generate(seed, exclude=())`` returns a ``Program``: the source text of a
module defining ``fn(x, y, n, flag, xs)`` (plus module-level helpers and
constants) and the descriptions of the inputs of every call the runner makes.
The same seed (and the same exclusions) always gives the same text.

How validity is kept
--------------------
The runner calls ``fn`` NV = 5 times ("variants"): the base inputs, the same
shapes again (must hit kiln's cache), other sizes (must recompile), other
Python values (n, flag, len(xs)), and the base shapes once more. The
generator tracks every tensor's shape as a tuple of dims, each dim being the
tuple of its NV concrete sizes, one per variant; an operation is emitted only
when it is valid in every variant (broadcasting, matmul, cat, slicing...).
Two dims are "equal" when all their per-variant sizes are. Control flow whose
direction the generator does not follow (``if flag:``, loops, data-dependent
branches, try/except) only rebinds existing variables to values of the same
shape and dtype, so code after it is valid whichever way it went; variables
created inside a block are forgotten after it.

Exclusions
----------
Every construct has a feature name (see FEATURES); ``exclude`` removes
constructs from generation, so that one known bug can be kept out of a
campaign while it looks for others. Excluding a feature never changes which
other features exist, but it changes the random stream (the texts differ).
"""
import math
import random
from dataclasses import dataclass, field

NV = 5
ROLES = ("base", "repeat", "resized", "scalars", "base-again")
F32, F64 = "float32", "float64"
MAX_NUMEL = 1024
MAX_RANK = 4

# Construct names usable with exclude=... (and recorded in Program.features).
FEATURES = {
    # statements
    "new": "assign a new tensor expression",
    "update": "rebind a tensor variable to a same-shape expression",
    "inplace": "x2 = t.clone() then in-place ops, setitem, mutation through views",
    "if": "if/elif/else on Python values and shapes",
    "ifexp": "conditional expressions (a if c else b)",
    "for_range": "for i in range(...) loops, with break/continue",
    "for_list": "for over lists, enumerate, zip, reversed, dict items",
    "while": "while loops with Python counters, break/continue",
    "helper": "module-level helper functions (defaults, keyword-only, *args, **kwargs, recursion)",
    "closure": "nested def capturing locals (and nonlocal counters)",
    "lambda": "lambdas, map()",
    "containers": "tuple/list/dict building, indexing, unpacking, star-unpacking",
    "listcomp": "list comprehensions",
    "dictcomp": "dict comprehensions",
    "genexpr": "generator expressions fed to sum()/tuple()",
    "stdmods": "functools.reduce/partial, itertools.accumulate/pairwise/chain over tensor lists",
    "pyarith": "Python int/float/bool arithmetic on n, shapes, len(xs)",
    "xs_mutation": "mutation of the input list xs (append, insert, pop, setitem, +=, del)",
    "input_mutation": "in-place mutation of input tensors (x, y, xs[0])",
    "no_grad": "with torch.no_grad()/enable_grad() blocks",
    "try": "try/except/finally with raise",
    "raise": "exceptions that escape fn in some call (eager raises too)",
    "datadep": "data-dependent code: branching on tensors, .item(), .tolist(), masks",
    "globals": "module-level constants and a global tensor",
    # expression groups
    "matmul": "@, matmul, mm, bmm, einsum, F.linear",
    "reduce": "sum/mean/amax/... with dim and keepdim",
    "softmax": "softmax, log_softmax, cumsum, normalize, flip, roll",
    "view": "transpose/permute/reshape/view/flatten/unsqueeze/squeeze/expand/repeat",
    "slice": "basic indexing and slicing, narrow, select, chunk, split, unbind",
    "catstack": "cat and stack",
    "where": "where, masked_fill, comparison masks",
    "factory": "zeros_like, ones, full, arange, linspace, eye, tensor(...)",
    "dtype": "float()/double()/to()/type_as",
    "return_shape": "returning torch.Size / shape tuples",
    "return_xs": "returning the input list xs itself (after mutating it)",
    "return_meta": "returning stride()/is_contiguous()/dtype/is_leaf of intermediates, bool/int64 tensors",
    "global_state": "mutating module globals (dict item, list append, global int, global tensor, object attribute)",
    "match": "match statements (literal, or-, sequence and wildcard patterns)",
    "loop_else": "for/while ... else",
    "walrus": "assignment expressions in conditions",
    "nested": "nested loops and calls of helpers/closures inside blocks",
    "helper_break": "data-dependent code inside helpers (graph breaks in inlined frames)",
    "layouts": "non-contiguous inputs: transposed, storage offset, strided (and a layout change between calls)",
    "aliasing": "aliased inputs in the 'scalars' call: y is x, xs[0] is x, xs[1] is xs[0]",
    "param_input": "x passed as an nn.Parameter in the 'scalars' call",
    "drift": "the runner changes module globals between calls (SCALE, CONFIG['eps'], OFFSETS, CFG.scale, BIAS values, SCALER attributes)",
    "objects": "a user class: __call__, methods with defaults, a property, instances made inside fn",
    "modules": "global nn.Module instances (GELU, Softmax, PReLU, Sequential) called in fn",
    "iterators": "iter()/next() over lists, list concatenation/repetition/reversal",
    "operators": "more Python operators on tensors: abs(), pow(), //, %, 2 ** t, comparisons as masks",
    "disable": "helpers decorated with @kiln.disable (graph breaks at their calls)",
    "decorator": "helpers wrapped by a module-level pass-through decorator (functools.wraps, *args/**kwargs)",
    "callforms": "calls through *args/**kwargs, getattr, unbound Tensor methods, operator, functools.reduce, "
                 "immediately-called lambdas, positional-only parameters, closure factories",
    "nonleaf": "inputs that are non-leaf tensors (computed from a leaf that requires grad)",
    "grad_flip": "x passed with requires_grad=False in the last call",
    "nested_compile": "helpers compiled with kiln.compile at module level, called from fn "
                      "(the eager reference gets a kiln shim whose compile/disable return the function)",
    "generators": "generator functions (yield) consumed by list()/sum()",
    "grad_modes": "set_grad_enabled(flag), nested no_grad/enable_grad, @torch.no_grad() helpers, "
                  "and the caller running the 'scalars' call under torch.no_grad()",
    "long": "occasional long programs (20-40 top-level statements)",
    "is_leaf": "Tensor.is_leaf queries (in returns and conditions)",
    "storage_offset": "Tensor.storage_offset() queries in returns",
    "ordereddict": "collections.OrderedDict built in fn: item writes, del, pop, popitem(last=...), move_to_end, "
                   "setdefault, update, |=, copy(), iteration over keys/items, returned",
    "dict_input": "an extra argument dd: an OrderedDict or dict of tensors, mutated in fn (writes, del, pop, "
                  "popitem, move_to_end, update) and iterated; its key order differs in the resized/scalars calls",
    "collections": "collections.defaultdict(list/int), Counter, deque (append/appendleft/pop/popleft/indexing, maxlen)",
    "user_types": "module-level dict/list subclasses (a custom __setitem__), a @dataclass with tensor fields, "
                  "a typing.NamedTuple with a method, plain objects whose attributes are set in fn",
    "nested_returns": "nested containers of tensors and objects returned (dict of lists of tuples, "
                      "OrderedDict of dataclasses, ...)",
}

OD_KEYS = ("a", "b", "c", "d", "e", "f")
TYPES_SRC = """
class Registry(dict):
    # a dict subclass with a custom __setitem__ (counts writes, stores doubled values)
    def __setitem__(self, key, value):
        self.writes = getattr(self, 'writes', 0) + 1
        super().__setitem__(key, value * 2)


class TensorList(list):
    def total(self):
        return sum(self)


@dataclasses.dataclass
class Pair:
    a: torch.Tensor
    b: torch.Tensor
    scale: float = 1.0

    def scaled(self):
        return self.a * self.scale


class Stats(typing.NamedTuple):
    mean: torch.Tensor
    std: torch.Tensor
    count: int = 0

    def spread(self):
        return self.std * 2 + self.count


class Box:
    def __init__(self, tag='box'):
        self.tag = tag
"""


def const_dim(k):
    return (k,) * NV


ONE = const_dim(1)
DT_CODE = {F32: "torch.float32", F64: "torch.float64"}


class TI:
    """What the generator knows about a tensor value."""
    __slots__ = ("shape", "dtype", "grad", "contig")

    def __init__(self, shape, dtype, grad=False, contig=False):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.grad = grad
        self.contig = contig

    @property
    def rank(self):
        return len(self.shape)

    def same(self, other):
        return self.shape == other.shape and self.dtype == other.dtype

    def ok(self):
        if self.rank > MAX_RANK:
            return False
        for v in range(NV):
            p = 1
            for d in self.shape:
                if d[v] < 1 or d[v] > 64:
                    return False
                p *= d[v]
            if p > MAX_NUMEL:
                return False
        return True

    def numel(self):
        out = []
        for v in range(NV):
            p = 1
            for d in self.shape:
                p *= d[v]
            out.append(p)
        return tuple(out)

    def like(self, **kw):
        t = TI(self.shape, self.dtype, self.grad, self.contig)
        for k, val in kw.items():
            setattr(t, k, val)
        return t


def promote(a, b):
    """Result dtype of a binary op between tensors a and b (TI)."""
    if (a.rank == 0) == (b.rank == 0):
        return F64 if F64 in (a.dtype, b.dtype) else F32
    return a.dtype if a.rank > 0 else b.dtype


def bcast(s1, s2):
    r = max(len(s1), len(s2))
    s1 = (ONE,) * (r - len(s1)) + tuple(s1)
    s2 = (ONE,) * (r - len(s2)) + tuple(s2)
    out = []
    for d1, d2 in zip(s1, s2):
        vals = []
        for a, b in zip(d1, d2):
            if a == b or b == 1:
                vals.append(a)
            elif a == 1:
                vals.append(b)
            else:
                return None
        out.append(tuple(vals))
    return tuple(out)


def mm_shape(s1, s2):
    if not s1 or not s2:
        return None
    a = s1 if len(s1) >= 2 else (ONE,) + tuple(s1)
    b = s2 if len(s2) >= 2 else tuple(s2) + (ONE,)
    if a[-1] != b[-2]:
        return None
    batch = bcast(a[:-2], b[:-2])
    if batch is None:
        return None
    res = list(batch) + [a[-2], b[-1]]
    if len(s2) == 1:
        res.pop(-1)
    if len(s1) == 1:
        res.pop(-1 if len(s2) == 1 else -2)
    return tuple(res)


class Var:
    """A generator-side variable. kind: t (tensor), i (int), f (float), b (bool),
    l (homogeneous list: elem TI + per-variant length or None), s (fixed sequence
    of TIs: tuple/list literal), d (dict with known str keys -> TI)."""

    def __init__(self, kind, name, info=None, vals=None, elem=None, length=None,
                 items=None, mutable=False, nz=False):
        self.kind = kind
        self.name = name
        self.info = info
        self.vals = vals
        self.elem = elem
        self.length = length
        self.items = items
        self.mutable = mutable
        self.nz = nz   # float var known to be nonzero


class Env:
    def __init__(self, parent=None):
        self.vars = dict(parent.vars) if parent else {}
        self.order = list(parent.order) if parent else []
        self.noupdate = set(parent.noupdate) if parent else set()
        # inside a closure/lambda body (may run later, after containers changed):
        # no reads of container items
        self.closure = getattr(parent, "closure", False)

    def add(self, var):
        if var.name in self.vars:
            self.order.remove(var.name)
        self.vars[var.name] = var
        self.order.append(var.name)

    def of(self, kind):
        return [self.vars[n] for n in self.order if self.vars[n].kind == kind]


@dataclass
class Program:
    seed: int
    source: str
    variants: list
    features: list
    expect_raise: bool = False
    mutates_inputs: bool = False
    exclude: tuple = ()
    stateful: bool = False
    drift: bool = False

    def describe_inputs(self):
        lines = []
        for i, v in enumerate(self.variants):
            def t(d):
                return (f"{d['dtype']}{list(d['shape'])}"
                        + (" requires_grad" if d["grad"] else "")
                        + (f" layout={d['layout']}" if d.get("layout") else "")
                        + (" nn.Parameter" if d.get("param") else ""))
            lines.append(f"call {i} ({ROLES[i]}): x={t(v['x'])} y={t(v['y'])} n={v['n']} "
                         f"flag={v['flag']} xs=[{v['xs']['len']} x {t(v['xs'])}]"
                         + (f" aliases: {', '.join(v['alias'])}" if v.get("alias") else "")
                         + (" (called under torch.no_grad())" if v.get("no_grad") else "")
                         + (f" dd={v['dd']['type']}({', '.join(v['dd']['keys'])}) of {t(v['dd'])}"
                            if v.get("dd") else ""))
        return "\n".join(lines)


class Unfit(Exception):
    """A construct could not be built here; the caller tries another."""


class Generator:
    def __init__(self, seed, exclude=()):
        self.seed = seed
        self.rng = random.Random(seed)
        self.exclude = frozenset(exclude)
        unknown = self.exclude - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown fuzz features {sorted(unknown)}; known: {sorted(FEATURES)}")
        self.counter = 0
        self.out = []          # current output line buffer
        self.ind = 1
        self.helpers = []      # list of (name, sig dict)
        self.helper_src = []   # source chunks of module-level helpers
        self.features = set()
        self.expect_raise = False
        self.mutates_inputs = False
        self.datadep_left = self.rng.choices([0, 1, 2], weights=[70, 20, 10])[0]
        self.raise_left = 1 if self.rng.random() < 0.1 else 0
        self.helper_depth = 0
        self.in_closure = 0
        self.uses_bias = False
        self.global_decls = set()
        self.needs_kiln = False
        self.needs_decorator = False
        self.stateful = False
        self.need_types = False
        self.dd = None

    # ------------------------------------------------------------------ utils
    def allow(self, feat):
        return feat not in self.exclude

    def used(self, feat):
        self.features.add(feat)

    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, line):
        self.out.append("    " * self.ind + line)

    def chance(self, p):
        return self.rng.random() < p

    def choice(self, seq):
        return seq[self.rng.randrange(len(seq))]

    def wchoice(self, pairs):
        pairs = [(k, w) for k, w in pairs if w > 0]
        total = sum(w for _, w in pairs)
        r = self.rng.random() * total
        for k, w in pairs:
            r -= w
            if r <= 0:
                return k
        return pairs[-1][0]

    # -------------------------------------------------------------- inputs
    def make_variants(self):
        rng = self.rng
        base = {s: rng.randint(2, 6) for s in "ABC"}
        resized = {}
        for s in "ABC":
            choices = [v for v in range(1, 8) if v != base[s]]
            if rng.random() > 0.15:
                choices = [v for v in choices if v != 1]
            resized[s] = rng.choice(choices)
        n0 = rng.randint(1, 4)
        n3 = rng.choice([v for v in range(1, 6) if v != n0])
        flag0 = rng.random() < 0.5
        l0 = rng.randint(1, 3)
        l3 = rng.choice([v for v in range(1, 5) if v != l0])
        syms = [base, base, resized, base, base]
        self.n_vals = (n0, n0, n0, n3, n0)
        self.flag_vals = (flag0, flag0, flag0, not flag0, flag0)
        self.len_vals = (l0, l0, l0, l3, l0)

        def sym_dim():
            r = rng.random()
            if r < 0.8:
                s = rng.choice("ABC")
                return tuple(syms[v][s] for v in range(NV))
            return const_dim(rng.randint(1, 4))

        def rand_shape(rank):
            return tuple(sym_dim() for _ in range(rank))

        xr = rng.choices([0, 1, 2, 3], weights=[1, 6, 10, 5])[0]
        xshape = rand_shape(xr)
        if xr > 0 and all(d == ONE for d in xshape):
            xshape = (tuple(syms[v]["A"] for v in range(NV)),) + xshape[1:]
        kind = rng.choices(["same", "suffix", "rev", "mm", "indep", "one"],
                           weights=[5, 2, 2, 3, 3, 1])[0]
        if kind == "same" or (kind in ("suffix", "rev", "mm") and xr == 0):
            yshape = xshape
        elif kind == "suffix":
            yshape = xshape[rng.randint(0, xr - 1):] if xr > 1 else xshape
        elif kind == "rev":
            yshape = tuple(reversed(xshape))
        elif kind == "mm":
            yshape = (xshape[-1], sym_dim())
        elif kind == "one":
            yshape = (ONE,)
        else:
            yshape = rand_shape(rng.randint(1, 3))
        ekind = rng.choices(["x", "y", "indep"], weights=[5, 2, 2])[0]
        eshape = xshape if ekind == "x" else yshape if ekind == "y" else rand_shape(rng.randint(1, 2))

        def dt():
            return F64 if rng.random() < 0.3 else F32
        xi = TI(xshape, dt(), rng.random() < 0.25, True)
        yi = TI(yshape, dt(), rng.random() < 0.25, True)
        ei = TI(eshape, dt(), rng.random() < 0.2, True)
        for t in (xi, yi, ei):
            if not t.ok():
                raise Unfit("inputs too large")
        self.inputs = (xi, yi, ei)

        def layouts(t):
            if t.grad and self.allow("nonleaf") and rng.random() < 0.15:
                return [self.choice(["nonleaf", "contig"]) for _ in range(NV)]
            if t.rank == 0 or not self.allow("layouts") or rng.random() < 0.6:
                return ["contig"] * NV
            opts = ["contig", "offset", "strided"] + (["t", "t"] if t.rank >= 2 else [])
            l0 = rng.choice(opts)
            l2 = rng.choice(opts)
            l4 = l0 if rng.random() < 0.6 else rng.choice(opts)
            return [l0, l0, l2, l0, l4]
        lay = {"x": layouts(xi), "y": layouts(yi), "xs": layouts(ei)}
        for t, key in ((xi, "x"), (yi, "y"), (ei, "xs")):
            if any(v != "contig" for v in lay[key]):
                t.contig = False
        alias = []
        if self.allow("aliasing") and rng.random() < 0.25:
            if yi.same(xi) and yi.grad == xi.grad and rng.random() < 0.6:
                alias.append("y=x")
            if ei.same(xi) and ei.grad == xi.grad and rng.random() < 0.6:
                alias.append("xs0=x")
            if l3 >= 2 and rng.random() < 0.4:
                alias.append("xs1=xs0")
        param = self.allow("param_input") and xi.grad and rng.random() < 0.3
        flip = self.allow("grad_flip") and xi.grad and "nonleaf" not in lay["x"] and rng.random() < 0.15
        nograd_call = self.allow("grad_modes") and rng.random() < 0.1
        self.drift = self.allow("drift") and rng.random() < 0.5
        if self.allow("dict_input") and rng.random() < 0.2:
            keys = rng.sample(["w", "b", "g", "h", "k"], rng.randint(2, 4))
            orders = [tuple(keys)] * NV
            for v in (2, 3):
                if v == 3 and rng.random() < 0.3:
                    continue
                perm = list(keys)
                while perm == keys:
                    rng.shuffle(perm)
                orders[v] = tuple(perm)
            dshape = rng.choice([xshape, eshape, rand_shape(rng.randint(1, 2))])
            di = TI(dshape, dt(), rng.random() < 0.2, True)
            if di.ok():
                self.dd = {"type": rng.choice(["OrderedDict", "dict"]), "orders": tuple(orders), "info": di}
        variants = []
        for v in range(NV):
            def desc(t, key):
                d = {"shape": [dd[v] for dd in t.shape], "dtype": t.dtype, "grad": t.grad}
                if lay[key][v] != "contig":
                    d["layout"] = lay[key][v]
                return d
            xsd = desc(ei, "xs")
            xsd["len"] = self.len_vals[v]
            var = {"x": desc(xi, "x"), "y": desc(yi, "y"), "n": self.n_vals[v],
                   "flag": self.flag_vals[v], "xs": xsd}
            if v == 3 and alias:
                var["alias"] = list(alias)
            if v == 3 and param:
                var["x"]["param"] = True
            if v == 4 and flip:
                var["x"]["grad"] = False
            if v == 3 and nograd_call:
                var["no_grad"] = True
            if self.dd:
                di = self.dd["info"]
                var["dd"] = {"type": self.dd["type"], "keys": list(self.dd["orders"][v]),
                             "shape": [dd[v] for dd in di.shape], "dtype": di.dtype, "grad": di.grad}
            variants.append(var)
        return variants

    # -------------------------------------------------------------- picking
    def tensor_cands(self, env, pred=None, atoms=False):
        cands = []
        for idx, name in enumerate(env.order):
            var = env.vars[name]
            w = 1 + idx
            if var.kind == "t":
                cands.append((name, var.info, w * 2))
            elif atoms:
                continue
            elif var.kind == "l" and var.length and min(var.length) >= 1:
                cands.append((f"{name}[0]", var.elem, w * 0.5))
                cands.append((f"{name}[-1]", var.elem, w * 0.3))
            elif var.kind == "s" and var.items:
                i = self.rng.randrange(len(var.items))
                cands.append((f"{name}[{i}]", var.items[i], w * 0.5))
            elif var.kind == "d" and var.items:
                k = self.choice(list(var.items))
                cands.append((f"{name}[{k!r}]", var.items[k], w * 0.5))
            elif var.kind == "c" and var.items and not getattr(env, "closure", False) and not self.helper_depth:
                acc = self.choice(list(var.items))
                cands.append((f"{name}{acc}", var.items[acc], w * 0.5))
        if self.allow("globals") and not atoms:
            cands.append(("BIAS", TI((ONE,), F32, False, True), 0.7))
        if pred:
            cands = [c for c in cands if pred(c[1])]
        return cands

    def pick(self, env, pred=None, atoms=False):
        cands = self.tensor_cands(env, pred, atoms)
        if not cands:
            return None
        code, info = self.wchoice([((c, i), w) for c, i, w in cands])
        return code, info

    def must_pick(self, env, pred=None, atoms=False):
        r = self.pick(env, pred, atoms)
        if r is None:
            raise Unfit("no operand")
        return r

    def int_atoms(self, env, nonzero=False):
        """Python int expressions with known per-variant values."""
        out = [] if self.helper_depth else [("n", self.n_vals)]
        xs = env.vars.get("xs")
        if xs is not None and xs.kind == "l" and xs.length:
            out.append(("len(xs)", xs.length))
        for name, info, _ in self.tensor_cands(env, atoms=True):
            if info.rank:
                i = self.rng.randrange(info.rank)
                form = self.choice([f"{name}.shape[{i}]", f"{name}.size({i})",
                                    f"{name}.shape[{i - info.rank}]"])
                out.append((form, info.shape[i]))
            out.append((f"{name}.dim()", const_dim(info.rank)))
            if info.rank and self.chance(0.2):
                out.append((f"{name}.numel()", info.numel()))
            if info.rank and self.chance(0.15):
                k = self.rng.randrange(5)
                sh = info.shape
                if k == 0:
                    out.append((f"len({name})", sh[0]))
                elif k == 1:
                    out.append((f"min({name}.shape)", tuple(min(d[v] for d in sh) for v in range(NV))))
                elif k == 2:
                    out.append((f"max({name}.shape)", tuple(max(d[v] for d in sh) for v in range(NV))))
                elif k == 3:
                    out.append((f"sum({name}.shape)", tuple(sum(d[v] for d in sh) for v in range(NV))))
                else:
                    out.append((f"math.prod({name}.shape)", info.numel()))
        for var in env.of("i"):
            if var.vals is not None:
                out.append((var.name, var.vals))
        out.append(("CONFIG['k']", const_dim(2)) if self.allow("globals") else ("2", const_dim(2)))
        if nonzero:
            out = [(c, v) for c, v in out if all(x != 0 for x in v)]
        return out

    def scalar(self, env, nonzero=False, small=False):
        """A Python number expression (code only)."""
        r = self.rng.random()
        if r < 0.45 or small:
            return self.choice(["0.5", "2.0", "-1.5", "3", "2", "0.25", "-1", "1e-3" if not nonzero else "4"])
        if r < 0.75:
            c, _ = self.choice(self.int_atoms(env, nonzero=True))
            return c
        opts = []
        for var in env.of("f"):
            if var.nz or not nonzero:
                opts.append(var.name)
        if self.allow("globals"):
            opts += ["SCALE", "OFFSETS[1]", "CONFIG['eps']", "math.pi"]
            if not self.helper_depth:
                opts.append("math.sqrt(n)")
        if not nonzero:
            opts += [v.name for v in env.of("i") if v.vals is None]
        if not self.helper_depth:
            if not nonzero:
                opts += ["float(flag)", "(n - 1)"]
            opts += ["(n + 1)", "(n * 0.5)"]
        if not opts:
            return "2.0"
        self.used("pyarith")
        return self.choice(opts)

    # ---------------------------------------------------------- expressions
    def texpr(self, env, depth):
        if depth <= 0 or self.chance(0.25):
            return self.must_pick(env)
        ops = [
            (self.op_unary, 6), (self.op_binary, 8), (self.op_scalar, 6),
            (self.op_reduce, 3 if self.allow("reduce") else 0),
            (self.op_softmax, 2 if self.allow("softmax") else 0),
            (self.op_matmul, 3 if self.allow("matmul") else 0),
            (self.op_view, 4 if self.allow("view") else 0),
            (self.op_slice, 3 if self.allow("slice") else 0),
            (self.op_cat, 2 if self.allow("catstack") else 0),
            (self.op_where, 2 if self.allow("where") else 0),
            (self.op_factory, 1 if self.allow("factory") else 0),
            (self.op_dtype, 1 if self.allow("dtype") else 0),
            (self.op_list, 1),
            (self.op_module, 0.8 if self.allow("modules") and self.allow("globals") else 0),
        ]
        for _ in range(12):
            op = self.wchoice(ops)
            try:
                r = op(env, depth - 1)
            except Unfit:
                continue
            if r is not None and r[1].ok():
                return r
        return self.must_pick(env)

    def sub(self, env, depth, atoms=False):
        if atoms or depth <= 0 or self.chance(0.5):
            return self.must_pick(env, atoms=atoms)
        return self.texpr(env, depth)

    UNARY = ["{a}.relu()", "torch.relu({a})", "{a}.sigmoid()", "torch.sigmoid({a})", "{a}.tanh()",
             "torch.tanh({a})", "{a}.abs()", "torch.abs({a})", "(-{a})", "torch.exp({a}.clamp(-5.0, 5.0))",
             "{a}.clamp(-1.0, 1.0)", "torch.clamp({a}, min=-0.5)", "{a}.clamp(max=2.0)", "{a}.sin()",
             "torch.cos({a})", "torch.sqrt({a}.abs() + 0.001)", "({a} ** 2)", "{a}.pow(3)", "F.relu({a})",
             "F.gelu({a})", "F.silu({a})", "F.leaky_relu({a}, 0.1)", "F.softplus({a})",
             "torch.log1p({a}.abs())", "{a}.neg()", "{a}.square()", "F.hardtanh({a})", "{a}.clone()",
             "{a}.contiguous()", "{a}.detach()", "torch.sign({a})", "(1.0 / ({a}.abs() + 1.0))",
             "{a}.exp().clamp(max=100.0)", "torch.where({a} > 0, {a}, 0.0)", "{a}.masked_fill({a} < 0, 0.5)",
             "({a} * ({a} > 0))", "torch.nan_to_num({a})", "{a}.floor()", "(torch.round({a} * 4) / 4)",
             "(+{a})", "{a}.sub(1)", "{a}.mul(2)", "{a}.tanh().mul(0.5).add(0.5)"]
    CALLFORMS_UNARY = ["getattr({a}, 'relu')()", "getattr(torch, 'tanh')({a})", "torch.Tensor.relu({a})",
                       "torch.Tensor.sigmoid({a})", "operator.neg({a})", "(lambda q: q * 2 + 1)({a})",
                       "torch.clamp(*({a}, -1.0, 1.0))", "torch.clamp({a}, **{{'min': -0.5, 'max': 0.5}})",
                       "{a}.clamp(*(-1.0,), **{{'max': 1.0}})", "functools.partial(torch.mul, other=2.0)({a})"]
    CALLFORMS_BINARY = ["torch.add(*({a}, {b}))", "torch.sub({a}, **{{'other': {b}}})", "operator.add({a}, {b})",
                        "operator.mul({a}, {b})", "getattr(torch, 'maximum')({a}, {b})",
                        "torch.Tensor.add({a}, {b})", "(lambda p, q: p - q)({a}, {b})",
                        "torch.add({a}, {b}, **{{'alpha': 2}})"]
    # `//` and `%` take abs() first and divisors no integer-valued result sits
    # on a multiple of: a value that is 0 up to rounding (a product of centred
    # values) or a small integer would otherwise flip between 0 and the
    # divisor within an ulp (seeds 5219, 5381 once did).
    OPERATORS = ["abs({a})", "pow({a}, 2)", "(abs({a}) // 1.37)", "(abs({a}) % 2.3)", "(2 ** {a}.clamp(-3.0, 3.0))",
                 "({a} > 0).to({a}.dtype)", "({a} * ({a} > 0).sum())", "({a} - (~({a} > 0)).to({a}.dtype))",
                 "({a} * ({a} != {a}.max()))", "(0.5 ** abs({a}))", "({a} @ {a}.mT if {a}.dim() >= 2 and {a}.shape[-1] == {a}.shape[-2] else {a})"]

    def op_unary(self, env, depth):
        code, info = self.sub(env, depth)
        tmpl = self.choice(self.UNARY)
        if self.allow("operators") and self.chance(0.2):
            self.used("operators")
            tmpl = self.choice(self.OPERATORS)
        elif self.allow("callforms") and self.chance(0.12):
            self.used("callforms")
            tmpl = self.choice(self.CALLFORMS_UNARY)
        if ("where" in tmpl or "masked" in tmpl or "(" + "{a} > 0)" in tmpl) and not self.allow("where"):
            tmpl = "{a}.relu()"
        out = info.like()
        if "detach" in tmpl:
            out.grad = False
        if "contiguous" in tmpl:
            out.contig = True
        return tmpl.format(a=code), out

    BINARY = ["({a} + {b})", "({a} - {b})", "({a} * {b})", "({a} / ({b}.abs() + 1.0))",
              "torch.add({a}, {b}, alpha=0.5)", "torch.sub({a}, {b})", "{a}.mul({b})", "{a}.add({b})",
              "torch.maximum({a}, {b})", "torch.minimum({a}, {b})", "torch.atan2({a}, {b})",
              "({a} * 0.5 + {b} * 0.25)", "torch.mul({a}, {b})", "({a} - {b}).abs()"]

    def op_binary(self, env, depth):
        a, ai = self.sub(env, depth)
        if self.chance(0.4):
            b, bi = self.like(env, ai, max(depth, 0), avoid=None)
        else:
            b, bi = self.must_pick(env, pred=lambda t: bcast(ai.shape, t.shape) is not None)
        shape = bcast(ai.shape, bi.shape)
        if shape is None:
            raise Unfit("bcast")
        tmpl = self.choice(self.BINARY)
        if self.allow("callforms") and self.chance(0.12):
            self.used("callforms")
            tmpl = self.choice(self.CALLFORMS_BINARY)
        if self.chance(0.5):
            a, b, ai, bi = b, a, bi, ai
        return tmpl.format(a=a, b=b), TI(shape, promote(ai, bi), ai.grad or bi.grad)

    def op_scalar(self, env, depth):
        a, ai = self.sub(env, depth)
        if self.chance(0.04) and self.take_datadep():
            b, _ = self.must_pick(env, atoms=True)
            self.used("datadep")
            return self.choice([f"({a} * {b}.sum().item())", f"({a} + float({b}.mean()))",
                                f"{a}.mul({b}.abs().max().item())"]), ai.like()
        k = self.rng.randrange(7)
        if k == 0:
            return f"({a} * {self.scalar(env)})", ai.like()
        if k == 1:
            return f"({a} + {self.scalar(env)})", ai.like()
        if k == 2:
            return f"({self.scalar(env)} - {a})", ai.like()
        if k == 3:
            return f"({a} / {self.scalar(env, nonzero=True)})", ai.like()
        if k == 4:
            return f"{a}.add({self.scalar(env)})", ai.like()
        if k == 5:
            return f"({self.scalar(env)} * {a} - {self.scalar(env)})", ai.like()
        return f"torch.mul({a}, {self.scalar(env)})", ai.like()

    def dim_of(self, info, extra=0):
        """A random dim index and its code (sometimes negative)."""
        r = info.rank + extra
        d = self.rng.randrange(r)
        code = d - r if self.chance(0.3) else d
        return d, code

    def op_reduce(self, env, depth):
        a, ai = self.sub(env, depth)
        self.used("reduce")
        if ai.rank == 0 or self.chance(0.25):
            tmpl = self.choice(["{a}.sum()", "{a}.mean()", "torch.sum({a})", "{a}.amax()", "{a}.norm()",
                                "{a}.abs().sum()", "torch.mean({a})", "{a}.max()", "{a}.min()"])
            return tmpl.format(a=a), TI((), ai.dtype, ai.grad, True)
        d, dc = self.dim_of(ai)
        keep = self.chance(0.4)
        forms = [f"{a}.sum(dim={dc}, keepdim={keep})", f"{a}.mean(dim={dc}, keepdim={keep})",
                 f"{a}.amax(dim={dc}, keepdim={keep})", f"{a}.amin({dc}, {keep})",
                 f"torch.sum({a}, {dc}, keepdim={keep})", f"torch.mean({a}, dim={dc}, keepdim={keep})",
                 f"{a}.max(dim={dc}, keepdim={keep}).values", f"{a}.min({dc}, keepdim={keep})[0]",
                 f"{a}.logsumexp(dim={dc}, keepdim={keep})", f"{a}.norm(dim={dc}, keepdim={keep})",
                 f"{a}.std(dim={dc}, keepdim={keep})", f"{a}.prod(dim={dc}, keepdim={keep})",
                 f"torch.max({a}, {dc}, {keep})[0]", f"{a}.var({dc}, keepdim={keep})"]
        dtype = ai.dtype
        if self.chance(0.1):
            forms = [f"{a}.argmax(dim={dc}, keepdim={keep}).float()",
                     f"{a}.argmin({dc}, keepdim={keep}).to(torch.float64)"]
            dtype = F32 if "float()" in forms[0] and self.chance(0.5) else None
            code = self.choice(forms)
            dtype = F32 if code.endswith("float()") else F64
        else:
            code = self.choice(forms)
        shape = list(ai.shape)
        if keep:
            shape[d] = ONE
        else:
            shape.pop(d)
        if ai.rank >= 2 and self.chance(0.15):
            d2 = (d + 1) % ai.rank
            code = f"{a}.sum(dim=({d}, {d2}), keepdim={keep})"
            dtype = ai.dtype
            shape = list(ai.shape)
            for dd in sorted((d, d2), reverse=True):
                if keep:
                    shape[dd] = ONE
                else:
                    shape.pop(dd)
        return code, TI(shape, dtype, ai.grad and "arg" not in code, False)

    def op_softmax(self, env, depth):
        a, ai = self.sub(env, depth)
        if ai.rank == 0:
            raise Unfit("rank0")
        self.used("softmax")
        d, dc = self.dim_of(ai)
        tmpl = self.choice(["torch.softmax({a}, dim={d})", "F.softmax({a}, dim={d})", "{a}.softmax({d})",
                            "{a}.log_softmax(dim={d})", "F.log_softmax({a}, {d})", "{a}.cumsum(dim={d})",
                            "torch.cumsum({a}, {d})", "F.normalize({a}, dim={d})", "{a}.flip([{d}])",
                            "torch.flip({a}, dims=({d},))", "{a}.roll(1, {d})",
                            "({a} - {a}.mean(dim={d}, keepdim=True))"])
        return tmpl.format(a=a, d=dc), ai.like(contig=False)

    def op_matmul(self, env, depth):
        a, ai = self.sub(env, depth, atoms=self.chance(0.5))
        if ai.rank == 0:
            raise Unfit("rank0")
        self.used("matmul")
        if ai.rank >= 2 and self.chance(0.3) and a.isidentifier():
            shape = mm_shape(ai.shape, ai.shape[:-2] + (ai.shape[-1], ai.shape[-2]))
            form = self.choice(["({a} @ {a}.transpose(-1, -2))", "torch.matmul({a}, {a}.mT)"])
            return form.format(a=a), TI(shape, ai.dtype, ai.grad)
        cands = []
        for code, bi, _ in self.tensor_cands(env):
            if bi.rank == 0:
                continue
            s = mm_shape(ai.shape, bi.shape)
            if s is not None:
                cands.append((code, bi, s, False))
            if bi.rank >= 2:
                bt = bi.shape[:-2] + (bi.shape[-1], bi.shape[-2])
                s = mm_shape(ai.shape, bt)
                if s is not None:
                    cands.append((code, bi, s, True))
            if ai.rank >= 1 and bi.rank == 2 and bi.shape[1] == ai.shape[-1]:
                cands.append((code, bi, ai.shape[:-1] + (bi.shape[0],), "linear"))
        if not cands:
            raise Unfit("no matmul partner")
        b, bi, shape, tr = self.choice(cands)
        if bi.dtype != ai.dtype:
            b = f"{b}.to({DT_CODE[ai.dtype]})"
        out = TI(shape, ai.dtype, ai.grad or bi.grad)
        if tr == "linear":
            return f"F.linear({a}, {b})", out
        if tr:
            b = self.choice([f"{b}.transpose(-1, -2)", f"{b}.mT"]) if bi.rank > 2 else \
                self.choice([f"{b}.t()", f"{b}.T", f"{b}.transpose(0, 1)"])
        forms = ["({a} @ {b})", "torch.matmul({a}, {b})", "{a}.matmul({b})"]
        if ai.rank == 2 and bi.rank == 2:
            forms += ["torch.mm({a}, {b})", "{a}.mm({b})", "torch.einsum('ij,jk->ik', {a}, {b})"]
        if ai.rank == 3 and bi.rank == 3 and ai.shape[0] == bi.shape[0]:
            forms += ["torch.bmm({a}, {b})"]
        if ai.rank == 1 and bi.rank == 1:
            forms += ["torch.dot({a}, {b})", "{a}.dot({b})"]
        return self.choice(forms).format(a=a, b=b), out

    def op_view(self, env, depth):
        a, ai = self.sub(env, depth, atoms=self.chance(0.6))
        atom = a.isidentifier()
        self.used("view")
        r = ai.rank
        k = self.rng.randrange(11)
        if k == 0 and r >= 2:
            i, j = self.rng.sample(range(r), 2)
            shape = list(ai.shape)
            shape[i], shape[j] = shape[j], shape[i]
            form = self.choice([f"{a}.transpose({i}, {j})", f"torch.transpose({a}, {i}, {j})",
                                f"{a}.swapaxes({i}, {j})"])
            if r == 2:
                form = self.choice([form, f"{a}.t()", f"{a}.T"])
            return form, TI(shape, ai.dtype, ai.grad, False)
        if k == 1 and r >= 2:
            perm = list(range(r))
            self.rng.shuffle(perm)
            shape = [ai.shape[p] for p in perm]
            form = self.choice([f"{a}.permute({', '.join(map(str, perm))})",
                                f"torch.permute({a}, ({', '.join(map(str, perm))},))",
                                f"{a}.permute([{', '.join(map(str, perm))}])"])
            return form, TI(shape, ai.dtype, ai.grad, False)
        if k == 2:
            numel = ai.numel()
            form = self.choice([f"{a}.reshape(-1)", f"{a}.flatten()", f"torch.flatten({a})",
                                f"{a}.reshape({a}.numel())" if atom else f"{a}.reshape(-1)"])
            if ai.contig and atom:
                form = self.choice([form, f"{a}.view(-1)"])
            return form, TI((numel,), ai.dtype, ai.grad, True)
        if k == 3 and r >= 2 and atom:
            i = self.rng.randrange(r - 1)
            merged = tuple(ai.shape[i][v] * ai.shape[i + 1][v] for v in range(NV))
            shape = ai.shape[:i] + (merged,) + ai.shape[i + 2:]
            parts = [f"{a}.shape[{j}]" for j in range(i)] + [f"{a}.shape[{i}] * {a}.shape[{i + 1}]"] + \
                    [f"{a}.size({j})" for j in range(i + 2, r)]
            if self.chance(0.4):
                parts[i] = "-1"
            meth = "view" if ai.contig and self.chance(0.5) else "reshape"
            return f"{a}.{meth}({', '.join(parts)})", TI(shape, ai.dtype, ai.grad, True)
        if k == 4 and r >= 1 and atom:
            i = self.rng.randrange(r)
            if all(d % 2 == 0 for d in ai.shape[i]):
                half = tuple(d // 2 for d in ai.shape[i])
                shape = ai.shape[:i] + (const_dim(2), half) + ai.shape[i + 1:]
                parts = [f"{a}.shape[{j}]" for j in range(i)] + ["2", f"{a}.shape[{i}] // 2"] + \
                        [f"{a}.shape[{j}]" for j in range(i + 1, r)]
                return f"{a}.reshape({', '.join(parts)})", TI(shape, ai.dtype, ai.grad, True)
            if r >= 2:
                return f"torch.flatten({a}, 0, 1)", TI(
                    (tuple(ai.shape[0][v] * ai.shape[1][v] for v in range(NV)),) + ai.shape[2:],
                    ai.dtype, ai.grad, True)
        if k == 5:
            d = self.rng.randrange(r + 1)
            dc = d - (r + 1) if self.chance(0.3) else d
            shape = ai.shape[:d] + (ONE,) + ai.shape[d:]
            form = self.choice([f"{a}.unsqueeze({dc})", f"torch.unsqueeze({a}, {dc})"])
            if d == 0:
                form = self.choice([form, f"{a}[None]"])
            elif d == 1 and r >= 1:
                form = self.choice([form, f"{a}[:, None]"])
            return form, TI(shape, ai.dtype, ai.grad, ai.contig)
        if k == 6:
            ones = [i for i, d in enumerate(ai.shape) if d == ONE]
            if not ones:
                raise Unfit("no 1 dim")
            partial = [i for i, d in enumerate(ai.shape) if 1 in d and d != ONE]
            if not partial and self.chance(0.4):
                shape = tuple(d for d in ai.shape if d != ONE)
                return f"{a}.squeeze()", TI(shape, ai.dtype, ai.grad, ai.contig)
            i = self.choice(ones)
            shape = ai.shape[:i] + ai.shape[i + 1:]
            return self.choice([f"{a}.squeeze({i})", f"torch.squeeze({a}, {i})"]), \
                TI(shape, ai.dtype, ai.grad, ai.contig)
        if k == 7 and atom:
            c, cv = self.choice([("2", const_dim(2))] + ([] if self.helper_depth else [("n", self.n_vals)]))
            shape = (cv,) + ai.shape
            form = self.choice([f"{a}.unsqueeze(0).expand({c}, *{a}.shape)",
                                f"{a}.expand({c}, *{a}.shape)" if r >= 0 else None])
            return form, TI(shape, ai.dtype, ai.grad, False)
        if k == 8 and r >= 1:
            reps = [self.choice([1, 1, 2]) for _ in range(r)]
            shape = tuple(tuple(d[v] * rp for v in range(NV)) for d, rp in zip(ai.shape, reps))
            return f"{a}.repeat({', '.join(map(str, reps))})", TI(shape, ai.dtype, ai.grad, True)
        if k == 9 and r >= 1:
            ones = [i for i, d in enumerate(ai.shape) if d == ONE]
            if ones and atom and not self.helper_depth:
                i = self.choice(ones)
                shape = list(ai.shape)
                shape[i] = self.n_vals
                parts = ["-1"] * r
                parts[i] = "n"
                return f"{a}.expand({', '.join(parts)})", TI(shape, ai.dtype, ai.grad, False)
            return f"{a}.contiguous()", ai.like(contig=True)
        if k == 10 and r >= 1:
            others = [(c, i) for c, i, _ in self.tensor_cands(env)
                      if i.numel() == ai.numel() and i.rank >= 1]
            if others:
                c, oi = self.choice(others)
                if c.isidentifier():
                    meth = "view_as" if ai.contig and self.chance(0.5) and atom else "reshape_as"
                    return f"{a}.{meth}({c})", TI(oi.shape, ai.dtype, ai.grad, True)
        raise Unfit("view")

    def op_slice(self, env, depth):
        a, ai = self.sub(env, depth, atoms=self.chance(0.5))
        if ai.rank == 0:
            raise Unfit("rank0")
        self.used("slice")
        r = ai.rank
        k = self.rng.randrange(8)
        if k <= 3:
            ndims = self.rng.randint(1, min(r, 3))
            lead = self.chance(0.75)
            dims = list(range(ndims)) if lead else list(range(r - ndims, r))
            parts, shape = [], list(ai.shape)
            removed = []
            for d in dims:
                dd = ai.shape[d]
                opts = [(":", dd), ("::2", tuple((x + 1) // 2 for x in dd)), (":1", ONE)]
                if min(dd) >= 2:
                    opts += [("1:", tuple(x - 1 for x in dd)), (":2", const_dim(2)), ("-2:", const_dim(2))]
                if min(dd) >= 3:
                    opts += [("1:-1", tuple(x - 2 for x in dd))]
                idx_opts = [("0", None), ("-1", None)]
                if min(dd) >= 2:
                    idx_opts.append(("1", None))
                if self.chance(0.3):
                    s, _ = self.choice(idx_opts)
                    parts.append(s)
                    removed.append(d)
                else:
                    s, nd = self.choice(opts)
                    parts.append(s)
                    shape[d] = nd
            for d in sorted(removed, reverse=True):
                shape.pop(d)
            if not lead:
                parts = ["..."] + parts
            code = f"{a}[{', '.join(parts)}]"
            return code, TI(shape, ai.dtype, ai.grad, False)
        if k == 4:
            d, dc = self.dim_of(ai)
            shape = list(ai.shape)
            if self.chance(0.5):
                shape[d] = ONE
                return f"{a}.narrow({dc}, 0, 1)", TI(shape, ai.dtype, ai.grad, False)
            shape.pop(d)
            return self.choice([f"{a}.select({dc}, 0)", f"{a}.unbind({dc})[0]",
                                f"torch.select({a}, {dc}, -1)"]), TI(shape, ai.dtype, ai.grad, False)
        if k == 5:
            d, dc = self.dim_of(ai)
            shape = list(ai.shape)
            if self.chance(0.5):
                shape[d] = tuple((x + 1) // 2 for x in ai.shape[d])
                return f"{a}.chunk(2, dim={dc})[0]", TI(shape, ai.dtype, ai.grad, False)
            shape[d] = ONE
            return f"{a}.split(1, dim={dc})[-1]", TI(shape, ai.dtype, ai.grad, False)
        if k == 6:
            # index with a Python int variable whose value is in range in every variant
            dd = ai.shape[0]
            opts = [(c, v) for c, v in self.int_atoms(env)
                    if all(-dd[i] <= v[i] < dd[i] for i in range(NV))]
            if opts:
                c, _ = self.choice(opts)
                return f"{a}[{c}]", TI(ai.shape[1:], ai.dtype, ai.grad, False)
            raise Unfit("no index")
        if min(ai.shape[0]) >= 2:
            self.used("slice")
            return f"{a}[[0, 1]]", TI((const_dim(2),) + ai.shape[1:], ai.dtype, ai.grad, True)
        raise Unfit("slice")

    def op_cat(self, env, depth):
        a, ai = self.sub(env, depth)
        self.used("catstack")
        lists = [v for v in env.of("l") if v.length and min(v.length) >= 1]
        if lists and self.chance(0.3):
            lv = self.choice(lists)
            ei = lv.elem
            if self.chance(0.5) or ei.rank == 0:
                d = self.rng.randrange(ei.rank + 1)
                shape = ei.shape[:d] + (lv.length,) + ei.shape[d:]
                return f"torch.stack({lv.name}, dim={d})", TI(shape, ei.dtype, ei.grad, True)
            d = self.rng.randrange(ei.rank)
            shape = list(ei.shape)
            shape[d] = tuple(ei.shape[d][v] * lv.length[v] for v in range(NV))
            return f"torch.cat({lv.name}, dim={d})", TI(shape, ei.dtype, ei.grad, True)
        if ai.rank == 0 or self.chance(0.3):
            b, bi = self.like(env, ai, depth)
            d = self.rng.randrange(ai.rank + 1)
            shape = ai.shape[:d] + (const_dim(2),) + ai.shape[d:]
            form = self.choice([f"torch.stack([{a}, {b}], dim={d})", f"torch.stack(({a}, {b}), {d})"])
            return form, TI(shape, ai.dtype, ai.grad or bi.grad, True)
        d, dc = self.dim_of(ai)
        partners = []
        for code, bi, _ in self.tensor_cands(env):
            if bi.rank == ai.rank and all(bi.shape[i] == ai.shape[i] for i in range(ai.rank) if i != d):
                partners.append((code, bi))
        if partners and self.chance(0.6):
            b, bi = self.choice(partners)
        else:
            b, bi = self.like(env, ai, depth)
        shape = list(ai.shape)
        shape[d] = tuple(ai.shape[d][v] + bi.shape[d][v] for v in range(NV))
        form = self.choice([f"torch.cat([{a}, {b}], dim={dc})", f"torch.cat(({a}, {b}), {dc})",
                            f"torch.concat([{a}, {b}], {dc})"])
        if self.allow("callforms") and self.chance(0.15):
            self.used("callforms")
            form = self.choice([f"torch.cat(*([{a}, {b}],), dim={dc})", f"torch.cat([{a}, {b}], **{{'dim': {dc}}})",
                                f"torch.cat(*[[{a}, {b}], {dc}])"])
        return form, TI(shape, promote(ai, bi), ai.grad or bi.grad, True)

    def op_where(self, env, depth):
        a, ai = self.sub(env, depth)
        self.used("where")
        b, bi = self.must_pick(env, pred=lambda t: bcast(ai.shape, t.shape) is not None)
        shape = bcast(ai.shape, bi.shape)
        cond = self.choice([f"{a} > {b}", f"{a} > 0", f"{b}.abs() < 0.5", f"({a} > 0) & ({b} < 1)",
                            f"~({a} < {b})"])
        if self.chance(0.5):
            return f"torch.where({cond}, {a}, {b})", TI(shape, promote(ai, bi), ai.grad or bi.grad)
        if cond.startswith(f"{b}.abs") or "&" in cond or cond.startswith("~") or f"> {b}" in cond:
            cond = f"{a} > 0"
        return self.choice([f"{a}.masked_fill({cond}, 0.0)", f"torch.where({cond}, {a}, -1.0)",
                            f"torch.where({cond}, 1.0, {a})"]), ai.like()

    def op_factory(self, env, depth):
        self.used("factory")
        k = self.rng.randrange(9)
        a, ai = self.must_pick(env, atoms=True)
        if k == 0:
            return self.choice([f"torch.zeros_like({a})", f"torch.ones_like({a})",
                                f"torch.full_like({a}, 0.5)"]), ai.like(grad=False, contig=ai.contig)
        if k == 1:
            return f"torch.zeros({a}.shape, dtype={a}.dtype)", ai.like(grad=False, contig=True)
        if k == 2:
            c, v = self.choice(self.int_atoms(env))
            if min(v) < 1 or max(v) > 64:
                raise Unfit("arange")
            form = self.choice([f"torch.arange({c}, dtype=torch.float32)", f"torch.arange({c}).float()",
                                f"torch.arange(0, {c}, dtype=torch.float64)"])
            return form, TI((v,), F64 if "float64" in form else F32, False, True)
        if k == 3 and ai.rank >= 1:
            c, v = self.choice(self.int_atoms(env))
            if min(v) < 1 or max(v) > 64:
                raise Unfit("ones")
            d0 = ai.shape[0]
            return f"torch.ones({a}.shape[0], {c})", TI((d0, v), F32, False, True)
        if k == 4 and ai.rank >= 1:
            return f"torch.linspace(0.0, 1.0, {a}.shape[-1], dtype={a}.dtype)", TI((ai.shape[-1],), ai.dtype)
        if k == 5 and ai.rank >= 1:
            d = ai.shape[-1]
            return f"torch.eye({a}.shape[-1], dtype={a}.dtype)", TI((d, d), ai.dtype, False, True)
        if k == 6:
            return self.choice([("torch.tensor([1.0, -2.0, 0.5])", TI((const_dim(3),), F32, False, True)),
                                ("torch.tensor(float(CONFIG['k']))", TI((), F32, False, True)),
                                ("torch.tensor(2.5, dtype=torch.float64)", TI((), F64, False, True))])
        if k == 7:
            return f"{a}.new_zeros({a}.shape)", ai.like(grad=False, contig=True)
        if ai.rank >= 2 and self.chance(0.4):
            return self.choice([f"torch.zeros({a}.shape[:-1] + (2,), dtype={a}.dtype)",
                                f"{a}.new_ones(torch.Size([2]) + {a}.shape[1:])"]), \
                (TI(ai.shape[:-1] + (const_dim(2),), ai.dtype, False, True))
        if ai.rank >= 1:
            return f"torch.full(({a}.shape[0], 2), 0.25, dtype=torch.float64)", \
                TI((ai.shape[0], const_dim(2)), F64, False, True)
        raise Unfit("factory")

    def op_dtype(self, env, depth):
        a, ai = self.sub(env, depth)
        self.used("dtype")
        k = self.rng.randrange(5)
        if k == 0:
            return f"{a}.double()", ai.like(dtype=F64)
        if k == 1:
            return f"{a}.float()", ai.like(dtype=F32)
        if k == 2:
            dt = self.choice([F32, F64])
            return f"{a}.to({DT_CODE[dt]})", ai.like(dtype=dt)
        b, bi = self.must_pick(env, atoms=True)
        if k == 3:
            return f"{a}.type_as({b})", ai.like(dtype=bi.dtype)
        return f"{a}.to({b}.dtype)", ai.like(dtype=bi.dtype)

    def op_module(self, env, depth):
        a, ai = self.sub(env, depth)
        self.used("modules")
        k = self.rng.randrange(4)
        if k == 0:
            return f"ACT({a})", ai.like(contig=False)
        if k == 1 and ai.rank >= 1:
            return f"SM({a})", ai.like(contig=False)
        if k == 2 and ai.rank >= 1 and ai.dtype == F32:
            return f"PRELU({a})", ai.like(grad=True, contig=False)
        return f"SEQ({a})", ai.like(contig=False)

    def op_list(self, env, depth):
        lists = [v for v in env.of("l") if v.length and min(v.length) >= 1]
        if not lists:
            raise Unfit("no list")
        lv = self.choice(lists)
        ei = lv.elem
        k = self.rng.randrange(5 if self.allow("callforms") else 4)
        if k == 4:
            self.used("callforms")
            return self.choice([f"functools.reduce(operator.add, {lv.name})",
                                f"functools.reduce(lambda p, q: p * 0.5 + q, {lv.name})"]), ei.like(contig=False)
        if k == 0:
            return f"sum({lv.name})", ei.like(contig=False)
        if k == 1:
            return f"{lv.name}[len({lv.name}) - 1]", ei.like()
        if k == 2:
            self.used("catstack")
            return f"torch.stack({lv.name}).sum(0)", ei.like(contig=True)
        return f"({lv.name}[0] * len({lv.name}))", ei.like()

    def like(self, env, target, depth, avoid=None):
        """An expression with exactly target's shape and dtype."""
        cands = self.tensor_cands(env, pred=lambda t: t.same(target))
        if not cands:
            raise Unfit("no same-shape value")
        code, info = self.wchoice([((c, i), w) for c, i, w in cands])
        grad = info.grad
        steps = self.rng.randint(0, 2) if depth > 0 else self.rng.randint(0, 1)
        for _ in range(steps):
            code, g = self.like_step(env, code, target)
            grad = grad or g
        return code, TI(target.shape, target.dtype, grad, False)

    def like_step(self, env, c, target):
        r = target.rank
        k = self.rng.randrange(10)
        if k <= 2:
            tmpl = self.choice(self.UNARY[:30])
            return tmpl.format(a=c), False
        if k == 3:
            return f"({c} * {self.scalar(env)} + {self.scalar(env)})", False
        if k <= 5:
            b, bi = self.must_pick(env, pred=lambda t: bcast(t.shape, target.shape) == target.shape)
            if promote(target, bi) != target.dtype:
                b = f"{b}.to({DT_CODE[target.dtype]})"
            op = self.choice(["+", "-", "*"])
            return f"({c} {op} {b})", bi.grad
        if k == 6 and r >= 1 and self.allow("softmax"):
            d, dc = self.dim_of(target)
            return self.choice([f"torch.softmax({c}, dim={dc})", f"{c}.cumsum({dc})",
                                f"({c} - {c}.mean(dim={dc}, keepdim=True))",
                                f"({c} / ({c}.norm(dim={dc}, keepdim=True) + 1.0))"]), False
        if k == 7 and self.allow("where"):
            b, bi = self.must_pick(env, pred=lambda t: bcast(t.shape, target.shape) == target.shape)
            if promote(target, bi) != target.dtype:
                b = f"{b}.to({DT_CODE[target.dtype]})"
            return f"torch.where({c} > 0, {c}, {b})", bi.grad
        if k == 8 and r >= 2 and target.shape[-1] == target.shape[-2] and self.allow("matmul"):
            return f"({c} @ {c}.transpose(-1, -2)).tanh()", False
        if k == 9 and r >= 1 and min(target.shape[0]) >= 2 and self.allow("slice") and self.allow("catstack"):
            if self.chance(0.3):
                return self.choice([f"{c}[torch.arange({c}.shape[0]).flip(0)]",
                                    f"{c}.index_select(0, torch.arange({c}.shape[0] - 1, -1, -1))",
                                    f"torch.gather({c}, 0, torch.zeros_like({c}, dtype=torch.long))"]), False
            return f"torch.cat([{c}[1:], {c}[:1]], dim=0)", False
        return f"{c}.clamp(-3.0, 3.0)", False

    # ----------------------------------------------------------- statements
    def new_tensor(self, env, code, info, prefix="t"):
        name = self.fresh(prefix)
        self.emit(f"{name} = {code}")
        env.add(Var("t", name, info))
        return name

    def updatable(self, env):
        return [v for v in env.of("t") if v.name not in env.noupdate]

    def st_update(self, env):
        vs = self.updatable(env)
        if not vs:
            raise Unfit("nothing to update")
        var = self.choice(vs[-6:])
        code, info = self.like(env, var.info, 2)
        if self.chance(0.15):
            op = self.choice(["+", "-", "*"])
            b, bi = self.must_pick(env, pred=lambda t: bcast(t.shape, var.info.shape) == var.info.shape
                                   and promote(var.info, t) == var.info.dtype)
            # augmented assignment on a tensor name is in place; only for names we own
            if var.name.startswith("w"):
                self.emit(f"{var.name} {op}= {b}")
                return
            self.emit(f"{var.name} = {var.name} {op} {b}")
            var.info = var.info.like(grad=var.info.grad or bi.grad, contig=False)
            return
        self.emit(f"{var.name} = {code}")
        var.info = var.info.like(grad=var.info.grad or info.grad, contig=False)

    def st_new(self, env):
        code, info = self.texpr(env, self.rng.randint(1, 3))
        if code.isidentifier() or code.endswith("]"):
            code, info = self.texpr(env, self.rng.randint(1, 3))
        self.new_tensor(env, code, info)

    def st_inplace(self, env):
        src, si = self.must_pick(env)
        if si.rank == 0 and self.chance(0.5):
            raise Unfit("rank0")
        self.used("inplace")
        name = self.fresh("w")
        init = self.choice([f"{src}.clone()", f"{src}.clone()", f"{src}.detach().clone()",
                            f"torch.zeros_like({src})", f"{src}.clone().contiguous()"])
        self.emit(f"{name} = {init}")
        info = si.like(grad=si.grad and "detach" not in init and "zeros" not in init)
        if "contiguous" in init or "zeros" in init:
            info.contig = True
        var = Var("t", name, info)
        env.add(var)
        for _ in range(self.rng.randint(1, 3)):
            k = self.rng.randrange(13)
            r = var.info.rank
            if k == 0:
                b, bi = self.must_pick(env, pred=lambda t: bcast(t.shape, var.info.shape) == var.info.shape)
                self.emit(f"{name}.add_({b}{', alpha=0.5' if self.chance(0.3) else ''})")
                var.info.grad |= bi.grad
            elif k == 1:
                self.emit(f"{name}.mul_({self.scalar(env)})")
            elif k == 2:
                b, bi = self.must_pick(env, pred=lambda t: bcast(t.shape, var.info.shape) == var.info.shape)
                self.emit(f"{name} {self.choice(['+=', '-=', '*='])} {b}")
                var.info.grad |= bi.grad
            elif k == 3:
                self.emit(self.choice([f"{name}.clamp_(-1.0, 1.0)", f"{name}.relu_()", f"{name}.abs_()",
                                       f"{name}.tanh_()", f"{name}.neg_()"]))
            elif k == 4 and r >= 1:
                self.emit(f"{name}[0] = {self.scalar(env, small=True)}")
            elif k == 5 and r >= 2:
                self.emit(f"{name}[:, 0] = {self.scalar(env, small=True)}")
            elif k == 6 and r >= 1 and min(var.info.shape[0]) >= 2:
                self.emit(f"{name}[1:] {self.choice(['*=', '+=', '-='])} {self.scalar(env, small=True)}")
            elif k == 7 and r >= 1:
                view = self.fresh("w")
                vk = self.rng.randrange(3)
                if vk == 0:
                    self.emit(f"{view} = {name}[0]")
                    vinfo = TI(var.info.shape[1:], var.info.dtype, var.info.grad)
                elif vk == 1 and var.info.contig:
                    self.emit(f"{view} = {name}.view(-1)")
                    vinfo = TI((var.info.numel(),), var.info.dtype, var.info.grad, True)
                else:
                    self.emit(f"{view} = {name}.unsqueeze(0)")
                    vinfo = TI((ONE,) + var.info.shape, var.info.dtype, var.info.grad)
                self.emit(self.choice([f"{view}.mul_(2)", f"{view}.add_(1.0)", f"{view}.zero_()",
                                       f"{view}.fill_(0.5)", f"{view}.sub_({self.scalar(env)})"]))
                env.add(Var("t", view, vinfo))
            elif k == 8:
                b, bi = self.must_pick(env, pred=lambda t: bcast(t.shape, var.info.shape) == var.info.shape)
                self.emit(f"{name}.copy_({b})")
                var.info.grad |= bi.grad
            elif k == 9:
                self.emit(self.choice([f"{name}.masked_fill_({name} > 0.5, 0.0)", f"{name}[{name} > 0.5] = 0.0",
                                       f"{name}[{name} < 0] *= 2"]))
            elif k == 12 and r >= 2:
                self.emit(self.choice([f"{name}[..., 0] = {name}[..., -1]", f"{name}[:, [0]] = 1.0",
                                       f"{name}.index_fill_(0, torch.tensor([0]), 1.0)",
                                       f"{name}[0] += {name}[-1]"]))
            elif k == 10:
                self.emit(f"torch.add({name}, 1.0, out={name})" if self.chance(0.3) and not var.info.grad
                          else f"{name}.sub_(0.25)")
            else:
                self.emit(f"{name}.fill_({self.scalar(env, small=True)})" if self.chance(0.3)
                          else f"{name}.div_(2.0)")

    def cond_py(self, env):
        c = []
        if not self.helper_depth:
            c.append(self.choice(["flag", "not flag", "flag and n > 1", "flag or n == 2"]))
            c.append(f"n > {self.rng.randint(1, 4)}")
            c.append(self.choice(["n % 2 == 0", "n >= 2", "n < 3", "n in (1, 3)", "1 <= n < 3",
                                  "type(n) is int", "0 < len(xs) <= 2"]))
            c.append(self.choice(["len(xs) > 1", "len(xs) >= 2", "len(xs) == 1", "any([flag, n > 3])",
                                  "all(q.dim() > 0 for q in xs)" if self.allow("genexpr") else "len(xs) > 2"]))
            if self.allow("walrus") and self.chance(0.15):
                self.used("walrus")
                c = [f"({self.fresh('kw')} := n * 2) > {self.rng.randint(2, 7)}"]
        t = self.pick(env, atoms=True)
        if t:
            a, ai = t
            if ai.rank:
                c.append(f"{a}.shape[0] > {self.rng.randint(2, 5)}")
                c.append(f"{a}.size(-1) % 2 == 0")
            c.append(self.choice([f"{a}.dim() == 2", f"{a}.ndim >= 2", f"{a}.numel() > 10",
                                  f"{a}.dtype == torch.float32", f"{a}.requires_grad",
                                  f"{a}.is_contiguous()", f"{a}.is_floating_point()",
                                  f"isinstance({a}, torch.Tensor)", f"{a}.dtype is torch.float64",
                                  f"{a}.shape[-1:] == ({a}.shape[-1],)" if ai.rank else f"{a}.dim() == 0",
                                  f"0 < {a}.dim() <= 2", f"{a}.device.type == 'cpu'",
                                  f"type({a}) is torch.Tensor"] + ([f"{a}.is_leaf"] if self.allow("is_leaf") else [])))
            u = self.pick(env, atoms=True)
            if u:
                c.append(f"{a}.shape == {u[0]}.shape")
        for var in env.of("i"):
            c.append(f"{var.name} > {self.rng.randint(0, 6)}")
        for var in env.of("b"):
            c.append(var.name if self.chance(0.5) else f"not {var.name}")
        for var in env.of("d"):
            c.append(f"{self.choice(['a', 'b', 'c', 'z'])!r} in {var.name}")
        if self.chance(0.1):
            c.append("torch.is_grad_enabled()")
        if not self.helper_depth:
            c.append("isinstance(n, int)")
        if not c:
            c.append("CONFIG['k'] == 2")
        self.used("if")
        return self.choice(c)

    # Thresholds sit off 0: the sum or mean of centred values is 0 up to
    # rounding, and a fused kernel rounds differently from eager, so a branch
    # on its sign would pick sides by chance (seed 6418 once did).
    def cond_data(self, env):
        a, ai = self.must_pick(env, atoms=True)
        self.used("datadep")
        return self.choice([f"{a}.sum() > 0.25", f"({a} > 0).any()", f"{a}.max().item() > 0.5",
                            f"bool({a}.mean() < -0.25)", f"torch.all({a} < 10)", f"{a}.abs().sum().item() > 1.0"])

    def take_datadep(self):
        if self.datadep_left > 0 and self.allow("datadep"):
            self.datadep_left -= 1
            return True
        return False

    def block(self, env, nstmts, ctx):
        """Emits an indented block; variables made inside are forgotten."""
        inner = Env(env)
        self.ind += 1
        start = len(self.out)
        for _ in range(nstmts):
            self.inner_stmt(inner, ctx)
        if len(self.out) == start:
            self.emit("pass")
        self.ind -= 1

    def inner_stmt(self, env, ctx):
        kinds = [("update", 10), ("temp", 3), ("if", 1.5 if ctx.get("depth", 0) < 2 else 0),
                 ("break", 1.2 if ctx.get("loop") else 0), ("continue", 0.8 if ctx.get("loop") else 0),
                 ("counter", 1 if [v for v in env.of("i") if v.mutable and v.name not in env.noupdate] else 0),
                 ("append", 2 if ctx.get("outs") else 0),
                 ("loop", 0.8 if ctx.get("depth", 0) < 2 and not self.helper_depth and self.allow("nested")
                  and self.allow("for_range") and self.allow("for_list") else 0),
                 ("call", 1.2 if not self.helper_depth and self.allow("nested") else 0)]
        for _ in range(6):
            k = self.wchoice(kinds)
            mark = len(self.out)
            try:
                if k == "update":
                    self.st_update(env)
                elif k == "temp":
                    code, info = self.texpr(env, 2)
                    self.new_tensor(env, code, info, "u")
                elif k == "if":
                    sub = dict(ctx, depth=ctx.get("depth", 0) + 1, outs=None)
                    if self.take_datadep():
                        cond = self.cond_data(env)
                    else:
                        cond = self.cond_py(env)
                    self.emit(f"if {cond}:")
                    self.block(env, self.rng.randint(1, 2), sub)
                    if self.chance(0.4):
                        self.emit("else:")
                        self.block(env, 1, sub)
                elif k in ("break", "continue"):
                    lv = ctx.get("loopvar")
                    conds = ["flag", "n > 2", "len(xs) > 2"]
                    if lv:
                        conds += [f"{lv} == 1", f"{lv} >= 2", f"{lv} % 2 == 1"]
                    self.emit(f"if {self.choice(conds)}:")
                    self.ind += 1
                    self.emit(k)
                    self.ind -= 1
                    ctx.setdefault("state", {})["jumped"] = True
                elif k == "counter":
                    var = self.choice([v for v in env.of("i") if v.mutable and v.name not in env.noupdate])
                    self.emit(f"{var.name} += {self.choice(['1', 'n', '2'])}")
                    var.vals = None
                elif k == "loop":
                    self.used("nested")
                    if self.chance(0.5):
                        self.st_for_range(env, depth=ctx.get("depth", 0) + 1)
                    else:
                        self.st_for_list(env, depth=ctx.get("depth", 0) + 1)
                elif k == "call":
                    self.used("nested")
                    fns = [v for v in env.of("fn")]
                    if fns and self.chance(0.6):
                        fv = self.choice(fns)
                        a, ai = self.must_pick(env, pred=lambda t: t.same(fv.info))
                        self.new_tensor(env, f"{fv.name}({a})", fv.elem.like(), "u")
                    elif self.allow("helper"):
                        self.st_helper(env)
                    else:
                        raise Unfit("no call")
                elif k == "append":
                    lv = ctx["outs"]
                    code, info = self.like(env, lv.elem, 1)
                    self.emit(f"{lv.name}.append({code})")
                    st = ctx.setdefault("state", {})
                    st["appended"] = st.get("appended", 0) + 1
                return
            except Unfit:
                del self.out[mark:]
                continue

    def st_if(self, env):
        kind = self.rng.randrange(4)
        if kind == 0 and self.take_datadep():
            cond = self.cond_data(env)
        else:
            cond = self.cond_py(env)
        ctx = {"depth": 1}
        self.emit(f"if {cond}:")
        self.block(env, self.rng.randint(1, 3), ctx)
        if self.chance(0.3):
            self.emit(f"elif {self.cond_py(env)}:")
            self.block(env, self.rng.randint(1, 2), ctx)
        if self.chance(0.5):
            self.emit("else:")
            self.block(env, self.rng.randint(1, 2), ctx)

    def st_ifexp(self, env):
        a, ai = self.must_pick(env)
        b, bi = self.like(env, ai, 1)
        self.used("ifexp")
        cond = self.cond_py(env)
        name = self.fresh("t")
        self.emit(f"{name} = {a} if {cond} else {b}")
        env.add(Var("t", name, ai.like(grad=ai.grad or bi.grad, contig=False)))

    def maybe_outs(self, env):
        """Sometimes a list collecting one value per iteration of the next loop."""
        if not self.chance(0.35):
            return None
        a, ai = self.must_pick(env)
        name = self.fresh("outs")
        self.emit(f"{name} = []")
        return Var("l", name, elem=ai.like(contig=False), length=None, mutable=True)

    def finish_outs(self, env, outs, ctx, iters):
        if outs is None:
            return
        st = ctx.get("state", {})
        if st.get("appended") == 1 and not st.get("jumped") and iters is not None and min(iters) >= 1:
            outs.length = iters
        env.add(outs)

    def st_for_range(self, env, depth=1):
        self.used("for_range")
        i = self.fresh("i")
        ranges = [("range(n)", self.n_vals), ("range(len(xs))", env.vars["xs"].length),
                  ("range(1, n + 1)", self.n_vals), ("range(2)", const_dim(2)),
                  ("range(0, n, 2)", tuple((v + 1) // 2 for v in self.n_vals)),
                  ("reversed(range(n))", self.n_vals)]
        t = self.pick(env, atoms=True, pred=lambda t: t.rank >= 1 and max(t.shape[0]) <= 8)
        if t:
            ranges.append((f"range({t[0]}.shape[0])", t[1].shape[0]))
        for var in env.of("i"):
            if var.vals is not None and 0 <= min(var.vals) and max(var.vals) <= 8:
                ranges.append((f"range({var.name})", var.vals))
        rcode, iters = self.choice(ranges)
        if rcode == "range(len(xs))" and env.vars["xs"].length is None:
            raise Unfit("xs length unknown")
        outs = self.maybe_outs(env)
        self.emit(f"for {i} in {rcode}:")
        inner = Env(env)
        inner.add(Var("i", i, vals=None))
        inner.noupdate.add(i)
        ctx = {"loop": True, "loopvar": i, "depth": depth, "outs": outs, "state": {}}
        if rcode == "range(len(xs))" and self.chance(0.6):
            self.ind += 1
            e = self.fresh("e")
            self.emit(f"{e} = xs[{i}]")
            inner.add(Var("t", e, env.vars["xs"].elem))
            self.ind -= 1
        # body: make the loop var matter
        self.ind += 1
        self.emit_loop_use(inner, i)
        self.ind -= 1
        self.block(inner, self.rng.randint(1, 3), ctx)
        self.loop_else(env, depth)
        self.finish_outs(env, outs, ctx, iters)

    def loop_else(self, env, depth):
        if self.allow("loop_else") and self.chance(0.12):
            self.used("loop_else")
            self.emit("else:")
            self.block(env, 1, {"depth": depth + 1})

    def emit_loop_use(self, env, ivar):
        vs = self.updatable(env)
        if vs and self.chance(0.7):
            var = self.choice(vs[-5:])
            form = self.choice([f"{var.name} = {var.name} + {ivar}", f"{var.name} = {var.name} * 0.5 + {ivar} * 0.1",
                                f"{var.name} = {var.name} - {var.name} / ({ivar} + 2)"])
            self.emit(form)
            var.info = var.info.like(contig=False)

    def st_for_list(self, env, depth=1):
        self.used("for_list")
        lists = [v for v in env.of("l") if v.elem is not None]
        lv = self.choice(lists)
        e = self.fresh("e")
        inner = Env(env)
        inner.noupdate.add(e)
        k = self.rng.randrange(6)
        idx = None
        iters = lv.length
        if k == 0:
            header = f"for {e} in {lv.name}:"
        elif k == 1:
            idx = self.fresh("i")
            header = f"for {idx}, {e} in enumerate({lv.name}):"
        elif k == 2:
            header = f"for {e} in reversed({lv.name}):"
        elif k == 3:
            header = f"for {e} in {lv.name}[1:]:"
            iters = None
        elif k == 4:
            others = [v for v in lists if v is not lv]
            if not others:
                header = f"for {e} in {lv.name}:"
            else:
                ov = self.choice(others)
                f2 = self.fresh("e")
                header = f"for {e}, {f2} in zip({lv.name}, {ov.name}):"
                inner.add(Var("t", f2, ov.elem))
                inner.noupdate.add(f2)
                iters = None if (lv.length is None or ov.length is None) else \
                    tuple(min(a, b) for a, b in zip(lv.length, ov.length))
        else:
            idx = self.fresh("i")
            header = f"for {idx}, {e} in enumerate({lv.name}, 1):"
        outs = self.maybe_outs(env)
        self.emit(header)
        inner.add(Var("t", e, lv.elem))
        if idx:
            inner.add(Var("i", idx, vals=None))
            inner.noupdate.add(idx)
        ctx = {"loop": True, "loopvar": idx, "depth": depth, "outs": outs, "state": {}}
        self.ind += 1
        # use the element
        vs = [v for v in self.updatable(inner)
              if bcast(lv.elem.shape, v.info.shape) == v.info.shape and v.name != e]
        if vs:
            var = self.choice(vs[-5:])
            b = e if promote(var.info, lv.elem) == var.info.dtype else f"{e}.to({DT_CODE[var.info.dtype]})"
            self.emit(f"{var.name} = {var.name} + {b}" + (f" * {idx}" if idx and self.chance(0.5) else ""))
            var.info = var.info.like(grad=var.info.grad or lv.elem.grad, contig=False)
        self.ind -= 1
        self.block(inner, self.rng.randint(0, 2), ctx)
        self.loop_else(env, depth)
        self.finish_outs(env, outs, ctx, iters)

    def st_while(self, env):
        self.used("while")
        w = self.fresh("c")
        bound = self.choice(["n", "len(xs)", "3", "n + 1"])
        if self.chance(0.15) and self.take_datadep():
            a, _ = self.must_pick(env, atoms=True)
            self.emit(f"{w} = 0")
            self.emit(f"while {a}.abs().sum() > 1.0 and {w} < 3:")
            self.ind += 1
            self.emit(f"{w} += 1")
            vs = [v for v in self.updatable(env) if v.name == a]
            if vs:
                self.emit(f"{a} = {a} * 0.5")
            self.ind -= 1
            self.block(env, 1, {"loop": True, "loopvar": w, "depth": 1})
            env.add(Var("i", w, vals=None))
            return
        self.emit(f"{w} = 0")
        self.emit(f"while {w} < {bound}:")
        inner = Env(env)
        inner.add(Var("i", w, vals=None))
        inner.noupdate.add(w)
        self.ind += 1
        self.emit(f"{w} += 1")
        self.emit_loop_use(inner, w)
        self.ind -= 1
        self.block(inner, self.rng.randint(1, 2), {"loop": True, "loopvar": w, "depth": 1})
        self.loop_else(env, 1)
        env.add(Var("i", w, vals=None))

    # ----------------------------------------------------------- functions
    def st_helper(self, env):
        self.used("helper")
        if self.helper_depth >= 2:
            raise Unfit("helper depth")
        # reuse a helper whose parameters match values at hand
        cands = []
        for name, sig in self.helpers:
            args = []
            for pinfo in sig["params"]:
                m = self.tensor_cands(env, pred=lambda t, p=pinfo: t.same(p))
                if not m:
                    break
                args.append(self.choice(m)[0])
            else:
                cands.append((name, sig, args))
        if cands and self.chance(0.5):
            name, sig, args = self.choice(cands)
        else:
            name, sig, args = self.make_helper(env)
        call = self.helper_call(env, name, sig, args)
        rets = sig["returns"]
        if len(rets) == 1:
            self.new_tensor(env, call, rets[0].like())
        elif self.chance(0.6):
            names = [self.fresh("t") for _ in rets]
            self.emit(f"{', '.join(names)} = {call}")
            for nm, ri in zip(names, rets):
                env.add(Var("t", nm, ri.like()))
        else:
            i = self.rng.randrange(len(rets))
            self.new_tensor(env, f"{call}[{i}]", rets[i].like())

    def helper_call(self, env, name, sig, args):
        k = self.rng.randrange(6)
        extra = []
        if sig["kind"] == "varargs":
            return f"{name}({', '.join(args)})" if k else f"{name}(*[{', '.join(args)}])"
        if sig["kind"] == "stateful":
            return f"{name}({args[0]})"
        if sig["kind"] == "factory":
            return f"{name}({self.scalar(env, small=True)})({args[0]})" if k % 2 else \
                f"{name}(k={self.scalar(env, small=True)})({args[0]}, bias=0.5)"
        if sig["kind"] == "plain" and self.allow("callforms") and self.chance(0.15):
            self.used("callforms")
            if sig["posonly"] or self.chance(0.5):
                return f"{name}(*[{', '.join(args)}], shift={self.scalar(env, small=True)})"
            kw = ", ".join(f"{p!r}: {a}" for p, a in zip(sig["pnames"], args))
            return f"{name}(**{{{kw}}})"
        if sig["kind"] == "recursive":
            return f"{name}({args[0]}, {self.choice(['2', '3'] if self.helper_depth else ['2', '3', 'n'])})"
        if k == 1:
            extra.append(self.scalar(env, small=True))
        elif k == 2:
            extra.append(f"shift={self.scalar(env, small=True)}")
        elif k == 3:
            extra.append(f"scale={self.scalar(env, small=True)}")
            extra.append(f"shift={self.scalar(env, small=True)}")
        elif k == 4 and len(args) >= 1 and not sig["posonly"]:
            kw = ", ".join(f"{p}={a}" for p, a in zip(sig["pnames"], args))
            return f"{name}({kw})"
        elif k == 5:
            opts = self.fresh("opts")
            self.emit(f"{opts} = {{'shift': {self.scalar(env, small=True)}}}")
            return f"{name}({', '.join(args)}, **{opts})"
        return f"{name}({', '.join(args + extra)})"

    def make_helper(self, env):
        name = self.fresh("helper")
        nparams = self.rng.randint(1, 3)
        args, params = [], []
        for _ in range(nparams):
            a, ai = self.must_pick(env)
            args.append(a)
            params.append(ai.like())
        pnames = [f"p{i}" for i in range(nparams)]
        kind = self.rng.choices(["plain", "varargs", "recursive", "stateful", "factory"],
                                weights=[8, 1, 1, 1 if self.allow("global_state") else 0,
                                         1 if self.allow("callforms") else 0])[0]
        posonly = False
        if kind == "varargs":
            params = [params[0]] * nparams
            first, args = args[0], []
            for _ in range(nparams):
                m = self.tensor_cands(env, pred=lambda t: t.same(params[0]))
                # The first pick may be an expression no variable matches.
                args.append(self.choice(m)[0] if m else first)
        saved_out, saved_ind = self.out, self.ind
        self.out, self.ind = [], 1
        self.helper_depth += 1
        try:
            henv = Env()
            for p, pi in zip(pnames, params):
                henv.add(Var("t", p, pi))
            if kind == "varargs":
                header = f"def {name}(*ts):"
                self.emit(f"acc = ts[0]")
                self.emit("for t in ts[1:]:")
                self.emit(f"    acc = acc {self.choice(['+', '*', '-'])} t")
                self.emit(f"return {self.choice(['acc', 'acc.relu()', 'acc / len(ts)'])}")
                returns = [params[0].like(grad=any(p.grad for p in params))]
            elif kind == "factory":
                self.used("callforms")
                header = f"def {name}(k):"
                self.emit("def inner(t, bias=1.0):")
                self.emit(f"    return {self.choice(['t * k + bias', '(t - bias).tanh() * k', 't.relu() * k'])}")
                self.emit("return inner")
                returns = [params[0].like(contig=False)]
                args = args[:1]
                params = params[:1]
            elif kind == "stateful":
                header = f"def {name}(p0, seen={{}}):"
                self.emit(f"seen[len(seen)] = p0.dim()")
                self.emit(f"return p0 * len(seen)")
                returns = [params[0].like(contig=False)]
                args = args[:1]
                params = params[:1]
                self.stateful = True
                self.used("global_state")
            elif kind == "recursive":
                p = params[0]
                header = f"def {name}(t, depth):"
                self.emit("if depth <= 0:")
                self.emit("    return t")
                self.emit(f"return {name}({self.choice(['t * 0.5 + 1', 't.tanh()', '(t - t.mean())'])}, depth - 1)")
                returns = [p.like(contig=False)]
                args = args[:1]
                params = params[:1]
            else:
                posonly = self.allow("callforms") and self.chance(0.15)
                plist = pnames[:1] + ["/"] + pnames[1:] if posonly else pnames
                header = f"def {name}({', '.join(plist)}, scale={self.scalar(env, small=True)}, *, shift=0.5):"
                henv.add(Var("f", "scale", nz=False))
                henv.add(Var("f", "shift", nz=False))
                if self.allow("global_state") and self.allow("globals") and self.chance(0.15):
                    self.used("global_state")
                    self.stateful = True
                    k = self.rng.randrange(4)
                    if k == 0:
                        self.emit("CFG.count += 1")
                        self.emit("p0 = p0 * CFG.count")
                    elif k == 1:
                        self.emit("STATE['calls'] = STATE['calls'] + 1")
                    elif k == 2:
                        self.emit("global STEP")
                        self.emit("STEP += 2")
                        self.emit("p0 = p0 + STEP")
                    else:
                        self.emit("SCALER.shift = SCALER.shift - 0.5")
                if self.allow("helper_break") and self.chance(0.5) and self.take_datadep():
                    self.datadep_left += 1
                    mark = len(self.out)
                    try:
                        self.st_datadep(henv)
                        self.used("helper_break")
                    except Unfit:
                        del self.out[mark:]
                for _ in range(self.rng.randint(0, 2)):
                    mark = len(self.out)
                    try:
                        if self.chance(0.3) and self.helper_depth < 2:
                            self.st_helper(henv)
                        else:
                            code, info = self.texpr_helper(henv)
                            self.new_tensor(henv, code, info, "h")
                    except Unfit:
                        del self.out[mark:]
                rets = []
                nret = 1 if self.chance(0.7) else 2
                for _ in range(nret):
                    code, info = self.texpr_helper(henv)
                    s = self.choice(["scale", "shift"])
                    if self.chance(0.6):
                        code = f"{code} * scale + shift" if not code.startswith("-") else f"({code}) * scale"
                    rets.append((code, info))
                self.emit("return " + ", ".join(c for c, _ in rets))
                returns = [i for _, i in rets]
            body = self.out
        finally:
            self.out, self.ind = saved_out, saved_ind
            self.helper_depth -= 1
        deco = []
        if kind in ("plain", "varargs") and self.rng.random() < 0.25:
            r = self.rng.random()
            if self.allow("grad_modes") and r < 0.2:
                deco = ["@torch.no_grad()"]
                self.used("grad_modes")
                returns = [ri.like(grad=False) for ri in returns]
            elif self.allow("nested_compile") and r < 0.4:
                deco = [self.choice(["@kiln.compile", "@kiln.compile(fullgraph=False)"])]
                self.used("nested_compile")
            elif self.allow("disable") and r < 0.7:
                deco = ["@kiln.disable"]
                self.needs_kiln = True
                self.used("disable")
            elif self.allow("decorator"):
                deco = ["@passthrough"]
                self.needs_decorator = True
                self.used("decorator")
        self.helper_src.append("\n".join(deco + [header] + body))
        sig = {"params": params, "returns": returns, "kind": kind, "pnames": pnames, "posonly": posonly}
        self.helpers.append((name, sig))
        return name, sig, args

    def texpr_helper(self, henv):
        # helpers see no n / xs: only their parameters and module globals
        for _ in range(10):
            try:
                code, info = self.texpr(henv, 2)
                if "n" in _names(code) or "xs" in _names(code) or "flag" in _names(code):
                    continue
                return code, info
            except Unfit:
                continue
        return self.must_pick(henv)

    def st_closure(self, env):
        self.used("closure")
        q, qi = self.must_pick(env)
        name = self.fresh("inner")
        k = self.rng.randrange(4)
        if k == 0 and self.allow("closure"):
            # nonlocal counter
            cnt = self.fresh("cnt")
            self.emit(f"{cnt} = 0")
            self.emit(f"def {name}(q):")
            self.ind += 1
            self.emit(f"nonlocal {cnt}")
            self.emit(f"{cnt} += 1")
            self.emit(f"return q * {cnt}")
            self.ind -= 1
            out = self.fresh("t")
            self.emit(f"{out} = {name}({q}) + {name}({q})")
            env.add(Var("t", out, qi.like(contig=False)))
            env.add(Var("i", cnt, vals=None))
            env.noupdate.add(cnt)
            return
        cenv = Env(env)
        cenv.closure = True
        cenv.add(Var("t", "q", qi))
        cenv.noupdate = set(cenv.vars)   # no rebinding of captured names
        self.emit(f"def {name}(q, k={self.scalar(env, small=True)}):")
        self.ind += 1
        self.in_closure += 1
        try:
            if self.chance(0.4):
                code, info = self.texpr(cenv, 2)
                self.new_tensor(cenv, code, info, "r")
            code, info = self.like(cenv, qi, 2)
            self.emit(f"return {code} * k")
        finally:
            self.in_closure -= 1
            self.ind -= 1
        out = self.fresh("t")
        call = self.choice([f"{name}({q})", f"{name}({q}, 2)", f"{name}({q}, k=0.5)"])
        self.emit(f"{out} = {call}")
        env.add(Var("t", out, info.like()))
        env.add(Var("fn", name, info=qi.like(), elem=info.like()))
        for nm in list(cenv.vars):
            pass

    def st_lambda(self, env):
        self.used("lambda")
        name = self.fresh("g")
        lists = [v for v in env.of("l") if v.length and min(v.length) >= 1]
        if lists and self.chance(0.4):
            lv = self.choice(lists)
            cenv = Env(env)
            cenv.closure = True
            cenv.add(Var("t", "q", lv.elem))
            code, info = self.like(cenv, lv.elem, 1)
            if "q" not in _names(code):
                code = f"q * 2 + {code}"
            self.emit(f"{name} = lambda q: {code}")
            out = self.fresh("l")
            self.emit(f"{out} = list(map({name}, {lv.name}))")
            env.add(Var("l", out, elem=lv.elem.like(contig=False), length=lv.length))
            return
        q, qi = self.must_pick(env)
        cenv = Env(env)
        cenv.closure = True
        cenv.add(Var("t", "q", qi))
        code, info = self.texpr(cenv, 2)
        if "q" not in _names(code):
            code, info = self.like(cenv, qi, 1)
            if "q" not in _names(code):
                code = f"{code} + q"
        if self.chance(0.3):
            self.emit(f"{name} = lambda q, s=1.0: ({code}) * s")
            call = f"{name}({q}, s={self.scalar(env, small=True)})"
        else:
            self.emit(f"{name} = lambda q: {code}")
            call = f"{name}({q})"
            env.add(Var("fn", name, info=qi.like(), elem=info.like()))
        self.new_tensor(env, call, info.like())

    # ----------------------------------------------------------- containers
    def st_containers(self, env):
        self.used("containers")
        k = self.rng.randrange(10 if self.allow("iterators") else 8)
        if k == 8 and self.allow("generators") and self.chance(0.3):
            lists = [v for v in env.of("l") if v.length and min(v.length) >= 1]
            if not lists:
                raise Unfit("no list")
            lv = self.choice(lists)
            gname = self.fresh("gen")
            body = self.choice(["yield t * 2", "yield t.relu() + i", "yield t\n        yield t * 0.5"])
            self.helper_src.append(f"def {gname}(ts):\n    for i, t in enumerate(ts):\n        {body}")
            self.used("generators")
            per = 2 if "\n" in body else 1
            name = self.fresh("l")
            if self.chance(0.5):
                self.emit(f"{name} = list({gname}({lv.name}))")
                env.add(Var("l", name, elem=lv.elem.like(contig=False), length=tuple(per * v for v in lv.length)))
            else:
                t = self.fresh("t")
                self.emit(f"{t} = sum({gname}({lv.name}))")
                env.add(Var("t", t, lv.elem.like(contig=False)))
            return
        if k == 8:
            lists = [v for v in env.of("l") if v.length and min(v.length) >= 1]
            if not lists:
                raise Unfit("no list")
            lv = self.choice(lists)
            it, a, b = self.fresh("it"), self.fresh("t"), self.fresh("t")
            self.used("iterators")
            self.emit(f"{it} = iter({lv.name})")
            self.emit(f"{a} = next({it})")
            self.emit(f"{b} = next({it}, {a})")
            env.add(Var("t", a, lv.elem.like()))
            env.add(Var("t", b, lv.elem.like()))
            return
        if k == 9:
            lists = [v for v in env.of("l") if v.length and min(v.length) >= 1]
            if not lists:
                raise Unfit("no list")
            lv = self.choice(lists)
            name = self.fresh("l")
            self.used("iterators")
            form, length = self.choice([
                (f"{lv.name} + {lv.name}", tuple(2 * v for v in lv.length)),
                (f"{lv.name}[::-1]", lv.length), (f"list(reversed({lv.name}))", lv.length),
                (f"{lv.name} * 2", tuple(2 * v for v in lv.length)), (f"list(tuple({lv.name}))", lv.length),
                (f"[*{lv.name}, {lv.name}[0]]", tuple(v + 1 for v in lv.length))])
            self.emit(f"{name} = {form}")
            env.add(Var("l", name, elem=lv.elem.like(), length=length))
            return
        if k == 0:
            items = [self.must_pick(env) for _ in range(self.rng.randint(2, 3))]
            name = self.fresh("p")
            self.emit(f"{name} = ({', '.join(c for c, _ in items)},)")
            env.add(Var("s", name, items=[i.like() for _, i in items]))
            if self.chance(0.5):
                names = [self.fresh("t") for _ in items]
                if self.chance(0.3) and len(items) >= 2:
                    self.emit(f"{names[0]}, *{names[1]} = {name}")
                    env.add(Var("t", names[0], items[0][1].like()))
                    env.add(Var("s", names[1], items=[i.like() for _, i in items[1:]]))
                else:
                    self.emit(f"{', '.join(names)} = {name}")
                    for nm, (_, ii) in zip(names, items):
                        env.add(Var("t", nm, ii.like()))
            return
        if k == 1:
            items = [self.must_pick(env) for _ in range(self.rng.randint(1, 3))]
            name = self.fresh("d")
            keys = ["a", "b", "c"][:len(items)]
            if self.chance(0.3):
                self.emit(f"{name} = dict({', '.join(f'{kk}={c}' for kk, (c, _) in zip(keys, items))})")
            else:
                self.emit(f"{name} = {{{', '.join(f'{kk!r}: {c}' for kk, (c, _) in zip(keys, items))}}}")
            var = Var("d", name, items={kk: i.like() for kk, (_, i) in zip(keys, items)}, mutable=True)
            env.add(var)
            if self.chance(0.5):
                c, ci = self.texpr(env, 1)
                self.emit(f"{name}['z'] = {c}")
                var.items["z"] = ci
            if self.chance(0.3):
                kk = self.choice(list(var.items))
                c, ci = self.texpr(env, 1)
                dflt = self.choice(list(var.items))
                t = self.fresh("t")
                self.emit(f"{t} = {name}.get('missing', {name}[{dflt!r}])")
                env.add(Var("t", t, var.items[dflt].like()))
            if self.chance(0.3) and len(var.items) > 1:
                kk = self.choice(list(var.items))
                self.emit(f"{name}.pop({kk!r})")
                del var.items[kk]
            return
        if k == 2:
            items = [self.must_pick(env) for _ in range(self.rng.randint(1, 3))]
            name = self.fresh("lst")
            self.emit(f"{name} = [{', '.join(c for c, _ in items)}]")
            var = Var("s", name, items=[i.like() for _, i in items], mutable=True)
            env.add(var)
            if self.chance(0.5):
                c, ci = self.texpr(env, 1)
                self.emit(f"{name}.append({c})")
                var.items.append(ci)
            if self.chance(0.3):
                t = self.fresh("t")
                self.emit(f"{t} = {name}[-1]")
                env.add(Var("t", t, var.items[-1].like()))
            return
        if k == 3:
            # unpack a shape
            a, ai = self.must_pick(env, atoms=True, pred=lambda t: 1 <= t.rank <= 3)
            names = [self.fresh("k") for _ in range(ai.rank)]
            if self.chance(0.3) and ai.rank >= 2:
                self.emit(f"{names[0]}, *_ = {a}.shape")
                env.add(Var("i", names[0], vals=ai.shape[0]))
            else:
                self.emit(f"{', '.join(names)}{',' if ai.rank == 1 else ''} = {a}.shape")
                for nm, d in zip(names, ai.shape):
                    env.add(Var("i", nm, vals=d))
            self.used("pyarith")
            return
        if k == 4:
            xs = env.vars["xs"]
            if not xs.length or min(xs.length) < 1:
                raise Unfit("xs empty")
            h, rest = self.fresh("t"), self.fresh("rest")
            self.emit(f"{h}, *{rest} = xs")
            env.add(Var("t", h, xs.elem.like()))
            rl = tuple(v - 1 for v in xs.length)
            env.add(Var("l", rest, elem=xs.elem.like(), length=rl if min(rl) >= 1 else None))
            return
        if k == 5:
            seqs = [v for v in env.of("s") if v.items]
            if not seqs:
                raise Unfit("no seq")
            sv = self.choice(seqs)
            i = self.rng.randrange(len(sv.items))
            t = self.fresh("t")
            self.emit(f"{t} = {sv.name}[{i}] if len({sv.name}) > {i} else {sv.name}[0]")
            env.add(Var("t", t, sv.items[i].like()))
            return
        if k == 6:
            ds = [v for v in env.of("d") if v.items]
            if not ds:
                raise Unfit("no dict")
            dv = self.choice(ds)
            infos = list(dv.items.values())
            if all(i.same(infos[0]) for i in infos):
                t = self.fresh("t")
                form = self.choice([f"sum({dv.name}.values())", f"sum(v for v in {dv.name}.values())"])
                if "for" in form:
                    self.used("genexpr")
                self.emit(f"{t} = {form}")
                env.add(Var("t", t, infos[0].like(contig=False)))
            else:
                t = self.fresh("t")
                self.emit(f"{t} = sum([v.sum() for k, v in {dv.name}.items()])")
                self.used("listcomp")
                env.add(Var("t", t, TI((), F64 if any(i.dtype == F64 for i in infos) else F32, False)))
            return
        # swap two same-info tensors
        vs = self.updatable(env)
        pairs = [(a, b) for a in vs for b in vs if a is not b and a.info.same(b.info)]
        if not pairs:
            raise Unfit("no pair")
        a, b = self.choice(pairs)
        self.emit(f"{a.name}, {b.name} = {b.name}, {a.name}")
        a.info, b.info = b.info.like(contig=False), a.info.like(contig=False)

    def st_listcomp(self, env):
        self.used("listcomp")
        name = self.fresh("l")
        lists = [v for v in env.of("l") if v.length and min(v.length) >= 1]
        k = self.rng.randrange(4)
        if k == 0 and lists:
            lv = self.choice(lists)
            cenv = Env(env)
            cenv.closure = True
            cenv.add(Var("t", "q", lv.elem))
            code, info = self.like(cenv, lv.elem, 1)
            if "q" not in _names(code):
                code = f"({code} + q)"
            self.emit(f"{name} = [{code} for q in {lv.name}]")
            env.add(Var("l", name, elem=info, length=lv.length))
        elif k == 1:
            a, ai = self.must_pick(env)
            self.emit(f"{name} = [{a} * j for j in range(n)]" if self.chance(0.5)
                      else f"{name} = [{a} + j / 2 for j in range(1, n + 1)]")
            env.add(Var("l", name, elem=ai.like(contig=False), length=self.n_vals))
        elif k == 2 and len(lists) >= 1:
            lv = self.choice(lists)
            other = self.choice(lists)
            if not other.elem.same(lv.elem):
                self.emit(f"{name} = [q for q in {lv.name}]")
                env.add(Var("l", name, elem=lv.elem.like(), length=lv.length))
            else:
                self.emit(f"{name} = [q * r for q, r in zip({lv.name}, {other.name})]")
                env.add(Var("l", name, elem=lv.elem.like(grad=lv.elem.grad or other.elem.grad),
                            length=tuple(min(a, b) for a, b in zip(lv.length, other.length))))
        else:
            xs = env.vars["xs"]
            if not xs.length:
                raise Unfit("xs")
            if self.take_datadep():
                # Off 0, as cond_data's thresholds: an xs item may be centred
                # (seed 63791: its sum's sign was rounding).
                self.emit(f"{name} = [q for q in xs if q.sum() > 0.25]")
                env.add(Var("l", name, elem=xs.elem.like(), length=None))
                t = self.fresh("k")
                self.emit(f"{t} = len({name})")
                env.add(Var("i", t, vals=None))
            else:
                self.emit(f"{name} = [xs[j] * (j + 1) for j in range(len(xs)) if j % 2 == 0]")
                env.add(Var("l", name, elem=xs.elem.like(),
                            length=tuple((v + 1) // 2 for v in xs.length)))

    def st_dictcomp(self, env):
        self.used("dictcomp")
        xs = env.vars["xs"]
        if not xs.length or min(xs.length) < 1:
            raise Unfit("xs")
        name = self.fresh("dd")
        self.emit(self.choice([f"{name} = {{f'k{{j}}': q for j, q in enumerate(xs)}}",
                               f"{name} = {{j: q * 2 for j, q in enumerate(xs)}}"]))
        key = "'k0'" if "f'" in self.out[-1] else "0"
        t = self.fresh("t")
        self.emit(self.choice([f"{t} = {name}[{key}] + sum({name}.values())",
                               f"{t} = torch.stack(list({name}.values())).mean(0)",
                               f"{t} = {name}[{key}] * len({name})"]))
        env.add(Var("t", t, xs.elem.like(contig=False)))

    def st_genexpr(self, env):
        self.used("genexpr")
        lists = [v for v in env.of("l") if v.length and min(v.length) >= 1]
        if not lists:
            raise Unfit("no list")
        lv = self.choice(lists)
        t = self.fresh("t")
        k = self.rng.randrange(3)
        if k == 0:
            self.emit(f"{t} = sum(q.sum() for q in {lv.name})")
            env.add(Var("t", t, TI((), lv.elem.dtype, lv.elem.grad)))
        elif k == 1:
            self.emit(f"{t} = torch.stack(tuple(q * 2 for q in {lv.name}))")
            env.add(Var("t", t, TI((lv.length,) + lv.elem.shape, lv.elem.dtype, lv.elem.grad, True)))
        else:
            self.emit(f"{t} = sum((q.mean() for q in {lv.name}), torch.zeros(()))")
            env.add(Var("t", t, TI((), lv.elem.dtype, lv.elem.grad)))

    def st_stdmods(self, env):
        self.used("stdmods")
        lists = [v for v in env.of("l") if v.length and min(v.length) >= 2]
        if not lists:
            raise Unfit("no list")
        lv = self.choice(lists)
        t = self.fresh("t")
        k = self.rng.randrange(5)
        if k == 1:
            self.emit(f"{t} = torch.stack(list(itertools.accumulate({lv.name})))")
            env.add(Var("t", t, TI((lv.length,) + lv.elem.shape, lv.elem.dtype, lv.elem.grad, True)))
            return
        self.emit(f"{t} = " + [
            f"functools.reduce(torch.add, {lv.name})",
            None,
            f"sum(a * b for a, b in itertools.pairwise({lv.name}))",
            f"functools.partial(torch.mul, other=2)({lv.name}[0])",
            f"torch.stack(list(itertools.chain({lv.name}, [{lv.name}[0]]))).sum(0)",
        ][k])
        env.add(Var("t", t, lv.elem.like(contig=False)))

    def st_pyarith(self, env):
        self.used("pyarith")
        k = self.rng.randrange(5)
        if k == 4:
            name = self.fresh("cnt")
            self.emit(f"{name} = {self.choice(['0', '1', 'n'])}")
            env.add(Var("i", name, vals=None, mutable=True))
            return
        if k <= 1:
            atoms = self.int_atoms(env)
            (c1, v1), (c2, v2) = self.choice(atoms), self.choice(atoms)
            ops = [("+", lambda a, b: a + b), ("*", lambda a, b: a * b), ("-", lambda a, b: a - b)]
            if all(x >= 1 for x in v2):
                ops += [("//", lambda a, b: a // b), ("%", lambda a, b: a % b)]
            op, f = self.choice(ops)
            vals = tuple(f(a, b) for a, b in zip(v1, v2))
            code = f"{c1} {op} {c2}"
            if self.chance(0.3):
                code = self.choice([f"max({c1}, {c2})", f"min({c1}, {c2})"])
                vals = tuple((max if code.startswith("max") else min)(a, b) for a, b in zip(v1, v2))
            if max(abs(v) for v in vals) > 10000:
                raise Unfit("big")
            name = self.fresh("k")
            self.emit(f"{name} = {code}")
            env.add(Var("i", name, vals=vals))
        elif k == 2:
            c, v = self.choice(self.int_atoms(env))
            name = self.fresh("s")
            self.emit(f"{name} = {self.choice([f'{c} / 2', f'float({c}) * 0.5 + 1', f'math.sqrt(abs({c}) + 1)'])}")
            env.add(Var("f", name, nz=True))
        else:
            name = self.fresh("b")
            self.emit(f"{name} = {self.cond_py(env)}")
            env.add(Var("b", name))

    def st_datadep(self, env):
        if not self.take_datadep():
            raise Unfit("no budget")
        a, ai = self.must_pick(env, atoms=True)
        k = self.rng.randrange(6)
        if k == 0:
            s = self.fresh("s")
            self.emit(f"{s} = {a}.sum().item()")
            env.add(Var("f", s))
        elif k == 1:
            s = self.fresh("s")
            self.emit(f"{s} = float({a}.mean())")
            env.add(Var("f", s))
        elif k == 2:
            vl = self.fresh("vals")
            s = self.fresh("s")
            self.emit(f"{vl} = {a}.reshape(-1).tolist()")
            self.emit(f"{s} = sum({vl}) / len({vl})")
            env.add(Var("f", s))
        elif k == 3:
            t = self.fresh("t")
            self.emit(f"{t} = {a}[{a} > 0].sum()")
            env.add(Var("t", t, TI((), ai.dtype, ai.grad)))
        elif k == 4:
            kk = self.fresh("k")
            self.emit(f"{kk} = int(torch.nonzero({a} > 0).shape[0])")
            env.add(Var("i", kk, vals=None))
        else:
            self.emit(f"if {self.cond_data(env)}:")
            self.block(env, self.rng.randint(1, 2), {"depth": 1})
            if self.chance(0.5):
                self.emit("else:")
                self.block(env, 1, {"depth": 1})
        self.used("datadep")

    def st_xs_mutation(self, env):
        xs = env.vars["xs"]
        if xs.length is None:
            raise Unfit("xs")
        self.used("xs_mutation")
        code, info = self.like(env, xs.elem, 1)
        k = self.rng.randrange(8)
        if k == 0:
            self.emit(f"xs.append({code})")
            xs.length = tuple(v + 1 for v in xs.length)
        elif k == 1:
            self.emit(f"xs.insert(0, {code})")
            xs.length = tuple(v + 1 for v in xs.length)
        elif k == 2:
            self.emit(f"xs[0] = {code}")
        elif k == 3 and min(xs.length) >= 2:
            t = self.fresh("t")
            self.emit(f"{t} = xs.pop()")
            env.add(Var("t", t, xs.elem.like()))
            xs.length = tuple(v - 1 for v in xs.length)
        elif k == 4:
            self.emit(f"xs += [{code}]")
            xs.length = tuple(v + 1 for v in xs.length)
        elif k == 5 and min(xs.length) >= 2:
            self.emit("del xs[0]")
            xs.length = tuple(v - 1 for v in xs.length)
        elif k == 6:
            self.emit(f"xs.extend([{code}, {code}])")
            xs.length = tuple(v + 2 for v in xs.length)
        else:
            self.emit("xs.reverse()")
        xs.elem = xs.elem.like(grad=xs.elem.grad or info.grad)

    def st_input_mutation(self, env):
        self.used("input_mutation")
        opts = []
        for name, ti in (("x", self.inputs[0]), ("y", self.inputs[1]), ("xs[0]", self.inputs[2])):
            if not ti.grad:
                opts.append((name, ti))
        if not opts:
            raise Unfit("all inputs need grad")
        name, ti = self.choice(opts)
        forms = [f"{name}.add_(1.0)", f"{name}.mul_(0.5)", f"{name}.clamp_(-1.0, 1.0)"]
        if ti.rank >= 1:
            forms.append(f"{name}[0] = 0.0")
        self.emit(self.choice(forms))
        self.mutates_inputs = True

    def st_no_grad(self, env):
        self.used("no_grad")
        opts = ["torch.no_grad()", "torch.no_grad()", "torch.enable_grad()"]
        if self.allow("grad_modes"):
            opts += ["torch.set_grad_enabled(flag)", "torch.set_grad_enabled(False)", "torch.no_grad()"]
        ctxm = self.choice(opts)
        if "set_grad" in ctxm:
            self.used("grad_modes")
        self.emit(f"with {ctxm}:")
        self.ind += 1
        code, info = self.texpr(env, 2)
        name = self.new_tensor(env, code, info.like(grad=info.grad and "enable" in ctxm))
        if self.allow("grad_modes") and self.chance(0.3):
            self.used("grad_modes")
            inner = self.choice(["torch.enable_grad()", "torch.no_grad()", "torch.set_grad_enabled(not flag)"])
            self.emit(f"with {inner}:")
            self.ind += 1
            code, info = self.texpr(env, 2)
            self.new_tensor(env, code, info.like())
            if self.chance(0.5):
                self.emit(f"{self.fresh('g')} = torch.is_grad_enabled()")
            self.ind -= 1
        if self.chance(0.3):
            vs = self.updatable(env)
            if vs:
                var = self.choice(vs[-4:])
                code, info = self.like(env, var.info, 1)
                self.emit(f"{var.name} = {code}")
        self.ind -= 1

    def st_try(self, env):
        self.used("try")
        vs = self.updatable(env)
        if not vs:
            raise Unfit("try")
        var = self.choice(vs[-4:])
        exc = self.choice(["KeyError", "ValueError", "IndexError"])
        self.emit("try:")
        self.ind += 1
        code, info = self.like(env, var.info, 1)
        self.emit(f"{var.name} = {code}")
        cond = self.cond_py(env)
        if exc == "IndexError" and self.chance(0.5):
            self.emit(f"{var.name} = {var.name} + xs[5].sum() * 0")
        else:
            self.emit(f"if {cond}:")
            self.emit(f"    raise {exc}('fuzz')")
        self.ind -= 1
        self.emit(f"except {exc}{' as err' if self.chance(0.3) else ''}:" if self.chance(0.8)
                  else f"except ({exc}, TypeError):")
        self.ind += 1
        code, info2 = self.like(env, var.info, 1)
        self.emit(f"{var.name} = {code}")
        self.ind -= 1
        if self.chance(0.3):
            self.emit("finally:")
            self.ind += 1
            code, info3 = self.like(env, var.info, 1)
            self.emit(f"{var.name} = {code}")
            self.ind -= 1
        var.info = var.info.like(grad=True if var.info.grad or info.grad or info2.grad else False,
                                 contig=False)

    def st_raise(self, env):
        """An exception that escapes fn in some call but not in the base one."""
        if self.raise_left <= 0:
            raise Unfit("raise budget")
        self.raise_left -= 1
        self.used("raise")
        n0, n3 = self.n_vals[0], self.n_vals[3]
        l0, l3 = self.len_vals[0], self.len_vals[3]
        k = self.rng.randrange(5)
        if k == 0:
            if n3 > n0:
                self.emit(f"if n > {n0}:")
            else:
                self.emit(f"if n < {n0}:")
            self.emit(f"    raise {self.choice(['ValueError', 'KeyError', 'RuntimeError'])}('n out of range')")
        elif k == 1:
            self.emit(f"assert {'flag' if self.flag_vals[0] else 'not flag'}, 'flag changed'")
        elif k == 2 and l3 < l0:
            t = self.fresh("t")
            self.emit(f"{t} = xs[{l0 - 1}]")
            env.add(Var("t", t, env.vars["xs"].elem.like()))
        elif k == 3:
            a, ai = self.must_pick(env, atoms=True, pred=lambda t: t.rank >= 1 and len(set(t.numel())) > 1)
            numel = ai.numel()[0]
            t = self.fresh("t")
            self.emit(f"{t} = {a}.reshape({numel})")
            env.add(Var("t", t, TI((const_dim(numel),), ai.dtype, ai.grad, True)))
            env.noupdate.add(t)
        else:
            d = self.fresh("d")
            key = "on" if self.flag_vals[0] else "off"
            self.emit(f"{d} = {{'on' if flag else 'off': n}}")
            self.emit(f"{d}[{key!r}] += 1")
        self.expect_raise = True

    # ------------------------------------------------------------ program
    def st_top(self, env):
        weights = [
            ("new", 12), ("update", 6), ("inplace", 3), ("if", 4), ("ifexp", 1), ("for_range", 3),
            ("for_list", 2.5), ("while", 1.5), ("helper", 3), ("closure", 1.5), ("lambda", 1.5),
            ("containers", 3), ("listcomp", 1.2), ("dictcomp", 0.5), ("genexpr", 0.7), ("stdmods", 0.5), ("pyarith", 2),
            ("datadep", 2.5 if self.datadep_left else 0), ("xs_mutation", 1.2), ("no_grad", 0.4),
            ("try", 0.4), ("raise", 1.5 if self.raise_left else 0),
            ("global_state", 1.0), ("match", 0.7), ("pyassert", 0.5),
            ("objects", 1.0 if self.allow("globals") else 0),
            ("ordereddict", 1.2), ("dict_input", 2.5 if self.dd else 0), ("collections", 1.0),
            ("user_types", 1.2),
        ]
        weights = [(k, w) for k, w in weights if self.allow(k if k != "pyassert" else "pyarith")]
        handlers = {
            "new": self.st_new, "update": self.st_update, "inplace": self.st_inplace, "if": self.st_if,
            "ifexp": self.st_ifexp, "for_range": self.st_for_range, "for_list": self.st_for_list,
            "while": self.st_while, "helper": self.st_helper, "closure": self.st_closure,
            "lambda": self.st_lambda, "containers": self.st_containers, "listcomp": self.st_listcomp,
            "dictcomp": self.st_dictcomp, "genexpr": self.st_genexpr, "stdmods": self.st_stdmods, "pyarith": self.st_pyarith,
            "datadep": self.st_datadep, "xs_mutation": self.st_xs_mutation, "no_grad": self.st_no_grad,
            "try": self.st_try, "raise": self.st_raise,
            "global_state": self.st_global_state, "match": self.st_match, "pyassert": self.st_pyassert,
            "objects": self.st_objects, "ordereddict": self.st_ordereddict, "dict_input": self.st_dict_input,
            "collections": self.st_collections, "user_types": self.st_user_types,
        }
        for _ in range(8):
            k = self.wchoice(weights)
            mark = len(self.out)
            nhelpers = (len(self.helpers), len(self.helper_src))
            snapshot = _snapshot(env)
            try:
                handlers[k](env)
                return
            except Unfit:
                del self.out[mark:]
                del self.helpers[nhelpers[0]:]
                del self.helper_src[nhelpers[1]:]
                _restore(env, snapshot)

    def st_global_state(self, env):
        if not self.allow("globals"):
            raise Unfit("globals excluded")
        self.used("global_state")
        a, ai = self.must_pick(env)
        k = self.rng.randrange(6)
        t = self.fresh("t")
        if k == 0:
            self.emit("STATE['calls'] += 1")
            self.emit(f"{t} = {a} * STATE['calls']")
        elif k == 1:
            self.emit(self.choice(["HIST.append(n)", f"HIST.append({a}.dim())", "HIST.extend([n, len(xs)])"]))
            self.emit(f"{t} = {a} + len(HIST)")
        elif k == 2:
            self.global_decls.add("STEP")
            self.emit(self.choice(["STEP += 1", "STEP = STEP + n"]))
            self.emit(f"{t} = {a} * STEP")
            if self.chance(0.3):
                self.emit(self.choice(["STEP -= 1", "STEP = STEP * 2"]))
        elif k == 3:
            self.emit(self.choice(["BUF.add_(1.0)", "BUF.mul_(0.5)", "BUF[0] = n"]))
            self.emit(f"{t} = {a} + BUF")
            self.new_tensor_info = None
            env.add(Var("t", t, TI(bcast(ai.shape, (ONE,)), promote(ai, TI((ONE,), F32)), ai.grad)))
            self.stateful = True
            return
        elif k == 4:
            self.emit(self.choice(["CFG.count += 1", "CFG.count = CFG.count + len(xs)"]))
            self.emit(f"{t} = {a} * CFG.scale + CFG.count")
        else:
            self.emit(f"{t} = {a} * STATE['calls'] + CFG.scale")
            env.add(Var("t", t, ai.like(contig=False)))
            return
        self.stateful = True
        env.add(Var("t", t, ai.like(contig=False)))

    def st_objects(self, env):
        self.used("objects")
        a, ai = self.must_pick(env)
        t = self.fresh("t")
        k = self.rng.randrange(7)
        if k == 0:
            self.emit(f"{t} = SCALER({a})")
        elif k == 1:
            self.emit(f"{t} = SCALER.apply({a}, k={self.scalar(env, small=True)})")
        elif k == 2:
            self.emit(f"{t} = {a} * SCALER.twice")
        elif k == 3:
            sc = self.fresh("sc")
            self.emit(f"{sc} = Scaler({self.scalar(env)}, shift=0.5)")
            self.emit(f"{t} = {sc}({a}) + {sc}.apply({a})")
        elif k == 4:
            if self.chance(0.5):
                sc = self.fresh("sc")
                self.emit(f"{sc} = Scaler(2.0)")
                self.emit(f"{sc}.s = {sc}.s * {self.scalar(env, small=True)}")
                self.emit(f"{sc}.extra = {a}")
                self.emit(f"{t} = {sc}({a}) + {sc}.extra")
            else:
                self.emit(f"{t} = Scaler(2.0).apply({a}, 3)")
        elif k == 5 and self.allow("global_state"):
            self.emit(f"SCALER.shift = SCALER.shift + {self.scalar(env, small=True)}")
            self.emit(f"{t} = SCALER({a})")
            self.stateful = True
            self.used("global_state")
        else:
            self.emit(f"{t} = getattr(SCALER, 's') * {a} + (SCALER.shift if hasattr(SCALER, 'shift') else 0.0)")
        env.add(Var("t", t, ai.like(contig=False)))

    def st_match(self, env):
        vs = self.updatable(env)
        if not vs:
            raise Unfit("match")
        self.used("match")
        k = self.rng.randrange(4)
        ctx = {"depth": 1}
        if k == 0:
            self.emit("match n:")
            self.ind += 1
            self.emit(f"case {self.rng.randint(1, 3)}:")
            self.block(env, 1, ctx)
            self.emit(f"case {self.rng.randint(1, 2)} | {self.rng.randint(3, 5)}:")
            self.block(env, 1, ctx)
        elif k == 1:
            self.emit("match flag:")
            self.ind += 1
            self.emit("case True:")
            self.block(env, 1, ctx)
        elif k == 2:
            a, ai = self.must_pick(env, atoms=True)
            self.emit(f"match {a}.dim():")
            self.ind += 1
            self.emit(f"case {ai.rank}:")
            self.block(env, self.rng.randint(1, 2), ctx)
            self.emit(f"case {self.choice([0, 1, 2, 3])} | {self.choice([4, 5])}:")
            self.block(env, 1, ctx)
        else:
            xs = env.vars["xs"]
            self.emit("match xs:")
            self.ind += 1
            first = self.fresh("e")
            self.emit(f"case [{first}]:")
            inner = Env(env)
            inner.add(Var("t", first, xs.elem.like()))
            inner.noupdate.add(first)
            self.block(inner, self.rng.randint(1, 2), ctx)
            rest = self.fresh("rest")
            self.emit(f"case [{first}, *{rest}]:")
            self.block(inner, 1, ctx)
        if self.chance(0.7):
            self.emit("case _:")
            self.block(env, 1, ctx)
        self.ind -= 1

    def st_pyassert(self, env):
        a, ai = self.must_pick(env, atoms=True)
        self.used("pyarith")
        self.emit(self.choice([f"assert {a}.dim() == {ai.rank}", f"assert isinstance({a}, torch.Tensor), 'tensor'",
                               "assert n >= 1", f"assert len(xs) >= 0, len(xs)"]))

    def meta_return(self, env, tcode):
        """Python values describing an intermediate tensor, or an int/bool tensor."""
        a = tcode()
        var = next((v for v in env.of("t") if v.name == a), None)
        r = var.info.rank if var else 0
        forms = [f"{a}.stride()", f"{a}.is_contiguous()", f"{a}.dtype", f"type({a}).__name__",
                 "x.stride()", "x.is_contiguous()", "type(x) is torch.Tensor",
                 f"({a} > 0)", f"{a}.requires_grad", f"{a}.dim()"]
        if r:
            forms += [f"{a}.argmax(dim=-1)", f"len({a})", f"{a}.size(-1)"]
        if self.allow("is_leaf"):
            forms += [f"{a}.is_leaf"]
            self.used("is_leaf")
        if self.allow("storage_offset"):
            forms += ["y.storage_offset()", f"{a}.storage_offset()"]
            self.used("storage_offset")
        self.used("return_meta")
        return self.choice(forms)

    def returns(self, env):
        tensors = env.of("t")
        recent = tensors[-4:]
        rng = self.rng
        k = rng.randrange(10)

        def tcode():
            v = self.choice(recent) if rng.random() < 0.7 else self.choice(tensors)
            return v.name

        def other():
            r = rng.randrange(5)
            ints = [v for v in env.of("i")]
            floats = env.of("f")
            if r == 0 and ints:
                return self.choice(ints).name
            if r == 1 and floats:
                return self.choice(floats).name
            if r == 2:
                return self.choice(["n", "len(xs)", "flag", "n * 2"])
            if r == 3 and self.allow("return_shape"):
                self.used("return_shape")
                return self.choice([f"{tcode()}.shape", f"tuple({tcode()}.shape)", f"{tcode()}.size()"])
            if r == 4 and self.allow("return_meta") and rng.random() < 0.5:
                return self.meta_return(env, tcode)
            return tcode()
        last = tensors[-1].name
        if k <= 2:
            return last
        if k <= 5:
            items = [last] + [self.choice([tcode, other, other])() for _ in range(rng.randint(1, 3))]
            return "(" + ", ".join(items) + ",)" if rng.random() < 0.8 else "[" + ", ".join(items) + "]"
        if k <= 7:
            keys = ["out", "aux", "extra"][:rng.randint(1, 3)]
            return "{" + ", ".join(f"{kk!r}: {last if i == 0 else self.choice([tcode, other])()}"
                                   for i, kk in enumerate(keys)) + "}"
        if k == 8:
            return f"{last}, {{'a': {tcode()}, 'b': [{tcode()}, {other()}]}}"
        if self.allow("return_xs") and (self.mutated_xs() or rng.random() < 0.2):
            self.used("return_xs")
            return f"{last}, xs"
        return f"{last}, len(xs)"

    def mutated_xs(self):
        return "xs_mutation" in self.features

    def generate(self):
        variants = self.make_variants()
        xi, yi, ei = self.inputs
        env = Env()
        env.add(Var("t", "x", xi))
        env.add(Var("t", "y", yi))
        env.add(Var("l", "xs", elem=ei, length=self.len_vals, mutable=True))
        env.noupdate.add("xs")
        if self.dd:
            self.used("dict_input")
            dv = Var("c", "dd", elem=("dd", ()), vals=self.dd["orders"])
            dv.items = self.c_accessors(dv)
            env.add(dv)
            env.noupdate.add("dd")
        if self.allow("input_mutation") and self.chance(0.07):
            try:
                self.st_input_mutation(env)
            except Unfit:
                pass
        # first statement: something computed from x
        code, info = self.like(env, xi, 2)
        if "x" not in _names(code):
            code = f"x * 2 + {code}" if not code.startswith("-") else f"x * 2 + ({code})"
        self.new_tensor(env, code, info)
        nstmts = self.rng.randint(3, 12)
        if self.allow("long") and self.chance(0.05):
            self.used("long")
            nstmts = self.rng.randint(20, 40)
        for _ in range(nstmts):
            self.st_top(env)
        self.emit(f"return {self.container_returns(env, self.returns(env))}")
        header = ["import functools", "import itertools", "import math", "import torch",
                  "import torch.nn.functional as F", ""]
        if self.allow("globals"):
            header = ["import functools", "import itertools", "import math", "import types", "import torch",
                      "import torch.nn.functional as F", ""]
            header += ["SCALE = 0.5", "OFFSETS = (1.0, -2.0, 0.25)", "CONFIG = {'eps': 0.001, 'k': 2}",
                       "BIAS = torch.tensor([0.5])", ""]
            header += ["# mutable module state (compared between eager and compiled after every call)",
                       "STATE = {'calls': 0}", "HIST = []", "STEP = 0", "BUF = torch.zeros(1)",
                       "CFG = types.SimpleNamespace(scale=0.5, count=0)", "",
                       "", "class Scaler:", "    def __init__(self, s, shift=0.0):", "        self.s = s",
                       "        self.shift = shift", "",
                       "    def __call__(self, t):", "        return t * self.s + self.shift", "",
                       "    def apply(self, t, k=1):", "        return t * (self.s * k) - self.shift", "",
                       "    @property", "    def twice(self):", "        return self.s * 2", "", "",
                       "SCALER = Scaler(0.5)",
                       "ACT = torch.nn.GELU()", "SM = torch.nn.Softmax(dim=-1)", "PRELU = torch.nn.PReLU()",
                       "SEQ = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Identity())", ""]
        else:
            header += ["CONFIG = {'k': 2}", ""]
        header = ["import functools", "import operator"] + header
        if self.needs_kiln or "nested_compile" in self.features:
            header = ["# `kiln` is injected by the fuzz runner (a shim for the eager reference)"] + header
        if self.need_types:
            header = ["import collections", "import dataclasses", "import typing",
                      "from collections import Counter, OrderedDict, defaultdict, deque"] + header
            header += TYPES_SRC.strip("\n").split("\n") + ["", ""]
        if self.needs_decorator:
            header += ["", "def passthrough(f):", "    @functools.wraps(f)", "    def wrapper(*args, **kwargs):",
                       "        return f(*args, **kwargs)", "    return wrapper", ""]
        parts = header + ["", *[s + "\n\n" for s in self.helper_src]]
        decl = [f"    global {', '.join(sorted(self.global_decls))}"] if self.global_decls else []
        src = "\n".join(parts).rstrip() + "\n\n\n" + f"def fn(x, y, n, flag, xs{', dd' if self.dd else ''}):\n" + "\n".join(decl + self.out) + "\n"
        src = src.replace("\n\n\n\n", "\n\n\n").lstrip("\n")
        return Program(seed=self.seed, source=src, variants=variants, features=sorted(self.features),
                       expect_raise=self.expect_raise, mutates_inputs=self.mutates_inputs,
                       exclude=tuple(sorted(self.exclude)), stateful=self.stateful, drift=self.drift)

    # ------------------------------------------------- containers and objects
    # Container values live in Vars of kind "c": elem = (type tag, model), where
    # the model is an immutable description the generator keeps exact (keys in
    # order with the TI of each value, deque items, dataclass fields...);
    # items = accessor suffix -> TI for reads (`od['a']`, `p.a`, `dq[0]`). Only
    # top-level statements of fn mutate them (never under control flow the
    # generator does not follow), and closures/lambdas never read them. The
    # dict argument dd keeps one key order per call (vals), all values of
    # self.dd["info"].

    def top_level(self):
        return self.ind == 1 and not self.helper_depth and not self.in_closure

    def c_accessors(self, var):
        typ, model = var.elem
        if typ in ("od", "reg", "dict"):
            return {f"[{k!r}]": ti for k, ti in model}
        if typ == "dd":
            orders = var.vals
            return {f"[{k!r}]": self.dd["info"] for k in orders[0] if all(k in o for o in orders)}
        if typ == "dq":
            tis, _ = model
            return {"[0]": tis[0], "[-1]": tis[-1]} if tis else {}
        if typ == "tl":
            elem, n = model
            return {"[0]": elem, "[-1]": elem, ".total()": elem.like(contig=False)} if n else {}
        if typ == "pair":
            a, b = model
            return {".a": a, ".b": b, ".scaled()": a.like(contig=False)}
        if typ == "stats":
            m, sd = model
            return {".mean": m, "[1]": sd, ".spread()": sd.like(contig=False)}
        if typ == "box":
            return {f".{k}": ti for k, ti in model}
        if typ in ("ddl", "frozen"):
            return dict(model)
        return {}

    def set_model(self, var, model, vals=None):
        var.elem = (var.elem[0], model)
        if vals is not None:
            var.vals = vals
        var.items = self.c_accessors(var)

    def add_c(self, env, typ, name, model):
        self.need_types = True
        var = Var("c", name, elem=(typ, model))
        var.items = self.c_accessors(var)
        env.add(var)
        env.noupdate.add(name)
        return var

    def add_py(self, env, name):
        """A Python value (list of keys, str, Counter...) that returns may include."""
        env.add(Var("py", name))

    def any_tensor(self, env):
        if self.chance(0.5):
            return self.must_pick(env)
        return self.texpr(env, 1)

    @staticmethod
    def m_set(model, key, ti):
        keys = [k for k, _ in model]
        if key in keys:
            return tuple((k, ti if k == key else v) for k, v in model)
        return tuple(model) + ((key, ti),)

    def st_ordereddict(self, env):
        if not self.top_level():
            raise Unfit("not top level")
        self.used("ordereddict")
        ods = [v for v in env.of("c") if v.elem[0] == "od"]
        var = self.choice(ods) if ods and self.chance(0.4) else self.od_create(env)
        for _ in range(self.rng.randint(1, 3)):
            try:
                self.map_op(env, var)
            except Unfit:
                pass

    def od_create(self, env):
        name = self.fresh("od")
        od = self.choice(["OrderedDict", "collections.OrderedDict"])
        k = self.rng.randrange(6)
        srcs = [v for v in env.of("c") if v.elem[0] in ("od", "reg", "dict") and v.elem[1]]
        if k == 0:
            self.emit(f"{name} = {od}()")
            model = ()
        elif k == 4 and srcs:
            src = self.choice(srcs)
            if self.chance(0.3):
                self.emit(f"{name} = {od}(sorted({src.name}.items()))")
                model = tuple(sorted(src.elem[1], key=lambda kv: kv[0]))
            else:
                self.emit(f"{name} = {od}({src.name})")
                model = src.elem[1]
        else:
            items = [self.any_tensor(env) for _ in range(self.rng.randint(1, 3))]
            keys = self.rng.sample(OD_KEYS, len(items))
            if k == 1:
                self.emit(f"{name} = {od}({', '.join(f'{kk}={c}' for kk, (c, _) in zip(keys, items))})")
            elif k == 2:
                self.emit(f"{name} = {od}([{', '.join(f'({kk!r}, {c})' for kk, (c, _) in zip(keys, items))}])")
            else:
                self.emit(f"{name} = {od}({{{', '.join(f'{kk!r}: {c}' for kk, (c, _) in zip(keys, items))}}})")
            model = tuple((kk, i.like()) for kk, (_, i) in zip(keys, items))
        return self.add_c(env, "od", name, model)

    def map_op(self, env, var):
        """One operation on an OrderedDict / Registry / dict container built in fn."""
        typ, model = var.elem
        name = var.name
        keys = [k for k, _ in model]
        info = dict(model)
        od = typ == "od"
        k = self.rng.randrange(14)
        if k <= 1 or not keys:
            key = self.choice(OD_KEYS)
            c, ci = self.any_tensor(env)
            self.emit(f"{name}[{key!r}] = {c}")
            self.set_model(var, self.m_set(model, key, ci.like(contig=False)))
        elif k == 2 and len(keys) >= 2:
            key = self.choice(keys)
            self.emit(f"del {name}[{key!r}]")
            self.set_model(var, tuple(kv for kv in model if kv[0] != key))
        elif k == 3 and len(keys) >= 2:
            key = self.choice(keys)
            t = self.fresh("t")
            self.emit(f"{t} = {name}.pop({key!r})")
            env.add(Var("t", t, info[key].like()))
            self.set_model(var, tuple(kv for kv in model if kv[0] != key))
        elif k == 4:
            if self.chance(0.5):
                self.emit(f"{name}.pop('zz', None)")
            else:
                c, ci = self.any_tensor(env)
                t = self.fresh("t")
                self.emit(f"{t} = {name}.pop('zz', {c})")
                env.add(Var("t", t, ci.like()))
        elif k == 5 and len(keys) >= 2:
            kk, t = self.fresh("key"), self.fresh("t")
            first = od and self.chance(0.5)
            arg = "last=False" if first else self.choice(["", "last=True"]) if od else ""
            self.emit(f"{kk}, {t} = {name}.popitem({arg})")
            gone = model[0] if first else model[-1]
            env.add(Var("t", t, gone[1].like()))
            self.add_py(env, kk)
            self.set_model(var, tuple(kv for kv in model if kv is not gone))
        elif k == 6 and od and keys:
            key = self.choice(keys)
            rest = tuple(kv for kv in model if kv[0] != key)
            if self.chance(0.5):
                self.emit(f"{name}.move_to_end({key!r})")
                self.set_model(var, rest + ((key, info[key]),))
            else:
                self.emit(f"{name}.move_to_end({key!r}, last=False)")
                self.set_model(var, ((key, info[key]),) + rest)
        elif k == 7:
            key = self.choice(OD_KEYS)
            c, ci = self.any_tensor(env)
            t = self.fresh("t")
            self.emit(f"{t} = {name}.setdefault({key!r}, {c})")
            if key in info:
                env.add(Var("t", t, info[key].like()))
            else:
                # a Registry's setdefault does not go through its __setitem__
                self.set_model(var, self.m_set(model, key, ci.like()))
                env.add(Var("t", t, ci.like()))
        elif k == 8:
            others = [v for v in env.of("c") if v.elem[0] in ("od", "reg", "dict") and v is not var]
            if others and self.chance(0.4):
                o = self.choice(others)
                self.emit(f"{name}.update({o.name})" if self.chance(0.6) else f"{name} |= {o.name}")
                m = model
                for kk, ti in o.elem[1]:
                    m = self.m_set(m, kk, ti)
                self.set_model(var, m)
            else:
                key = self.choice(OD_KEYS)
                c, ci = self.any_tensor(env)
                self.emit(self.choice([f"{name}.update({{{key!r}: {c}}})", f"{name}.update({key}={c})",
                                       f"{name} |= {{{key!r}: {c}}}", f"{name}.update([({key!r}, {c})])"]))
                self.set_model(var, self.m_set(model, key, ci.like(contig=False)))
        elif k == 9:
            c2 = self.fresh("od" if od else "dc")
            self.emit(f"{c2} = {name}.copy()" if self.chance(0.7) else
                      f"{c2} = {'OrderedDict' if od else 'dict'}({name})")
            # Registry.copy() is a plain dict
            nv = self.add_c(env, "od" if od else "dict", c2, model)
            self.map_op(env, nv)
        elif k == 10 and keys:
            acc = self.fresh("acc")
            kk, vv = self.fresh("k"), self.fresh("v")
            dt = F64 if any(ti.dtype == F64 for ti in info.values()) else F32
            self.emit(f"{acc} = torch.zeros(())" + (".double()" if dt == F64 else ""))
            if self.chance(0.5):
                self.emit(f"for {kk}, {vv} in {name}.items():")
                self.emit(f"    {acc} = {acc} * 0.5 + {vv}.sum() * len({kk})")
            else:
                self.emit(f"for {kk} in {self.choice([name, f'{name}.keys()', f'reversed({name})'])}:")
                self.emit(f"    {acc} = {acc} * 0.5 + {name}[{kk}].mean()")
                self.emit(f"    if {kk} == {self.choice(keys)!r}:")
                self.emit(f"        {acc} = {acc} - 1.0")
            env.add(Var("t", acc, TI((), dt, any(ti.grad for ti in info.values()))))
        elif k == 11 and keys:
            ks = self.fresh("ks")
            if self.chance(0.5):
                self.emit(f"{ks} = " + self.choice([f"list({name})", f"tuple({name}.keys())",
                                                     f"list(reversed({name}))", f"[k for k, _ in {name}.items()]",
                                                     f"','.join({name})", f"next(iter({name}))"]))
                self.add_py(env, ks)
            else:
                self.emit(f"{ks} = list({name}.values())")
                env.add(Var("s", ks, items=[ti.like() for ti in info.values()]))
        elif k == 12:
            b = self.fresh("b")
            self.emit(f"{b} = " + self.choice([f"list({name}) == {keys!r}", f"{self.choice(OD_KEYS)!r} in {name}",
                                               f"len({name}) > {len(keys) - 1}"]))
            env.add(Var("b", b))
        elif keys:
            key = self.choice(keys)
            t = self.fresh("t")
            self.emit(f"{t} = {name}.get({key!r})" if self.chance(0.5) else
                      f"{t} = {name}.get('zz', {name}[{key!r}])")
            env.add(Var("t", t, info[key].like()))
        else:
            raise Unfit("map op")

    def st_dict_input(self, env):
        dv = env.vars.get("dd")
        if dv is None or dv.kind != "c" or not self.top_level():
            raise Unfit("no dd")
        self.used("dict_input")
        orders = dv.vals
        info = self.dd["info"]
        common = [k for k in orders[0] if all(k in o for o in orders)]
        od = self.dd["type"] == "OrderedDict"
        minlen = min(len(o) for o in orders)
        k = self.rng.randrange(11)
        if k <= 1:
            key = self.choice(common + ["n1", "n2"])
            c, ci = self.like(env, info, 1)
            self.emit(f"dd[{key!r}] = {c}")
            self.set_model(dv, (), tuple(o if key in o else o + (key,) for o in orders))
        elif k == 2 and minlen >= 2 and common:
            key = self.choice(common)
            t = self.fresh("t")
            self.emit(self.choice([f"del dd[{key!r}]", f"{t} = dd.pop({key!r})"]))
            if "pop" in self.out[-1]:
                env.add(Var("t", t, info.like()))
            self.set_model(dv, (), tuple(tuple(q for q in o if q != key) for o in orders))
        elif k == 3 and minlen >= 2:
            kk, t = self.fresh("key"), self.fresh("t")
            first = od and self.chance(0.5)
            self.emit(f"{kk}, {t} = dd.popitem({'last=False' if first else ''})")
            env.add(Var("t", t, info.like()))
            self.add_py(env, kk)
            self.set_model(dv, (), tuple(o[1:] if first else o[:-1] for o in orders))
        elif k == 4 and od and common:
            key = self.choice(common)
            last = self.chance(0.5)
            self.emit(f"dd.move_to_end({key!r})" if last else f"dd.move_to_end({key!r}, last=False)")
            self.set_model(dv, (), tuple(tuple(q for q in o if q != key) + (key,) if last else
                                         (key,) + tuple(q for q in o if q != key) for o in orders))
        elif k == 5:
            # order-dependent: checks kiln's guard on the key order
            acc, kk, vv = self.fresh("acc"), self.fresh("k"), self.fresh("v")
            self.emit(f"{acc} = torch.zeros_like(next(iter(dd.values())))")
            form = self.choice(["dd.items()", "list(dd.items())", "zip(dd.keys(), dd.values())"])
            self.emit(f"for {kk}, {vv} in {form}:")
            self.emit(f"    {acc} = {acc} * 0.5 + {vv}" + self.choice(["", " * len(" + kk + ")"]))
            if self.chance(0.4):
                self.emit(f"    if {kk} == {self.choice(common or ['w'])!r}:")
                self.emit(f"        {acc} = {acc}.flip(0)" if info.rank else f"        {acc} = -{acc}")
            env.add(Var("t", acc, info.like(contig=False)))
        elif k == 6:
            ks = self.fresh("ks")
            self.emit(f"{ks} = " + self.choice(["list(dd)", "tuple(dd.keys())", "next(iter(dd))",
                                                "[k for k in reversed(dd)]", "'-'.join(dd)",
                                                "[(k, v.shape) for k, v in dd.items()]",
                                                "{k: i for i, k in enumerate(dd)}"]))
            self.add_py(env, ks)
        elif k == 7:
            key = self.choice(common + ["n3"])
            c, ci = self.like(env, info, 1)
            t = self.fresh("t")
            self.emit(f"{t} = dd.setdefault({key!r}, {c})")
            env.add(Var("t", t, info.like(grad=info.grad or ci.grad)))
            self.set_model(dv, (), tuple(o if key in o else o + (key,) for o in orders))
        elif k == 8:
            key = self.choice(common + ["n4"])
            c, ci = self.like(env, info, 1)
            self.emit(self.choice([f"dd.update({{{key!r}: {c}}})", f"dd.update({key}={c})", f"dd |= {{{key!r}: {c}}}"]))
            self.set_model(dv, (), tuple(o if key in o else o + (key,) for o in orders))
        elif k == 9:
            lname = self.fresh("l")
            self.emit(f"{lname} = " + self.choice(["list(dd.values())", "[v * i for i, v in enumerate(dd.values())]",
                                                   "[dd[k] for k in dd]"]))
            env.add(Var("l", lname, elem=info.like(contig=False), length=tuple(len(o) for o in orders)))
        else:
            nm = self.fresh("m")
            self.emit(f"{nm} = len(dd)")
            env.add(Var("i", nm, vals=tuple(len(o) for o in orders)))

    def st_collections(self, env):
        if not self.top_level():
            raise Unfit("not top level")
        self.used("collections")
        self.need_types = True
        k = self.rng.randrange(5)
        xs = env.vars["xs"]
        if k == 0:
            if not xs.length or min(xs.length) < 1:
                raise Unfit("xs empty")
            name, i, q = self.fresh("groups"), self.fresh("i"), self.fresh("q")
            self.emit(f"{name} = {self.choice(['defaultdict', 'collections.defaultdict'])}(list)")
            self.emit(f"for {i}, {q} in enumerate(xs):")
            self.emit(f"    {name}['even' if {i} % 2 == 0 else 'odd'].append({q} * ({i} + 1))")
            model = (("['even'][0]", xs.elem.like(contig=False)),)
            if self.chance(0.5):
                c, ci = self.any_tensor(env)
                self.emit(f"{name}['extra'].append({c})")
                model += (("['extra'][-1]", ci.like()),)
            if self.chance(0.4):
                m = self.fresh("m")
                self.emit(f"{m} = len({name}['odd'])")
                env.add(Var("i", m, vals=tuple(v // 2 for v in xs.length)))
            self.add_c(env, "ddl", name, model)
        elif k == 1:
            name = self.fresh("cnt")
            a, ai = self.must_pick(env, atoms=True)
            self.emit(f"{name} = {self.choice(['defaultdict', 'collections.defaultdict'])}(int)")
            self.emit(self.choice([f"for q in xs:\n{'    ' * self.ind}    {name}[q.dim()] += 1",
                                   f"{name}['n'] += n", f"{name}[str({a}.dim())] += 2"]))
            if self.chance(0.5):
                t = self.fresh("t")
                self.emit(f"{t} = {a} * ({name}['missing'] + 1)")   # inserts 'missing'
                env.add(Var("t", t, ai.like(contig=False)))
            self.add_c(env, "ddi", name, ())
        elif k == 2:
            name = self.fresh("ctr")
            a, ai = self.must_pick(env, atoms=True)
            self.emit(f"{name} = " + self.choice(["Counter()", "collections.Counter(['a', 'b', 'a'])",
                                                  "Counter(q.dim() for q in xs)", "Counter(a=n, b=2)"]))
            for _ in range(self.rng.randint(1, 3)):
                self.emit(self.choice([f"{name}['k'] += n", f"{name}.update(['a', 'c', 'a'])",
                                       f"{name}.update({{'b': len(xs)}})", f"{name}[{a}.dim()] += 1",
                                       f"{name}.subtract(['a'])"]))
            if self.chance(0.5):
                t = self.fresh("t")
                self.emit(f"{t} = {a} * ({name}['zz'] + {name}['a'] + 1)")   # no insertion in a Counter
                env.add(Var("t", t, ai.like(contig=False)))
            if self.chance(0.4):
                top = self.fresh("top")
                self.emit(f"{top} = " + self.choice([f"{name}.most_common(2)", f"sorted({name}.elements(), key=str)",
                                                     f"{name}.total()", f"+{name}"]))
                self.add_py(env, top)
            self.add_c(env, "ctr", name, ())
        else:
            name = self.fresh("dq")
            dq = self.choice(["deque", "collections.deque"])
            maxlen = None
            if xs.length and min(xs.length) >= 1 and self.chance(0.3):
                self.emit(f"{name} = {dq}(xs[:1])")
                tis = [xs.elem.like()]
            else:
                items = [self.any_tensor(env) for _ in range(self.rng.randint(0, 2))]
                if self.chance(0.3):
                    maxlen = 2
                    items = items[:2]
                    self.emit(f"{name} = {dq}([{', '.join(c for c, _ in items)}], maxlen=2)")
                else:
                    self.emit(f"{name} = {dq}([{', '.join(c for c, _ in items)}])")
                tis = [i.like() for _, i in items]
            for _ in range(self.rng.randint(1, 4)):
                op = self.rng.randrange(7)
                if op <= 1 or not tis:
                    c, ci = self.any_tensor(env)
                    if self.chance(0.5):
                        self.emit(f"{name}.append({c})")
                        tis.append(ci.like())
                        if maxlen and len(tis) > maxlen:
                            tis.pop(0)
                    else:
                        self.emit(f"{name}.appendleft({c})")
                        tis.insert(0, ci.like())
                        if maxlen and len(tis) > maxlen:
                            tis.pop()
                elif op == 2 and len(tis) >= 2:
                    t = self.fresh("t")
                    if self.chance(0.5):
                        self.emit(f"{t} = {name}.pop()")
                        env.add(Var("t", t, tis.pop()))
                    else:
                        self.emit(f"{t} = {name}.popleft()")
                        env.add(Var("t", t, tis.pop(0)))
                elif op == 3:
                    t = self.fresh("t")
                    i = self.rng.randrange(len(tis))
                    self.emit(f"{t} = {name}[{i}]" if self.chance(0.5) else f"{t} = {name}[{i - len(tis)}]")
                    env.add(Var("t", t, tis[i].like()))
                elif op == 4 and len(tis) >= 2:
                    self.emit(f"{name}.rotate(1)")
                    tis.insert(0, tis.pop())
                elif op == 5:
                    m = self.fresh("m")
                    self.emit(f"{m} = len({name})")
                    env.add(Var("i", m, vals=const_dim(len(tis))))
                else:
                    lname = self.fresh("lst")
                    self.emit(f"{lname} = list({name})")
                    env.add(Var("s", lname, items=[ti.like() for ti in tis]))
            self.add_c(env, "dq", name, (tuple(tis), maxlen))

    def st_user_types(self, env):
        if not self.top_level():
            raise Unfit("not top level")
        self.used("user_types")
        self.need_types = True
        k = self.rng.randrange(6)
        if k == 0:
            name = self.fresh("reg")
            items = [self.any_tensor(env) for _ in range(self.rng.randint(0, 2))]
            keys = self.rng.sample(OD_KEYS, len(items))
            form = self.rng.randrange(3)
            if form == 0 or not items:
                self.emit(f"{name} = Registry()")
                model = ()
                for kk, (c, ci) in zip(keys, items):
                    self.emit(f"{name}[{kk!r}] = {c}")     # through __setitem__
                    model = self.m_set(model, kk, ci.like(contig=False))
            elif form == 1:
                self.emit(f"{name} = Registry({', '.join(f'{kk}={c}' for kk, (c, _) in zip(keys, items))})")
                model = tuple((kk, ci.like()) for kk, (_, ci) in zip(keys, items))
            else:
                self.emit(f"{name} = Registry({{{', '.join(f'{kk!r}: {c}' for kk, (c, _) in zip(keys, items))}}})")
                model = tuple((kk, ci.like()) for kk, (_, ci) in zip(keys, items))
            var = self.add_c(env, "reg", name, model)
            for _ in range(self.rng.randint(0, 2)):
                try:
                    self.map_op(env, var)
                except Unfit:
                    pass
        elif k == 1:
            a, ai = self.must_pick(env)
            b, bi = self.like(env, ai, 1)
            name = self.fresh("tl")
            elem = ai.like(grad=ai.grad or bi.grad, contig=False)
            n = 2
            self.emit(f"{name} = TensorList([{a}, {b}])")
            if self.chance(0.5):
                c, ci = self.like(env, ai, 1)
                self.emit(self.choice([f"{name}.append({c})", f"{name} += [{c}]", f"{name}.extend([{c}])"]))
                n += 1
                elem = elem.like(grad=elem.grad or ci.grad)
            t = self.fresh("t")
            self.emit(f"{t} = {name}.total()" if self.chance(0.6) else f"{t} = {name}[{n - 1}] - {name}[0]")
            env.add(Var("t", t, elem.like()))
            self.add_c(env, "tl", name, (elem, n))
        elif k == 2:
            (a, ai), (b, bi) = self.any_tensor(env), self.any_tensor(env)
            name = self.fresh("p")
            self.emit(f"{name} = " + self.choice([f"Pair({a}, {b})", f"Pair(a={a}, b={b}, scale={self.scalar(env, small=True)})",
                                                  f"Pair({a}, {b}, 2.0)", f"Pair(b={b}, a={a})"]))
            model = (ai.like(), bi.like())
            for _ in range(self.rng.randint(1, 3)):
                op = self.rng.randrange(6)
                if op == 0:
                    c, ci = self.any_tensor(env)
                    fld = self.choice(["a", "b"])
                    self.emit(f"{name}.{fld} = {c}")
                    model = (ci.like(), model[1]) if fld == "a" else (model[0], ci.like())
                elif op == 1:
                    self.emit(self.choice([f"{name}.scale = {name}.scale * 2", f"{name}.scale += n",
                                           f"{name}.scale = float(len(xs))"]))
                elif op == 2:
                    t = self.fresh("t")
                    self.emit(f"{t} = {name}.scaled() + {name}.a")
                    env.add(Var("t", t, model[0].like(contig=False)))
                elif op == 3:
                    p2 = self.fresh("p")
                    c, ci = self.any_tensor(env)
                    self.emit(f"{p2} = dataclasses.replace({name}, b={c})")
                    self.add_c(env, "pair", p2, (model[0], ci.like()))
                elif op == 4:
                    ks = self.fresh("ks")
                    self.emit(f"{ks} = " + self.choice([f"[f.name for f in dataclasses.fields({name})]",
                                                        f"dataclasses.is_dataclass({name})",
                                                        f"type({name}).__name__"]))
                    self.add_py(env, ks)
                else:
                    t = self.fresh("t")
                    self.emit(f"{t} = {name}.b * {name}.scale")
                    env.add(Var("t", t, model[1].like(contig=False)))
            self.add_c(env, "pair", name, model)
        elif k == 3:
            (a, ai), (b, bi) = self.any_tensor(env), self.any_tensor(env)
            name = self.fresh("st")
            self.emit(f"{name} = " + self.choice([f"Stats({a}, {b})", f"Stats(mean={a}, std={b}, count=n)",
                                                  f"Stats({a}, {b}, len(xs))", f"Stats._make([{a}, {b}, 3])"]))
            model = (ai.like(), bi.like())
            op = self.rng.randrange(5)
            if op == 0:
                m, sd, c = self.fresh("t"), self.fresh("t"), self.fresh("m")
                self.emit(f"{m}, {sd}, {c} = {name}")
                env.add(Var("t", m, ai.like()))
                env.add(Var("t", sd, bi.like()))
            elif op == 1:
                t = self.fresh("t")
                self.emit(f"{t} = {name}.spread() + {name}[1]")
                env.add(Var("t", t, bi.like(contig=False)))
            elif op == 2:
                s2 = self.fresh("st")
                self.emit(f"{s2} = {name}._replace(count={name}.count + 1)")
                self.add_c(env, "stats", s2, model)
            elif op == 3:
                ks = self.fresh("ks")
                self.emit(f"{ks} = " + self.choice([f"{name}._asdict()", f"{name}._fields", f"len({name})",
                                                    f"isinstance({name}, tuple)", f"{name}.count"]))
                self.add_py(env, ks)
            self.add_c(env, "stats", name, model)
        elif k == 4:
            name = self.fresh("bx")
            self.emit(f"{name} = Box()" if self.chance(0.5) else f"{name} = Box(tag='t{self.counter}')")
            model = ()
            for _ in range(self.rng.randint(1, 3)):
                op = self.rng.randrange(5)
                if op <= 1:
                    c, ci = self.any_tensor(env)
                    attr = self.choice(["t", "u", "w"])
                    self.emit(f"{name}.{attr} = {c}" if op == 0 else f"setattr({name}, {attr!r}, {c})")
                    model = self.m_set(model, attr, ci.like())
                elif op == 2:
                    self.emit(self.choice([f"{name}.k = n", f"{name}.items = [x, {name}.tag]",
                                           f"{name}.tag = {name}.tag + '!'"]))
                elif op == 3 and model:
                    attr = self.choice([kk for kk, _ in model])
                    self.emit(f"del {name}.{attr}")
                    model = tuple(kv for kv in model if kv[0] != attr)
                elif model:
                    attr, ti = self.choice(list(model))
                    t = self.fresh("t")
                    self.emit(f"{t} = getattr({name}, {attr!r}) * 2 if hasattr({name}, {attr!r}) else {name}.{attr}")
                    env.add(Var("t", t, ti.like(contig=False)))
            self.add_c(env, "box", name, model)
        else:
            # a nested structure kept in a variable: OrderedDict of dataclasses, dict of lists of tuples
            self.used("nested_returns") if self.allow("nested_returns") else None
            (a, ai), (b, bi) = self.any_tensor(env), self.any_tensor(env)
            name = self.fresh("nest")
            if self.chance(0.5):
                self.emit(f"{name} = OrderedDict(first=Pair({a}, {b}), second=Stats({b}, {a}))")
                model = (("['first'].a", ai.like()), ("['second'].mean", bi.like()))
            else:
                self.emit(f"{name} = {{'main': [({a}, {b}), ({b},)], 'meta': {{'k': [{a}]}}}}")
                model = (("['main'][0][1]", bi.like()), ("['meta']['k'][0]", ai.like()))
            self.add_c(env, "frozen", name, model)

    def nested_expr(self, env, depth):
        """A nested container expression of tensors and objects for a return."""
        r = self.rng.randrange(7)
        if depth <= 0 or r == 0:
            objs = env.of("c") + env.of("py")
            if objs and self.chance(0.4):
                return self.choice(objs).name
            return self.must_pick(env)[0]
        parts = [self.nested_expr(env, depth - 1) for _ in range(self.rng.randint(1, 2))]
        if r == 1:
            return "[" + ", ".join(parts) + "]"
        if r == 2:
            return "(" + ", ".join(parts) + ",)"
        if r == 3:
            return "{" + ", ".join(f"'k{i}': {p}" for i, p in enumerate(parts)) + "}"
        if r == 4:
            return "OrderedDict(" + ", ".join(f"f{i}={p}" for i, p in enumerate(parts)) + ")"
        if r == 5:
            a, b = self.must_pick(env)[0], self.must_pick(env)[0]
            return self.choice([f"Pair({a}, {b})", f"Stats({a}, {b}, {len(parts)})"])
        return "{'items': [" + ", ".join(f"({p}, {i})" for i, p in enumerate(parts)) + "]}"

    def container_returns(self, env, ret):
        """Adds containers and objects built in fn (and dd) to the returned value."""
        objs = env.of("c") + env.of("py")
        nested = self.allow("nested_returns") and (self.need_types or self.chance(0.05)) and self.chance(0.4)
        if not objs and not nested:
            return ret
        if objs and not self.chance(0.85) and not nested:
            return ret
        extra = []
        if objs:
            extra = [v.name for v in self.rng.sample(objs, min(len(objs), self.rng.randint(1, 3)))]
        if nested:
            self.used("nested_returns")
            self.need_types = True
            extra.append(self.nested_expr(env, self.rng.randint(1, 2)))
        return f"({ret}), " + ", ".join(extra)


def _snapshot(env):
    out = {}
    for name, var in env.vars.items():
        out[name] = (var, var.info, var.vals, var.length, var.elem,
                     dict(var.items) if isinstance(var.items, dict) else list(var.items) if var.items else var.items)
    return dict(order=list(env.order), vars=out, noupdate=set(env.noupdate))


def _restore(env, snap):
    env.order = snap["order"]
    env.noupdate = snap["noupdate"]
    env.vars = {}
    for name, (var, info, vals, length, elem, items) in snap["vars"].items():
        var.info, var.vals, var.length, var.elem, var.items = info, vals, length, elem, items
        env.vars[name] = var


def _names(code):
    import re
    return set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", code))


def generate(seed, exclude=()):
    """The program for this seed (deterministic)."""
    for attempt in range(20):
        g = Generator(seed * 1000 + attempt if attempt else seed, exclude)
        try:
            prog = g.generate()
        except Unfit:
            continue
        prog.seed = seed
        return prog
    raise RuntimeError(f"could not generate a program for seed {seed}")


if __name__ == "__main__":
    import sys
    p = generate(int(sys.argv[1]) if len(sys.argv) > 1 else 0,
                 exclude=tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ())
    print(p.source)
    print("# features:", ", ".join(p.features))
    print("\n".join("# " + line for line in p.describe_inputs().splitlines()))
