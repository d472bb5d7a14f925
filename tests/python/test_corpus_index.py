"""The corpus index (corpus_index.py) names real tests, covers every item
of the tracer issue, and adds up to at least 150 distinct test functions."""
import ast
import pathlib

from corpus_index import ITEMS

HERE = pathlib.Path(__file__).resolve().parent


def functions_in(path):
    """Names of the module-level test functions in a test file."""
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def resolve(entry):
    """The (file, test) pairs an index entry stands for."""
    file, _, name = entry.partition("::")
    path = HERE / file
    assert path.is_file(), f"corpus index: no test file {file}"
    names = functions_in(path)
    if name:
        assert name in names, f"corpus index: {file} has no test {name}"
        return {(file, name)}
    assert names, f"corpus index: {file} has no tests"
    return {(file, n) for n in names}


def test_every_entry_names_existing_tests():
    for entries in ITEMS.values():
        for entry in entries:
            resolve(entry)


def test_every_item_has_tests():
    for item, entries in ITEMS.items():
        tests = set().union(*(resolve(e) for e in entries))
        # The fuzzer is one test running thousands of programs.
        least = 1 if item == "differential fuzzer" else 3
        assert len(tests) >= least, f"corpus item {item!r} has only {len(tests)} tests"


def test_corpus_has_at_least_150_test_functions():
    tests = set()
    for entries in ITEMS.values():
        for entry in entries:
            tests |= resolve(entry)
    assert len(tests) >= 150, len(tests)
