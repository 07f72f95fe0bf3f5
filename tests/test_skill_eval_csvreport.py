"""The second plugin suite, ``csvreport``, written from the reference alone (issue 26).

It takes the layout choices ``relnotes`` does not: ``plugin.json`` at the root naming its eval dir
(``experimental.evals: quality/evals``), cases nested in groups, a case wholly in ``case.yaml``,
one wholly in ``prompt.md``, both files with prompt.md overriding (``name``, ``runs``), graders
inline and as files (a regex pattern in the body, a ``tool_used`` with a human note), every
grader kind and option, and ``plugins: ["../../../.."]``. Each case was run in three arms through
the real CLI (the pin) against the mock API (``tests/data/skill_eval/record_csvreport.py``); the
scores below are computed by hand from the grader files and what each recorded run did.
"""

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.scorers.skill_eval import SkillEvalGrading
from bench_assets.scorers.skill_graders import JudgeVerdict, grade_run, parse_transcript
from bench_assets.tasks.catalog import load_benchmark
from tests.data.skill_eval.demo import CASE_NAMES
from tests.data.skill_eval.record_csvreport import ARMS, all_runs

DATA = Path(__file__).parent / "data" / "skill_eval"
PLUGIN = DATA / "plugins" / "csvreport"
T = DATA / "transcripts" / "csvreport"

# (case, arm) -> score, by hand. Weights: sales-total 0.5 + 1 + 1 + 1 + 2 scored (routed is a
# Skill grader: shown, not scored); the without arm keeps no-scratch-files (0.5) and
# report-created (1) of 5.5. expense-total without: rent-line + only-report-created = 2 of 5.
# q3-total without: no-edit-of-data + report-created = 2 of 4 (routed is arm: with-only).
# csv-dialect with_plugin: the skill fired, so stays-quiet (arm: both) and the trace regex fail,
# mentions-delimiter passes: 1 of 3. one-line-summary without: only nothing-written (1 of 4: the
# llm rubric weighs 2, the baseline 1, both judged FAIL).
EXPECTED = {
    ("sales-total", "with_plugin"): 1.0,
    ("sales-total", "with_candidate"): 1.0,
    ("sales-total", "without_plugin"): round(1.5 / 5.5, 6),
    ("expense-total", "with_plugin"): 1.0,
    ("expense-total", "with_candidate"): 1.0,
    ("expense-total", "without_plugin"): 0.4,
    ("q3-total", "with_plugin"): 1.0,
    ("q3-total", "with_candidate"): 1.0,
    ("q3-total", "without_plugin"): 0.5,
    ("inventory-count", "with_plugin"): 1.0,
    ("inventory-count", "with_candidate"): 1.0,
    ("inventory-count", "without_plugin"): 0.0,
    ("git-stash", "with_plugin"): 1.0,
    ("git-stash", "with_candidate"): 1.0,
    ("git-stash", "without_plugin"): 1.0,
    ("csv-dialect", "with_plugin"): round(1 / 3, 6),
    ("csv-dialect", "with_candidate"): 1.0,
    ("csv-dialect", "without_plugin"): 1.0,
    ("unit-convert", "with_plugin"): 1.0,
    ("unit-convert", "with_candidate"): 1.0,
    ("unit-convert", "without_plugin"): 1.0,
    ("one-line-summary", "with_plugin"): 1.0,
    ("one-line-summary", "with_candidate"): 1.0,
    ("one-line-summary", "without_plugin"): 0.25,
}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("csvreport") / "tasks"
    res = CliRunner().invoke(
        main, ["import", "claude-plugin-eval", str(PLUGIN), "--tasks", str(root)]
    )
    assert res.exit_code == 0 and "10 created" in res.stdout, res.output
    return root


def grading(tasks: Path, case: str) -> SkillEvalGrading:
    return SkillEvalGrading.model_validate_json(
        (tasks / f"csvreport.{case}" / "oracle" / "skill_eval.json").read_text()
    )


def fake_judge(g: object, t: object, created: object, read: object) -> JudgeVerdict:
    """Stands in for the judge (tested in test_skill_eval_judge): PASS when the run names 1,250."""
    ok = "1,250" in t.last_message  # type: ignore[attr-defined]
    return ok, "fake judge", [ok] * 3, 0.0


