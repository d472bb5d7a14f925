"""Imports inside compiled functions (Note [Imports] in
tracer/trace_imports.cpp): a module already loaded is looked up at trace
time, with no graph break; importing one not loaded yet is a graph break
and CPython runs the import; names read from an imported module are
guarded like globals."""
import sys
import textwrap
from collections import OrderedDict

import torch

import kiln
from conftest import stats


def imports_loaded_modules(x):
    import math
    import os.path
    from collections import OrderedDict as OD
    from torch.nn import functional as F
    y = F.relu(x) * math.pi
    return y, os.path.sep, OD(a=y)


def test_import_of_loaded_modules_traces_whole():
    x = torch.randn(4)
    compiled = kiln.compile(imports_loaded_modules, fullgraph=True)
    y, sep, od = compiled(x)
    ey, esep, eod = imports_loaded_modules(x)
    torch.testing.assert_close(y, ey)
    assert sep == esep and type(od) is OrderedDict and list(od) == ["a"]
    torch.testing.assert_close(od["a"], eod["a"])
    assert stats()["graph_breaks"] == 0


def write_package(tmp_path, flag):
    package = tmp_path / "kiln_imp_pkg"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(f"SCALE = {flag}\n")
    (package / "model.py").write_text(textwrap.dedent("""
        import torch

        def scaled(x):
            from .settings import SCALE
            from . import settings
            return x * SCALE + settings.SCALE
    """))
    return package


def test_relative_import_and_guarded_module_globals(tmp_path):
    write_package(tmp_path, 2)
    sys.path.insert(0, str(tmp_path))
    try:
        import kiln_imp_pkg.model as model
        import kiln_imp_pkg.settings as settings
        compiled = kiln.compile(model.scaled, fullgraph=True)
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), x * 2 + 2)
        settings.SCALE = 5  # a guarded global of the imported module
        torch.testing.assert_close(compiled(x), x * 5 + 5)
        assert stats()["recompiles"] == 1
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("kiln_imp_pkg")]:
            del sys.modules[name]


def imports_a_new_module(x):
    import kiln_never_loaded_module  # noqa: F401  (made by the test)
    return x + kiln_never_loaded_module.OFFSET


def test_import_of_a_module_not_loaded_yet_breaks_and_runs_it(tmp_path):
    (tmp_path / "kiln_never_loaded_module.py").write_text("OFFSET = 3\n")
    sys.path.insert(0, str(tmp_path))
    try:
        x = torch.randn(2)
        compiled = kiln.compile(imports_a_new_module)
        torch.testing.assert_close(compiled(x), x + 3)
        assert "kiln_never_loaded_module" in sys.modules
        assert stats()["graph_breaks"] >= 1
        torch.testing.assert_close(compiled(x), x + 3)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("kiln_never_loaded_module", None)


NEW_MODULE_BODY = textwrap.dedent("""
    import dataclasses

    def helper(n):
        return [i * 2 for i in range(n)]

    @dataclasses.dataclass
    class Config:
        width: int = 3

    TABLE = helper(5)
    OFFSET = Config().width + TABLE[1]

    def shift(x):
        return x + OFFSET
""")


def imports_a_module_with_functions(x):
    import kiln_module_with_functions as m
    return m.shift(x) * 2


def test_a_first_import_runs_its_module_untraced(tmp_path):
    # Note [Imports run untraced]: the functions a module's body runs (its
    # own helpers, the dataclass methods made for it) are not traced; the
    # module's function called from the compiled code afterwards is.
    (tmp_path / "kiln_module_with_functions.py").write_text(NEW_MODULE_BODY)
    sys.path.insert(0, str(tmp_path))
    try:
        x = torch.randn(2)
        compiled = kiln.compile(imports_a_module_with_functions)
        torch.testing.assert_close(compiled(x), (x + 5) * 2)
        s = stats()
        assert (s["traces"], s["unsupported"]) == (2, 0), s  # the frame before the import, and after it
        torch.testing.assert_close(compiled(x), (x + 5) * 2)
        assert stats()["traces"] == 2
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("kiln_module_with_functions", None)


def builds_mappings(x, pairs):
    a = dict(k=x, j=2)
    b = dict(pairs, extra=x * 2)
    c = OrderedDict([("z", x), ("y", 1)])
    c["z"] = x + 1
    d = dict(c)
    return a, b, c, d


def test_dict_and_ordered_dict_constructors_trace():
    x = torch.randn(2)
    compiled = kiln.compile(builds_mappings, fullgraph=True)
    got = compiled(x, [("p", 1), ("q", 2)])
    want = builds_mappings(x, [("p", 1), ("q", 2)])
    for g, w in zip(got, want):
        assert type(g) is type(w) and list(g) == list(w)
        for key in w:
            if isinstance(w[key], torch.Tensor):
                torch.testing.assert_close(g[key], w[key])
            else:
                assert g[key] == w[key]
