"""Golden trace tests: each tests/traces/*.txt file holds Python source and,
per Python version, the expected trace dump (bytecode, graph, guards,
breaks) of calling its `fn` on `ARGS`. KILN_UPDATE_GOLDEN=1 rewrites the
running version's section instead of comparing."""
import difflib
import os
import pathlib
import re
import sys

import pytest
import torch

import kiln

TRACES = pathlib.Path(__file__).resolve().parent.parent / "traces"
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
SECTION = re.compile(r"^--- (Input|Expected (\d+\.\d+)) ---$", re.M)


def parse(text):
    """Returns (header, sections) where sections maps 'Input' / '3.11' / ... to text."""
    matches = list(SECTION.finditer(text))
    if not matches or matches[0].group(1) != "Input":
        raise ValueError("a golden file starts with a '--- Input ---' section")
    header = text[:matches[0].start()]
    sections = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        key = match.group(2) or "Input"
        sections[key] = text[match.end() + 1:end]
    return header, sections


def render(header, sections):
    out = header
    out += "--- Input ---\n" + sections["Input"]
    for version in sorted(k for k in sections if k != "Input"):
        out += f"--- Expected {version} ---\n" + sections[version]
    return out


def dump_of(path, source):
    namespace = {"__name__": f"golden_{path.stem}"}
    torch.manual_seed(0)
    exec(compile(source, f"<golden:{path.name}>", "exec"), namespace)
    fn = namespace["fn"]
    args = namespace.get("ARGS", ())
    kwargs = namespace.get("KWARGS", {})
    kiln.reset()
    if namespace.get("DYNAMIC"):
        # Traced as kiln.compile(dynamic=True) would: argument sizes symbolic.
        _, text = kiln._C.trace_dump(fn, tuple(args), kwargs, False, True)
        return text
    return kiln.trace_dump(fn, *args, **kwargs)


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.txt")), ids=lambda p: p.stem)
def test_golden_trace(path):
    header, sections = parse(path.read_text())
    actual = dump_of(path, sections["Input"])
    if os.environ.get("KILN_UPDATE_GOLDEN") == "1":
        sections[VERSION] = actual
        path.write_text(render(header, sections))
        return
    assert VERSION in sections, (
        f"{path.name} has no '--- Expected {VERSION} ---' section; "
        "run with KILN_UPDATE_GOLDEN=1 and review the result")
    expected = sections[VERSION]
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            f"{path.name} (expected {VERSION})", "actual"))
        pytest.fail(f"trace of {path.name} changed:\n{diff}")


def test_golden_files_exist():
    assert len(list(TRACES.glob("*.txt"))) >= 5


def test_parse_render_round_trip():
    text = "# header\n--- Input ---\ndef fn(): pass\n--- Expected 3.11 ---\nA\n--- Expected 3.12 ---\nB\n"
    header, sections = parse(text)
    assert header == "# header\n"
    assert sections == {"Input": "def fn(): pass\n", "3.11": "A\n", "3.12": "B\n"}
    assert render(header, sections) == text