def test_the_suite_imports_and_validates_with_every_layout_choice(tasks: Path) -> None:
    res = CliRunner().invoke(main, ["validate", str(tasks)])
    assert res.exit_code == 0 and "ok — 8 task(s)" in res.stdout, res.output
    bench = load_benchmark(tasks)
    # prompt.md's name and runs override case.yaml's; the eval dir came from plugin.json.
    q3 = bench.task("csvreport.q3-total").spec
    assert q3.skill_eval is not None and q3.skill_eval.case == "q3-total"
    sales = bench.task("csvreport.sales-total").spec.skill_eval
    assert sales is not None and sales.runs == 1  # case.yaml said 3
    assert sales.env == {"EVAL_CURRENCY": "EUR"}
    assert sales.append_system_prompt == "Answer in British English."
    assert bench.task("csvreport.sales-total").spec.timeouts.session_s == 180
    quiet = bench.task("csvreport.unit-convert").spec.skill_eval
    assert quiet is not None and quiet.model == "claude-sonnet-4-5-20250929"  # bench.yaml's pin
    # case.yaml's graders first, then graders/*.md in name order.
    assert [g.name for g in grading(tasks, "q3-total").graders] == [
        "total-in-report", "no-edit-of-data", "report-created", "routed",
    ]  # fmt: skip
    routed = grading(tasks, "sales-total").graders[3]
    assert routed.name == "routed" and "Shown, not scored" in (routed.note or "")  # type: ignore[union-attr]
    total = grading(tasks, "sales-total").graders[5]
    assert total.pattern == "^Total: 1,250$"  # type: ignore[union-attr]  # the pattern in the body
    assert (tasks / "csvreport.q3-total" / "repo" / "data" / "2026" / "q3.csv").is_file()
    assert (tasks / "skills" / "summarize-csv" / "SKILL.md").is_file()
    assert not (tasks / "_plugins" / "csvreport" / "quality").exists()  # evals stay hidden


def test_every_recorded_run_scores_as_computed_by_hand(tasks: Path) -> None:
    assert len(all_runs()) == len(EXPECTED) == 8 * len(ARMS)
    got = {}
    for name in all_runs():
        short, arm = name.split("--")
        case = CASE_NAMES.get(short, short)
        tree = json.loads((T / f"{name}.tree.json").read_text())
        assert tree["session_ok"] and tree["cli_version"] == "2.1.332"
        r = grade_run(
            grading(tasks, case),
            (T / f"{name}.jsonl").read_bytes(),
            tree["created"],
            tree["files"].get,
            with_plugin=arm != "without_plugin",
            judge=fake_judge,
        )
        assert r.session_error is None
        got[(case, arm)] = r.score
    assert got == EXPECTED


def test_explanations_and_exclusions_on_recorded_runs(tasks: Path) -> None:
    def run(case: str, short: str, arm: str) -> dict[str, tuple[bool | None, str, bool]]:
        tree = json.loads((T / f"{short}--{arm}.tree.json").read_text())
        r = grade_run(
            grading(tasks, case),
            (T / f"{short}--{arm}.jsonl").read_bytes(),
            tree["created"],
            tree["files"].get,
            with_plugin=arm != "without_plugin",
            judge=fake_judge,
        )
        return {o.name: (o.passed, o.explanation, o.scored) for o in r.graders}

    inc = run("csv-dialect", "csv-dialect", "with_plugin")
    assert inc["stays-quiet"] == (False, "Skill called 1x (expected 0..0)", True)  # arm: both
    assert inc["no-skill-in-trace"][0] is False
    q3 = run("q3-total", "nested-quarter", "with_plugin")
    assert q3["routed"] == (True, "Skill called 1x (expected 1..∞)", False)  # with-only: shown
    assert "routed" not in run("q3-total", "nested-quarter", "without_plugin")  # omitted
    exp = run("expense-total", "expense-total", "with_candidate")
    assert exp["reads-before-writing"][0] and exp["rent-line"][1].startswith("1 match")
    # The incumbent globs first: the Read is call 3 (Skill, Glob, Read), the candidate's call 2.
    assert "call 3" in run("sales-total", "sales-total", "with_plugin")["reads-data-first"][1]
    assert "call 2" in run("sales-total", "sales-total", "with_candidate")["reads-data-first"][1]


