"""Unchanged inputs are not re-run (issue 24, build 1-2): which tasks' inputs are stale, decided in
bulk, and a generation's input phase launching runs only for those, in batches.

Cheap: pure-function tests of the rule, and the generation's input phase
(:func:`bench_assets.driver.evolve._pay` with the cell planning stubbed) over a 3-task suite:
first generation, unchanged, one task edited — with the rule checked against Dagster's own
staleness resolver on the way.
"""

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from bench_assets.defs.inputs import CODE_VERSIONS, task_bindings
from bench_assets.defs.resources import BenchResource, latest_metadata_by_partition
from bench_assets.driver import evolve as evolve_mod
from bench_assets.driver.inputs import input_job_tasks, input_jobs, input_status
from bench_assets.driver.instance import sync_instance
from bench_assets.driver.paying import CellPayer
from bench_assets.driver.runqueue import InProcessExecutor
from bench_assets.generation.progress import GenerationTally
from bench_assets.inputs import input_state
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import make_bench
from tests.staleness import stale_status

TASKS = ("alpha", "beta", "gamma")

# -- the rule, pure ------------------------------------------------------------------------------


def _stored(tmp_path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Metadata of one task's four inputs as Dagster records them, consistent with each other."""
    rec = tmp_path / "record.json"
    rec.write_text("{}")
    dv = {a: f"dv-{a}" for a in input_state.INPUT_ASSETS}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for asset in input_state.INPUT_ASSETS:
        md: dict[str, Any] = {
            "data_version": dv[asset],
            "dagster/code_version": CODE_VERSIONS[asset],
            "record_path": str(rec),
        }
        for up in input_state.UPSTREAM[asset]:
            md[f"dagster/input_data_version/{up}"] = input_state.partition_input_version(dv[up])
        out[asset] = {"t": md}
    out["task_bindings"]["t"][input_state.SOURCE_KEY] = "src"
    return out


def _reasons(stored: dict[str, dict[str, dict[str, Any]]], source: str = "src") -> dict[str, str]:
    return input_state.stale_reasons(
        ["t"], stored, code_versions=CODE_VERSIONS, sources={"t": source}
    )


def test_the_rule_names_each_reason_a_task_is_stale(tmp_path: Path) -> None:
    assert _reasons(_stored(tmp_path)) == {}
    assert _reasons(_stored(tmp_path), source="other") == {
        "t": "task folder, pinned ref or input settings changed"
    }
    s = _stored(tmp_path)
    del s["task_environments"]["t"]
    assert _reasons(s) == {"t": "task_environments never materialized"}
    s = _stored(tmp_path)
    s["sanitized_graphs"]["t"]["dagster/code_version"] = "graph-v0"
    assert _reasons(s)["t"].startswith("sanitized_graphs: code version graph-v0 -> ")
    s = _stored(tmp_path)
    s["task_bindings"]["t"]["data_version"] = "new binding"
    assert _reasons(s) == {
        "t": "oracle_snapshots: older than task_bindings (upstream data version changed)"
    }
    s = _stored(tmp_path)
    s["sanitized_graphs"]["t"]["template_path"] = str(tmp_path / "gone")
    assert _reasons(s)["t"].startswith("sanitized_graphs: stored artifact missing (template_path")
    s = _stored(tmp_path)
    del s["task_bindings"]["t"][input_state.SOURCE_KEY]
    assert "before source digests" in _reasons(s)["t"]


def test_batches_fill_the_slots_and_stay_bounded() -> None:
    tasks = [f"t{i}" for i in range(10)]
    assert input_state.batches(tasks, slots=2, max_size=25) == [tasks[:5], tasks[5:]]
    assert input_state.batches(tasks, slots=1, max_size=4) == [tasks[:4], tasks[4:8], tasks[8:]]
    assert input_state.batches(tasks[:1], slots=4, max_size=25) == [["t0"]]
    assert input_state.batches([], slots=2, max_size=25) == []


def test_source_digest_moves_with_the_task_folder_only(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks", tasks=("alpha", "beta"))
    before = input_state.source_digests(load_benchmark(root), ["alpha", "beta"])
    (root / "alpha" / "repo" / "__pycache__").mkdir()
    (root / "alpha" / "repo" / "__pycache__" / "x.pyc").write_bytes(b"litter")
    assert input_state.source_digests(load_benchmark(root), ["alpha", "beta"]) == before
    (root / "alpha" / "oracle" / "test_oracle_alpha.py").write_text("def test_x():\n    pass\n")
    after = input_state.source_digests(load_benchmark(root), ["alpha", "beta"])
    assert after["alpha"] != before["alpha"] and after["beta"] == before["beta"]


# -- a generation's input phase ------------------------------------------------------------------


@pytest.fixture
def run_granularity_instance():
    overrides = {"concurrency": {"pools": {"granularity": "run"}}}
    with dg.instance_for_test(overrides=overrides) as inst:
        yield inst


def _input_phase(
    instance: dg.DagsterInstance, root: Path, art: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[list[str]], list[str]]:
    """One generation's input phase (what ``evolve`` runs between its snapshot of the skills
    and its decision), cells not paid: (tasks of each input run launched, tasks planned)."""
    bench = load_benchmark(root)
    sync_instance(instance, bench)
    planned: list[str] = []
    monkeypatch.setattr(
        evolve_mod, "_submit_task", lambda payer, task, **kw: (planned.append(task), ([], 0))[1]
    )
    launched: list[list[str]] = []
    real_submit = InProcessExecutor.submit

    def submit(self, job):  # type: ignore[no-untyped-def]
        tasks = input_job_tasks(job)
        if tasks is not None:
            launched.append(tasks)
        return real_submit(self, job)

    monkeypatch.setattr(InProcessExecutor, "submit", submit)
    stale, _ = input_status(instance, bench, list(TASKS))
    with InProcessExecutor(instance, tasks_dir=str(root), artifact_root=str(art)) as ex:
        payer = CellPayer(ex, bench, instance, "g0001", str(art), print, GenerationTally())
        evolve_mod._pay(payer, folder=art / "gen", tasks=list(TASKS), stale=stale)
    return launched, planned


@pytest.mark.slow  # 4 task input builds: 27-137 s on the shared 2-core machine under load
def test_unchanged_inputs_launch_no_run_and_an_edit_rebuilds_exactly_its_task(
    tmp_path: Path, run_granularity_instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = run_granularity_instance
    root = make_bench(tmp_path / "tasks", tasks=TASKS, limits={"graph_builds": 2})
    art = tmp_path / "art"

    launched, planned = _input_phase(instance, root, art, monkeypatch)
    assert launched == [["alpha", "beta"], ["gamma"]]  # 2 batches fill the 2 graph_build slots
    assert sorted(planned) == sorted(TASKS)
    batch_runs = instance.get_runs(dg.RunsFilter(job_name="input_batch"))
    assert len(batch_runs) == 2
    # Lineage per partition: each task's inputs are its own run, tagged with its batch's id.
    first = {
        a: latest_metadata_by_partition(instance, a, list(TASKS)) for a in input_state.INPUT_ASSETS
    }
    for task in TASKS:
        run = instance.get_run_by_id(first["sanitized_graphs"][task]["run_id"])
        assert run is not None and run.tags["wfbench/input_batch"] in {r.run_id for r in batch_runs}
    assert len({first["task_bindings"][t]["run_id"] for t in TASKS}) == 3

    launched, planned = _input_phase(instance, root, art, monkeypatch)
    assert launched == [] and sorted(planned) == sorted(TASKS)  # unchanged: 0 input runs

    # Agreement with Dagster's own staleness: both fresh now; after a new binding of beta,
    # Dagster calls beta's oracle snapshot stale (a new upstream data version), and so do we.
    from bench_assets.definitions import defs as load_defs

    defs = load_defs()
    for asset in input_state.INPUT_ASSETS:
        assert stale_status(instance, defs, dg.AssetKey(asset), "beta")[0] == "FRESH"
    spec = yaml.safe_load((root / "beta" / "task.yaml").read_text())
    (root / "beta" / "task.yaml").write_text(yaml.safe_dump({**spec, "prompt": "Add, please."}))
    assert input_status(instance, load_benchmark(root), list(TASKS))[0] == {
        "beta": "task folder, pinned ref or input settings changed"
    }
    dg.materialize(
        [task_bindings],
        instance=instance,
        partition_key="beta",
        resources={"bench": BenchResource(tasks_dir=str(root), artifact_root=str(art))},
    )
    status, causes = stale_status(instance, defs, dg.AssetKey("oracle_snapshots"), "beta")
    assert status == "STALE", causes
    assert input_status(instance, load_benchmark(root), list(TASKS))[0] == {
        "beta": "oracle_snapshots: older than task_bindings (upstream data version changed)"
    }
    launched, planned = _input_phase(instance, root, art, monkeypatch)
    assert launched == [["beta"]]
    after = {
        a: latest_metadata_by_partition(instance, a, list(TASKS)) for a in input_state.INPUT_ASSETS
    }
    for asset in input_state.INPUT_ASSETS:
        for task in ("alpha", "gamma"):  # untouched: the same materialization as before
            assert after[asset][task]["run_id"] == first[asset][task]["run_id"]
        assert after[asset]["beta"]["run_id"] != first[asset]["beta"]["run_id"]
    for asset in input_state.INPUT_ASSETS:  # and Dagster agrees nothing is stale any more
        assert stale_status(instance, defs, dg.AssetKey(asset), "beta")[0] == "FRESH"
    assert (
        after["task_bindings"]["beta"]["data_version"]
        != first["task_bindings"]["beta"]["data_version"]
    )
    launched, _ = _input_phase(instance, root, art, monkeypatch)
    assert launched == []


def test_without_run_granularity_each_stale_task_is_its_own_run() -> None:
    jobs = input_jobs(["a", "b"], tags={}, batched=False, slots=2)
    assert [(j.assets, j.partition, j.job) for j in jobs] == [
        (input_state.INPUT_ASSETS, "a", None),
        (input_state.INPUT_ASSETS, "b", None),
    ]
    assert [input_job_tasks(j) for j in jobs] == [["a"], ["b"]]
    (batch,) = input_jobs(["a", "b"], tags={}, batched=True, slots=1)
    assert batch.job == "input_batch" and input_job_tasks(batch) == ["a", "b"]
