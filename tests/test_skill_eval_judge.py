"""Judge graders (llm, baseline) against the mock Messages API: 2 of 3 votes, cost recorded apart
from the agent's, through the egress proxy; and validation fails closed without a pinned judge."""

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench_assets.cells.records import CellRecord
from bench_assets.config.models import JudgeConfig
from bench_assets.exports.plugin_eval import grader_lines, judge_agreement
from bench_assets.kernel.errors import InputError
from bench_assets.scorers.judge import MessagesJudge, decide, focus_text, parse_vote, vote_cost
from bench_assets.scorers.skill_eval import SkillEvalGrading
from bench_assets.scorers.skill_graders import grade_run, parse_transcript
from bench_assets.tasks.catalog import ValidationFailed, load_benchmark
from bench_assets.tasks.skill_eval_import import import_plugin
from tests.mock_anthropic import Failure, MockMessagesAPI, Reply, text

DATA = Path(__file__).parent / "data" / "skill_eval"
T = DATA / "transcripts"
KEY = "sk-ant-api03-judge-test-key-0123456789abcdefghijkl"
JUDGE = "claude-haiku-4-5-20251001"


def cfg(url: str) -> JudgeConfig:
    return JudgeConfig(
        model=JUDGE, input_usd_per_mtok=1.0, output_usd_per_mtok=5.0, api_base_url=url
    )


def votes(*answers: "Reply | Failure") -> Any:
    """A script answering the n-th request with answers[n]."""
    counter = itertools.count()
    return lambda body: answers[next(counter) % len(answers)]


def judged(**grader: object) -> SkillEvalGrading:
    return SkillEvalGrading.model_validate(
        {
            "source": "claude-plugin-eval",
            "case": "names-version",
            "graders": [
                {"name": "same-version", "type": "regex", "pattern": r"4\.2\.0"},
                {"name": "minor-bump", "type": "llm", "criteria": "PASS if 4.2.0 is named.",
                 **grader},
            ],
        }
    )  # fmt: skip


def graded(g: SkillEvalGrading, judge: MessagesJudge, name: str = "patch-with") -> Any:
    tree = json.loads((T / f"{name}.tree.json").read_text())
    return grade_run(
        g,
        (T / f"{name}.jsonl").read_bytes(),
        tree["created"],
        tree["files"].get,
        with_plugin=True,
        judge=judge,
    )


def test_two_of_three_votes_decide_and_the_cost_is_recorded_apart() -> None:
    g = judged()
    answers = (text("Names it.\nVERDICT: PASS"), text("Hmm.\nVERDICT: FAIL"), text("VERDICT: PASS"))
    with MockMessagesAPI(votes(*answers)) as api:
        run = graded(g, MessagesJudge(cfg(api.url), {"ANTHROPIC_API_KEY": KEY}, {}))
    outcome = {o.name: o for o in run.graders}["minor-bump"]
    assert outcome.passed is True and outcome.judge_votes == [True, False, True]
    assert outcome.judged and outcome.explanation.startswith(f"judge {JUDGE}: votes PASS, FAIL")
    # The mock reports 100 input and 20 output tokens per reply: 3 x (100x$1 + 20x$5)/1e6.
    assert outcome.judge_cost_usd == pytest.approx(3 * (100 * 1.0 + 20 * 5.0) / 1e6)
    assert run.judge_cost_usd == pytest.approx(0.0006) and run.judge_called
    assert run.score == 1.0
    # Three requests, each with the pinned model and the real key added by the egress proxy.
    assert len(api.seen) == 3
    assert {s.body["model"] for s in api.seen if s.body} == {JUDGE}
    assert {s.headers.get("x-api-key") for s in api.seen} == {KEY}
    rubric = api.seen[0].body["messages"][0]["content"]  # type: ignore[index]
    assert "PASS if 4.2.0 is named." in rubric and "Added the 4.2.0 section" in rubric


def test_two_fails_fail_and_unreadable_votes_are_undecided_never_a_fail() -> None:
    g = judged()
    with MockMessagesAPI(votes(text("VERDICT: FAIL"), text("VERDICT: PASS"))) as api:
        run = graded(g, MessagesJudge(cfg(api.url), {"ANTHROPIC_API_KEY": KEY}, {}))
    # Votes: FAIL, PASS, FAIL -> FAIL; score = regex 1 of 2 graders = 0.5.
    assert {o.name: o.passed for o in run.graders}["minor-bump"] is False and run.score == 0.5
    junk = (
        text("I think so"),
        Failure(529, "overloaded_error", "Overloaded"),
        text("VERDICT: PASS"),
    )
    with MockMessagesAPI(votes(*junk)) as api:
        run = graded(g, MessagesJudge(cfg(api.url), {"ANTHROPIC_API_KEY": KEY}, {}))
    outcome = {o.name: o for o in run.graders}["minor-bump"]
    assert outcome.passed is None and "not decided" in outcome.explanation
    assert run.score is None and not run.resolved  # unknown is not zero
    assert outcome.judge_cost_usd is None and run.judge_cost_usd is None  # a vote's cost unknown


