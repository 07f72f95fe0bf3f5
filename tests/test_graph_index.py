"""Tests for the built-in Python code indexer and graph scrubbing
(:mod:`bench_assets.inputs.graph`)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from bench_assets.inputs.graph_index import (
    check_graph_clean,
    find_markers,
    index_python_tree,
    main,
    scrub_predicate,
    write_graph,
)
from bench_assets.kernel.errors import GraphScrubError
from bench_assets.kernel.hashing import canonical_json, sha256_text

ORACLE_MARKER = ".wfbench-oracle-"
ORACLE_FILE_MARKER = "test_oracle_x"


def _write(root: Path, rel: str, text: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def _make_package(root: Path) -> Path:
    _write(
        root,
        "pkg/__init__.py",
        """
        from .util import helper

        __all__ = ["helper"]
        """,
    )
    # The invalid escape makes the compiler warn; under pytest's "error" filter that would turn
    # the file into a parse error unless the indexer isolates itself from warning filters.
    _write(
        root,
        "pkg/util.py",
        r"""
        import os

        PATTERN = "\d+"


        def helper(x):
            return os.path.join(x, "a")


        def _private():
            return helper("b")


        def shadow(helper):
            return helper()
        """,
    )
    _write(
        root,
        "pkg/core.py",
        """
        import json

        import pkg
        from . import util
        from .util import helper as h


        class Base:
            def log(self, message):
                return message


        class Engine(Base):
            def __init__(self):
                self.state = {}

            def run(self, x):
                def inner(y):
                    return h(y)

                return self.step(inner(x))

            def step(self, value):
                return self.log(util.helper(json.dumps(value)))


        def make():
            pkg.helper("z")
            return Engine()
        """,
    )
    _write(root, "pkg/broken.py", "def oops(:\n    pass\n")
    _write(root, "pkg/latin.py", b"name = '\xe9t\xe9'\n")
    # Never indexed: hidden folders, VCS metadata and bytecode caches.
    _write(root, ".hidden/ghost.py", "def ghost():\n    pass\n")
    _write(root, ".git/hooks/hook.py", "def hook():\n    pass\n")
    _write(root, "pkg/__pycache__/cached.py", "def cached():\n    pass\n")
    _write(root, "pkg/README.txt", "def not_python():\n    pass\n")
    return root


def _ids(graph: dict[str, Any]) -> set[str]:
    return {n["id"] for n in graph["nodes"]}


def _triples(graph: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(e["src"], e["dst"], e["kind"]) for e in graph["edges"]}


def test_index_small_package_exact_nodes_edges_and_stats(tmp_path: Path) -> None:
    graph = index_python_tree(_make_package(tmp_path / "repo"))

    assert graph["schema"] == "wfbench.graph/v1"
    assert graph["indexer"] == "builtin-python/1"

    def mod(name: str, path: str, **extra: Any) -> dict[str, Any]:
        node = {"id": f"module:{name}", "kind": "module", "name": name, "path": path, "line": 1}
        return node | extra

    def sym(kind: str, qual: str, path: str, line: int) -> dict[str, Any]:
        return {
            "id": f"{kind}:{qual}",
            "kind": kind,
            "name": qual.rsplit(".", 1)[1],
            "path": path,
            "line": line,
        }

    core, util = "pkg/core.py", "pkg/util.py"
    expected_nodes = [
        sym("class", "pkg.core.Base", core, 8),
        sym("class", "pkg.core.Engine", core, 13),
        {"id": "external:json", "kind": "external", "name": "json"},
        {"id": "external:os", "kind": "external", "name": "os"},
        sym("function", "pkg.core.Base.log", core, 9),
        sym("function", "pkg.core.Engine.__init__", core, 14),
        sym("function", "pkg.core.Engine.run", core, 17),
        sym("function", "pkg.core.Engine.run.inner", core, 18),
        sym("function", "pkg.core.Engine.step", core, 23),
        sym("function", "pkg.core.make", core, 27),
        sym("function", "pkg.util._private", util, 10),
        sym("function", "pkg.util.helper", util, 6),
        sym("function", "pkg.util.shadow", util, 14),
        mod("pkg", "pkg/__init__.py"),
        mod("pkg.broken", "pkg/broken.py", parse_error=True),
        mod("pkg.core", core),
        mod("pkg.latin", "pkg/latin.py", parse_error=True),
        mod("pkg.util", util),
    ]
    assert graph["nodes"] == expected_nodes

    expected_edges = {
        # imports: relative ones resolved inside the tree, others become external nodes
        ("module:pkg", "module:pkg.util", "imports"),
        ("module:pkg.util", "external:os", "imports"),
        ("module:pkg.core", "external:json", "imports"),
        ("module:pkg.core", "module:pkg", "imports"),
        ("module:pkg.core", "module:pkg.util", "imports"),
        # defines, including methods and the nested function
        ("module:pkg.util", "function:pkg.util.helper", "defines"),
        ("module:pkg.util", "function:pkg.util._private", "defines"),
        ("module:pkg.util", "function:pkg.util.shadow", "defines"),
        ("module:pkg.core", "class:pkg.core.Base", "defines"),
        ("module:pkg.core", "class:pkg.core.Engine", "defines"),
        ("module:pkg.core", "function:pkg.core.make", "defines"),
        ("class:pkg.core.Base", "function:pkg.core.Base.log", "defines"),
        ("class:pkg.core.Engine", "function:pkg.core.Engine.__init__", "defines"),
        ("class:pkg.core.Engine", "function:pkg.core.Engine.run", "defines"),
        ("class:pkg.core.Engine", "function:pkg.core.Engine.step", "defines"),
        ("function:pkg.core.Engine.run", "function:pkg.core.Engine.run.inner", "defines"),
        # calls: same-module name, aliased from-import, self-method, inherited self-method,
        # module attribute, package re-export, class instantiation, nested function
        ("function:pkg.util._private", "function:pkg.util.helper", "calls"),
        ("function:pkg.core.Engine.run.inner", "function:pkg.util.helper", "calls"),
        ("function:pkg.core.Engine.run", "function:pkg.core.Engine.step", "calls"),
        ("function:pkg.core.Engine.run", "function:pkg.core.Engine.run.inner", "calls"),
        ("function:pkg.core.Engine.step", "function:pkg.core.Base.log", "calls"),
        ("function:pkg.core.Engine.step", "function:pkg.util.helper", "calls"),
        ("function:pkg.core.make", "function:pkg.util.helper", "calls"),
        ("function:pkg.core.make", "class:pkg.core.Engine", "calls"),
    }
    assert _triples(graph) == expected_edges
    assert len(graph["edges"]) == len(expected_edges)
    # The parameter named ``helper`` hides the module function: no edge from shadow to helper.
    assert ("function:pkg.util.shadow", "function:pkg.util.helper", "calls") not in _triples(graph)

    assert graph["stats"] == {
        "files": 5,
        "modules": 5,
        "classes": 2,
        "functions": 9,
        "externals": 2,
        "imports": 5,
        "calls": 8,
        "defines": 11,
        "nodes": 18,
        "edges": 24,
        "parse_errors": 2,
        "skipped_files": 0,
        # os.path.join, json.dumps and the shadowed parameter call
        "unresolved_calls": 3,
        "unresolved_imports": 0,
    }


def test_nodes_and_edges_are_sorted_and_edges_reference_nodes(tmp_path: Path) -> None:
    graph = index_python_tree(_make_package(tmp_path / "repo"))
    ids = [n["id"] for n in graph["nodes"]]
    assert ids == sorted(ids)
    triples = [(e["src"], e["dst"], e["kind"]) for e in graph["edges"]]
    assert triples == sorted(triples)
    known = set(ids)
    assert all(src in known and dst in known for src, dst, _ in triples)


def test_unresolvable_relative_import_and_namespace_packages(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _write(root, "top.py", "from .. import nothing\nfrom . import ns\n")
    _write(root, "ns/deep/leaf.py", "def f():\n    pass\n")
    _write(
        root,
        "user.py",
        """
        import ns.deep.leaf
        from .missing import gone


        def go():
            ns.deep.leaf.f()
            gone()
        """,
    )
    graph = index_python_tree(root)
    triples = _triples(graph)
    assert ("function:user.go", "function:ns.deep.leaf.f", "calls") in triples
    assert ("module:user", "module:ns.deep.leaf", "imports") in triples
    # A relative import of a module that is not in the tree never becomes an external node.
    assert not any(i.startswith("external:") for i in _ids(graph))
    # "from .. import" above the top level, "from . import ns" (a namespace, no module) and
    # "from .missing import" (absent) cannot be resolved.
    assert graph["stats"]["unresolved_imports"] == 3
    assert graph["stats"]["unresolved_calls"] == 1


def test_classmethod_staticmethod_and_cyclic_reexports(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _write(
        root,
        "m.py",
        """
        from n import loop


        class K:
            @classmethod
            def build(cls):
                return cls.helper()

            @staticmethod
            def helper(self):
                return self.build()

            def again(self):
                return K.build()
        """,
    )
    _write(root, "n.py", "from m import loop\n\n\ndef user():\n    return loop()\n")
    graph = index_python_tree(root)
    triples = _triples(graph)
    assert ("function:m.K.build", "function:m.K.helper", "calls") in triples
    assert ("function:m.K.again", "function:m.K.build", "calls") in triples
    # In a staticmethod the first parameter is not the instance.
    assert not any(src == "function:m.K.helper" for src, _, kind in triples if kind == "calls")
    # ``loop`` is re-exported in a cycle between m and n and never defined: no edge, no hang.
    assert graph["stats"]["unresolved_calls"] == 2


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("def secret_outside():\n    pass\n", encoding="utf-8")
    root = tmp_path / "repo"
    _write(root, "a.py", "def a():\n    pass\n")
    os.symlink(outside, root / "link.py")
    graph = index_python_tree(root)
    assert "secret_outside" not in canonical_json(graph)
    assert graph["stats"]["skipped_files"] == 1
    assert graph["stats"]["files"] == 1


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        index_python_tree(tmp_path / "nope")


def test_index_is_deterministic_and_location_independent(tmp_path: Path) -> None:
    first = _make_package(tmp_path / "one")
    a = canonical_json(index_python_tree(first))
    b = canonical_json(index_python_tree(first))
    copy = tmp_path / "elsewhere" / "deeper" / "two"
    shutil.copytree(first, copy)
    c = canonical_json(index_python_tree(copy))
    assert a == b == c
    assert str(tmp_path) not in a


def _make_scrub_tree(root: Path) -> Path:
    _make_package(root)
    _write(
        root,
        "pkg/leak.py",
        f"""
        ORACLE_DIR = "/tmp/{ORACLE_MARKER}abc"


        def leak_fn():
            return ORACLE_DIR
        """,
    )
    _write(
        root,
        f"tests/{ORACLE_FILE_MARKER}.py",
        """
        from pkg.core import make


        def test_secret_behaviour():
            assert make()
        """,
    )
    return root


def test_scrub_predicate_skips_marked_files_and_graph_is_clean(tmp_path: Path) -> None:
    root = _make_scrub_tree(tmp_path / "repo")
    markers = [ORACLE_MARKER, ORACLE_FILE_MARKER]
    graph = index_python_tree(root, skip=scrub_predicate(markers))

    text = canonical_json(graph)
    paths = {n.get("path") for n in graph["nodes"]}
    assert "pkg/leak.py" not in paths
    assert f"tests/{ORACLE_FILE_MARKER}.py" not in paths
    for fragment in ("leak", "test_secret_behaviour", "tests", ORACLE_FILE_MARKER, ORACLE_MARKER):
        assert fragment not in text
    assert graph["stats"]["skipped_files"] == 2
    assert graph["stats"]["files"] == 5
    check_graph_clean(graph, markers)
    # Scrubbing the two files leaves the rest of the index exactly as without them.
    clean = index_python_tree(_make_package(tmp_path / "plain"))
    assert graph["nodes"] == clean["nodes"]
    assert graph["edges"] == clean["edges"]


def test_unscrubbed_graph_contains_marker_and_check_raises(tmp_path: Path) -> None:
    root = _make_scrub_tree(tmp_path / "repo")
    markers = [ORACLE_MARKER, ORACLE_FILE_MARKER]
    graph = index_python_tree(root)

    assert f"module:tests.{ORACLE_FILE_MARKER}" in _ids(graph)
    assert "function:pkg.leak.leak_fn" in _ids(graph)
    with pytest.raises(GraphScrubError) as info:
        check_graph_clean(graph, markers)
    message = str(info.value)
    assert message == f"code graph contains benchmark-owned marker(s): {ORACLE_FILE_MARKER}"
    assert "test_secret_behaviour" not in message


def test_check_graph_clean_sees_markers_hidden_by_json_escaping() -> None:
    marker = 'say "hi"\\now'
    graph = {"nodes": [{"id": "x", "name": f"pre {marker} post"}]}
    assert marker not in canonical_json(graph)
    with pytest.raises(GraphScrubError, match="marker"):
        check_graph_clean(graph, [marker])
    check_graph_clean(graph, ["absent", ""])


def test_find_markers_sorted_unique_case_sensitive() -> None:
    text = "alpha beta Gamma beta"
    found = find_markers(text, ["beta", "alpha", "gamma", "beta", "", "Gamma"])
    assert found == ["Gamma", "alpha", "beta"]
    assert find_markers(text, iter(["zeta"])) == []


def test_scrub_predicate_checks_path_and_bytes() -> None:
    skip = scrub_predicate(iter([ORACLE_MARKER, "", ORACLE_FILE_MARKER]))
    assert skip(f"tests/{ORACLE_FILE_MARKER}.py", b"x = 1\n")
    assert skip("pkg/a.py", f"p = '{ORACLE_MARKER}1'".encode())
    # Non-UTF-8 bytes around the marker do not hide it.
    assert skip("pkg/b.py", b"\xff\xfe" + ORACLE_MARKER.encode() + b"\xff")
    assert not skip("pkg/c.py", b"x = 1\n")
    assert not skip("pkg/Test_Oracle_X.py", b"")
    assert not scrub_predicate([""])("anything.py", b"anything")


def test_write_graph_writes_canonical_json_and_returns_its_digest(tmp_path: Path) -> None:
    graph = index_python_tree(_make_package(tmp_path / "repo"))
    path, digest = write_graph(graph, tmp_path / "out" / "nested")
    assert path == tmp_path / "out" / "nested" / "graph.json"
    text = path.read_text(encoding="utf-8")
    assert text == canonical_json(graph) + "\n"
    assert digest == sha256_text(text)
    assert json.loads(text) == graph


def test_module_entry_point_matches_in_process_result(tmp_path: Path) -> None:
    root = _make_scrub_tree(tmp_path / "repo")
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "bench_assets.inputs.graph_index", str(root), str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    expected = index_python_tree(root)
    assert (out / "graph.json").read_text(encoding="utf-8") == canonical_json(expected) + "\n"
    assert json.loads(res.stdout) == expected["stats"]

    scrubbed_out = tmp_path / "scrubbed"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench_assets.inputs.graph_index",
            str(root),
            str(scrubbed_out),
            "--marker",
            ORACLE_MARKER,
            "--marker",
            ORACLE_FILE_MARKER,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    scrubbed = index_python_tree(root, skip=scrub_predicate([ORACLE_MARKER, ORACLE_FILE_MARKER]))
    assert (scrubbed_out / "graph.json").read_text(encoding="utf-8") == (
        canonical_json(scrubbed) + "\n"
    )


def test_main_reports_errors_with_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "missing"), str(tmp_path / "out")]) == 2
    assert "not a directory" in capsys.readouterr().err
    root = tmp_path / "repo"
    _write(root, "pkg/owned.py", "def f():\n    pass\n")
    # A marker that only appears in a derived id (not in any path or file) is caught afterwards.
    assert main([str(root), str(tmp_path / "out"), "--marker", "pkg.owned"]) == 1
    assert "pkg.owned" in capsys.readouterr().err
    assert not (tmp_path / "out" / "graph.json").exists()
