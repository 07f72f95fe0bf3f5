"""The same two generations on sqlite and on PostgreSQL storage decide the same things.

Each backend gets its own copy of the replay fixture bench, its own artifact root and its own
``DAGSTER_HOME``; only the ``storage:`` block of ``dagster.yaml`` differs. Generation 1 pays every
cell; generation 2 (a second candidate, no canaries) pays the candidate cell and reuses the
comparator cells through the partition-aware lookups, which is where the two storages could
disagree. Everything that is not a timestamp, a run or record id, a data version derived from
those, or a path under the backend's own folder must be identical. Both pay in process, so
storage is the only variable (the queued path over PostgreSQL is tests/test_deployment.py).
"""

import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from bench_assets.decision.documents import load_decision
from bench_assets.driver.evolve import evolve
from tests.conftest import write_yaml
from tests.pg import PgServer, pg_server  # noqa: F401  (the session fixture)
from tests.test_dagster_cells import replay_bench

VOLATILE = {
    "now",
    "evidence_oldest",
    "evidence_expires_at",
    "record_id",
    "recorded_at",
    "run_id",
    "prior_run_id",
    "source_run_id",
    "data_version",
}
"""Keys whose values differ between any two runs of the same generation (time and run ids)."""

TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")


def normalize(value: Any, root: str) -> Any:
    """``value`` with volatile fields masked (None stays None), timestamps and ``root`` replaced."""
    if isinstance(value, dict):
        return {
            k: ("<volatile>" if k in VOLATILE and v is not None else normalize(v, root))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [normalize(v, root) for v in value]
    if isinstance(value, str):
        return TIMESTAMP.sub("<ts>", value.replace(root, "<root>"))
    return value


def generation_bench(base: Path) -> Path:
    """The replay bench with a decisive one-task policy, a cheaper candidate and a second one."""
    root = replay_bench(base)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["policy"] = {"name": "strict", "min_runs": 1}
    data["reuse"] = {"canaries": 0, "gate_canaries_per_task": 0}
    data["arms"]["cand"]["agent"]["predictions"] = "replays/c.jsonl"
    write_yaml(root / "bench.yaml", data)
    row = json.loads((root / "replays" / "w.jsonl").read_text().splitlines()[0])
    row |= {"model_name_or_path": "cand", "usage": {"cost_usd": 0.3, "turns": 2}}
    (root / "replays" / "c.jsonl").write_text(json.dumps(row) + "\n")
    second = root / "candidates" / "c2"
    (second / "files" / "plan").mkdir(parents=True)
    (second / "files" / "plan" / "SKILL.md").write_text("---\nname: plan\n---\nBudget.\n")
    write_yaml(second / "candidate.yaml", {"id": "c2", "title": "plan budget"})
    return root


def run_generations(base: Path, storage: dict[str, Any] | None) -> dict[str, Any]:
    """Two generations on an instance at ``base/home``; what they decided, normalized."""
    root = generation_bench(base / "tasks-parent")
    home = base / "home"
    home.mkdir(parents=True)
    config: dict[str, Any] = {"telemetry": {"enabled": False}}
    if storage is not None:
        config["storage"] = storage
    write_yaml(home / "dagster.yaml", config)
    out: dict[str, Any] = {"generations": []}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        out["run_storage"] = type(instance.run_storage).__name__
        out["event_storage"] = type(instance.event_log_storage).__name__
        for _ in range(2):
            res = evolve(
                str(root), artifact_root=str(base / "art"), instance=instance, in_process=True
            )
            record = instance.fetch_materializations(
                dg.AssetKey("promotion_decision"), limit=1
            ).records[0]
            md = record.asset_materialization.metadata
            doc = load_decision(Path(str(md["decision_path"].value)))
            out["generations"].append(
                {
                    "result": {
                        "generation": res.generation,
                        "candidate": res.candidate,
                        "decision": res.decision,
                        "paid_cells": res.paid_cells,
                        "reused_cells": res.reused_cells,
                        "aborted": res.aborted,
                        "unusable": res.unusable,
                    },
                    "plan": [p.model_dump(mode="json") for p in res.plan],
                    "document": doc.model_dump(mode="json"),
                }
            )
        out["runs"] = len(instance.get_runs())
    return normalize(out, str(base))


def test_a_generation_decides_the_same_on_postgres_as_on_sqlite(
    tmp_path: Path,
    pg_server: PgServer,  # noqa: F811
) -> None:
    db = pg_server.create_database("gen")
    lite = run_generations(tmp_path / "sqlite", None)
    pg = run_generations(tmp_path / "pg", pg_server.storage_config(db))

    assert (lite.pop("run_storage"), lite.pop("event_storage")) == (
        "SqliteRunStorage",
        "SqliteEventLogStorage",
    )
    assert (pg.pop("run_storage"), pg.pop("event_storage")) == (
        "PostgresRunStorage",
        "PostgresEventLogStorage",
    )
    # The runs really are in the PostgreSQL database, not in a file beside it.
    assert pg_server.query("select count(*) from runs", db) == pg["runs"] > 0
    assert not (tmp_path / "pg" / "home" / "history").exists()

    g1, g2 = (g["result"] for g in pg["generations"])
    assert (g1["generation"], g1["candidate"], g1["decision"]) == ("g0001", "c1", "promote")
    assert (g1["paid_cells"], g1["reused_cells"]) == (3, 0)
    assert (g2["generation"], g2["candidate"], g2["paid_cells"], g2["reused_cells"]) == (
        "g0002",
        "c2",
        1,
        2,
    )

    for a, b in zip(lite["generations"], pg["generations"], strict=True):
        assert a["result"] == b["result"]
        assert a["plan"] == b["plan"]
        da, db_ = a["document"]["decision"], b["document"]["decision"]
        assert da["decision"] == db_["decision"]
        assert da["reasons"] == db_["reasons"]
        assert da["tasks"] == db_["tasks"], "per-task rows"
        assert da["evidence"] == db_["evidence"]
        assert a["document"] == b["document"]
    assert lite == pg
