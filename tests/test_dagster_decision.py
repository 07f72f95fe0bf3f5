"""The decision layer: aggregates + completeness check, promotion_decision, report, ledger, CLI."""

import datetime as dt
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from bench_assets import gate
from bench_assets.cli import main
from bench_assets.decision.documents import load_decision
from bench_assets.driver.instance import decision_records, materialize_decision
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import DEMO_TASKS
from tests.test_dagster_cells import cells, replay_bench, run_all


def demo_gate_input(
    override: dict[tuple[str, str, int], ErrorKind] | None = None,
) -> gate.GateInput:
    """The demo's recorded outcomes (facts, per test_demo_suite) as the gate's input; ``override``
    makes the named (arm, task, run) cells unresolved with the given error kind."""
    bench = load_benchmark(DEMO_TASKS)
    expected = json.loads((DEMO_TASKS / "replays" / "expected.json").read_text())
    now = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    outcomes = []
    for arm in ("workflow", "candidate_workflow"):
        lines = [
            json.loads(x)
            for x in (DEMO_TASKS / "replays" / f"{arm}.jsonl").read_text().splitlines()
            if x.strip()
        ]
        usage = {(x["instance_id"], x["run"]): (x["usage"], x["model_patch"]) for x in lines}
        for task, runs in expected[arm].items():
            for run, exp in enumerate(runs):
                u, patch = usage[(task, run)]
                resolved = exp["verify"] and exp["oracle"] and bool(patch.strip())
                kind = (
                    None
                    if resolved
                    else (ErrorKind.VERIFY_FAILED if not exp["verify"] else ErrorKind.ORACLE_FAILED)
                )
                if override and (arm, task, run) in override:
                    resolved, kind = False, override[arm, task, run]
                outcomes.append(
                    gate.RunOutcome(
                        task=task,
                        arm=arm,
                        run=run,
                        resolved=resolved,
                        error_kind=kind,
                        metric=u["cost_usd"],
                        reused=False,
                        generation="g0001",
                        record_id=f"{task}-{arm}-{run}",
                        data_version="x" * 8,
                        recorded_at=now,
                    )
                )
    return gate.GateInput(
        policy=bench.config.policy,
        model=bench.config.model,
        incumbent_arm="workflow",
        candidate_arm="candidate_workflow",
        tasks=[t for t in bench.task_ids() if bench.task(t).spec.review is None],
        outcomes=outcomes,
        aborted=False,
        now=now,
        max_age_days=90,
    )


def test_the_demo_design_promotes_under_the_default_policy() -> None:
    """The demo's recorded outcomes (facts, per test_demo_suite) lead the gate to `promote`."""
    inp = demo_gate_input()
    assert gate.decide(inp).decision == "promote"
    # The negative control: the same evidence from an aborted generation never promotes.
    aborted = gate.decide(inp.model_copy(update={"aborted": True}))
    assert aborted.decision == "insufficient_evidence"


def decide(instance, root: Path, art: Path, generation: str) -> dict:
    """Aggregate, decide and report on the fixture task."""
    return materialize_decision(
        instance,
        ["alpha"],
        tasks_dir=str(root),
        artifact_root=str(art),
        generation=generation,
        aborted=False,
        progress=lambda m: None,
    )


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.tags.append(tag)


