"""Golden trace tests: each tests/traces/*.txt file holds Python source and,
per Python version, the expected trace dump (bytecode, graph, guards,
breaks) of calling its `fn` on `ARGS` (format and runner: kiln.goldens).
KILN_UPDATE_GOLDEN=1 rewrites the running version's section instead of
comparing."""
import os
import pathlib

import pytest

from kiln import goldens

TRACES = pathlib.Path(__file__).resolve().parent.parent / "traces"


@pytest.mark.cpu_semantics("golden files record traces of CPU tensors")
@pytest.mark.parametrize("path", sorted(TRACES.glob("*.txt")), ids=lambda p: p.stem)
def test_golden_trace(path):
    result = goldens.check_file(path, update=os.environ.get("KILN_UPDATE_GOLDEN") == "1")
    assert result.status != "missing", (
        f"{path.name} has no '--- Expected {goldens.VERSION} ---' section; "
        "run with KILN_UPDATE_GOLDEN=1 and review the result")
    if result.status == "changed":
        pytest.fail(f"trace of {path.name} changed:\n{result.diff}")


def test_golden_files_exist():
    assert len(list(TRACES.glob("*.txt"))) >= 5


def test_parse_render_round_trip():
    text = "# header\n--- Input ---\ndef fn(): pass\n--- Expected 3.11 ---\nA\n--- Expected 3.12 ---\nB\n"
    header, sections = goldens.parse(text)
    assert header == "# header\n"
    assert sections == {"Input": "def fn(): pass\n", "3.11": "A\n", "3.12": "B\n"}
    assert goldens.render(header, sections) == text
