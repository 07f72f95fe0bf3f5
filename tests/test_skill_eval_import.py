"""`wfbench import claude-plugin-eval` / `import skill-creator`, `validate`, and `grade` of
predictions carrying the run's stream-json transcript (recorded from the real CLI)."""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cells.records import CellRecord
from bench_assets.cli import main
from bench_assets.cli.suites import plugin_eval_export
from bench_assets.exports.plugin_eval import case_scores, plugin_eval_table
from bench_assets.kernel.errors import InputError
from bench_assets.scorers.skill_eval import SkillEvalGrading
from bench_assets.tasks.catalog import load_benchmark
from bench_assets.tasks.skill_eval_creator import import_skill_creator
from bench_assets.tasks.skill_eval_import import import_plugin
from tests.test_skill_eval_graders import PATCH_TO_NOTES, UNRELATED

DATA = Path(__file__).parent / "data" / "skill_eval"
PLUGIN = DATA / "plugins" / "relnotes"
T = DATA / "transcripts"


def cli(*args: str) -> str:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout


def failing(*args: str) -> str:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code != 0, res.output
    return res.output + (str(res.exception) if res.exception else "")


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    dest = tmp_path / "relnotes"
    shutil.copytree(PLUGIN, dest)
    return dest


def hidden(tasks: Path, task: str) -> SkillEvalGrading:
    return SkillEvalGrading.model_validate_json(
        (tasks / task / "oracle/skill_eval.json").read_text()
    )


def test_a_plugin_suite_imports_validates_and_keeps_its_graders_hidden(
    tmp_path: Path, plugin: Path
) -> None:
    tasks = tmp_path / "tasks"
    out = cli("import", "claude-plugin-eval", str(plugin), "--tasks", str(tasks))
    assert "5 created" in out  # 3 cases, the incumbent skills, the whole plugin
    whole = tasks / "_plugins" / "relnotes"
    assert (whole / ".claude-plugin" / "plugin.json").is_file() and not (whole / "evals").exists()
    assert "ok — 3 task(s), 2 arm(s)" in cli("validate", str(tasks))
    bench = load_benchmark(tasks)
    spec = bench.task("relnotes.patch-to-notes").spec
    assert spec.skill_eval is not None and spec.repo == "inline"
    se = spec.skill_eval
    assert (se.runs, se.max_turns, se.env, spec.timeouts.session_s) == (
        3, 14, {"EVAL_LOCALE": "en_GB"}, 240,
    )  # fmt: skip
    assert se.allowed_tools == ["Read", "Glob", "Grep", "Skill", "Write"]
    assert spec.prompt.startswith("The patch since 4.1.0 is in inputs/delta.patch.")
    # The scaffold ran once, in the sandbox: its files are the pinned starting tree.
    repo = tasks / "relnotes.patch-to-notes" / "repo"
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()) == [
        "RELEASE_NOTES.md",
        "inputs/delta.patch",
    ]
    # Graders: in the oracle folder only (staged after the agent exits), defaults made explicit.
    imported = hidden(tasks, "relnotes.patch-to-notes")
    assert imported.model_dump(exclude={"case"}) == PATCH_TO_NOTES.model_dump(exclude={"case"})
    assert hidden(tasks, "relnotes.unrelated-question").graders == UNRELATED.graders
    assert not any("graders" in str(p) for p in repo.rglob("*"))
    assert (tasks / "skills" / "draft-release-notes" / "SKILL.md").is_file()


