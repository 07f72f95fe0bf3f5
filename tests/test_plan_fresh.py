"""A fresh plan never builds inputs for cells that have no record (issue 24, build 3)."""

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest

from bench_assets.driver.instance import sync_instance
from bench_assets.driver.plan import plan_cells
from bench_assets.generation.planner import PriorCell, plan_generation
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import add_task
from tests.test_dagster_cells import replay_bench


def test_a_fresh_plan_builds_no_inputs_and_plans_every_cell_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = replay_bench(tmp_path)
    add_task(root, "beta")
    bench = load_benchmark(root)

    def no_build(*a, **kw):
        raise AssertionError("a fresh plan built inputs")

    monkeypatch.setattr("bench_assets.driver.plan.build_cell_inputs", no_build)
    lines: list[str] = []
    with dg.instance_for_test() as instance:
        sync_instance(instance, bench)
        plan = plan_cells(
            bench,
            instance,
            ArtifactStore(tmp_path / "art"),
            generation="g0001",
            candidate="c1",
            arms=list(bench.config.arms),
            now=dt.datetime.now(dt.UTC),
            progress=lines.append,
        )
    assert len(plan) == 6 and all(c.action == "run" for c in plan)
    assert {c.kind for c in plan if c.role == "comparator"} == {"missing"}
    assert {c.kind for c in plan if c.role == "candidate"} == {"candidate"}
    assert all(c.identity_digest is None for c in plan)
    assert any(
        "2 task(s) without usable stored inputs and without any cell record" in m for m in lines
    )


def test_a_recorded_cell_is_never_planned_without_its_identity() -> None:
    prior = PriorCell(
        identity={},
        identity_digest="d",
        error_kind=None,
        recorded_at=dt.datetime.now(dt.UTC),
        generation="g0001",
    )
    key = ("alpha", "baseline", 0)
    with pytest.raises(ValueError, match="has a record but no identity"):
        plan_generation(
            current={key: None},
            prior={key: prior},
            roles={"baseline": "comparator"},
            canary_cells=set(),
            max_age_days=30,
            now=dt.datetime.now(dt.UTC),
        )