def test_decision_is_recorded_with_lineage_report_and_ledger(
    tmp_path: Path, instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, art = replay_bench(tmp_path), tmp_path / "art"
    run_all(instance, root, art)
    out = decide(instance, root, art, "g0001")
    d = out["decision"]
    # One run per arm cannot meet min_runs 3: insufficient, never keep/promote.
    assert d["decision"] == "insufficient_evidence"
    body = json.loads(Path(str(d["decision_path"])).read_text())
    assert body["generation"] == "g0001" and body["candidate"] == "c1"
    cells = {(e["arm"], e["run"]) for e in body["decision"]["evidence"]}
    assert cells == {("workflow", 0), ("cand", 0)}
    assert "workflow.r0" in str(d["evidence"]) and "fresh" in str(d["evidence"])
    # Recomputing from the stored input reproduces the stored decision exactly.
    stored_input = Path(str(d["decision_path"])).parent / "gate-input.json"
    inp = gate.GateInput.model_validate_json(stored_input.read_text())
    assert gate.decide(inp).model_dump(mode="json") == body["decision"]
    # The report: Markdown in metadata, a self-contained HTML file with charts.
    html = Path(str(out["report"]["html_path"])).read_text()
    parser = _Html()
    parser.feed(html)
    assert "svg" in parser.tags and "script" not in parser.tags and "link" not in parser.tags
    assert "insufficient_evidence" in html
    # It names the candidate, tables the gate per task, labels every scatter point, explains
    # health UNKNOWN and the non-inferiority confidence; the UI links the decision to it.
    assert "candidate c1 (overlay " in html and "Gate, per task" in html
    assert re.search(r'<text [^>]*class="a"[^>]*>alpha</text>', html)
    # One run per arm: the scatter point has no error bar; the caption still says what bars are.
    assert 'class="eb"' not in html and "error bars are the min–max cost" in html
    assert "UNKNOWN: no fresh attempt" in html and "one-sided confidence" in html
    assert str(d["report_url"]).endswith(f"/{d['digest']}/report.html")
    assert out["report"]["report_url"] == d["report_url"]
    assert "UNKNOWN" in str(d["how_to_read"])
    # Both the report and the UI show what the gate looked at: looks, drift, pooled history.
    assert "Looks, drift and pooled history" in html and "look 1/" in html
    assert "drift:" in str(d["looks_drift_pool"]) and "pooled history:" in str(
        d["looks_drift_pool"]
    )
    # The ledger verifies, and a single edited byte is caught and named.
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(art))
    ok = CliRunner().invoke(main, ["ledger", "verify"])
    assert ok.exit_code == 0 and "OK, 1 entries" in ok.output
    ledger = ArtifactStore(art).ledger()
    data = bytearray(ledger.read_bytes())
    pos = data.index(b'"insufficient_evidence"') + 2
    data[pos] = ord("X")
    ledger.chmod(0o644)
    ledger.write_bytes(bytes(data))
    bad = CliRunner().invoke(main, ["ledger", "verify"])
    assert bad.exit_code == 1 and "line 1" in bad.output


def test_explain_names_policy_tasks_and_evidence(
    tmp_path: Path, instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, art = replay_bench(tmp_path), tmp_path / "art"
    run_all(instance, root, art)
    decide(instance, root, art, "g0001")
    # A second generation reuses every cell; its decision names where the evidence came from.
    cells(instance, root, art, generation="g0002")
    decide(instance, root, art, "g0002")
    monkeypatch.setenv("DAGSTER_HOME", instance.root_directory)
    res = CliRunner().invoke(main, ["explain", "--generation", "g0002"])
    first = CliRunner().invoke(main, ["explain", "--generation", "g0001", "--json"])
    assert res.exit_code == 0, res.output
    assert "generation g0002: insufficient_evidence" in res.output
    assert "policy paired" in res.output
    # Exactly the settings gate v3 reads, and the cheat counts per arm.
    assert "resolve_margin 0.1," in res.output and "resolve_error" in res.output
    assert "v2_resolve_margin" not in res.output and "seed" not in res.output
    assert "cheats, candidate cand: 0 grader-tampered" in res.output
    g1 = {md["generation"]: md for md in decision_records(instance)}["g0001"]
    g1_doc = load_decision(Path(str(g1["decision_path"])))
    paid = g1_doc.lineage_of("alpha", "workflow", 0)
    assert paid is not None and paid.run_id and not paid.reused
    # Reused evidence names the run that paid for it (and its generation), never "None".
    assert f"alpha workflow.r0: reused from run {paid.run_id} (g0001)" in res.output
    assert "None" not in res.output
    table = str(decision_records(instance, limit=1)[0]["evidence"])
    assert f"reused from run {paid.run_id} (g0001)" in table and "None" not in table
    assert json.loads(first.output)["generation"] == "g0001"


def test_incomplete_task_fails_the_check_and_cannot_promote(tmp_path: Path, instance) -> None:
    from bench_assets.defs.decision import aggregates
    from bench_assets.defs.resources import BenchResource
    from bench_assets.driver.inputs import materialize_inputs
    from bench_assets.driver.instance import sync_instance

    root, art = replay_bench(tmp_path), tmp_path / "art"
    sync_instance(instance, load_benchmark(root))
    materialize_inputs(
        instance, ["alpha"], tasks_dir=str(root), artifact_root=str(art), progress=lambda m: None
    )
    result = dg.materialize(
        [aggregates],
        instance=instance,
        resources={"bench": BenchResource(tasks_dir=str(root), artifact_root=str(art))},
        raise_on_error=False,
    )
    evaluations = [
        e for e in result.get_asset_check_evaluations() if e.check_name == "aggregates_complete"
    ]
    assert evaluations and not evaluations[0].passed
    assert "baseline.r0" in str(evaluations[0].metadata["missing"].value)
