"""Graphs with symbolic sizes whose calls mostly work at static sizes (a
decoding step: only the KV cache grows) compile their static regions once
and replay the calls that touch symbolic sizes eagerly, instead of one
compile per size. See Note [Static regions] in interpreter/static_regions.cpp."""
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import assert_same, kiln_logs


def _compile(fn, **kwargs):
    # Without CPU kernels inductor replays CPU graphs through torch;
    # aot_eager still compiles regions and instances to prims.
    kernels = kiln._C.cpu_kernels_available() and kiln.config.cpu_kernels
    return kiln.compile(fn, backend="inductor" if kernels else "aot_eager", **kwargs)


class _DecodeStep(torch.nn.Module):
    """One token through a layer norm, a projection, attention over a cache
    that grows by the token, and two MLPs: only the cat and the attention
    see the cache's length."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.query = torch.nn.Linear(16, 16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)
        self.out_norm = torch.nn.LayerNorm(16)
        self.up2 = torch.nn.Linear(16, 32)
        self.down2 = torch.nn.Linear(32, 16)

    def forward(self, x, cache):
        h = self.norm(x)
        q = self.query(h) * 0.25
        keys = torch.cat([cache, h], dim=1)
        attended = torch.softmax(q @ keys.transpose(1, 2), dim=-1) @ keys
        y = x + self.down(F.gelu(self.up(attended)))
        y = y + self.down2(F.gelu(self.up2(self.out_norm(y))))
        return y * 2.0 + 1.0, keys


def _decode(compiled, step, lengths):
    with torch.no_grad():
        for length in lengths:
            args = (torch.randn(1, 1, 16), torch.randn(1, length, 16))
            assert_same(compiled(*args), step(*args))
    return kiln.stats()


def test_a_decoding_step_compiles_its_static_regions_once(capfd):
    torch.manual_seed(0)
    step = _DecodeStep().eval()
    with kiln_logs("dynamic"):
        s = _decode(_compile(step), step, [8, 9, 10, 11, 17, 30, 2])
    log = capfd.readouterr().err
    # Static trace, dynamic trace; every later length runs the same stages.
    assert s["traces"] == 2 and s["size_instances"] == 0 and s["eager_runs"] == 0, s
    assert s["static_regions"] == 1, s
    assert "static regions compiled once, the rest replayed eagerly" in log, log
    assert "replays eagerly at such sizes" not in log, log


def test_perf_log_times_each_stage(capfd):
    # Note [Executor run profile]: KILN_LOGS=perf shows each stage's host
    # time by executor, the eager replays between regions included.
    torch.manual_seed(0)
    step = _DecodeStep().eval()
    compiled = _compile(step)
    _decode(compiled, step, [8, 9, 10])
    capfd.readouterr()
    with kiln_logs("perf"):
        _decode(compiled, step, [11])
    log = capfd.readouterr().err
    lines = [line for line in log.splitlines() if "staged run:" in line]
    assert len(lines) == 1, log
    assert "; eager " in lines[0] and " us" in lines[0], lines[0]


def test_without_static_regions_each_size_compiles(capfd):
    torch.manual_seed(0)
    step = _DecodeStep().eval()
    s = _decode(_compile(step, options={"static_regions": False}), step, [8, 9, 10, 11, 17])
    assert s["traces"] == 2 and s["size_instances"] == 4, s


def test_a_region_whose_input_changes_size_replays_eagerly(capfd):
    # x[:, :8] is 8 long at every sample point of the trace (13, 26, 39), so
    # what the MLP makes of it is a static region; at length 5 the slice is
    # 5 long and the region runs eagerly for that call, equal to eager. The
    # slice itself, a view whose strides grow with x, is no region's input:
    # the projection reading it replays.
    torch.manual_seed(0)
    up, down = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)

    def fn(x):
        head = x[:, :8]
        y = down(F.gelu(up(head))) * 2.0 + 1.0
        return y.tanh() - 0.5, x.sum(1)

    compiled = _compile(fn)
    with torch.no_grad(), kiln_logs("dynamic"):
        for length in [12, 13, 14, 15, 5, 20]:
            x = torch.randn(2, length, 4)
            assert_same(compiled(x), fn(x))
    log = capfd.readouterr().err
    assert "static regions compiled once" in log, log
    regions_replayed = [line for line in log.splitlines() if "replays eagerly at such sizes" in line]
    assert len(regions_replayed) == 1 and "is sizes (2, 5, 8)" in regions_replayed[0], log
    s = kiln.stats()
    assert s["traces"] == 2 and s["size_instances"] == 0, s


def test_graphs_that_need_gradients_compile_per_size(capfd):
    # kiln's autograd differentiates a whole graph: a training step keeps
    # its size instances.
    torch.manual_seed(0)
    step = _DecodeStep()
    compiled = _compile(step)
    with kiln_logs("dynamic"):
        for length in [8, 9, 10, 11]:
            args = (torch.randn(1, 1, 16), torch.randn(1, length, 16))
            out, keys = compiled(*args)
            want, _ = step(*args)
            assert_same(out, want)
            out.sum().backward()
    log = capfd.readouterr().err
    assert "static regions" not in log and "compiled per size" in log, log


def test_the_config_setting_turns_them_off():
    torch.manual_seed(0)
    step = _DecodeStep().eval()
    assert kiln.config.static_regions is True
    kiln.config.static_regions = False
    try:
        s = _decode(_compile(step), step, [8, 9, 10])
    finally:
        kiln.config.static_regions = True
    assert s["static_regions"] == 0 and s["size_instances"] == 2, s
    with pytest.raises(TypeError, match="static_regions must be a bool"):
        kiln.config.static_regions = "yes"


def test_a_view_written_in_place_later_keeps_size_instances(capfd):
    # The region would hand on v, a view of h, and an eager call writes h in
    # place afterwards: a compiled graph may return a copy where torch
    # returns the view, so the graph is compiled per size instead.
    torch.manual_seed(0)
    w = torch.randn(4, 4)

    def fn(x, cache):
        h = (x @ w).tanh() * 2.0 + 1.0
        v = h.view(-1)
        keys = torch.cat([cache, x], dim=0)
        h.add_(keys.sum())
        return v * 1.0, keys

    compiled = _compile(fn)
    with torch.no_grad(), kiln_logs("dynamic"):
        for length in [3, 4, 5, 7]:
            args = (torch.randn(1, 4), torch.randn(length, 4))
            assert_same(compiled(*args), fn(*args))
    log = capfd.readouterr().err
    assert "static regions" not in log and "compiled per size" in log, log