def test_reimport_is_idempotent_and_a_changed_case_prints_its_diff(
    tmp_path: Path, plugin: Path
) -> None:
    tasks = tmp_path / "tasks"
    cli("import", "claude-plugin-eval", str(plugin), "--tasks", str(tasks))
    assert "0 created, 0 changed, 5 unchanged" in cli(
        "import", "claude-plugin-eval", str(plugin), "--tasks", str(tasks)
    )
    grader = plugin / "evals" / "patch-to-notes" / "graders" / "section-written.md"
    grader.write_text(grader.read_text().replace("weight: 2", "weight: 3"))
    out = cli("import", "claude-plugin-eval", str(plugin), "--tasks", str(tasks))
    assert "changed   relnotes.patch-to-notes" in out
    assert '-      "weight": 2.0,' in out and '+      "weight": 3.0,' in out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("patch-to-notes/prompt.md", "runs: 3", "runs: 3\nretries: 2"),
         "prompt.md: field 'retries'"),
        (("patch-to-notes/case.yaml", "scaffold_script: seed.sh", "history_file: h.jsonl"),
         "case.yaml: field 'context.history_file'"),
        (("patch-to-notes/prompt.md", "EVAL_LOCALE", "LOCALE"), "field 'env.LOCALE'"),
        (("patch-to-notes/graders/routed.md", "tool: Skill", "tool: Skill\ntarget: mock_calls"),
         "routed.md: field 'graders.routed.target'"),
        (("controls/unrelated-question/case.yaml", 'pattern: "teapot"', 'pattern: "(?i)teapot"'),
         "Python-only regex"),
        (("controls/unrelated-question/case.yaml", "version: \"1.1\"", "version: \"2.0\""),
         "case.yaml: field 'schema_version': '2.0' is not the case format"),
        (("patch-to-notes/prompt.md", "tags: [smoke, notes]", "tags: smoke"),
         "prompt.md: field 'tags': a list of strings"),
        (("patch-to-notes/prompt.md", "timeout_seconds: 240", "timeout_seconds: 7200"),
         "prompt.md: field 'timeout_seconds': a whole number from 1 to 3600"),
        (("judged/names-version/prompt.md", "[Skill]\n---", "[Skill]"),
         "prompt.md: frontmatter: opened with --- but never closed"),
    ],
)  # fmt: skip
def test_unsupported_fields_are_refused_naming_file_and_field(
    tmp_path: Path, plugin: Path, edit: tuple[str, str, str], message: str
) -> None:
    rel, old, new = edit
    path = plugin / "evals" / rel
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    tasks = tmp_path / "tasks"
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        import_plugin(plugin, tasks)
    assert not tasks.exists() or not any(tasks.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda p: (p / "evals" / "patch-to-notes" / "mocks" / "tracker").mkdir(parents=True),
         r"patch-to-notes/mocks: case 'patch-to-notes', field 'mocks'"),
        (lambda p: (p / "evals" / "mocks" / "tracker").mkdir(parents=True),
         r"evals/mocks: suite-wide MCP mocks \(tracker\)"),
        (lambda p: (p / ".mcp.json").write_text('{"mcpServers": {"tracker": {"command": "x"}}}'),
         r"\.mcp\.json: field 'mcpServers' \(tracker\)"),
        (lambda p: (p / ".claude-plugin" / "plugin.json").write_text(
            '{"name": "relnotes", "mcpServers": {"db": {"command": "x"}}}'),
         r"plugin\.json: field 'mcpServers' \(db\)"),
    ],
)  # fmt: skip
def test_mcp_servers_and_mocks_are_refused_naming_where(
    tmp_path: Path, plugin: Path, declare: Any, message: str
) -> None:
    """claude plugin eval reaches MCP tools only through mocks; wfbench runs none, so a suite or
    plugin declaring MCP servers or mocks is refused, never imported without them."""
    declare(plugin)
    with pytest.raises(InputError, match=message) as e:
        import_plugin(plugin, tmp_path / "t")
    assert "does not run" in str(e.value) or "not run by wfbench" in str(e.value)
    assert not (tmp_path / "t").exists()


def test_a_case_without_graders_is_refused(tmp_path: Path, plugin: Path) -> None:
    shutil.rmtree(plugin / "evals" / "patch-to-notes" / "graders")
    with pytest.raises(InputError, match="field 'graders': a case needs at least one grader"):
        import_plugin(plugin, tmp_path / "t")


