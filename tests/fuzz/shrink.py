#!/usr/bin/env python3
"""Shrinks a failing fuzz program to a small one that fails the same way.

    PYTHONPATH=python /usr/bin/python3 tests/fuzz/shrink.py SEED [--exclude a,b] [--source FILE] [--out FILE]

Starts from the seed's program (or FILE), runs it with the seed's inputs as
run_fuzz.py does, and keeps applying source edits that preserve the failure:
deleting statements, replacing if/for/while/with/try/match by one of their
bodies, dropping unused module-level definitions, returning fewer values,
replacing call arguments and operands by a simpler one. "The same way"
means the same failure kind and, for exceptions, the same exception type
(or --match REGEX on the message). Each candidate runs in this process;
with --subprocess each runs in a fresh interpreter (for crashes).
"""
import argparse
import ast
import copy
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from program_generator import generate  # noqa: E402


def signature(res):
    if res.get("status") != "fail":
        return None
    kind = res.get("kind")
    msg = res.get("message", "")
    if kind in ("kiln-exception", "exception-type", "fullgraph", "harness-exception"):
        m = re.search(r"raised (\w+)", msg)
        return (kind, m.group(1) if m else None)
    if kind == "mismatch":
        # what differs, without the path
        m = re.search(r"\]: (.*)$", msg.splitlines()[0]) or re.search(r"\): (.*)$", msg.splitlines()[0])
        what = m.group(1) if m else msg
        what = re.sub(r"[-0-9.e]+", "#", what)[:60]
        return (kind, "values" if "values differ" in msg else what)
    return (kind,)


class Runner:
    def __init__(self, prog, use_subprocess, match):
        self.prog = prog
        self.sub = use_subprocess
        self.match = match
        self.runs = 0

    def result(self, src):
        self.runs += 1
        if self.sub:
            with open("/tmp/_shrink_candidate.py", "w") as f:
                f.write(src)
            cmd = [sys.executable, os.path.join(HERE, "run_fuzz.py"), "--repro", str(self.prog.seed),
                   "--source", "/tmp/_shrink_candidate.py", "--json-only"]
            if self.prog.exclude:
                cmd += ["--exclude", ",".join(self.prog.exclude)]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if p.returncode < 0:
                return {"status": "fail", "kind": "crash", "message": f"signal {-p.returncode}"}
            try:
                return json.loads(p.stdout.strip().splitlines()[-1])
            except Exception:  # noqa: BLE001
                return {"status": "error"}
        from run_fuzz import check_program
        try:
            compile(src, "<shrink>", "exec")
            return check_program(self.prog, src)
        except Exception as e:  # noqa: BLE001
            return {"status": "discard", "discard": str(e)}

    def same(self, src, want):
        res = self.result(src)
        if self.match:
            return res.get("status") == "fail" and re.search(self.match, res.get("message", "")) is not None
        return signature(res) == want


def stmt_lists(tree):
    """Every (node, field) holding a list of statements."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            v = getattr(node, field, None)
            if isinstance(v, list) and v and isinstance(v[0], ast.stmt):
                yield node, field
        if isinstance(node, ast.Try):
            for h in node.handlers:
                yield h, "body"
        if isinstance(node, ast.Match):
            for c in node.cases:
                yield c, "body"


def candidates(tree):
    """Yields edited copies of tree, biggest simplifications first."""
    # 1. delete statements / replace compound statements by a body
    lists = list(stmt_lists(tree))
    for li, (node, field) in enumerate(lists):
        body = getattr(node, field)
        for i in range(len(body)):
            st = body[i]
            if isinstance(st, ast.Return) and isinstance(node, ast.FunctionDef) and node.name == "fn":
                continue
            t2 = copy.deepcopy(tree)
            n2, f2 = list(stmt_lists(t2))[li]
            b2 = getattr(n2, f2)
            del b2[i]
            if not b2:
                b2.append(ast.Pass())
            yield t2
            inner = []
            if isinstance(st, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                inner = [st.body] + ([st.orelse] if getattr(st, "orelse", None) else [])
                if isinstance(st, ast.Try):
                    inner += [h.body for h in st.handlers] + ([st.finalbody] if st.finalbody else [])
            elif isinstance(st, ast.Match):
                inner = [c.body for c in st.cases]
            for k in range(len(inner)):
                t2 = copy.deepcopy(tree)
                n2, f2 = list(stmt_lists(t2))[li]
                b2 = getattr(n2, f2)
                st2 = b2[i]
                if isinstance(st2, ast.Match):
                    rep = st2.cases[k].body
                else:
                    rep = ([st2.body] + ([st2.orelse] if getattr(st2, "orelse", None) else [])
                           + ([h.body for h in st2.handlers] + ([st2.finalbody] if st2.finalbody else [])
                              if isinstance(st2, ast.Try) else []))[k]
                b2[i:i + 1] = rep
                yield t2
    # 2. fewer returned values
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, (ast.Tuple, ast.List, ast.Dict)):
            elts = node.value.values if isinstance(node.value, ast.Dict) else node.value.elts
            for k in range(len(elts)):
                t2 = copy.deepcopy(tree)
                for n2 in ast.walk(t2):
                    if isinstance(n2, ast.Return) and ast.dump(n2) == ast.dump(node):
                        v = n2.value
                        if isinstance(v, ast.Dict):
                            n2.value = ast.Dict(keys=[v.keys[k]], values=[v.values[k]])
                        else:
                            n2.value = type(v)(elts=[v.elts[k]], ctx=ast.Load())
                        break
                yield t2
    # 3. replace an expression by one of its sub-expressions
    exprs = [n for n in ast.walk(tree) if isinstance(n, (ast.Call, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Subscript,
                                                         ast.Attribute))
             and not isinstance(getattr(n, "ctx", None), ast.Store)]
    for idx in range(len(exprs)):
        node = exprs[idx]
        subs = []
        if isinstance(node, ast.Call):
            subs = [a for a in node.args if not isinstance(a, ast.Starred)]
            if isinstance(node.func, ast.Attribute):
                subs.append(node.func.value)
        elif isinstance(node, ast.BinOp):
            subs = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp):
            subs = [node.operand]
        elif isinstance(node, ast.IfExp):
            subs = [node.body, node.orelse]
        for k in range(len(subs)):
            t2 = copy.deepcopy(tree)
            target = [n for n in ast.walk(t2) if isinstance(n, (ast.Call, ast.BinOp, ast.UnaryOp, ast.IfExp,
                                                                 ast.Subscript, ast.Attribute))
                      and not isinstance(getattr(n, "ctx", None), ast.Store)][idx]
            replacement = _subs_of(target)[k]
            if not _replace(t2, target, replacement):
                continue
            yield t2


def _subs_of(node):
    if isinstance(node, ast.Call):
        s = [a for a in node.args if not isinstance(a, ast.Starred)]
        if isinstance(node.func, ast.Attribute):
            s.append(node.func.value)
        return s
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.IfExp):
        return [node.body, node.orelse]
    return []


def _replace(tree, target, replacement):
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, field, replacement)
                return True
            if isinstance(value, list):
                for i, v in enumerate(value):
                    if v is target:
                        value[i] = replacement
                        return True
    return False


def drop_unused_defs(tree):
    """Removes module-level defs/classes/assignments whose names are not used elsewhere."""
    changed = True
    while changed:
        changed = False
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        used |= {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
        keep = []
        for st in tree.body:
            name = None
            if isinstance(st, (ast.FunctionDef, ast.ClassDef)):
                name = st.name
            elif isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                name = st.targets[0].id
            if name and name != "fn" and name not in used:
                changed = True
                continue
            keep.append(st)
        tree.body = keep
    return tree


def shrink(prog, src, runner, want, log=print):
    tree = ast.parse(src)
    best = ast.unparse(tree)
    progress = True
    while progress:
        progress = False
        for cand in candidates(tree):
            text = ast.unparse(drop_unused_defs(copy.deepcopy(cand)))
            if len(text) >= len(best):
                continue
            if runner.same(text, want):
                tree = ast.parse(text)
                best = text
                progress = True
                log(f"  {len(best.splitlines())} lines ({runner.runs} runs)")
                break
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("seed", type=int)
    ap.add_argument("--exclude", default="")
    ap.add_argument("--source", help="start from this program text instead of the seed's")
    ap.add_argument("--out", help="write the result here")
    ap.add_argument("--subprocess", action="store_true", help="run each candidate in a fresh process")
    ap.add_argument("--match", help="keep candidates whose failure message matches this regex")
    opts = ap.parse_args()
    import warnings
    warnings.simplefilter("ignore")
    prog = generate(opts.seed, tuple(x for x in opts.exclude.split(",") if x))
    src = open(opts.source).read() if opts.source else prog.source
    runner = Runner(prog, opts.subprocess, opts.match)
    res = runner.result(src)
    want = signature(res)
    if want is None and not opts.match:
        sys.exit(f"seed {opts.seed} does not fail: {json.dumps(res)[:500]}")
    print(f"failure: {res.get('kind')}: {res.get('message', '')[:300]}")
    best = shrink(prog, src, runner, want)
    final = runner.result(best)
    print(best)
    print(prog.describe_inputs())
    print(f"failure: {final.get('kind')}: {final.get('message', '')[:500]}")
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(best + "\n")


if __name__ == "__main__":
    main()
