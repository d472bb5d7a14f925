"""examples/embed: the C++ host serving model.py from 4 threads through libkiln."""
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# ctest names the built program; run by hand, the first build tree that has it.
EXAMPLE = pathlib.Path(os.environ.get("KILN_EMBED_EXAMPLE") or next(
    (str(p) for p in sorted(ROOT.glob("build*/bin/kiln_embed_example"))),
    ROOT / "build" / "bin" / "kiln_embed_example"))

pytestmark = pytest.mark.skipif(not EXAMPLE.exists(),
                                reason=f"the embedding example is not built ({EXAMPLE})")


def test_four_threads_match_eager_over_10000_calls_without_memory_growth():
    result = subprocess.run([str(EXAMPLE), "--calls", "10000", "--threads", "4"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = re.search(r"(\d+) calls on (\d+) threads .*: (\d+) mismatches, (\d+) errors", result.stdout)
    assert summary, result.stdout
    assert summary.groups() == ("10000", "4", "0", "0")
    assert " 0 traces after warm-up" in result.stdout
    assert result.stderr == ""


def test_a_model_error_fails_with_the_python_traceback(tmp_path):
    broken = tmp_path / "broken_model.py"
    broken.write_text("import torch\n\nclass M(torch.nn.Module):\n"
                      "    def forward(self, x):\n        raise RuntimeError('model is broken')\n\n"
                      "model = M()\n")
    result = subprocess.run([str(EXAMPLE), "--calls", "8", "--model", str(broken)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "RuntimeError: model is broken" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr
