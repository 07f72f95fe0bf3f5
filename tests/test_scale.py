"""Planning and bookkeeping that stay linear in the number of tasks (the scale issue, build 1).

Behavioural: each test counts what used to be repeated per task or per cell — predictions file
parses, event-log queries, runs, pool writes — rather than timing anything (``bench/scale.py``
measures the times).
"""

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from bench_assets.agents import replay
from bench_assets.cells.pipeline import build_cell_inputs, make_adapter
from bench_assets.decision.documents import load_aggregate_set
from bench_assets.defs import resources
from bench_assets.defs.resources import latest_metadata, latest_metadata_by_partition
from bench_assets.driver.inputs import materialize_inputs
from bench_assets.driver.instance import (
    latest_cells,
    materialize_cells,
    materialize_decision,
    partition_blocks,
    sync_instance,
)
from bench_assets.driver.plan import plan_cells, plan_task, prior_cells, stored_input_identities
from bench_assets.kernel.errors import InputError, ValidationFailed
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import add_task, make_bench
from tests.test_dagster_cells import replay_bench


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


# -- predictions: parsed once per process ---------------------------------------------------


def _prediction(task: str, run: int) -> str:
    return json.dumps(
        {"instance_id": task, "model_name_or_path": "m", "run": run, "model_patch": ""}
    )


def test_each_predictions_file_is_parsed_once_however_many_tasks_and_arms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = tuple(f"t{i:03d}" for i in range(30))
    root = make_bench(tmp_path / "tasks", tasks=tasks)
    for name in ("b.jsonl", "w.jsonl"):
        lines = [_prediction(t, r) for t in tasks for r in range(2)]
        (root / "replays" / name).write_text("\n".join(lines) + "\n")
    bench = load_benchmark(root)
    parsed: list[Path] = []
    real = replay.load_predictions

    def counting(path: Path) -> dict:
        parsed.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(replay, "load_predictions", counting)
    adapters = []
    for _task in tasks:  # what planning does: an adapter per task and arm
        for arm in bench.config.arms.values():
            adapters.append(make_adapter(bench, arm))
    assert sorted(parsed) == ["b.jsonl", "w.jsonl"]  # 2 files, not 30 tasks x 3 arms
    assert all(a.has("t029", 1) for a in adapters)  # type: ignore[attr-defined]

    # An edited file is read again (the cache is keyed by the file's identity), and only it.
    (root / "replays" / "b.jsonl").write_text(_prediction("t000", 0) + "\n")
    fresh = make_adapter(bench, bench.config.arms["baseline"])
    make_adapter(bench, bench.config.arms["workflow"])
    assert sorted(parsed) == ["b.jsonl", "b.jsonl", "w.jsonl"]
    assert fresh.has("t000", 0) and not fresh.has("t029", 1)  # type: ignore[attr-defined]


def test_an_invalid_predictions_file_is_reported_every_time_and_never_cached(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("{not json\n")
    for _ in range(2):
        with pytest.raises(InputError, match="line 1: invalid prediction"):
            replay.cached_predictions(path)


# -- partial loads: a run of one task reads bench.yaml and that task ------------------------


def test_a_partial_load_reads_only_the_tasks_named(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks", tasks=("alpha", "beta"))
    (root / "beta" / "task.yaml").write_text("id: beta\nclass: [unclosed\n")
    with pytest.raises(ValidationFailed):
        load_benchmark(root)  # the whole benchmark: beta is invalid
    one = load_benchmark(root, tasks=["alpha"])
    assert one.partial and one.task_ids() == ["alpha"] and one.task("alpha").id == "alpha"
    assert load_benchmark(root, tasks=[]).task_ids() == []
    for bad in ("gamma", "../alpha", "candidates", ""):
        with pytest.raises(ValidationFailed):
            load_benchmark(root, tasks=[bad])


# -- bulk lookup of latest materializations ----------------------------------------------------


def _report(instance: dg.DagsterInstance, asset: str, partition: str, n: int) -> None:
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset, partition=partition, metadata={"n": n}, tags={"dagster/data_version": f"v{n}"}
        )
    )


