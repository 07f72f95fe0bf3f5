"""One real cell of an imported plugin-eval case: Claude Code (the pin) against the mock API.

The only skill-eval test that runs the CLI live (~20 s); every grader kind is tested on recorded
transcripts in ``test_skill_eval_graders.py``.
"""

import os
import shutil
from pathlib import Path

import yaml

from bench_assets.cells.pipeline import build_cell_inputs, run_cell
from bench_assets.config.models import ArmSpec
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.redact import Redactor
from bench_assets.tasks.catalog import load_benchmark
from bench_assets.tasks.skill_eval_import import import_plugin
from tests.data.skill_eval.record_transcripts import KEY, MODEL, PLUGIN, SCENARIOS
from tests.mock_anthropic import MockMessagesAPI
from tests.test_claude_code_real import claude_cli  # noqa: F401  (the pinned CLI fixture)


def test_a_live_cell_is_graded_by_the_hidden_graders(tmp_path: Path, claude_cli: Path) -> None:  # noqa: F811
    from bench_assets.config.models import CLAUDE_CODE_VERSION

    tasks = tmp_path / "tasks"
    import_plugin(PLUGIN, tasks)
    shutil.rmtree(tasks / "relnotes.names-version")  # a judge case: tested in test_skill_eval_judge
    (tasks / "p.jsonl").write_text("")
    (tasks / "bench.yaml").write_text(
        yaml.safe_dump(
            {
                "model": MODEL,
                "runs": 1,
                "arms": {"replayed": {"agent": {"adapter": "replay", "predictions": "p.jsonl"},
                                      "skills": "none"}},
                "limits": {"session_timeout_s": 120},
                "agents": {"claude_code": {"version": CLAUDE_CODE_VERSION}},
            }
        )
    )  # fmt: skip
    bench = load_benchmark(tasks)
    store = ArtifactStore(tmp_path / "artifacts")
    task = "relnotes.patch-to-notes"
    with MockMessagesAPI(SCENARIOS["patch-with"]["script"]) as api:
        arm = ArmSpec.model_validate(
            {"agent": {"adapter": "claude-code", "api_base_url": api.url}, "skills": "incumbent"}
        )
        os.environ["ANTHROPIC_API_KEY"] = KEY
        try:
            record, _ = run_cell(
                bench, task, "with_plugin", 0, build_cell_inputs(bench, task, store), store,
                generation=None, redactor=Redactor([KEY]), arm_spec=arm, ad_hoc=True,
            )  # fmt: skip
        finally:
            del os.environ["ANTHROPIC_API_KEY"]
    assert record.resolved, record.error_detail
    se = record.skill_eval
    assert se is not None and se.score == 1.0 and se.session_error is None
    by_name = {g.name: (g.passed, g.scored) for g in se.graders}
    # The Skill grader passed (the skill fired in the worktree) and is shown, not scored.
    assert by_name["routed"] == (True, False)
    assert by_name["section-written"] == (True, True)
    assert record.agent_version == CLAUDE_CODE_VERSION