def test_skill_creator_evals_json_both_spellings(tmp_path: Path) -> None:
    skill = tmp_path / "csv-tidy"
    (skill / "evals" / "files").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: csv-tidy\ndescription: tidy CSVs\n---\nbody\n")
    (skill / "evals" / "files" / "orders.csv").write_text("id,country\n1,\n1,\n")
    doc = {
        "skill_name": "csv-tidy",
        "evals": [
            {
                "id": 1,
                "prompt": "dedupe evals/files/orders.csv",
                "expected_output": "A deduplicated CSV.",
                "files": ["evals/files/orders.csv"],
                "assertions": [
                    "The reply states the number of duplicate rows removed",
                    {"name": "says-rows", "type": "contains", "value": "rows (1)"},
                ],
            },
            {"id": "two", "prompt": "convert", "expectations": ["A UTF-8 CSV is written"]},
            {"id": 3, "prompt": "anything", "expected_output": "Keeps the header order."},
        ],
    }
    evals = skill / "evals" / "evals.json"
    evals.write_text(json.dumps(doc))
    tasks = tmp_path / "tasks"
    out = cli("import", "skill-creator", str(evals), "--tasks", str(tasks))
    assert "4 created" in out, out
    assert "ok — 3 task(s)" in cli("validate", str(tasks))
    one = hidden(tasks, "csv-tidy.1")
    assert [(g.type, g.name) for g in one.graders] == [
        ("llm", "assertion-1"),
        ("regex", "says-rows"),
    ]
    assert one.graders[1].pattern == r"rows\ \(1\)"  # type: ignore[union-attr]
    assert one.ablation == "none"
    assert [g.criteria for g in hidden(tasks, "csv-tidy.two").graders] == [  # type: ignore[union-attr]
        "A UTF-8 CSV is written"
    ]
    assert hidden(tasks, "csv-tidy.3").graders[0].criteria == "Keeps the header order."  # type: ignore[union-attr]
    assert (tasks / "csv-tidy.1" / "repo" / "evals" / "files" / "orders.csv").is_file()
    assert (tasks / "skills" / "csv-tidy" / "SKILL.md").is_file()
    assert not (tasks / "skills" / "csv-tidy" / "evals").exists()
    # Descriptive keys real files add are kept (description, tag); custom scorers are refused.
    doc["version"] = "2"
    doc["evals"][0].update(category="dedupe", eval_name="dedupe-orders")  # type: ignore[attr-defined]
    evals.write_text(json.dumps(doc))
    import_skill_creator(evals, tmp_path / "t3")
    se = yaml.safe_load((tmp_path / "t3" / "csv-tidy.1" / "task.yaml").read_text())["skill_eval"]
    assert se["tags"] == ["dedupe"] and se["description"] == "dedupe-orders"
    doc["evals"][0]["scorers"] = [{"type": "regex", "pattern": "x"}]  # type: ignore[index]
    evals.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"evals\.0: field 'scorers': custom scorers"):
        import_skill_creator(evals, tmp_path / "t2")


def _predictions(path: Path, runs: list[tuple[str, str, int]], *, as_events: bool = False) -> Path:
    rows = []
    for task, name, run in runs:
        tree = json.loads((T / f"{name}.tree.json").read_text())
        text = (T / f"{name}.jsonl").read_text()
        events = [json.loads(line) for line in text.splitlines()]
        rows.append({"instance_id": task, "run": run, "model_patch": tree["patch"],
                     "transcript": events if as_events else text})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _graded(tasks: Path, preds: Path, skills: str, arm: str) -> list[CellRecord]:
    out = cli("grade", "--predictions", str(preds), "--tasks", str(tasks), "--skills", skills,
              "--json")  # fmt: skip
    return [
        CellRecord.model_validate_json(line).model_copy(update={"arm": arm})
        for line in out.strip().splitlines()
    ]