def test_bulk_lookup_returns_each_partitions_latest_in_few_queries(
    instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [f"p{i:02d}" for i in range(12)]
    for i, key in enumerate(keys[:10]):  # p10 and p11 never materialized
        _report(instance, "thing", key, i)
    for i, key in enumerate(keys[:4]):  # a newer materialization wins
        _report(instance, "thing", key, 100 + i)
    _report(instance, "other", "p00", 7)  # another asset is never mixed in
    expected = {k: latest_metadata(instance, "thing", k) for k in keys[:10]}

    pages: list[int] = []
    real_read = resources._read_plain_materializations
    deserialized: list[int] = []
    real_fetch = instance.fetch_materializations

    def reading(inst, storage_ids):
        pages.append(len(storage_ids))
        return real_read(inst, storage_ids)

    def fetching(records_filter, limit, *a, **kw):
        deserialized.append(limit)
        return real_fetch(records_filter, limit, *a, **kw)

    monkeypatch.setattr(resources, "_read_plain_materializations", reading)
    monkeypatch.setattr(instance, "fetch_materializations", fetching)
    for wanted, page in ((keys, 3), (keys, 500), (None, 4), (keys[:5], 2)):
        pages.clear()
        got = latest_metadata_by_partition(instance, "thing", wanted, page=page)
        want = {k: v for k, v in expected.items() if wanted is None or k in wanted}
        assert got == want
        assert len(pages) == -(-len(want) // page)  # ceil(n / page) record queries
    assert deserialized == []  # plain metadata never needs Dagster's deserializer
    assert got["p00"]["n"] == 100 and got["p00"]["data_version"] == "v100"
    assert latest_metadata_by_partition(instance, "thing", []) == {}
    assert latest_metadata_by_partition(instance, "never", keys) == {}


def test_bulk_lookup_reads_plain_metadata_from_the_stored_json_exactly_as_dagster_does(
    instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = {
        "text": "x",
        "empty": "",
        "int": 7,
        "big": 2**40,
        "float": 0.25,
        "whole_float": 1.0,
        "yes": True,
        "no": False,
        "none": None,
        "path": dg.MetadataValue.path("/tmp/record.json"),
        "md": dg.MetadataValue.md("| a |\n| - |"),
        "url": dg.MetadataValue.url("http://example.com"),
        "unicode": "naïve ✓",
    }
    for i in range(4):
        instance.report_runless_asset_event(
            dg.AssetMaterialization(
                "cells",
                partition=f"p{i}",
                metadata={**plain, "n": i},
                tags={"dagster/data_version": f"v{i}", "other": "t"},
            )
        )
    # Values Dagster stores as objects (json, tables) go through Dagster's own deserializer.
    instance.report_runless_asset_event(
        dg.AssetMaterialization("cells", partition="p9", metadata={"json": {"a": [1, 2]}})
    )
    keys = [f"p{i}" for i in range(4)] + ["p9"]
    expected = {k: latest_metadata(instance, "cells", k) for k in keys}
    through_dagster: list[object] = []
    real = instance.fetch_materializations

    def counting(records_filter, limit, *a, **kw):
        through_dagster.extend(records_filter.storage_ids or [])
        return real(records_filter, limit, *a, **kw)

    monkeypatch.setattr(instance, "fetch_materializations", counting)
    got = latest_metadata_by_partition(instance, "cells", keys)
    assert got == expected
    assert {k: type(v) for k, v in got["p0"].items()} == {
        k: type(v) for k, v in expected["p0"].items()
    }
    assert len(through_dagster) == 1  # only p9's record was deserialized by Dagster
    assert got["p9"]["json"] == {"a": [1, 2]}


# -- planning from stored inputs ---------------------------------------------------------------


def _two_task_bench(tmp_path: Path) -> Path:
    root = replay_bench(tmp_path)
    add_task(root, "beta")
    return root


def test_planning_reads_stored_inputs_and_matches_building_them(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, art = _two_task_bench(tmp_path), tmp_path / "art"
    bench = load_benchmark(root)
    sync_instance(instance, bench)
    materialize_inputs(
        instance,
        bench.task_ids(),
        tasks_dir=str(root),
        artifact_root=str(art),
        progress=lambda m: None,
    )
    store = ArtifactStore(art)
    built = {t: build_cell_inputs(bench, t, store, candidate="c1") for t in bench.task_ids()}
    stored, unusable = stored_input_identities(instance, bench, bench.task_ids(), candidate="c1")
    assert unusable == {}
    assert stored == {t: built[t].identity() for t in bench.task_ids()}

    # Planning every task at once builds nothing and plans exactly what per-task planning does.
    import bench_assets.cells.pipeline as cells_mod

    def no_build(*a, **kw):
        raise AssertionError("planning rebuilt inputs")

    monkeypatch.setattr(cells_mod, "build_cell_inputs", no_build)
    monkeypatch.setattr("bench_assets.driver.plan.build_cell_inputs", no_build)
    now = dt.datetime.now(dt.UTC)
    arms = list(bench.config.arms)
    roles = {n: a.role for n, a in bench.config.arms.items()}
    at_once = plan_cells(
        bench, instance, store, generation="g0001", candidate="c1", arms=arms, now=now
    )
    one_by_one = []
    for t in bench.task_ids():
        keys = [(t, a, 0) for a in arms]
        one_by_one += plan_task(
            bench, t, built[t], prior_cells(instance, t, keys, roles), "g0001", now
        )
    assert at_once == one_by_one and len(at_once) == 6

    # A task edited since its inputs were bound is not planned from stale inputs.
    spec = yaml.safe_load((root / "beta" / "task.yaml").read_text())
    (root / "beta" / "task.yaml").write_text(yaml.safe_dump({**spec, "prompt": "Other."}))
    edited = load_benchmark(root)
    _, unusable = stored_input_identities(instance, edited, edited.task_ids(), candidate="c1")
    assert unusable == {"beta": "task folder, pinned ref or input settings changed"}


def test_prior_cells_and_latest_cells_query_per_asset_not_per_cell(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, art = replay_bench(tmp_path), tmp_path / "art"
    bench = load_benchmark(root)
    sync_instance(instance, bench)
    materialize_inputs(
        instance, ["alpha"], tasks_dir=str(root), artifact_root=str(art), progress=lambda m: None
    )
    materialize_cells(
        instance,
        ["alpha"],
        tasks_dir=str(root),
        artifact_root=str(art),
        force=False,
        generation="g0001",
        candidate="c1",
        progress=lambda m: None,
    )
    calls: list[str] = []
    real = resources.latest_metadata_by_partition

    def counting(inst, asset, partitions=None, **kw):
        calls.append(str(asset))
        return real(inst, asset, partitions, **kw)

    monkeypatch.setattr("bench_assets.driver.plan.latest_metadata_by_partition", counting)
    monkeypatch.setattr("bench_assets.driver.instance.latest_metadata_by_partition", counting)
    roles = {n: a.role for n, a in bench.config.arms.items()}
    keys = [("alpha", a, 0) for a in bench.config.arms] + [("ghost", "baseline", 0)]
    prior = prior_cells(instance, None, keys, roles)
    assert sorted(calls) == ["candidate_cells", "comparator_cells"]
    assert prior[("ghost", "baseline", 0)] is None
    assert all(prior[k] is not None for k in keys[:-1])
    calls.clear()
    views = latest_cells(instance, ["alpha"], str(root))
    assert sorted(calls) == ["candidate_cells", "comparator_cells"] and len(views) == 3


# -- the decision: aggregates for all tasks in one materialization ----------------------------


def test_aggregates_are_one_materialization_for_all_tasks_naming_each_incomplete_one(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    root, art = _two_task_bench(tmp_path), tmp_path / "art"
    bench = load_benchmark(root)
    sync_instance(instance, bench)
    materialize_inputs(
        instance,
        bench.task_ids(),
        tasks_dir=str(root),
        artifact_root=str(art),
        progress=lambda m: None,
    )
    materialize_cells(  # alpha's cells only: beta stays incomplete
        instance,
        ["alpha"],
        tasks_dir=str(root),
        artifact_root=str(art),
        force=False,
        generation="g0001",
        candidate="c1",
        progress=lambda m: None,
    )
    lines: list[str] = []
    materialize_decision(
        instance,
        bench.task_ids(),
        tasks_dir=str(root),
        artifact_root=str(art),
        generation="g0001",
        aborted=False,
        progress=lines.append,
    )
    mats = instance.fetch_materializations(dg.AssetKey("aggregates"), limit=100).records
    assert len(mats) == 1 and mats[0].partition_key is None  # one materialization, every task
    agg_runs = {r.run_id for r in mats}
    md = latest_metadata(instance, "aggregates", None)
    assert md["tasks"] == 2 and md["incomplete_tasks"] == 1 and md["cells"] == 3
    aset = load_aggregate_set(Path(md["record_path"]))
    by_task = {a.task: a for a in aset.tasks}
    assert by_task["alpha"].missing_cells == [] and len(by_task["alpha"].evidence) == 3
    assert by_task["beta"].missing_cells == ["baseline.r0", "workflow.r0", "cand.r0"]
    assert "aggregates[beta]: INCOMPLETE (missing baseline.r0, workflow.r0, cand.r0)" in lines
    assert not any("aggregates[alpha]: INCOMPLETE" in line for line in lines)
    # The blocking check failed in that run and names the incomplete task and its cells.
    key = dg.AssetCheckKey(dg.AssetKey("aggregates"), "aggregates_complete")
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
    evaluation = record.event.dagster_event.event_specific_data
    assert record.run_id in agg_runs and not evaluation.passed
    assert "beta: baseline.r0, workflow.r0, cand.r0" in evaluation.metadata["missing"].value
    assert "alpha" not in evaluation.metadata["missing"].value


def test_partition_blocks_are_contiguous_runs_in_partition_order() -> None:
    ordered = ["c", "a", "b", "d", "e"]
    assert partition_blocks(ordered, ["a", "b", "c", "d", "e"]) == [("c", "e")]
    assert partition_blocks(ordered, ["c", "b", "e"]) == [("c", "c"), ("b", "b"), ("e", "e")]
    assert partition_blocks(ordered, ["a", "b"]) == [("a", "b")]
    assert partition_blocks(ordered, []) == []
    with pytest.raises(InputError, match="wfbench sync"):
        partition_blocks(ordered, ["zz"])


def test_a_repeated_sync_writes_nothing(
    tmp_path: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_bench(tmp_path / "tasks", tasks=("alpha", "beta"))
    sync_instance(instance, load_benchmark(root))
    writes: list[str] = []
    storage = instance.event_log_storage
    real_slots = storage.set_concurrency_slots
    monkeypatch.setattr(
        storage, "set_concurrency_slots", lambda k, n: (writes.append(k), real_slots(k, n))
    )
    monkeypatch.setattr(instance, "add_dynamic_partitions", lambda *a: writes.append("add"))
    monkeypatch.setattr(instance, "delete_dynamic_partition", lambda *a: writes.append("del"))
    plan, _ = sync_instance(instance, load_benchmark(root))
    assert plan.empty and writes == []
