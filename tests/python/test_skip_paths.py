"""Which files kiln traces: user code anywhere, even under a directory named
like kiln's or torch's own packages; never kiln's, torch's or the stdlib's."""
import importlib.util

import torch

import kiln


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_user_code_under_a_kiln_directory_is_traced(tmp_path):
    for directory in ("kiln", "torch"):
        folder = tmp_path / directory / "models"
        folder.mkdir(parents=True)
        (folder / "user_model.py").write_text("def f(x):\n    return x * 2 + 1\n")
        module = load_module(folder / "user_model.py", f"user_model_{directory}")
        kiln.reset()
        compiled = kiln.compile(module.f)
        x = torch.randn(3)
        for _ in range(3):
            torch.testing.assert_close(compiled(x), x * 2 + 1)
        stats = kiln.stats()
        assert stats["traces"] == 1, (directory, stats)
        assert stats["cache_hits"] == 2, (directory, stats)


def test_torch_internals_are_not_traced_as_frames():
    # torch.functional.einsum is Python code inside torch: compiling it
    # directly runs it untraced (and correctly).
    compiled = kiln.compile(torch.functional.einsum)
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    torch.testing.assert_close(compiled("ij,jk->ik", a, b), a @ b)
    assert kiln.stats()["traces"] == 0


def test_site_packages_libraries_are_traced_even_inside_the_stdlib_directory():
    # A venv's (or pyenv's) site-packages lies under its lib/python3.X,
    # which sysconfig reports as a standard-library directory: the longest
    # matching directory decides, so torchvision's model code is traced as
    # its own frame, and one graph covers the whole model.
    import site
    import sysconfig

    import torchvision

    stdlib_dirs = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
    assert any(torchvision.__file__.startswith(d + "/") for d in stdlib_dirs) or \
        any(torchvision.__file__.startswith(d) for d in site.getsitepackages())
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        explanation = kiln.explain(model)(x)
        assert explanation.graph_count == 1, explanation.graphs[:2]
        assert explanation.graph_break_count == 0
        # cuDNN may pick other convolution algorithms for kiln's graph than
        # for eager's calls: CUDA results agree to 1e-3.
        tol = 1e-3 if x.is_cuda else 1e-4
        torch.testing.assert_close(kiln.compile(model)(x), model(x), rtol=tol, atol=tol)
    assert kiln.stats()["recompiles"] == 0


AUDITED = []


def _audit_hook(event, args):
    # Stays registered for the process (audit hooks cannot be removed):
    # records only while a test fills AUDITED with a marker.
    if AUDITED and event == "os.listdir":
        AUDITED.append(event)


def lists_a_directory(x, path):
    import os
    y = x + 1
    os.listdir(path)  # not traced: a graph break, run by CPython, audited
    return y * 2


def test_audit_hooks_run_untraced(tmp_path):
    # Note [Untraced callbacks]: an audit hook runs for every audited event
    # of a compiled call, and it is nobody's model code.
    import sys
    if _audit_hook not in getattr(sys, "_kiln_test_hooks", ()):
        sys.addaudithook(_audit_hook)
        sys._kiln_test_hooks = (_audit_hook,)
    AUDITED.append("marker")
    try:
        compiled = kiln.compile(lists_a_directory)
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, str(tmp_path)), (x + 1) * 2)
        assert AUDITED[1:] == ["os.listdir"]  # the hook ran
        stats = kiln.stats()
        assert (stats["traces"], stats["unsupported"]) == (2, 0), stats  # the function and its resumption
    finally:
        AUDITED.clear()
