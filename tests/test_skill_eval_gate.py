"""A generation over an imported plugin-eval suite: replayed real-CLI runs (with the plugin, with a
candidate plugin, without), decided by the gate with lineage; `explain` shows every grader's
outcome and the report shows the `claude plugin eval` table next to the verdict."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.tasks.skill_eval_import import import_plugin

DATA = Path(__file__).parent / "data" / "skill_eval"
T = DATA / "transcripts"
NOTES, QUIET = "relnotes.patch-to-notes", "relnotes.unrelated-question"


def _replay(path: Path, runs: dict[str, str], producer: str) -> None:
    rows = []
    for task, name in runs.items():
        tree = json.loads((T / f"{name}.tree.json").read_text())
        rows.append(
            {
                "instance_id": task,
                "run": 0,
                "model_name_or_path": producer,
                "model_patch": tree["patch"],
                "transcript": (T / f"{name}.jsonl").read_text(),
                "usage": {"cost_usd": 0.05, "turns": 4},
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.slow
def test_the_gate_decides_on_a_plugin_suite_and_explain_shows_the_graders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "tasks"
    import_plugin(DATA / "plugins" / "relnotes", root)
    shutil.rmtree(root / "relnotes.names-version")  # its judge grader is tested on its own
    (root / "replays").mkdir()
    _replay(root / "replays" / "b.jsonl", {NOTES: "patch-without", QUIET: "teapot-quiet"}, "b")
    _replay(root / "replays" / "w.jsonl", {NOTES: "patch-with", QUIET: "teapot-skill"}, "w")
    _replay(root / "replays" / "c.jsonl", {NOTES: "patch-with", QUIET: "teapot-quiet"}, "c")
    cand = root / "candidates" / "c1"
    (cand / "files" / "draft-release-notes").mkdir(parents=True)
    (cand / "files" / "draft-release-notes" / "SKILL.md").write_text(
        "---\nname: draft-release-notes\ndescription: Release notes from a patch; only when "
        "asked for release notes.\n---\nRead the patch, then write the section.\n"
    )
    (cand / "candidate.yaml").write_text(yaml.safe_dump({"id": "c1", "title": "narrower"}))
    replay = "replay"
    bench = {
        "model": "claude-sonnet-4-5-20250929",
        "runs": 1,
        "arms": {
            "without_plugin": {"agent": {"adapter": replay, "predictions": "replays/b.jsonl"},
                               "skills": "none"},
            "with_plugin": {"agent": {"adapter": replay, "predictions": "replays/w.jsonl"},
                            "skills": "incumbent"},
            "with_candidate": {"agent": {"adapter": replay, "predictions": "replays/c.jsonl"},
                               "skills": "candidate", "role": "candidate",
                               "pairs_with": "with_plugin"},
        },
        "policy": {"min_runs": 1, "max_looks": 1},
    }  # fmt: skip
    (root / "bench.yaml").write_text(yaml.safe_dump(bench))
    monkeypatch.setenv("WFBENCH_ARTIFACTS", str(tmp_path / "art"))
    res = CliRunner().invoke(main, ["evolve", "--tasks", str(root), "--json"])
    body = json.loads(res.stdout)
    assert body["candidate"] == "c1" and body["decision"], res.output
    out = CliRunner().invoke(main, ["explain"])
    assert out.exit_code == 0, out.output
    text = out.stdout
    # Every evidence cell of a skill-eval task lists its graders, from its record.
    assert f"{QUIET} with_plugin.r0" in text
    assert "graders: score 0.8 (threshold 1)" in text
    assert "FAIL      skill-stays-quiet [tool_used x1]: Skill called 1x (expected 0..0)" in text
    assert "pass      routed [tool_used x1] (shown, not scored): Skill called 1x" in text
    reports = sorted((tmp_path / "art").rglob("report.md"))
    assert reports, "the generation rendered its report"
    report = reports[-1].read_text()
    assert "as `claude plugin eval` would report them" in report
    assert "### with = `with_plugin`" in report and "### with = `with_candidate`" in report
    assert "| unrelated-question | 0.80 | 1.00 | -0.20 | 2 |" in report
    assert "| unrelated-question | 1.00 | 1.00 | +0.00 | 2 |" in report
