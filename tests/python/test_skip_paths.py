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
