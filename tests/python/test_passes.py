"""kiln.passes: user passes over captured graphs (after_capture), and the
worked example examples/user_pass.py."""
import os
import subprocess
import sys

import pytest
import torch

import kiln
from kiln.passes import PassError, after_capture

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_the_worked_example_fuses_and_matches_eager():
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "user_pass.py")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "ok: 1 x*sigmoid(x) fused into kiln_example.silu" in done.stdout
    assert "torch.ops.kiln_example.silu(" in done.stdout


def test_passes_run_in_order_and_kiln_compiles_the_result():
    order = []

    def double_relu(gm):
        order.append("first")
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is torch.relu:
                node.target = torch.abs  # a rewrite kiln must then compile
        return gm

    def note(gm):
        order.append("second")

    def f(x):
        return torch.relu(x) * 2

    x = torch.randn(5)
    kiln.reset()
    got = kiln.compile(f, backend=after_capture(double_relu, note))(x)
    torch.testing.assert_close(got, x.abs() * 2)
    assert order == ["first", "second"]
    assert kiln.stats()["prim_fallbacks"] == 0


def test_a_pass_that_breaks_the_graph_is_named():
    def use_before_definition(gm):
        nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
        nodes[0].args = (nodes[-1],) + tuple(nodes[0].args[1:])

    def not_a_graph(gm):
        return 42

    def f(x):
        return (x + 1) * 2

    with pytest.raises(PassError, match="kiln pass use_before_definition left an invalid graph"):
        kiln.compile(f, backend=after_capture(use_before_definition))(torch.randn(3))
    with pytest.raises(PassError, match="kiln pass not_a_graph returned int"):
        kiln.compile(f, backend=after_capture(not_a_graph))(torch.randn(3))
    with pytest.raises(TypeError, match="a pass must be callable"):
        after_capture(3)
