"""The kiln binary behaves as python3: argv, exit codes, exceptions and
tracebacks, -c, -m, scripts from stdin; and kiln's own options."""
import textwrap

from kiln_binary import KILN, PYTHON, both, needs_kiln, run

pytestmark = needs_kiln


def script(tmp_path, source, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def assert_same(kiln, python):
    assert (kiln.returncode, kiln.stdout, kiln.stderr) == \
        (python.returncode, python.stdout, python.stderr)


def test_argv_is_python3s(tmp_path):
    path = script(tmp_path, "import sys; print(sys.argv)")
    # Arguments after the script are the script's, even when they look like kiln's.
    assert_same(*both([path, "a", "--report", "--compile=none", "-c", "x"]))


def test_exit_codes(tmp_path):
    for source, code in (("print('ok')", 0), ("import sys; sys.exit(3)", 3),
                         ("raise SystemExit('bye')", 1), ("raise SystemExit", 0)):
        kiln, python = both([script(tmp_path, source)])
        assert kiln.returncode == code
        assert_same(kiln, python)


def test_uncaught_exception_traceback(tmp_path):
    path = script(tmp_path, """\
        def inner(x):
            return {}[x]

        def outer():
            inner("missing")

        outer()
        """)
    kiln, python = both([path])
    assert kiln.returncode == 1
    assert "KeyError: 'missing'" in kiln.stderr
    assert_same(kiln, python)


def test_dash_c(tmp_path):
    assert_same(*both(["-c", "import sys; print(sys.argv); sys.exit(4)", "x", "--report"]))
    assert_same(*both(["-c", "1/0"]))


def test_dash_m(tmp_path):
    script(tmp_path, "import sys; print(__name__, sys.argv[1:])", name="hello_mod.py")
    kiln, python = both(["-m", "hello_mod", "a", "b"], env={"PYTHONPATH": str(tmp_path)})
    assert kiln.stdout == "__main__ ['a', 'b']\n"
    assert (kiln.returncode, kiln.stdout) == (python.returncode, python.stdout)


def test_script_from_stdin():
    source = "import sys; print(sys.argv); raise SystemExit(5)"
    assert_same(*both(["-", "a"], stdin=source))
    kiln, python = both([], stdin=source)
    assert kiln.returncode == 5
    assert_same(kiln, python)


def test_python_options_before_kiln_options(tmp_path):
    path = script(tmp_path, "import sys; print(sys.flags.optimize, sys.warnoptions, sys.argv)")
    kiln = run(KILN, ["-O", "-W", "ignore", "--compile=none", path, "z"])
    python = run(PYTHON, ["-O", "-W", "ignore", path, "z"])
    assert_same(kiln, python)


def test_bad_kiln_option_is_a_usage_error():
    for bad in ("--compile=fast", "--compile", "--report-sample=x", "--reports"):
        result = run(KILN, [bad, "-c", "pass"])
        assert result.returncode == 2, bad
        assert result.stderr.startswith("kiln: ") and "usage: kiln" in result.stderr
    assert run(PYTHON, ["--bogus"]).returncode == 2


def test_help_names_kiln_and_python_options():
    result = run(KILN, ["--help"])
    assert result.returncode == 0
    assert "--compile=modules" in result.stdout and "--report" in result.stdout
    assert "-c cmd" in result.stdout  # python's own help follows


MODEL = """\
    import sys
    import torch
    import kiln

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, 8)
            self.fc2 = torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    model = Block()
    if "compile" in sys.argv:
        model = kiln.compile(model, backend="eager")
    x = torch.randn(3, 4)
    for _ in range(5):
        y = model(x)
    print(kiln.stats()["traces"], type(model).__name__, tuple(y.shape))
    """


def test_compile_policies(tmp_path):
    path = script(tmp_path, MODEL)
    assert run(KILN, [path]).stdout == "0 Block (3, 2)\n"
    # One graph: submodules are inlined into the outermost module's trace.
    assert run(KILN, ["--compile=modules", path]).stdout == "1 Block (3, 2)\n"
    assert run(KILN, [path, "compile"]).stdout == "1 CompiledModule (3, 2)\n"
    assert run(KILN, ["--compile=modules", path, "compile"]).stdout == "1 CompiledModule (3, 2)\n"
    assert run(KILN, ["--compile=none", path, "compile"]).stdout == "0 Block (3, 2)\n"


def test_report(tmp_path):
    path = script(tmp_path, """\
        import torch
        import kiln

        @kiln.compile(backend="eager")
        def step(x):
            return (x * 2).relu().sum()

        @kiln.compile(backend="eager")
        def chatty(x):
            y = x + 1
            print("hello")
            return y * 2

        x = torch.randn(8)
        for _ in range(40):
            step(x)
        chatty(x)
        """)
    result = run(KILN, ["--report", "--report-sample=5", path])
    assert result.returncode == 0
    report = result.stderr
    assert "=== kiln report (--compile=marked; every 5th call" in report
    rows = {line.split()[0]: line.split() for line in report.splitlines()
            if line.startswith(("step", "chatty"))}
    assert rows["step"][2:4] == ["40", "1"]      # calls, graphs
    assert rows["chatty"][2:5] == ["1", "2", "1"]  # calls, graphs, breaks
    assert "chatty (script.py:8): not enough samples" in report
    assert "graph breaks:" in report and "print" in report
    # Without --report nothing is printed.
    assert "kiln report" not in run(KILN, [path]).stderr


def test_report_at_uncaught_exception_and_exit(tmp_path):
    path = script(tmp_path, """\
        import torch, kiln
        f = kiln.compile(lambda x: x + 1, backend="eager")
        f(torch.ones(2))
        raise RuntimeError("late")
        """)
    result = run(KILN, ["--report", path])
    assert result.returncode == 1
    assert "RuntimeError: late" in result.stderr
    assert result.stderr.index("RuntimeError: late") < result.stderr.index("=== kiln report")
    assert "<lambda>" in result.stderr
