"""Which tests an oracle file defines, found by parsing it (nothing is executed).

The trusted runner's default expectation for an oracle is "every test in the oracle files
passes". The list of those tests must not come from the run being graded (code under test runs in
that process and could hide tests from collection), so it is computed here, harness-side, from the
oracle files alone, with pytest's default naming rules.
"""

import ast
import fnmatch
from pathlib import PurePosixPath


def is_fixture(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated with ``fixture`` / ``pytest.fixture`` (called or not) — not merely a decorator
    that mentions the word: ``@pytest.mark.usefixtures(...)`` marks a test, and a test wrongly
    taken for a fixture would drop out of the expected oracle tests."""
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = ast.unparse(target)
        if name in ("fixture", "pytest.fixture") or name.endswith(".fixture"):
            return True
    return False


def opts_out(body: list[ast.stmt]) -> bool:
    """``__test__ = False`` in a module or class body."""
    for stmt in body:
        if (
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__test__" for t in stmt.targets)
            and isinstance(stmt.value, ast.Constant)
            and not stmt.value.value
        ):
            return True
    return False


def _test_functions(body: list[ast.stmt]) -> list[str]:
    return [
        n.name
        for n in body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.name.startswith("test")
        and not is_fixture(n)
    ]


def _method_names(
    node: ast.ClassDef, local: dict[str, ast.ClassDef], seen: frozenset[str]
) -> list[str]:
    names: list[str] = []
    for base in node.bases:
        parent = local.get(ast.unparse(base))
        if parent is not None and parent.name not in seen:
            names += _method_names(parent, local, seen | {node.name})
    return list(dict.fromkeys(names + _test_functions(node.body)))


def _class_tests(node: ast.ClassDef, prefix: str, local: dict[str, ast.ClassDef]) -> list[str]:
    unittest_case = any(ast.unparse(b).endswith("TestCase") for b in node.bases)
    if not (node.name.startswith("Test") or unittest_case) or opts_out(node.body):
        return []
    if not unittest_case and any(
        isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in node.body
    ):
        return []  # pytest does not collect a test class with __init__
    out = [f"{prefix}::{n}" for n in _method_names(node, local, frozenset())]
    for inner in node.body:
        if isinstance(inner, ast.ClassDef):
            out += _class_tests(inner, f"{prefix}::{inner.name}", local)
    return out


def discover_tests(name: str, source: bytes) -> list[str]:
    """Test ids pytest (default naming) would collect from oracle file ``name``, found by parsing.

    Nothing is executed. Top-level ``test*`` functions, ``test*`` methods of ``Test*`` classes
    (without ``__init__``) and of ``unittest.TestCase`` subclasses, methods inherited from classes
    of the same file, and nested classes are found; a parametrized test is one id that every
    parametrization matches. Tests made dynamically (assigned, generated, inherited from another
    file) are not: declare ``fail_to_pass``/``pass_to_pass`` for those.

    Raises:
        SyntaxError: the file does not parse.
    """
    base = PurePosixPath(name).name
    if not (fnmatch.fnmatch(base, "test_*.py") or fnmatch.fnmatch(base, "*_test.py")):
        return []
    tree = ast.parse(source, filename=name)
    if opts_out(tree.body):
        return []
    local = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out = [f"{name}::{f}" for f in _test_functions(tree.body)]
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out += _class_tests(node, f"{name}::{node.name}", local)
    return list(dict.fromkeys(out))
