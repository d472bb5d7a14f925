"""kiln --report: what compiling did and whether it paid, printed at exit.

Per compiled callable: calls, graphs, graph breaks, recompiles, compile
time, and its return on investment. Every N-th call (N = --report-sample,
50 by default) runs eagerly; the medians of those eager calls and of the
compiled calls give the time saved per call, times the compiled calls,
against the compile time. With fewer than MIN_SAMPLES of either the report
says so instead of guessing.
"""
import atexit
import os
import re
import statistics
import sys

from . import _C, policy

MIN_SAMPLES = 3
LIST_LIMIT = 20

_sample_every = 50


def enable(sample_every: int = 50) -> None:
    """Turns reporting on for everything compiled from now; prints at exit."""
    global _sample_every
    _sample_every = sample_every
    _C.enable_report(sample_every)
    atexit.register(print_report)


def print_report() -> None:
    """Writes the report to stderr."""
    for stream in (sys.stdout, sys.stderr):  # the program's output first
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    sys.stderr.write(format_report(_C.report_data(), policy.policy(), _sample_every))
    sys.stderr.flush()


def _short(text: str) -> str:
    # "/long/path/file.py:3" -> "file.py:3": the table stays narrow.
    return re.sub(r"(?:[^\s()]*/)([^/\s()]+:\d+)", r"\1", text)


def _roi(item):
    """Returns (eager_us, compiled_us, saving_ms, net_ms, note); numbers are None when unknown."""
    eager, compiled = item["eager_ns"], item["compiled_ns"]
    compile_ms = item["compile_ns"] / 1e6
    if len(eager) < MIN_SAMPLES or len(compiled) < MIN_SAMPLES:
        return (None, None, None, None,
                f"not enough samples ({len(eager)} eager, {len(compiled)} compiled; "
                f"{MIN_SAMPLES} of each needed)")
    eager_us = statistics.median(eager) / 1e3
    compiled_us = statistics.median(compiled) / 1e3
    compiled_calls = item["calls"] - len(eager)
    saving_ms = (eager_us - compiled_us) * compiled_calls / 1e3
    return eager_us, compiled_us, saving_ms, saving_ms - compile_ms, ""


def _num(value, fmt):
    return "-" if value is None else format(value, fmt)


def format_report(data, policy_name: str, sample_every: int) -> str:
    """The report text for _C.report_data() entries."""
    sampling = (f"every {sample_every}th call runs eagerly to measure the saving"
                if sample_every else "no eager sampling")
    lines = [f"=== kiln report (--compile={policy_name}; {sampling}) ==="]
    used = [item for item in data if item["calls"] or item["traces"]]
    if not used:
        lines.append("nothing was compiled")
        return "\n".join(lines) + "\n"
    header = (f"{'compiled':40} {'calls':>7} {'graphs':>6} {'breaks':>6} {'recomp':>6} "
              f"{'compile ms':>10} {'eager us':>9} {'kiln us':>9} {'saved ms':>9} {'net ms':>9}")
    lines += [header, "-" * len(header)]
    notes = []
    total_compile = total_net = 0.0
    for item in used:
        eager_us, compiled_us, saving_ms, net_ms, note = _roi(item)
        name = _short(item["name"])
        compile_ms = item["compile_ns"] / 1e6
        total_compile += compile_ms
        if net_ms is not None:
            total_net += net_ms
        if note:
            notes.append(f"  {name}: {note}")
        lines.append(f"{name[:40]:40} {item['calls']:>7} {item['traces']:>6} {len(item['breaks']):>6} "
                     f"{len(item['recompiles']):>6} {compile_ms:>10.1f} {_num(eager_us, '9.1f'):>9} "
                     f"{_num(compiled_us, '9.1f'):>9} {_num(saving_ms, '9.1f'):>9} "
                     f"{_num(net_ms, '+9.1f'):>9}")
    lines.append(f"total compile time {total_compile:.1f} ms; net gain of the measured ones "
                 f"{total_net:+.1f} ms (saved ms = (eager us - kiln us) x compiled calls; "
                 "net = saved - compile)")
    if notes:
        lines.append("not measured:")
        lines += notes
    for title, key in (("graph breaks", "breaks"), ("recompiles", "recompiles"),
                       ("frames run eagerly (cannot be traced)", "eager_frames")):
        entries = [f"  {_short(item['name'])}: in {_short(text)}" for item in used
                   for text in item[key]]
        if entries:
            lines.append(f"{title}:")
            lines += entries[:LIST_LIMIT]
            if len(entries) > LIST_LIMIT:
                lines.append(f"  ... and {len(entries) - LIST_LIMIT} more")
    return "\n".join(lines) + "\n"
