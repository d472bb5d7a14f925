"""`kiln trace`: trace dumps and golden trace checks from the command line.

    kiln trace FILE.py::function [--args EXPR] [--dynamic]   print the trace dump
    kiln trace --check DIR_OR_FILE [--update]                compare goldens

Exit codes: 0 all goldens match (or were updated), 1 some changed or lack
a section for this Python, 2 usage errors (as argparse).
Also runnable as `python3 -m kiln.trace_cli`.
"""
import argparse
import os
import runpy
import sys

from . import goldens


def _parser():
    parser = argparse.ArgumentParser(
        prog="kiln trace",
        description="Print kiln's trace dump of a function, or check golden trace files.")
    parser.add_argument("target", nargs="?",
                        help="FILE.py::function to trace (with --dump, the default action)")
    parser.add_argument("--dump", action="store_true",
                        help="print the trace dump (bytecode, graph, guards, breaks)")
    parser.add_argument("--args", metavar="EXPR",
                        help="Python expression for the arguments, evaluated in the file's "
                             "namespace (a tuple, or one value); default: the file's ARGS")
    parser.add_argument("--dynamic", action="store_true",
                        help="trace argument sizes as dynamic (kiln.compile(dynamic=True))")
    parser.add_argument("--check", metavar="DIR",
                        help="compare every golden file (*.txt) in DIR (or one file)")
    parser.add_argument("--update", action="store_true",
                        help="with --check: rewrite this Python version's sections")
    return parser


def dump(target, args_expr=None, dynamic=False):
    """Returns the trace dump text of FILE.py::function."""
    import torch
    import kiln

    if "::" not in target:
        raise SystemExit(f"kiln trace: expected FILE.py::function, got {target!r}")
    path, function = target.rsplit("::", 1)
    if not os.path.isfile(path):
        raise SystemExit(f"kiln trace: no such file: {path}")
    # The file's own imports work as if it were run as a script.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    torch.manual_seed(0)
    namespace = runpy.run_path(path, run_name="__kiln_trace__")
    if function not in namespace:
        raise SystemExit(f"kiln trace: {path} defines no function {function!r}")
    if args_expr is not None:
        args = eval(args_expr, namespace)
        if not isinstance(args, tuple):
            args = (args,)
    else:
        args = tuple(namespace.get("ARGS", ()))
    kwargs = namespace.get("KWARGS", {})
    kiln.reset()
    _, text = kiln._C.trace_dump(namespace[function], args, kwargs, False, dynamic)
    return text


def check(target, update=False, out=sys.stdout):
    """Checks (or updates) the goldens under target; returns the exit code."""
    files = goldens.golden_files(target)
    if not files:
        print(f"kiln trace: no golden files (*.txt) in {target}", file=out)
        return 1
    failed = 0
    for path in files:
        try:
            result = goldens.check_file(path, update=update)
        except Exception as error:  # a broken golden is reported, the others still run
            print(f"ERROR   {path}: {type(error).__name__}: {error}", file=out)
            failed += 1
            continue
        if result.status == "changed":
            failed += 1
            print(f"CHANGED {path}", file=out)
            out.write(result.diff)
        elif result.status == "missing":
            failed += 1
            print(f"MISSING {path}: no '--- Expected {goldens.VERSION} ---' section "
                  "(run with --update and review it)", file=out)
        else:
            print(f"{result.status.upper():7} {path}", file=out)
    print(f"{len(files) - failed} of {len(files)} golden files "
          f"{'up to date' if update else 'match'} (Python {goldens.VERSION})", file=out)
    if failed and not update:
        print("after an intended change: kiln trace --check "
              f"{target} --update, then review the diff", file=out)
    return 1 if failed else 0


def main(argv=None):
    """Entry point of `kiln trace`; returns the exit code."""
    parser = _parser()
    options = parser.parse_args(argv)
    if options.check:
        if options.target or options.dump:
            parser.error("--check takes a directory; do not also give FILE.py::function")
        return check(options.check, options.update)
    if options.update:
        parser.error("--update goes with --check")
    if not options.target:
        parser.error("give FILE.py::function (with --dump) or --check DIR")
    sys.stdout.write(dump(options.target, options.args, options.dynamic))
    return 0


if __name__ == "__main__":
    sys.exit(main())
