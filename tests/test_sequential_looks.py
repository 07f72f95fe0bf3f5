"""Sequential looks are paid by the generation (issue 13, item 4): an inconclusive first look buys
top-up cells ``<arm>.r<k>`` beyond ``runs`` as real cell partitions (on the tasks the gate chose,
issue 23's partial top-ups), the final decision records every look, a kill between a look's
record and its cells resumes at the same look, and the comparator's drifted cells can be
re-planned fresh."""

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from bench_assets.decision.documents import load_decision
from bench_assets.decision.manifest import (
    LookRecord,
    ManifestCell,
    TaskManifest,
    load_looks,
    load_manifest,
    merge_look,
    write_look,
    write_task,
)
from bench_assets.defs.cells import bench_cell_keys
from bench_assets.driver import paying
from bench_assets.driver.evolve import evolve
from bench_assets.driver.instance import decision_records
from bench_assets.driver.looks import _repay
from bench_assets.gate.models import Look
from bench_assets.kernel.errors import InputError
from tests.conftest import make_bench, write_yaml
from tests.test_dagster_cells import fix_patch

TASKS = ("alpha", "beta")
# Look 1 (one run each): the candidate is ~10 % cheaper on both tasks but two tasks at one run
# cannot show it, and t = -10 is far from futility: the gate asks for a top-up run.
COSTS = {
    "workflow": {"alpha": [0.50], "beta": [0.60]},
    "cand": {"alpha": [0.45, 0.40], "beta": [0.55, 0.58]},
}


def looks_bench(tmp_path: Path, top_up_share: float | None = 1.0) -> Path:
    """Two tasks at one run, two looks; ``top_up_share`` 1 tops up both tasks, ``None`` (the
    default share, a sixth of the first look's cells) one of them."""
    root = make_bench(tmp_path / "tasks", tasks=TASKS, runs=1)
    patch = fix_patch(root)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    del data["arms"]["baseline"]
    data["arms"]["cand"]["agent"]["predictions"] = "replays/c.jsonl"
    data["policy"] = {
        "min_runs": 1,
        "min_counted_tasks": 2,
        "max_looks": 2,
        "top_up_runs": 1,
    }
    if top_up_share is not None:
        data["policy"]["top_up_share"] = top_up_share
    write_yaml(root / "bench.yaml", data)
    for arm, name in (("workflow", "w.jsonl"), ("cand", "c.jsonl")):
        lines = [
            json.dumps(
                {
                    "instance_id": task,
                    "model_name_or_path": arm,
                    "run": run,
                    "model_patch": patch,
                    "usage": {"cost_usd": cost, "turns": 3},
                }
            )
            for task, costs in COSTS[arm].items()
            for run, cost in enumerate(costs)
        ]
        (root / "replays" / name).write_text("\n".join(lines) + "\n")
    cand = root / "candidates" / "c1"
    (cand / "files" / "work").mkdir(parents=True)
    (cand / "files" / "work" / "SKILL.md").write_text("---\nname: work\n---\nTest first.\n")
    write_yaml(cand / "candidate.yaml", {"id": "c1", "title": "test first"})
    return root


def _decision(instance: dg.DagsterInstance):
    return load_decision(Path(str(decision_records(instance)[0]["decision_path"])))


def test_top_up_partitions_exist_only_for_the_implementation_candidate(tmp_path: Path) -> None:
    root = looks_bench(tmp_path)
    comparator, candidate = bench_cell_keys(str(root), top_ups=True)
    assert comparator == ["workflow.r0"] and candidate == ["cand.r0", "cand.r1"]
    assert bench_cell_keys(str(root)) == (["workflow.r0"], ["cand.r0"])


