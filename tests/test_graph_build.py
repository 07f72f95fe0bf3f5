"""Sanitized graph builds: built-in indexer, external indexers in the sandbox, the scrub check."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from bench_assets.inputs.build import bind_task, build_sanitized_graph, capture_oracle
from bench_assets.kernel.errors import CommandError, GraphScrubError
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import make_bench, write_yaml

LIST_FILES = (
    "import json, os, sys\n"
    "files = sorted(os.path.relpath(os.path.join(d, f), '/workspace')"
    " for d, _, fs in os.walk('/workspace') for f in fs if '/.git' not in d)\n"
    "json.dump({'nodes': [{'id': f} for f in files], 'edges': [],"
    " 'stats': {'nodes': len(files), 'edges': 0}}, open('/out/graph.json', 'w'))\n"
)


def _build(tmp_path: Path, graph: dict | None = None, extra_files: dict[str, str] | None = None):
    root = make_bench(tmp_path / "tasks")
    for rel, text in (extra_files or {}).items():
        p = root / "alpha" / "repo" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    if graph is not None:
        data = yaml.safe_load((root / "bench.yaml").read_text())
        data["graph"] = graph
        write_yaml(root / "bench.yaml", data)
    bench = load_benchmark(root)
    store = ArtifactStore(tmp_path / "art")
    bound = bind_task(bench, "alpha", store).binding
    captured = capture_oracle(bench, "alpha", bound, store)
    return build_sanitized_graph(bench, "alpha", bound, captured, store), store


def test_builtin_graph_has_symbols_and_is_stored_read_only(tmp_path: Path) -> None:
    built, store = _build(tmp_path)
    assert built.graph.stats["nodes"] > 0 and built.graph.stats["edges"] > 0
    path = store.graph(built.graph.digest) / "graph.json"
    graph = json.loads(path.read_text())
    ids = {n["id"] for n in graph["nodes"]}
    assert "class:calc.Acc" in ids and "function:calc.add" in ids
    assert not path.stat().st_mode & 0o222


def test_builtin_graph_scrubs_files_with_benchmark_markers(tmp_path: Path) -> None:
    built, store = _build(
        tmp_path,
        extra_files={
            "leak.py": "import os\nROOT = os.environ['WFBENCH_ORACLE_ROOT']\n",
            "test_oracle_alpha.py": "def test_copy():\n    pass\n",
        },
    )
    text = (store.graph(built.graph.digest) / "graph.json").read_text()
    assert "leak" not in text and "test_oracle_alpha" not in text
    assert built.graph.stats["skipped_files"] == 2


def test_external_indexer_runs_sandboxed_on_a_scrubbed_tree(tmp_path: Path) -> None:
    built, store = _build(
        tmp_path,
        graph={"indexer": "command", "argv": ["python", "-c", LIST_FILES]},
        extra_files={"notes.md": "see .wfbench-oracle-123 for answers\n"},
    )
    graph = json.loads((store.graph(built.graph.digest) / "graph.json").read_text())
    files = {n["id"] for n in graph["nodes"]}
    assert "calc/__init__.py" in files and "notes.md" not in files
    assert built.graph.indexer.startswith("command:")


def test_scrub_check_fires_on_an_indexer_that_leaks_a_marker(tmp_path: Path) -> None:
    leaky = (
        "import json; "
        "json.dump({'nodes': [{'id': 'WFBENCH_ORACLE_ROOT'}]}, open('/out/graph.json', 'w'))"
    )
    with pytest.raises(GraphScrubError, match="WFBENCH_ORACLE_ROOT"):
        _build(tmp_path, graph={"indexer": "command", "argv": ["python", "-c", leaky]})
    # Nothing was published for the leaky graph.
    assert not list((tmp_path / "art" / "graphs").glob("*/graph.json"))


def test_failing_or_silent_indexer_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="exited 3"):
        _build(tmp_path / "a", graph={"indexer": "command", "argv": ["sh", "-c", "exit 3"]})
    with pytest.raises(CommandError, match="did not write"):
        _build(tmp_path / "b", graph={"indexer": "command", "argv": ["true"]})


def test_indexer_cannot_write_to_the_tree(tmp_path: Path) -> None:
    vandal = "open('/workspace/calc/__init__.py', 'w').write('x')"
    with pytest.raises(CommandError, match="Read-only"):
        _build(tmp_path, graph={"indexer": "command", "argv": [sys.executable, "-c", vandal]})
