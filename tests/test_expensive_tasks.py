"""`expensive: true` tasks run only when selected: plan, evolve and the decision leave them out.

The README promises it; before issue 15 (item 6) `wfbench plan` and `wfbench evolve` planned and
paid them, and the decision loaded every task partition's aggregate, so a generation that skipped
a task failed (never aggregated) or rested on a stale aggregate.
"""

import json
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.decision.documents import load_decision
from bench_assets.decision.manifest import load_header
from bench_assets.driver.evolve import evolve
from bench_assets.driver.plan import generation_canaries, generation_tasks
from bench_assets.generation.progress import GenerationTally
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import add_task, write_yaml
from tests.test_dagster_cells import replay_bench


def _bench_with_expensive_task(tmp_path: Path) -> Path:
    """The replay bench (task alpha) plus task omega, marked expensive, with its own replays."""
    root = replay_bench(tmp_path)
    add_task(root, "omega", expensive=True)
    for f in ("b.jsonl", "w.jsonl"):
        path = root / "replays" / f
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        rows += [{**r, "instance_id": "omega"} for r in rows]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    second = root / "candidates" / "c2"
    (second / "files" / "work").mkdir(parents=True)
    (second / "files" / "work" / "SKILL.md").write_text("---\nname: work\n---\nSmall steps.\n")
    write_yaml(second / "candidate.yaml", {"id": "c2", "title": "small steps"})
    return root


def _plan_json(root: Path, *extra: str) -> list[dict]:
    res = CliRunner().invoke(main, ["plan", "--tasks", str(root), "--json", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_the_selection_leaves_expensive_tasks_out_and_canaries_follow_it(tmp_path: Path) -> None:
    root = _bench_with_expensive_task(tmp_path)
    bench = load_benchmark(root)
    assert generation_tasks(bench) == ["alpha"]
    assert generation_tasks(bench, include_expensive=True) == ["alpha", "omega"]
    # Canaries are chosen over the selected tasks only, so none lands on a task not planned.
    data = json.loads(json.dumps(bench.config.model_dump(mode="json", by_alias=True)))
    assert data["reuse"]["canaries"] >= 1
    for g in ("g0001", "g0002", "g0003"):
        assert {t for t, _, _ in generation_canaries(bench, g, generation_tasks(bench))} == {
            "alpha"
        }


@pytest.mark.slow  # two in-process generations and two plans: about a minute on 2 busy cores
def test_expensive_task_is_left_out_unless_selected(tmp_path: Path, monkeypatch) -> None:
    root = _bench_with_expensive_task(tmp_path)
    art = tmp_path / "art"
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(art))
    store = ArtifactStore(art)
    instance = dg.DagsterInstance.get()  # the test's $DAGSTER_HOME, shared with the CLI

    # `wfbench plan` leaves it out by default and plans it when selected.
    assert {c["task"] for c in _plan_json(root)} == {"alpha"}
    assert {c["task"] for c in _plan_json(root, "--include-expensive")} == {"alpha", "omega"}

    # evolve (what the weekly job calls) neither plans nor pays it; the total counts alpha only.
    tally = GenerationTally()
    g1 = evolve(str(root), artifact_root=str(art), instance=instance, tally=tally)
    assert g1.generation == "g0001" and g1.decision != "None"
    assert {p.task for p in g1.plan} == {"alpha"}
    assert {c["task"] for c in g1.cells} == {"alpha"} and g1.paid_cells == 3
    assert tally.total == 3 and tally.done == 3
    header = load_header(store.generation("g0001"))
    assert header is not None and header.tasks == ["alpha"]
    assert not list(art.glob("cells/omega/*/*/record.json")), "an omega cell was paid"

    # The decision decides on alpha alone and never mentions omega (it has no aggregate at all:
    # deciding over every task partition would fail here).
    md = instance.get_latest_materialization_event(dg.AssetKey("promotion_decision"))
    assert md is not None
    meta = md.asset_materialization.metadata  # type: ignore[union-attr]
    doc = load_decision(Path(str(meta["decision_path"].value)))
    assert doc.generation == "g0001"
    assert {row.task for row in doc.lineage} == {"alpha"}
    assert {t.task for t in doc.decision.tasks} == {"alpha"}
    assert "omega" not in json.dumps(doc.model_dump(mode="json"))
    assert "omega" not in str(meta["tasks"].value) + str(meta["evidence"].value)
    report = Path(g1.report)
    assert report.is_file() and "omega" not in report.read_text()
    assert "omega" not in (report.parent / "report.md").read_text()

    # Selected explicitly, it is planned and paid, as `wfbench plan` said it would be.
    planned = _plan_json(root, "--include-expensive")
    g2 = evolve(str(root), artifact_root=str(art), instance=instance, include_expensive=True)
    assert g2.generation == "g0002"
    assert [(p.task, p.cell, p.action, p.kind) for p in g2.plan] == [
        (c["task"], f"{c['arm']}.r{c['run']}", c["action"], c["kind"]) for c in planned
    ]
    omega = [p for p in g2.plan if p.task == "omega"]
    assert len(omega) == 3 and all(p.action == "run" for p in omega)
    assert {c["task"] for c in g2.cells} >= {"omega"}
    md2 = instance.get_latest_materialization_event(dg.AssetKey("promotion_decision"))
    doc2 = load_decision(
        Path(str(md2.asset_materialization.metadata["decision_path"].value))  # type: ignore[union-attr]
    )
    assert doc2.generation == "g0002"
    assert {row.task for row in doc2.lineage} == {"alpha", "omega"}