@pytest.mark.slow
def test_an_inconclusive_look_buys_top_up_cells_and_the_decision_records_both_looks(
    tmp_path: Path,
) -> None:
    """At the default ``top_up_share`` (a sixth of the first look's cells; two tasks at one run:
    one task) the top-up pays one run on the task the gate chose (by digest, never by outcome),
    the look's record names it, the last look reads 1.5 runs per task, and ``explain`` shows
    both looks. The kill test below pays a top-up of every task (``top_up_share`` 1)."""
    from bench_assets.decision.explain import v2_lines
    from bench_assets.gate.sequential import top_up_tasks

    root = looks_bench(tmp_path, top_up_share=None)
    art = tmp_path / "art"
    (chosen,) = top_up_tasks(list(TASKS), dict.fromkeys(TASKS, 1), 1, 1)
    with dg.instance_for_test() as instance:
        result = evolve(str(root), artifact_root=str(art), instance=instance, in_process=True)
        paid = sorted((c["task"], c["cell"]) for c in result.cells)
        assert paid == sorted(
            [
                ("alpha", "cand.r0"),
                ("alpha", "workflow.r0"),
                ("beta", "cand.r0"),
                ("beta", "workflow.r0"),
                (chosen, "cand.r1"),
            ]
        )
        folder = art / "generations" / "g0001"
        (look,) = load_looks(folder)
        assert look.action == "top_up" and look.statistics.top_up_tasks == [chosen]
        assert look.candidate_runs == 1, "runs planned on every task: unchanged"
        assert [(c.task, c.cell) for c in look.cells] == [(chosen, "cand.r1")]
        manifest = load_manifest(folder)
        assert manifest is not None
        assert [(c.cell, c.look) for c in manifest.tasks[chosen].cells] == [
            ("cand.r0", 1),
            ("workflow.r0", 1),
            ("cand.r1", 2),
        ]
        # The top-up cells are runs of their own partitions, tagged with their look.
        key = dg.MultiPartitionKey({"task": chosen, "cell": "cand.r1"})
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": str(key)}))
        assert runs and all(r.tags.get(paying.LOOK_TAG) == "2" for r in runs)
        doc = _decision(instance)
        v2 = doc.decision.paired_v2
        assert v2 is not None
        assert [(lk.look, lk.action) for lk in v2.looks] == [(1, "top_up"), (2, "decide")]
        assert v2.looks[-1].candidate_runs_per_task == 1
        assert v2.looks[-1].candidate_runs_mean == 1.5
        assert "missing_cells" not in {f.rule for f in doc.decision.findings}
        assert {(e.task, e.run) for e in doc.decision.evidence if e.arm == "cand"} == {
            ("alpha", 0),
            ("beta", 0),
            (chosen, 1),
        }
        assert doc.decision.next_action == "decide"
        text = "\n".join(v2_lines(doc.decision))
        assert "look 1/2: 1 candidate runs per task" in text
        assert "-> top_up on 1 task(s) with the fewest planned candidate runs" in text
        assert f"(ties by digest of look and task): {chosen}" in text
        assert "look 2/2: 1.50 (at least 1) candidate runs per task" in text
        # Look 1 and look 2 each aggregated once; the decision reused look 2's aggregates.
        aggs = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("aggregates")),
            limit=10,
        ).records
        assert len(aggs) == 2


@pytest.mark.slow
def test_a_kill_after_the_look_is_recorded_resumes_the_same_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = looks_bench(tmp_path)
    art = tmp_path / "art"
    real = paying.CellPayer.submit_planned

    def killed(self, planned):
        if any(c.look > 1 for c in planned):
            raise KeyboardInterrupt("kill -9 stand-in: the top-up was recorded, not paid")
        return real(self, planned)

    with dg.instance_for_test() as instance:
        monkeypatch.setattr(paying.CellPayer, "submit_planned", killed)
        with pytest.raises(KeyboardInterrupt):
            evolve(str(root), artifact_root=str(art), instance=instance, in_process=True)
        folder = art / "generations" / "g0001"
        (before,) = load_looks(folder)
        assert not decision_records(instance)
        monkeypatch.setattr(paying.CellPayer, "submit_planned", real)
        result = evolve(str(root), artifact_root=str(art), instance=instance, in_process=True)
        assert result.generation == "g0001"
        assert sorted((c["task"], c["cell"]) for c in result.cells) == [
            ("alpha", "cand.r1"),
            ("beta", "cand.r1"),
        ], "the resume pays exactly the recorded look's cells, nothing twice"
        assert load_looks(folder) == [before]
        v2 = _decision(instance).decision.paired_v2
        assert v2 is not None and [lk.look for lk in v2.looks] == [1, 2]


def _cell(task: str, cell: str, action: str = "reuse", look: int = 1) -> ManifestCell:
    return ManifestCell(
        task=task,
        cell=cell,
        asset="candidate_cells" if cell.startswith("cand") else "comparator_cells",
        role="candidate" if cell.startswith("cand") else "comparator",
        identity_digest=f"id-{task}-{cell}",
        action=action,  # type: ignore[arg-type]
        kind="reusable" if action == "reuse" else "candidate",
        source_run_id="run-old" if action == "reuse" else None,
        source_data_version="dv-old" if action == "reuse" else None,
        look=look,
    )


def _look(cells: list[ManifestCell], look: int = 1) -> LookRecord:
    return LookRecord(
        generation="g0002",
        look=look,
        action="repay_comparator",
        decided_at="2026-11-30T00:00:00+00:00",
        statistics=Look(
            look=look,
            max_looks=2,
            candidate_runs_per_task=1,
            alpha_cost=0.05,
            alpha_resolve=0.1,
            cost_t=None,
            cost_verdict=None,
            resolve_verdict=None,
            action="repay_comparator",
        ),
        reasons=["drift"],
        candidate_runs=1,
        cells=cells,
    )


