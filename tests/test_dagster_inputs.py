"""The Dagster layer: definitions, partition sync, data versions and staleness of input assets."""

import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from bench_assets.definitions import defs as load_defs
from bench_assets.defs.inputs import oracle_snapshots, sanitized_graphs, task_bindings
from bench_assets.defs.resources import BenchResource
from bench_assets.defs.sensors import tasks_sync_sensor
from bench_assets.driver.inputs import materialize_inputs
from bench_assets.driver.instance import sync_instance
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import REPO_ROOT, add_task, make_bench
from tests.staleness import stale_status

INPUTS = ["task_bindings", "oracle_snapshots", "sanitized_graphs", "task_environments"]


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _data_versions(instance: dg.DagsterInstance, task: str) -> dict[str, str]:
    out = {}
    for name in INPUTS:
        rec = instance.get_latest_data_version_record(dg.AssetKey(name), partition_key=task)
        assert rec is not None, name
        assert rec.asset_materialization is not None
        out[name] = rec.asset_materialization.tags["dagster/data_version"]
    return out


def _materialize(instance, root: Path, artifacts: Path, tasks: list[str]):
    sync_instance(instance, load_benchmark(root))
    return materialize_inputs(
        instance, tasks, tasks_dir=str(root), artifact_root=str(artifacts), progress=lambda m: None
    )


def test_definitions_hold_the_input_assets_and_sync_sensor() -> None:
    defs = load_defs()
    keys = sorted(k.to_user_string() for k in defs.resolve_all_asset_keys())
    assert keys == [
        "aggregates",
        "benchmark_report",
        "candidate_cells",
        "candidate_overlay",
        "comparator_cells",
        "incumbent_skills",
        "oracle_snapshots",
        "promotion_decision",
        "sanitized_graphs",
        "task_bindings",
        "task_environments",
    ]
    cells = defs.resolve_assets_def("comparator_cells").partitions_def
    assert isinstance(cells, dg.MultiPartitionsDefinition)
    cell_dim = next(d for d in cells.partitions_defs if d.name == "cell").partitions_def
    assert cell_dim.get_partition_keys() == [
        f"{arm}.r{k}"
        for arm in ("baseline", "review", "workflow", "workflow_planned")
        for k in range(3)
    ]
    assert defs.resolve_sensor_def("tasks_sync_sensor") is not None
    graph = defs.resolve_asset_graph()
    node = graph.get(dg.AssetKey("sanitized_graphs"))
    assert node.pools == {"graph_build"}
    for name in ["incumbent_skills", *INPUTS]:
        spec = graph.get(dg.AssetKey(name))
        assert (
            spec.code_version and spec.description and spec.owners and spec.group_name == "inputs"
        )


def test_dagster_definitions_validate_passes() -> None:
    res = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "definitions",
            "validate",
            "-w",
            "workspace.yaml",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


def test_unchanged_task_keeps_data_versions(tmp_path: Path, instance) -> None:
    root = make_bench(tmp_path / "tasks")
    art = tmp_path / "art"
    first = _materialize(instance, root, art, ["alpha"])
    v1 = _data_versions(instance, "alpha")
    second = _materialize(instance, root, art, ["alpha"])
    assert _data_versions(instance, "alpha") == v1
    assert (
        first["alpha"]["sanitized_graphs"]["sanitized_sha"]
        == (second["alpha"]["sanitized_graphs"]["sanitized_sha"])
    )
    defs = load_defs()
    for name in INPUTS:
        assert stale_status(instance, defs, dg.AssetKey(name), "alpha")[0] == "FRESH"


def test_changed_prompt_changes_binding_version_and_makes_downstream_stale(
    tmp_path: Path, instance
) -> None:
    root = make_bench(tmp_path / "tasks")
    art = tmp_path / "art"
    _materialize(instance, root, art, ["alpha"])
    v1 = _data_versions(instance, "alpha")
    task_file = root / "alpha" / "task.yaml"
    task_file.write_text(task_file.read_text().replace("Fix add()", "Repair add()"))
    dg.materialize(
        [task_bindings],
        instance=instance,
        partition_key="alpha",
        resources={"bench": BenchResource(tasks_dir=str(root), artifact_root=str(art))},
    )
    v2 = _data_versions(instance, "alpha")
    assert v2["task_bindings"] != v1["task_bindings"]
    defs = load_defs()
    for asset in (oracle_snapshots, sanitized_graphs):
        status, causes = stale_status(instance, defs, asset.key, "alpha")
        assert status == "STALE", (asset.key, causes)
        assert any("task_bindings[alpha]" in c and "data version" in c for c in causes), causes