def test_a_baseline_judge_reads_the_reference_transcript() -> None:
    ref = '{"type":"assistant","message":{"content":[{"type":"text","text":"REFERENCE-4.2.0"}]}}'
    g = SkillEvalGrading.model_validate(
        {
            "source": "claude-plugin-eval",
            "case": "c",
            "graders": [{"name": "b", "type": "baseline", "criteria": "As precise.",
                         "baseline_file": "reference.jsonl", "baseline_transcript": ref}],
        }
    )  # fmt: skip
    with MockMessagesAPI(votes(text("VERDICT: PASS"))) as api:
        run = graded(g, MessagesJudge(cfg(api.url), {"ANTHROPIC_API_KEY": KEY}, {}))
    assert run.score == 1.0
    prompt = api.seen[0].body["messages"][0]["content"]  # type: ignore[index]
    assert "REFERENCE-4.2.0" in prompt and "As precise." in prompt


def test_a_crashed_session_is_not_judged_and_costs_nothing() -> None:
    with MockMessagesAPI(votes(text("VERDICT: PASS"))) as api:
        run = graded(judged(), MessagesJudge(cfg(api.url), {"ANTHROPIC_API_KEY": KEY}, {}), "crash")
    assert api.seen == [] and run.score is None and not run.judge_called


def test_pure_parts() -> None:
    assert parse_vote("a\nVERDICT: PASS\n") is True and parse_vote("VERDICT: FAIL") is False
    assert parse_vote("PASS") is None and parse_vote("VERDICT: PASS\nVERDICT: FAIL") is False
    assert decide([True, None, True]) is True and decide([True, False, None]) is None
    c = cfg("http://127.0.0.1:9")
    assert vote_cost({"input_tokens": 1000, "output_tokens": 100}, c) == pytest.approx(0.0015)
    assert vote_cost({"output_tokens": 100}, c) is None
    t = parse_transcript((T / "patch-with.jsonl").read_bytes())
    assert len(t.lines) == 15  # 8 assistant + 6 user events + the result event
    shown = focus_text("trace", t, [], lambda p: None).splitlines()
    assert len(shown) == 15  # <= 24 lines: all of them
    long = parse_transcript(b"".join([(T / "patch-with.jsonl").read_bytes()] * 2))
    assert len(focus_text("trace", long, [], lambda p: None).splitlines()) == 12 + 1 + 12


def test_judge_cost_counts_toward_the_spend_cap_and_validation_needs_a_pinned_judge(
    tmp_path: Path,
) -> None:
    with MockMessagesAPI(votes(text("VERDICT: PASS"))) as api:
        run = graded(judged(), MessagesJudge(cfg(api.url), {"ANTHROPIC_API_KEY": KEY}, {}))
    base = {"record_id": "r", "task": "t", "cost_usd": 0.01, "skill_eval": run}
    spend = CellRecord.model_construct(**base).spend_usd  # type: ignore[arg-type]
    assert spend == pytest.approx(0.01 + 0.0006)

    tasks = tmp_path / "tasks"
    import_plugin(DATA / "plugins" / "relnotes", tasks)
    bench: dict[str, Any] = {
        "model": "claude-sonnet-4-5-20250929",
        "runs": 1,
        "arms": {"a": {"agent": {"adapter": "command", "argv": ["true"]}, "skills": "none"}},
    }
    (tasks / "bench.yaml").write_text(yaml.safe_dump(bench))
    with pytest.raises(ValidationFailed, match="relnotes.names-version.*pin their judge"):
        load_benchmark(tasks)
    bench["judge"] = {"model": JUDGE, "input_usd_per_mtok": 1.0, "output_usd_per_mtok": 5.0}
    (tasks / "bench.yaml").write_text(yaml.safe_dump(bench))
    assert load_benchmark(tasks).config.judge is not None
    bench["judge"]["model"] = "haiku"
    (tasks / "bench.yaml").write_text(yaml.safe_dump(bench))
    with pytest.raises(ValidationFailed, match="judge.model: .*name a dated model id"):
        load_benchmark(tasks)


def test_agreement_with_human_labels_is_measured_per_session(tmp_path: Path) -> None:
    session = json.loads((T / "patch-with.jsonl").read_text().splitlines()[0])["session_id"]
    plugin = tmp_path / "relnotes"
    shutil.copytree(DATA / "plugins" / "relnotes", plugin)
    labels = [
        {"grader": "minor-bump", "session_id": session, "passed": False},
        {"grader": "minor-bump", "session_id": "another-session", "passed": True},
    ]
    (plugin / "evals" / "judged" / "names-version" / "human-labels.yaml").write_text(
        yaml.safe_dump(labels)
    )
    tasks = tmp_path / "tasks"
    import_plugin(plugin, tasks)
    path = tasks / "relnotes.names-version" / "oracle" / "skill_eval.json"
    g = SkillEvalGrading.model_validate_json(path.read_text())
    assert [lb.session_id for lb in g.labels] == [session, "another-session"]
    with MockMessagesAPI(votes(text("VERDICT: PASS"))) as api:
        run = graded(g, MessagesJudge(cfg(api.url), {"ANTHROPIC_API_KEY": KEY}, {}))
    outcome = run.graders[0]
    assert (outcome.passed, outcome.human_label) == (True, False)
    rec = CellRecord.model_construct(task="relnotes.names-version", skill_eval=run)
    assert judge_agreement([rec]) == {"relnotes.names-version/minor-bump": (0, 1)}
    assert "[human label: FAIL (disagrees)]" in "\n".join(grader_lines(rec))
    # A label for a deterministic grader is refused: agreement is about judges.
    (plugin / "evals" / "judged" / "names-version" / "human-labels.yaml").write_text(
        yaml.safe_dump([{"grader": "nope", "session_id": session, "passed": True}])
    )
    with pytest.raises(InputError, match="human-labels.yaml: field"):
        import_plugin(plugin, tmp_path / "t2")