def test_drift_re_plans_reused_comparator_cells_fresh_and_merging_is_idempotent(
    tmp_path: Path,
) -> None:
    from bench_assets.decision.manifest import ManifestHeader, write_header

    folder = tmp_path / "g0002"
    write_header(
        folder,
        ManifestHeader(
            generation="g0002",
            candidate="c1",
            overlay_digest="o",
            skills_digest="s",
            tasks=["alpha"],
            tasks_dir=str(tmp_path),
            tasks_digest="t",
            created_at="2026-11-30T00:00:00+00:00",
        ),
    )
    planned = [
        _cell("alpha", "workflow.r0", "run"),
        _cell("alpha", "workflow.r1"),
        _cell("alpha", "baseline.r0"),
        _cell("alpha", "cand.r0", "run"),
    ]
    write_task(folder, TaskManifest(generation="g0002", task="alpha", cells=planned))
    cells, pcs = _repay(folder, "workflow", 2)
    assert [(c.cell, c.action, c.kind, c.source_run_id) for c in cells] == [
        ("workflow.r1", "run", "drift", None)
    ], "only the gated comparator's reused cells; fresh ones and other arms stay"
    assert pcs[0].prior_run_id == "run-old"
    rec = _look(cells)
    write_look(folder, rec)
    assert merge_look(folder, rec) == 1
    assert merge_look(folder, rec) == 0, "merging a look twice changes nothing"
    manifest = load_manifest(folder)
    assert manifest is not None
    by_cell = {c.cell: c for c in manifest.tasks["alpha"].cells}
    assert [c.cell for c in manifest.tasks["alpha"].cells] == [c.cell for c in planned]
    assert by_cell["workflow.r1"].action == "run" and by_cell["workflow.r1"].look == 2
    assert by_cell["baseline.r0"].action == "reuse"
    # A gap in the look records is an error, not a silently shorter history.
    (folder / "looks" / "look-3.json").write_text((folder / "looks" / "look-1.json").read_text())
    with pytest.raises(InputError, match="gap"):
        load_looks(folder)


@pytest.mark.slow
def test_a_look_that_asks_to_repay_the_comparator_pays_its_reused_cells_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's side of drift control, at one look: the reused comparator cells are re-planned
    fresh (kind ``drift``), paid in this generation, and the decision reads them as fresh evidence
    with the pooled history set aside. The gate's own drift rule is tested in test_gate_v2; here
    the first look's answer is forced, because replayed costs cannot drift."""
    from bench_assets.driver import looks as looks_mod

    root = looks_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["policy"]["max_looks"] = 1
    data["reuse"] = {"canaries": 0, "gate_canaries_per_task": 0}
    write_yaml(root / "bench.yaml", data)
    art = tmp_path / "art"
    with dg.instance_for_test() as instance:
        evolve(str(root), artifact_root=str(art), instance=instance, in_process=True)
        c2 = root / "candidates" / "c2"
        (c2 / "files" / "work").mkdir(parents=True)
        (c2 / "files" / "work" / "SKILL.md").write_text("---\nname: work\n---\nPlan first.\n")
        write_yaml(c2 / "candidate.yaml", {"id": "c2", "title": "plan first"})
        real = looks_mod.gate_mod.decide
        asked: list[int] = []

        def drifted(inp):
            d = real(inp)
            if not asked:
                asked.append(1)
                assert d.paired_v2 is not None
                *before, last = d.paired_v2.looks
                asks = last.model_copy(update={"action": "repay_comparator"})
                v2 = d.paired_v2.model_copy(update={"looks": [*before, asks]})
                return d.model_copy(update={"next_action": "repay_comparator", "paired_v2": v2})
            return d

        monkeypatch.setattr(looks_mod.gate_mod, "decide", drifted)
        result = evolve(str(root), artifact_root=str(art), instance=instance, in_process=True)
        assert result.generation == "g0002"
        (look,) = load_looks(art / "generations" / "g0002")
        assert look.action == "repay_comparator"
        assert sorted((c.task, c.cell, c.action, c.kind) for c in look.cells) == [
            ("alpha", "workflow.r0", "run", "drift"),
            ("beta", "workflow.r0", "run", "drift"),
        ]
        paid = sorted((c["task"], c["cell"]) for c in result.cells)
        assert ("alpha", "workflow.r0") in paid and ("beta", "workflow.r0") in paid
        doc = _decision(instance)
        assert doc.generation == "g0002"
        comp = [e for e in doc.decision.evidence if e.arm == "workflow"]
        assert comp and all(e.generation == "g0002" and not e.reused for e in comp)
        v2 = doc.decision.paired_v2
        assert v2 is not None and v2.pooled.pooled_runs == 0, "pooled history set aside"
        assert [lk.action for lk in v2.looks][0] == "repay_comparator"