def test_drifted_pin_fails_the_materialization_before_downstream(tmp_path: Path, instance) -> None:
    from bench_assets.driver.instance import StepFailed
    from bench_assets.inputs import binding as binding_mod
    from bench_assets.inputs.build import bind_task
    from bench_assets.kernel.store import ArtifactStore

    root = make_bench(tmp_path / "tasks")
    art = tmp_path / "art"
    bench = load_benchmark(root)
    binding_mod.write_pins(bench, {"alpha": bind_task(bench, "alpha", ArtifactStore(art)).binding})
    task_file = root / "alpha" / "task.yaml"
    task_file.write_text(task_file.read_text().replace("Fix add()", "Repair add()"))
    with pytest.raises(StepFailed) as exc:
        _materialize(instance, root, art, ["alpha"])
    assert exc.value.cls_name == "BindingDriftError"
    assert "task binding drifted for alpha: prompt_digest" in exc.value.message
    assert (
        instance.get_latest_data_version_record(
            dg.AssetKey("sanitized_graphs"), partition_key="alpha"
        )
        is None
    )


def _evaluate_sensor(instance, root: Path):
    ctx = dg.build_sensor_context(
        instance=instance, resources={"bench": BenchResource(tasks_dir=str(root))}
    )
    return tasks_sync_sensor(ctx)


def test_sync_sensor_adds_and_deletes_partitions(tmp_path: Path, instance) -> None:
    root = make_bench(tmp_path / "tasks", tasks=("alpha", "beta"))
    result = _evaluate_sensor(instance, root)
    assert isinstance(result, dg.SensorResult)
    (add,) = result.dynamic_partitions_requests
    assert isinstance(add, dg.AddDynamicPartitionsRequest)
    assert sorted(add.partition_keys) == ["alpha", "beta"]
    instance.add_dynamic_partitions("tasks", ["alpha", "beta", "gone", "bad|key"])
    result = _evaluate_sensor(instance, root)
    (delete,) = result.dynamic_partitions_requests
    assert isinstance(delete, dg.DeleteDynamicPartitionsRequest)
    assert sorted(delete.partition_keys) == ["bad|key", "gone"]


def test_sync_sensor_changes_nothing_while_tasks_are_invalid(tmp_path: Path, instance) -> None:
    root = make_bench(tmp_path / "tasks")
    add_task(root, "beta")
    (root / "beta" / "task.yaml").write_text("id: beta\n")
    result = _evaluate_sensor(instance, root)
    assert isinstance(result, dg.SkipReason)
    assert "beta/task.yaml: class:" in (result.skip_message or "")


def test_wfbench_sync_applies_partitions_and_pool_limits(tmp_path: Path, instance) -> None:
    root = make_bench(
        tmp_path / "tasks", tasks=("alpha", "beta"), limits={"agent_sessions": 3, "graph_builds": 2}
    )
    plan, limits = sync_instance(instance, load_benchmark(root))
    assert plan.add == ["alpha", "beta"]
    assert sorted(instance.get_dynamic_partitions("tasks")) == ["alpha", "beta"]
    assert instance.event_log_storage.get_concurrency_info("agent_sessions").slot_count == 3
    assert instance.event_log_storage.get_concurrency_info("graph_build").slot_count == 2
    import shutil

    shutil.rmtree(root / "beta")
    plan, _ = sync_instance(instance, load_benchmark(root))
    assert plan.delete == ["beta"] and instance.get_dynamic_partitions("tasks") == ["alpha"]


def test_cli_inputs_twice_is_identical_and_changes_no_data_version(
    tmp_path: Path, artifact_root: Path
) -> None:
    import json

    from click.testing import CliRunner

    from bench_assets.cli import main

    root = make_bench(tmp_path / "tasks", tasks=("alpha", "beta"))
    first = CliRunner().invoke(main, ["inputs", "--tasks", str(root), "--json"])
    assert first.exit_code == 0, first.output
    second = CliRunner().invoke(main, ["inputs", "--tasks", str(root), "--json"])
    assert second.exit_code == 0, second.output
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert [r["data_versions_changed"] for r in a["tasks"]] == [INPUTS, INPUTS]
    assert [r["data_versions_changed"] for r in b["tasks"]] == [[], []]

    def strip(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "data_versions_changed"} for r in rows]

    assert strip(a["tasks"]) == strip(b["tasks"])
    assert a["skills_digest"] == b["skills_digest"]
