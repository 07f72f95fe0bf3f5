"""Shipped JSON Schemas match the models; model rules not covered by the CLI cases."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from bench_assets.config import schema
from bench_assets.config.models import BenchConfig, check_model_id, validate_cron
from bench_assets.tasks.sync import is_valid_partition_key, plan_sync
from tests.conftest import BENCH, DEMO_TASKS


def test_shipped_schema_matches_models() -> None:
    assert schema.stale(DEMO_TASKS / "schema") == [], "run `wfbench schema` and commit the result"


def test_schema_staleness_is_detected(tmp_path: Path) -> None:
    schema.write(tmp_path)
    assert schema.stale(tmp_path) == []
    path = tmp_path / "task.schema.json"
    path.write_text(path.read_text().replace('"prompt"', '"prompt_text"'))
    assert schema.stale(tmp_path) == ["task.schema.json"]


@pytest.mark.parametrize(
    "model_id",
    [
        "latest",
        "claude-latest",
        "claude-sonnet-4-5@latest",
        "org/model:auto",
        "AUTO",
        "gpt-4o-default",
    ],
)
def test_mutable_model_aliases_are_rejected(model_id: str) -> None:
    with pytest.raises(ValueError, match="mutable alias"):
        check_model_id(model_id)


@pytest.mark.parametrize(
    "model_id", ["claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805", "autopilot-7b-v2"]
)
def test_versioned_model_ids_are_accepted(model_id: str) -> None:
    assert check_model_id(model_id) == model_id


@pytest.mark.parametrize(
    "cron", ["0 3 * * 6", "*/15 * * * *", "0 0 1 jan,jul *", "5 4 * * sun", "0 9-17/2 * * 1-5"]
)
def test_valid_cron(cron: str) -> None:
    validate_cron(cron)


@pytest.mark.parametrize(
    ("cron", "why"),
    [
        ("0 3 * *", "5 fields"),
        ("60 * * * *", "outside"),
        ("0 3 * * 8", "outside"),
        ("0 5-3 * * *", "backwards"),
        ("*/0 * * * *", "step"),
        ("0 3 * * fri-", "not a number"),
    ],
)
def test_invalid_cron(cron: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        validate_cron(cron)


def test_bench_defaults_follow_the_spec() -> None:
    cfg = BenchConfig.model_validate(BENCH)
    assert cfg.schedule.cron == "0 3 * * 6"
    assert cfg.reuse.max_age_days == 90 and cfg.reuse.canaries == 1
    assert cfg.limits.outage_streak == 5
    assert cfg.policy.name == "paired"
    assert cfg.comparator_arms() == ["baseline", "workflow"]
    assert cfg.candidate_arms() == ["cand"]


def test_models_are_strict() -> None:
    with pytest.raises(ValidationError):
        BenchConfig.model_validate({**BENCH, "runs": 2.0})


@pytest.mark.parametrize("key", ["a|b", "x...y", "has space", "", "-lead", "a,b", "a[0]"])
def test_invalid_partition_keys_are_never_added(key: str) -> None:
    assert not is_valid_partition_key(key)
    assert plan_sync([], [key, "ok"]).add == ["ok"]
