"""Bounded differential fuzz run: kiln.compile(fn) against eager PyTorch.

Runs tests/fuzz/run_fuzz.py over a fixed range of seeds (default 0:200, a
few seconds to a minute on 2 cores) in worker subprocesses, so a crash in
kiln is reported with its seed instead of killing pytest. Any failure
(mismatch, differing exception, kiln exception, crash, hang, cache or
fullgraph inconsistency) fails the test; the failing programs are written
under the test's tmp_path and listed in the assertion message.

It runs once per backend configuration: the default backend (inductor,
with its CPU kernels), aot_eager (prims and kiln's autograd, replayed
through torch) and eager (graphs replayed through torch as traced).

Environment: KILN_FUZZ_SEEDS=LO:HI to change the range, KILN_FUZZ_EXCLUDE=a,b
to leave generator features out (see tests/fuzz/README.md).
"""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.join(REPO, "tests", "fuzz", "run_fuzz.py")
SUMMARY = re.compile(r"fuzz: (\d+) programs, (\d+) traced fully, (\d+) fell back, (\d+) failures")


CONFIGS = {
    "default": {},
    "aot_eager": {"KILN_FUZZ_BACKEND": "aot_eager"},
    "eager": {"KILN_FUZZ_BACKEND": "eager"},
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_fuzz_bounded(tmp_path, config):
    seeds = os.environ.get("KILN_FUZZ_SEEDS", "0:200")
    cmd = [sys.executable, RUNNER, "--seeds", seeds, "--jobs", "2", "--batch", "100",
           "--report", str(tmp_path), "--quiet", "--timeout", "60",
           "--exclude", os.environ.get("KILN_FUZZ_EXCLUDE", "")]
    env = dict(os.environ)
    env.update(CONFIGS[config])
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("fuzz:")]
    assert lines, f"no summary line; exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    print(lines[-1])
    m = SUMMARY.match(lines[-1])
    assert m, lines[-1]
    programs, _, _, failures = map(int, m.groups())
    fails = [ln for ln in proc.stderr.splitlines() if ln.startswith("FAIL")]
    assert failures == 0, (f"{lines[-1]}\n" + "\n".join(fails[:30])
                           + f"\n(reports under {tmp_path}; rerun one with "
                           "PYTHONPATH=python python3 tests/fuzz/run_fuzz.py --repro SEED)")
    lo, hi = (int(v) for v in seeds.split(":"))
    assert programs >= 0.9 * (hi - lo), f"too many discarded programs: {lines[-1]}"


def _runner():
    sys.path.insert(0, os.path.dirname(RUNNER))
    import run_fuzz
    return run_fuzz


def test_float64_judge_passes_rounding_and_fails_wrong_values():
    """The fuzzer's second look (within_eager_error): a float32 result outside
    tolerance passes only when it is as close to the float64 result as eager's
    is, up to a few ulps of the largest output."""
    import torch
    rf = _runner()
    ref = torch.tensor([0.0, 1e-14, -3e-15], dtype=torch.float64)
    eager = torch.zeros(3)
    rounded = torch.tensor([2e-5, -1e-5, 0.0])       # cancellation noise of outputs near 40
    wrong = torch.tensor([2e-5, -1e-5, 0.5])
    assert rf.within_eager_error(rounded, eager, ref, scale=40.0)
    assert not rf.within_eager_error(rounded, eager, ref, scale=1.0)
    assert not rf.within_eager_error(wrong, eager, ref, scale=40.0)
    assert not rf.within_eager_error(torch.tensor([float("nan"), 0, 0]), eager, ref, scale=40.0)
    # without a reference: within FP32_ULPS ulps of the magnitude of eager's result
    assert rf.within_eager_error(rounded, eager, None, scale=40.0)
    assert not rf.within_eager_error(rounded, eager, None, scale=1.0)
    assert not rf.within_eager_error(wrong, eager, None, scale=40.0)
    # a reference eager is far from (the float64 run branched on a dtype) is none
    assert rf.within_eager_error(rounded, eager, ref + 30.0, scale=40.0)
    assert not rf.within_eager_error(wrong, eager, ref + 30.0, scale=40.0)
    # where eager itself is far from float64, kiln may be as far
    noisy = torch.tensor([3e-3, 0.0, 0.0])
    assert rf.within_eager_error(torch.tensor([-4e-3, 1e-3, 0.0]), noisy, ref, scale=1.0)
    assert not rf.within_eager_error(torch.tensor([-9e-3, 1e-3, 0.0]), noisy, ref, scale=1.0)
    # a float64 value with float32 rounding in it (the gradient of a float64
    # input cast to float32) gets no float32 ulps: only eager's error, twice
    ref64 = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager64 = ref64 + torch.tensor([1e-6, -1e-6, 0.0], dtype=torch.float64)
    assert rf.within_eager_error(ref64 + 1.5e-6, eager64, ref64, scale=40.0)
    assert not rf.within_eager_error(ref64 + 3e-6, eager64, ref64, scale=40.0)


def test_float64_reference_run_promotes_inputs():
    """float64_reference replays a program with its float32 inputs in float64."""
    import torch
    rf = _runner()
    from program_generator import generate
    prog = generate(11200)
    out, args, grads, scale = rf.float64_reference(prog, None, 1)
    assert out.dtype == torch.float64 and args[0].dtype == torch.float64
    assert grads is not None and grads[0].dtype == torch.float64 and scale > 0