def test_grade_predictions_with_recorded_transcripts_and_export_round_trips(
    tmp_path: Path, plugin: Path, artifact_root: Path
) -> None:
    """`wfbench grade` replays real-CLI runs (patch + stream-json transcript) with per-grader
    outcomes in --json; the claude-plugin-eval export of those cells keeps wfbench's scores."""
    tasks = tmp_path / "tasks"
    cli("import", "claude-plugin-eval", str(plugin), "--tasks", str(tasks))
    notes, quiet = "relnotes.patch-to-notes", "relnotes.unrelated-question"
    with_runs = _predictions(
        tmp_path / "with.jsonl",
        [(notes, "patch-with", 0), (notes, "crash", 1), (quiet, "teapot-skill", 0)],
    )
    without_runs = _predictions(
        tmp_path / "without.jsonl",
        [(notes, "patch-without", 0), (quiet, "teapot-quiet", 0)],
        as_events=True,  # the other accepted shape: a list of event objects
    )
    with_recs = _graded(tasks, with_runs, "incumbent", "with_plugin")
    without_recs = _graded(tasks, without_runs, "none", "without_plugin")
    by = {(r.task, r.run): r for r in with_recs}
    ok = by[(notes, 0)]
    assert ok.resolved and ok.skill_eval is not None and ok.skill_eval.score == 1.0
    assert {g.name: g.passed for g in ok.skill_eval.graders} == {
        "names-version": True, "no-stray-backups": True, "reads-before-writing": True,
        "routed": True, "section-written": True,
    }  # fmt: skip
    crash = by[(notes, 1)]
    assert crash.error_kind == "session-error" and crash.skill_eval is not None
    assert crash.skill_eval.score is None and "session error, not graded" in crash.error_detail
    fired = by[(quiet, 0)]
    assert fired.error_kind == "oracle-failed" and fired.skill_eval is not None
    assert fired.skill_eval.score == 0.8 and "skill-stays-quiet" in fired.error_detail

    doc = json.loads(
        json.dumps(
            plugin_eval_export(tasks, with_recs + without_recs, "with_plugin", "without_plugin")
        )
    )
    # By hand: patch-to-notes with [1.0, errored] -> 1.0, without [0.0] -> Δ +1.0;
    # unrelated-question with [0.8], without [1.0] (arm: both keeps its Skill grader) -> Δ -0.2.
    assert case_scores(doc) == {notes: 1.0, quiet: 0.8, "relnotes.names-version": None}
    cases = {c["dir"]: c for c in doc["cases"]}
    assert cases[notes]["aggregates"] == {
        "score": 1.0, "passRate": 1.0, "scoreWithout": 0.0, "passRateWithout": 0.0, "delta": 1.0,
    }  # fmt: skip
    assert cases[quiet]["aggregates"]["delta"] == -0.2
    assert "delta" not in cases["relnotes.names-version"]["aggregates"]  # no runs: omitted, not 0
    errored = cases[notes]["arms"]["with"][1]
    assert errored["score"] is None and "session error" in errored["error"]
    assert doc["aggregates"] == {
        "casesTotal": 3, "casesPassed": 1, "overallScore": 0.9, "overallPassRate": 0.5,
        "meanDelta": 0.4,
    }  # fmt: skip
    # wfbench's own per-case scores (mean of scored with-arm runs) equal the exported ones.
    for task in (notes, quiet):
        mine = [r.skill_eval.score for r in with_recs if r.task == task and r.skill_eval
                and r.skill_eval.score is not None]  # fmt: skip
        assert case_scores(doc)[task] == sum(mine) / len(mine)
    table = plugin_eval_table(doc)
    assert "| patch-to-notes | 1.00 | 0.00 | +1.00 | 3 |" in table
    assert "1 run(s) errored, not scored" in table


