"""Note [Dynamic profiles] (interpreter/dynamic_profile.cpp): the dynamic
dims a code learned over several recompiles are kept on disk, and a later
process makes them dynamic at that code's first size-change recompile.
Each run here is its own process sharing one cache directory."""
import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import json, sys, torch, kiln

    def step(x, cache):
        # A decoding step: the first call has no cache; later calls append
        # one token to a cache that grows by one each call. The cache starts
        # 3 long, no size that changed at the first step (4 -> 1), so that
        # step traces it static (Note [Sizes that change together]).
        if cache is None:
            return x.sum(-1) * 2
        return torch.cat([cache, x], -1).sum(-1) * 2{edit}

    compiled = kiln.compile(step)
    cache = None
    x = torch.randn(1, 4)
    for _ in range(5):
        got, want = compiled(x, cache), step(x, cache)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (got, want)
        cache = torch.randn(1, 3) if cache is None else torch.cat([cache, x], -1)
        x = torch.randn(1, 1)
    print(json.dumps({{"traces": kiln.stats()["traces"]}}))
''')


def run(tmp_path, profiles="1", edit=""):
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "cache"), KILN_DYNAMIC_PROFILES=profiles)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(os.path.dirname(__file__), "..", "..", "python"),
                                                     env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(edit=edit)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])["traces"]


def test_a_later_process_traces_the_learned_dims_dynamic_at_once(tmp_path):
    # First process: the prefill, the first step (the cache is new, so
    # static), then the cache's growth makes it dynamic: 3 traces.
    assert run(tmp_path) == 3
    profiles = list((tmp_path / "cache" / "dynamic").iterdir())
    assert len(profiles) == 1 and "cache" in profiles[0].read_text()
    # A second process: the first step's recompile makes the cache dynamic
    # already: 2 traces.
    assert run(tmp_path) == 2


def test_profiles_off_or_an_edited_function_learn_afresh(tmp_path):
    assert run(tmp_path) == 3
    assert run(tmp_path, profiles="0") == 3
    # Other bytecode: the profile of the old function does not apply.
    assert run(tmp_path, edit=" + 0") == 3


STALE_SCRIPT = textwrap.dedent('''
    import json, sys, torch, kiln

    def step(x, y):
        out = x.sum(-1)
        for i in range(y.shape[1]):  # a Python int from y's width: it cannot be dynamic
            out = out + y[:, i]
        return out

    compiled = kiln.compile(step)
    for width in range(4, 10):
        x, y = (torch.randn(2, 4), torch.randn(2, width)) if sys.argv[1] == "y" else \\
               (torch.randn(2, width), torch.randn(2, 3))
        assert torch.allclose(compiled(x, y), step(x, y), rtol=1e-5, atol=1e-5)
    print(json.dumps({"traces": kiln.stats()["traces"]}))
''')


def run_stale(tmp_path, varies):
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "cache"), KILN_DYNAMIC_PROFILES="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(os.path.dirname(__file__), "..", "..", "python"),
                                                     env.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", STALE_SCRIPT, varies], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])["traces"]


def test_a_profile_dim_this_run_cannot_keep_is_dropped(tmp_path):
    # The first process varies y's width: the profile keeps y dim 1,
    # though the trace cannot make it dynamic (it loops over it). The
    # second varies x's width instead: the profile's y dim 1 makes its
    # first dynamic trace fall back; the dim is then dropped (this process
    # never saw it change) and x's width traced dynamic at its next
    # change, not per size until the cache limit.
    run_stale(tmp_path, "y")
    assert run_stale(tmp_path, "x") == 3
    # Without the stale profile: static, then dynamic.
    assert run_stale(tmp_path / "fresh", "x") == 2
