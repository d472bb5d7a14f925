"""`kiln trace`: dumps of FILE.py::function, golden checks with readable
diffs, and the update mode."""
import textwrap

from kiln_binary import KILN, needs_kiln, run

pytestmark = needs_kiln

SOURCE = """\
    import torch

    def fn(x):
        return torch.relu(x) + 1

    def other(x, y):
        return x * y

    ARGS = (torch.randn(2, 3),)
    """


def golden(tmp_path, body="torch.relu(x) + 1"):
    (tmp_path / "goldens").mkdir(exist_ok=True)
    path = tmp_path / "goldens" / "relu.txt"
    path.write_text("# a user's golden\n--- Input ---\n" + textwrap.dedent(f"""\
        import torch

        def fn(x):
            return {body}

        ARGS = (torch.randn(2, 3),)
        """))
    return path


def test_dump(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(SOURCE))
    result = run(KILN, ["trace", f"{path}::fn", "--dump"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("=== frame fn ===\n--- bytecode ---\n")
    assert "torch.relu" in result.stdout and "--- guards ---" in result.stdout
    assert "f32[2, 3]" in result.stdout
    other = run(KILN, ["trace", f"{path}::other", "--args", "(torch.ones(4), 2.0)"])
    assert other.returncode == 0, other.stderr
    assert "=== frame other ===" in other.stdout and "f32[4]" in other.stdout


def test_usage_errors(tmp_path):
    assert run(KILN, ["trace"]).returncode == 2
    assert run(KILN, ["trace", "--update"]).returncode == 2
    missing = run(KILN, ["trace", f"{tmp_path}/nope.py::fn"])
    assert missing.returncode == 1 and "no such file" in missing.stderr


def test_check_update_cycle(tmp_path):
    path = golden(tmp_path)
    directory = path.parent
    # No section for this Python yet: a failure that says what to do.
    first = run(KILN, ["trace", "--check", directory])
    assert first.returncode == 1 and "MISSING" in first.stdout and "--update" in first.stdout
    assert run(KILN, ["trace", "--check", directory, "--update"]).returncode == 0
    assert path.read_text().startswith("# a user's golden\n--- Input ---\n")
    assert run(KILN, ["trace", "--check", directory]).returncode == 0

    # A changed graph fails with a unified diff of the dump.
    text = path.read_text().replace("torch.relu(x) + 1", "torch.sigmoid(x) + 1")
    path.write_text(text)
    changed = run(KILN, ["trace", "--check", directory])
    assert changed.returncode == 1
    out = changed.stdout
    assert f"CHANGED {path}" in out
    assert "--- relu.txt (expected" in out and "+++ relu.txt (actual)" in out
    removed = [line for line in out.splitlines() if line.startswith("-") and "relu" in line]
    added = [line for line in out.splitlines() if line.startswith("+") and "sigmoid" in line]
    assert removed and added
    assert "0 of 1 golden files match" in out

    assert run(KILN, ["trace", "--check", directory, "--update"]).returncode == 0
    again = run(KILN, ["trace", "--check", path])  # a single file works too
    assert again.returncode == 0 and "1 of 1 golden files match" in again.stdout


def test_check_kilns_own_goldens():
    from kiln_binary import ROOT
    result = run(KILN, ["trace", "--check", ROOT / "tests" / "traces"])
    assert result.returncode == 0, result.stdout
