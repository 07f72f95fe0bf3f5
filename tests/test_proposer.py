"""Agent proposers: the overlay a sandboxed agent writes is validated before anything is paid."""

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.decision.documents import DecisionDocument, load_decision
from bench_assets.driver.evolve import evolve
from bench_assets.driver.instance import decision_records, latest_cells
from bench_assets.generation.proposer import evidence_bundle, propose
from bench_assets.kernel.errors import InputError
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.redact import Redactor
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import write_yaml
from tests.test_dagster_cells import replay_bench

GOOD = (
    "import json, os; os.makedirs('overlay/work', exist_ok=True); "
    "open('overlay/work/SKILL.md', 'w').write('---\\nname: work\\n---\\nSmaller steps.\\n'); "
    "ev = json.load(open('evidence.json')); "
    "json.dump({'title': 'smaller steps', 'rationale': 'saw %d cells' % len(ev['worst_cells'])}, "
    "open('overlay.json', 'w'))"
)


def proposer_bench(tmp_path: Path, code: str) -> Path:
    root = replay_bench(tmp_path)
    data = yaml.safe_load((root / "bench.yaml").read_text())
    data["proposer"] = {"kind": "command", "argv": ["python", "-c", code]}
    write_yaml(root / "bench.yaml", data)
    return root


def run(tmp_path: Path, code: str) -> tuple[Path, str]:
    root = proposer_bench(tmp_path, code)
    bench = load_benchmark(root)
    cid = propose(
        bench,
        ArtifactStore(tmp_path / "art"),
        "g0003",
        {"worst_cells": [{"task": "alpha"}], "reasons": []},
        Redactor(),
    )
    return root, cid


def test_a_proposal_becomes_a_queued_candidate(tmp_path: Path) -> None:
    root, cid = run(tmp_path, GOOD)
    assert cid == "g0003-proposal"
    bench = load_benchmark(root)
    cand = bench.candidates[cid]
    assert cand.spec.origin == "proposer" and cand.spec.title == "smaller steps"
    assert "saw 1 cells" in cand.spec.rationale
    assert (cand.files_dir / "work" / "SKILL.md").read_text().endswith("Smaller steps.\n")


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("pass", "no overlay/ folder"),
        ("import os; os.makedirs('overlay')", "empty"),
        ("import os, shutil; shutil.copytree('skills', 'overlay')", "identical to the incumbent"),
        ("import os; os.makedirs('overlay'); os.symlink('/etc/passwd', 'overlay/x')", "symlink"),
        (
            "import os; os.makedirs('overlay')\nfor i in range(30): open(f'overlay/f{i}', 'w')"
            ".write(str(i))",
            "30 files",
        ),
        ("import os; os.makedirs('overlay'); open('overlay/big', 'w').write('x' * 70000)", "bytes"),
        ("import sys; sys.exit(3)", "proposer agent failed"),
    ],
)
def test_bad_proposals_are_refused(tmp_path: Path, code: str, why: str) -> None:
    with pytest.raises(InputError, match=why):
        run(tmp_path, code)
    assert not list((tmp_path / "tasks" / "candidates").glob("g0003-*"))


def test_evidence_bundle_is_bounded_and_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real cells of a real generation (one unmeasured), a real decision document."""
    secret = "sk-ant-api03-" + "x" * 30
    root = replay_bench(tmp_path)
    (root / "replays" / "b.jsonl").write_text(  # baseline: no usage recorded → cost unmeasured
        json.dumps(
            {
                "instance_id": "alpha",
                "model_name_or_path": f"b {secret}",
                "run": 0,
                "model_patch": "",
            }
        )
        + "\n"
    )
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(tmp_path / "art"))
    with dg.instance_for_test() as instance:
        monkeypatch.setenv("DAGSTER_HOME", instance.root_directory)
        evolve(str(root), artifact_root=str(tmp_path / "art"), instance=instance)
        cells = latest_cells(instance, ["alpha"], str(root))
        body = load_decision(Path(str(decision_records(instance, limit=1)[0]["decision_path"])))
    assert any(c.record.cost_usd is None for c in cells)  # the case that used to crash
    many = [c.model_copy(update={"task": f"t{i}"}) for i in range(6) for c in cells]
    bundle = evidence_bundle(body, many, Redactor([secret]))
    worst = bundle["worst_cells"]
    assert len(worst) == 12 and bundle["previous_generation"] == "g0001"
    assert bundle["decision"] == body.decision.decision and bundle["reasons"]
    assert all(c["resolved"] is False for c in worst[:6])  # unresolved first
    unmeasured = [c for c in worst if c["cost_usd"] is None]
    assert unmeasured and all(c["arm"] == "baseline" for c in unmeasured)
    assert secret not in json.dumps(bundle)


def test_evidence_bundle_bounds_reasons() -> None:
    secret = "sk-ant-api03-" + "y" * 30
    doc = _decision_doc(["leak " + secret, "x" * 5000])
    bundle = evidence_bundle(doc, [], Redactor([secret]))
    assert secret not in json.dumps(bundle) and len(bundle["reasons"][1]) == 600


def _decision_doc(reasons: list[str]) -> DecisionDocument:
    """A stored decision document from the gate's own output, with given reasons."""
    import datetime as dt

    from bench_assets.config.models import PolicyConfig
    from bench_assets.gate import GateInput, decide

    now = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
    decision = decide(
        GateInput(
            policy=PolicyConfig(),
            model="claude-sonnet-4-5-20250929",
            incumbent_arm="workflow",
            candidate_arm="cand",
            tasks=["alpha"],
            outcomes=[],
            aborted=False,
            now=now,
            max_age_days=90,
        )
    ).model_copy(update={"reasons": reasons})
    return DecisionDocument(
        kind="generation",
        generation="g0001",
        candidate="c1",
        overlay_digest="0" * 64,
        incumbent_skills_digest="1" * 64,
        overlay_files="/nonexistent/files",
        skills_dir="/nonexistent/skills",
        target_base_digests={},
        decision=decision,
        lineage=[],
    )


def test_failed_proposal_stops_the_generation_before_any_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = proposer_bench(tmp_path, "pass")
    art = tmp_path / "art"
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(art))
    result = CliRunner().invoke(main, ["evolve", "--tasks", str(root)])
    assert result.exit_code == 2, result.output
    assert "no overlay/ folder" in result.output
    assert not ArtifactStore(art).cells_root().exists()


def test_generation_with_an_agent_proposer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = proposer_bench(tmp_path, GOOD)
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(tmp_path / "art"))
    result = CliRunner().invoke(main, ["evolve", "--tasks", str(root), "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["candidate"] == "g0001-proposal" and body["paid_cells"] == 3
