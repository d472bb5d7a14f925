"""kiln under torch.distributed: DistributedDataParallel around a kiln-compiled
model, kiln.compile around a DDP model, and FSDP2 with each block's forward
compiled, two CPU processes over gloo (examples/train_gpt_distributed.py
under torchrun), against the same wrapping's eager losses and parameters."""
import os
import re
import subprocess
import sys

import pytest

import kiln

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_gpt_distributed.py")


@pytest.mark.parametrize("wrap", ["inner", "outer", "fsdp"])
def test_data_parallel_training_equals_eager(wrap):
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           EXAMPLE, "--steps", "20", "--wrap", wrap, "--device", "cpu"],
                          env=env, capture_output=True, text=True, timeout=300)
    ranks = re.findall(r"rank \d \(\w+\):.*?prim fallbacks", proc.stdout)
    assert proc.returncode == 0 and len(ranks) == 2, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    graphs = 2 if wrap == "fsdp" else 1  # FSDP2: one per block
    for line in ranks:
        # Each rank's graphs went through kiln's autograd, whole.
        assert f" {graphs} autograd graphs" in line and "0 breaks" in line and "0 prim fallbacks" in line, line
