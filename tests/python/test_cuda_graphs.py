"""mode="reduce-overhead": CUDA graphs captured on the second call and
replayed after (Note [CUDA graphs] in runtime/cuda_graph_executor.cpp),
compared with eager. CPU graphs under the mode run as without it; the CUDA
cases need a GPU (the GPU host runs them)."""
import pytest
import torch
import torch.nn as nn

import kiln

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def mlp(width=64):
    layers = []
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers)


@pytest.mark.cpu_semantics("its subject is graphs on CPU tensors")
def test_cpu_graphs_run_as_without_the_mode():
    model = mlp()
    compiled = kiln.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 64)
            torch.testing.assert_close(compiled(x), model(x))
    assert kiln.stats()["cuda_graphs_captured"] == 0


@cuda
def test_inference_replays_one_capture_and_matches_eager():
    torch.manual_seed(0)
    model = mlp(256).cuda()
    compiled = kiln.compile(model, mode="reduce-overhead")
    kept = []
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(1, 256, device="cuda")
            got = compiled(x)
            torch.testing.assert_close(got, model(x))
            kept.append((x, got))
        # Every call returned its own tensor: later replays overwrote none.
        for x, got in kept:
            torch.testing.assert_close(got, model(x))
    assert kiln.stats()["cuda_graphs_captured"] == 1


@cuda
def test_parameters_are_read_in_place_and_a_moved_one_recaptures():
    model = nn.Sequential(nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 8)).cuda()
    compiled = kiln.compile(model, mode="reduce-overhead")
    x = torch.randn(4, 32, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            compiled(torch.randn(4, 32, device="cuda"))
        # Written in place: the replay reads the new values.
        model[0].weight.mul_(0.5)
        torch.testing.assert_close(compiled(x), model(x))
        # Moved to new memory: captured again.
        before = kiln.stats()["cuda_graphs_captured"]
        model[2].weight.data = torch.randn(8, 32, device="cuda")
        torch.testing.assert_close(compiled(x), model(x))
        assert kiln.stats()["cuda_graphs_captured"] == before + 1


@cuda
def test_training_graphs_run_without_cuda_graphs():
    model = mlp(32).cuda()
    compiled = kiln.compile(model, mode="reduce-overhead")
    x = torch.randn(4, 32, device="cuda")
    for _ in range(3):
        compiled(x).sum().backward()
    assert kiln.stats()["cuda_graphs_captured"] == 0
    assert all(p.grad is not None for p in model.parameters())


@cuda
def test_a_graph_that_cannot_be_captured_falls_back():
    # nonzero synchronizes with the CPU (its size depends on the data); the
    # capture fails and the graph runs as it is.
    def f(x):
        return torch.nonzero(x > 0).float().sum() + x.sum()

    compiled = kiln.compile(f, mode="reduce-overhead", dynamic=False)
    for _ in range(3):
        x = torch.randn(16, device="cuda")
        torch.testing.assert_close(compiled(x), f(x))