def test_the_recorded_costs_are_the_clis_own(tasks: Path) -> None:
    """The demo's cost evidence is each run's result event, as the CLI estimated it."""
    cost = {}
    for name in all_runs():
        t = parse_transcript((T / f"{name}.jsonl").read_bytes())
        assert t.result is not None and t.result["is_error"] is False
        cost[name] = t.result["total_cost_usd"]
    for short in ("sales-total", "expense-total", "nested-quarter", "inventory-count"):
        assert cost[f"{short}--with_candidate"] < cost[f"{short}--with_plugin"]  # one turn fewer
    assert cost["csv-dialect--with_candidate"] < cost["csv-dialect--with_plugin"] / 2


def test_bom_crlf_and_dot_slash_paths_read_as_written(tmp_path: Path) -> None:
    """Files saved by other editors: a UTF-8 BOM and CRLF line ends must not turn a frontmatter
    into prompt text, and ``./report.md`` names the workspace's report.md."""
    import shutil

    from bench_assets.tasks.skill_eval_import import import_plugin

    plugin = tmp_path / "csvreport"
    shutil.copytree(PLUGIN, plugin)
    case = plugin / "quality" / "evals" / "positive" / "inventory-count"
    pm = case / "prompt.md"
    pm.write_bytes(b"\xef\xbb\xbf" + pm.read_text().replace("\n", "\r\n").encode())
    g = case / "graders" / "count-in-report.md"
    g.write_text(g.read_text().replace("path: report.md", "path: ./report.md"))
    tasks = tmp_path / "tasks"
    import_plugin(plugin, tasks)
    spec = load_benchmark_spec(tasks, "csvreport.inventory-count")
    assert spec["prompt"].startswith("How many items") and spec["skill_eval"]["runs"] == 1
    name = "inventory-count--with_candidate"
    tree = json.loads((T / f"{name}.tree.json").read_text())
    r = grade_run(
        grading(tasks, "inventory-count"),
        (T / f"{name}.jsonl").read_bytes(),
        tree["created"],
        tree["files"].get,
        with_plugin=True,
    )
    assert r.score == 1.0


def load_benchmark_spec(tasks: Path, task: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((tasks / task / "task.yaml").read_text())  # type: ignore[no-any-return]


def test_the_demo_suite_decides_from_the_recorded_runs(tasks: Path) -> None:
    """What ``make demo-skill-eval`` decides, in one gate call (no Dagster): the recorded runs
    graded by their cases, each cell's metric the CLI's own cost, under the demo's policy. The
    candidate resolves one task more (csv-dialect: the incumbent's skill fires on it) and is
    about a quarter cheaper (no exploratory glob). Under gate v3's defaults (cost error 0.025)
    eight tasks do not show the saving: the one-sided 97.5 % bound on it is just below 0, so the
    single look answers keep_incumbent, non-inferior on resolve, the improvement not shown."""
    from datetime import UTC, datetime

    from bench_assets.config.models import PolicyConfig
    from bench_assets.gate import decide
    from bench_assets.gate.models import GateInput, RunOutcome

    now = datetime.now(UTC)
    outcomes = []
    for name in all_runs():
        short, arm = name.split("--")
        if arm == "without_plugin":
            continue
        case = CASE_NAMES.get(short, short)
        tree = json.loads((T / f"{name}.tree.json").read_text())
        data = (T / f"{name}.jsonl").read_bytes()
        r = grade_run(
            grading(tasks, case),
            data,
            tree["created"],
            tree["files"].get,
            with_plugin=True,
            judge=fake_judge,
        )
        result = parse_transcript(data).result
        assert result is not None
        outcomes.append(
            RunOutcome(
                task=f"csvreport.{case}", arm=arm, run=0, resolved=r.resolved, error_kind=None,
                metric=result["total_cost_usd"], reused=False, generation="g0001",
                record_id=name, data_version=name, recorded_at=now,
            )
        )  # fmt: skip
    decision = decide(
        GateInput(
            policy=PolicyConfig(min_runs=1, max_looks=1),
            model="claude-sonnet-4-5-20250929",
            incumbent_arm="with_plugin",
            candidate_arm="with_candidate",
            tasks=sorted({o.task for o in outcomes}),
            outcomes=outcomes,
            aborted=False,
            now=now,
            max_age_days=90,
        )
    )
    assert decision.decision == "keep_incumbent", decision.reasons
    cost = next(r for r in decision.reasons if r.startswith("cost_usd:"))
    assert "saves 25.0% over 8 tasks" in cost and "improvement not shown" in cost, cost
    resolve = next(r for r in decision.reasons if r.startswith("resolve rate:"))
    assert "+0.125 over 8 tasks" in resolve and resolve.endswith("non-inferior."), resolve
