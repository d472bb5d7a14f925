"""Golden trace files: Python source plus, per Python version, the expected
trace dump (bytecode, graph, guards, breaks) of calling its `fn` on `ARGS`.

A golden file reads:

    # any header text
    --- Input ---
    import torch
    def fn(x):
        return x.relu() + 1
    ARGS = (torch.randn(4),)
    --- Expected 3.11 ---
    <the kiln.trace_dump text>

`ARGS` (a tuple) and `KWARGS` (a dict) are optional; `DYNAMIC = True` traces
as kiln.compile(dynamic=True) would. torch.manual_seed(0) runs first.
Used by `kiln trace --check` and by kiln's own tests (tests/traces).
"""
import difflib
import pathlib
import re
import sys
from dataclasses import dataclass

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
    """The file text for a header and sections (the inverse of parse)."""
    out = header
    out += "--- Input ---\n" + sections["Input"]
    for version in sorted(k for k in sections if k != "Input"):
        out += f"--- Expected {version} ---\n" + sections[version]
    return out


def dump_source(source, filename="<golden>", function="fn"):
    """Runs `source`, then traces its `function` on ARGS/KWARGS; returns the dump text."""
    import torch
    import kiln

    namespace = {"__name__": f"golden_{pathlib.Path(filename).stem}"}
    torch.manual_seed(0)
    exec(compile(source, filename, "exec"), namespace)
    if function not in namespace:
        raise ValueError(f"{filename} defines no function {function!r}")
    fn = namespace[function]
    args = namespace.get("ARGS", ())
    kwargs = namespace.get("KWARGS", {})
    kiln.reset()
    if namespace.get("DYNAMIC"):
        # Traced as kiln.compile(dynamic=True) would: argument sizes symbolic.
        _, text = kiln._C.trace_dump(fn, tuple(args), kwargs, False, True)
        return text
    return kiln.trace_dump(fn, *args, **kwargs)


@dataclass
class Result:
    """The outcome of checking one golden file."""
    path: pathlib.Path
    status: str        # "ok", "changed", "missing" (no section for VERSION), "updated"
    diff: str = ""     # unified diff expected -> actual when changed


def check_file(path, update=False):
    """Compares a golden file's expected section for the running Python with a
    fresh trace; with update=True rewrites that section instead."""
    path = pathlib.Path(path)
    header, sections = parse(path.read_text())
    actual = dump_source(sections["Input"], f"<golden:{path.name}>")
    expected = sections.get(VERSION)
    if update:
        if expected == actual:
            return Result(path, "ok")
        sections[VERSION] = actual
        path.write_text(render(header, sections))
        return Result(path, "updated")
    if expected is None:
        return Result(path, "missing")
    if actual == expected:
        return Result(path, "ok")
    diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                        f"{path.name} (expected {VERSION})",
                                        f"{path.name} (actual)"))
    return Result(path, "changed", diff)


def golden_files(target):
    """The golden files of a directory (*.txt, sorted), or the file itself."""
    target = pathlib.Path(target)
    return sorted(target.glob("*.txt")) if target.is_dir() else [target]
