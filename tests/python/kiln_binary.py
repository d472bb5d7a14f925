"""Runs the kiln binary and the python it was built against side by side (test helper)."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
KILN = ROOT / "build" / "bin" / "kiln"
# The python the binary was built against: the one running these tests.
PYTHON = sys.executable

needs_kiln = pytest.mark.skipif(not KILN.exists(),
                                reason=f"the kiln binary is not built ({KILN}); build with ninja -C build")


def run(program, args, stdin=None, env=None, cwd=None, timeout=120):
    """Runs program (KILN or PYTHON) with args; returns the CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.pop("KILN_LOGS", None)
    full_env.update(env or {})
    return subprocess.run([str(program), *map(str, args)], input=stdin, capture_output=True,
                          text=True, env=full_env, cwd=cwd, timeout=timeout)


def both(args, **kwargs):
    """Runs kiln and python3 on the same arguments; returns (kiln, python)."""
    return run(KILN, args, **kwargs), run(PYTHON, args, **kwargs)
