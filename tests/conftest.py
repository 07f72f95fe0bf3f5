"""Shared fixtures: a small, valid benchmark directory built from scratch in tmp_path."""

import functools
import importlib
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_TASKS = REPO_ROOT / "tasks"

_GROUPED = re.compile(r"^pytestmark\b.*\bxdist_group\(", re.M)


@functools.cache
def _stays_on_one_worker(module: str) -> bool:
    """Whether a test module marks itself ``xdist_group`` (one expensive module fixture)."""
    path = REPO_ROOT / module
    return path.is_file() and bool(_GROUPED.search(path.read_text(encoding="utf-8")))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``make test`` (``-n 3 --dist loadgroup``): a module marked ``xdist_group`` goes to one
    worker whole, every other test is scheduled on its own.

    xdist's own loadgroup renames each marked item's ``_nodeid``, which pytest 9.2 no longer reads
    (``Node.nodeid`` comes from ``_id``), so the marks were silently ignored and the cheat corpus'
    module fixture was built three times at once. This is the same rule, keyed by module path.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if _stays_on_one_worker(module) else nodeid

    return ModuleGroupScheduling(config, log)


BENCH = {
    "model": "claude-sonnet-4-5-20250929",
    "effort": "medium",
    "runs": 2,
    "arms": {
        "baseline": {
            "agent": {"adapter": "replay", "predictions": "replays/b.jsonl"},
            "skills": "none",
        },
        "workflow": {
            "agent": {"adapter": "replay", "predictions": "replays/w.jsonl"},
            "skills": "incumbent",
        },
        "cand": {
            "agent": {"adapter": "replay", "predictions": "replays/w.jsonl"},
            "skills": "candidate",
            "role": "candidate",
            "pairs_with": "workflow",
        },
    },
}

TASK = {
    "id": "alpha",
    "class": "bug",
    "repo": "inline",
    "prompt": "Fix add() so that it adds.",
    "verify": {"pytest": ["tests"]},
    "oracle": {"files": ["test_oracle_alpha.py"]},
    "protected": ["conftest.py"],
}


def bench_script(name: str) -> ModuleType:
    """``bench/<name>.py`` imported as a module, leaving ``sys.path`` as it was (the scripts put
    ``bench/`` first on it to find ``gate_sim``)."""
    saved = list(sys.path)
    try:
        return importlib.import_module(f"bench.{name}")
    finally:
        sys.path[:] = saved


def write_yaml(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def add_task(root: Path, task_id: str = "alpha", **overrides: object) -> Path:
    """Write a valid inline task (a tiny package with a bug) under ``root``."""
    d = root / task_id
    spec = {**TASK, "id": task_id, **overrides}
    write_yaml(d / "task.yaml", spec)
    (d / "repo" / "calc").mkdir(parents=True, exist_ok=True)
    (d / "repo" / "calc" / "__init__.py").write_text(
        textwrap.dedent(
            """\
            import math


            def add(a, b):
                return a - b


            class Acc:
                def __init__(self):
                    self.total = 0

                def push(self, x):
                    self.total = add(self.total, x)
                    return self.total
            """
        )
    )
    (d / "repo" / "tests").mkdir(exist_ok=True)
    (d / "repo" / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
    )
    (d / "repo" / "conftest.py").write_text("# test-runner config\n")
    (d / "oracle").mkdir(exist_ok=True)
    (d / "oracle" / "test_oracle_alpha.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    return d


def make_bench(root: Path, *, tasks: tuple[str, ...] = ("alpha",), **bench: object) -> Path:
    """A complete valid benchmark directory."""
    root.mkdir(parents=True, exist_ok=True)
    write_yaml(root / "bench.yaml", {**BENCH, **bench})
    (root / "skills" / "work").mkdir(parents=True, exist_ok=True)
    (root / "skills" / "work" / "SKILL.md").write_text("---\nname: work\n---\nDo the work.\n")
    (root / "replays").mkdir(exist_ok=True)
    (root / "replays" / "b.jsonl").write_text("")
    (root / "replays" / "w.jsonl").write_text("")
    for t in tasks:
        add_task(root, t)
    return root


@pytest.fixture
def bench_dir(tmp_path: Path) -> Path:
    return make_bench(tmp_path / "tasks")


@pytest.fixture
def artifact_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "artifacts"
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(root))
    yield root


@pytest.fixture(autouse=True)
def _isolated_dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    # Generations run in process unless a test exercises the run queue (it unsets this).
    monkeypatch.setenv("WFBENCH_IN_PROCESS", "1")
