"""kiln under torch.distributed: DistributedDataParallel around a kiln-compiled
model and kiln.compile around a DDP model, two CPU processes over gloo
(examples/train_gpt_ddp.py under torchrun), against eager DDP's losses and
parameters."""
import os
import re
import subprocess
import sys

import pytest

import kiln

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_gpt_ddp.py")


@pytest.mark.parametrize("wrap", ["inner", "outer"])
def test_ddp_training_equals_eager_ddp(wrap):
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           EXAMPLE, "--steps", "20", "--wrap", wrap, "--device", "cpu"],
                          env=env, capture_output=True, text=True, timeout=300)
    ranks = re.findall(r"rank \d \(\w+\):.*?prim fallbacks", proc.stdout)
    assert proc.returncode == 0 and len(ranks) == 2, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    for line in ranks:
        # Each rank's graph went through kiln's autograd, whole.
        assert "1 autograd graphs" in line and "0 breaks" in line and "0 prim fallbacks" in line, line