def test_a_skill_creator_case_runs_as_a_cell_with_its_judge(
    tmp_path: Path, artifact_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An evals.json case graded end to end: its assertion judged 2 of 3 by the mock API through
    the egress proxy, the judge's cost recorded apart from the agent's and in the cell's spend."""
    from tests.mock_anthropic import MockMessagesAPI, text

    skill = tmp_path / "relnotes-skill"
    (skill / "evals").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: relnotes-skill\ndescription: notes\n---\nbody\n")
    doc = {
        "skill_name": "relnotes-skill",
        "evals": [{"id": 1, "prompt": "Add notes for the patch.",
                   "assertions": ["The reply names version 4.2.0"]}],
    }  # fmt: skip
    (skill / "evals" / "evals.json").write_text(json.dumps(doc))
    tasks = tmp_path / "tasks"
    cli("import", "skill-creator", str(skill / "evals" / "evals.json"), "--tasks", str(tasks))
    answers = iter(["VERDICT: PASS", "VERDICT: FAIL", "VERDICT: PASS"])
    with MockMessagesAPI(lambda body: text(next(answers))) as api:
        bench = yaml.safe_load((tasks / "bench.yaml").read_text())
        bench["judge"]["api_base_url"] = api.url  # the pinned judge, served by the mock
        (tasks / "bench.yaml").write_text(yaml.safe_dump(bench))
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-skill-creator-test-0123456789")
        preds = tmp_path / "p.jsonl"
        preds.write_text(json.dumps({"instance_id": "relnotes-skill.1", "model_patch": "",
                                     "transcript": (T / "patch-with.jsonl").read_text(),
                                     "usage": {"cost_usd": 0.02}}) + "\n")  # fmt: skip
        out = cli("grade", "--predictions", str(preds), "--tasks", str(tasks), "--json")
    record = CellRecord.model_validate_json(out.strip().splitlines()[-1])
    assert record.resolved and record.skill_eval is not None
    (outcome,) = record.skill_eval.graders
    assert (outcome.type, outcome.passed, outcome.judge_votes) == ("llm", True, [True, False, True])
    # Haiku list prices from the fresh bench.yaml: 3 x (100 x $1 + 20 x $5) / 1e6.
    assert record.skill_eval.judge_cost_usd == pytest.approx(0.0006)
    assert record.cost_usd == 0.02 and record.spend_usd == pytest.approx(0.0206)
    assert len(api.seen) == 3


def test_a_case_max_turns_caps_the_claude_code_session(tmp_path: Path) -> None:
    """The case's max_turns (carried into task.yaml) replaces the arm's --max-turns."""
    from bench_assets.agents.base import SessionContext
    from bench_assets.agents.claude_code import ClaudeCodeAdapter
    from bench_assets.config.models import ClaudeCodeAgent, ClaudeCodeConfig

    adapter = ClaudeCodeAdapter(
        ClaudeCodeAgent(adapter="claude-code", max_turns=30), cli=ClaudeCodeConfig()
    )

    def turns(case_turns: int | None) -> str:
        ctx = SessionContext(
            task_id="t", arm="a", run=0, prompt="p", model="claude-sonnet-4-5-20250929",
            effort=None, workdir=tmp_path, scratch=tmp_path, timeout_s=1.0, max_turns=case_turns,
        )  # fmt: skip
        argv = adapter.argv("claude", ctx)
        return argv[argv.index("--max-turns") + 1]

    assert (turns(14), turns(None)) == ("14", "30")


GIT_SEED = "git init -q .\ngit config user.email e@x\ngit config user.name e\n"


@pytest.mark.parametrize(
    ("script", "refused"),
    [
        (GIT_SEED + "echo v1 > notes.txt\ngit add -A\ngit commit -qm seed\n", None),
        (GIT_SEED + "echo v1 > notes.txt\ngit add -A\ngit commit -qm seed\necho v2 >> notes.txt\n",
         r"1 commit\(s\) and uncommitted changes \(M notes.txt\)"),
        (GIT_SEED + "echo 1 > a\ngit add a\ngit commit -qm one\necho 2 > b\ngit add b\n"
         "git commit -qm two\n", r"2 commit\(s\)"),
    ],
)  # fmt: skip
def test_a_scaffold_git_state_one_base_commit_cannot_hold_is_refused(
    tmp_path: Path, plugin: Path, script: str, refused: str | None
) -> None:
    """A scaffold's uncommitted edit or history is part of the case (`git reset --hard` cases);
    wfbench starts from one base commit of the files, so only one clean commit is accepted."""
    (plugin / "evals" / "patch-to-notes" / "seed.sh").write_text("set -eu\n" + script)
    tasks = tmp_path / "t"
    if refused is None:
        import_plugin(plugin, tasks)
        repo = tasks / "relnotes.patch-to-notes" / "repo"
        assert (repo / "notes.txt").read_text() == "v1\n" and not (repo / ".git").exists()
        return
    with pytest.raises(
        InputError, match="case.yaml: field 'context.scaffold_script': .*" + refused
    ):
        import_plugin(plugin, tasks)


def test_eval_dir_flag_wins_over_the_manifest(tmp_path: Path, plugin: Path) -> None:
    """As `claude plugin eval --eval-dir`: the flag names the suite's folder; outside the plugin
    is refused naming the flag."""
    shutil.move(plugin / "evals", plugin / "checks")
    out = cli("import", "claude-plugin-eval", str(plugin), "--eval-dir", "checks",
              "--tasks", str(tmp_path / "t"))  # fmt: skip
    assert "relnotes.patch-to-notes" in out
    assert not (tmp_path / "t" / "_plugins" / "relnotes" / "checks").exists()  # stays hidden
    with pytest.raises(InputError, match="--eval-dir '../x': a folder inside the plugin"):
        import_plugin(plugin, tmp_path / "t2", "../x")
