"""Review cells: a read-only worktree, the artifact outside it, scored against hidden labels."""

import json
from pathlib import Path

import pytest

from bench_assets.config.models import ArmSpec
from bench_assets.kernel.errorkinds import ErrorKind, is_excluded, is_systemic
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import Benchmark, load_benchmark
from tests.conftest import add_task, make_bench
from tests.test_cells import cell
from tests.test_claude_code_real import claude_cli  # noqa: F401

LABELS = {
    "schema_version": 1,
    "findings": [
        {
            "id": "mul",
            "severity": "high",
            "path": "calc/__init__.py",
            "line_start": 5,
            "line_end": 5,
            "category": "correctness",
        }
    ],
}

FINDING = {
    "id": "f1",
    "severity": "high",
    "path": "calc/__init__.py",
    "line": 5,
    "end_line": 5,
    "category": "correctness",
    "scenario": "add(2, 3) returns 6",
    "evidence": "return a * b",
    "recommendation": "return a + b",
    "blocking": True,
}
PERFECT = {"schema_version": 1, "verdict": "request_changes", "findings": [FINDING]}


def review_arm(code: str) -> ArmSpec:
    return ArmSpec.model_validate(
        {
            "agent": {"adapter": "command", "argv": ["python", "-c", code]},
            "skills": "none",
            "kind": "review",
        }
    )


def writer(doc: object, *, before: str = "") -> str:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return before + f"\nopen('/review-output/review-output.json', 'w').write({text!r})\n"


@pytest.fixture
def bench(tmp_path: Path) -> Benchmark:
    root = make_bench(tmp_path / "tasks")
    d = add_task(
        root,
        "rev",
        **{
            "class": "review-defect",
            "setup": "sed -i 's/return a - b/return a * b/' calc/__init__.py",
            "verify": "test -s /review-output/review-output.json",
            "oracle": {"files": ["labels.json"]},
            "review": {"labels": "labels.json"},
        },
    )
    (d / "oracle" / "test_oracle_alpha.py").unlink()
    (d / "oracle" / "labels.json").write_text(json.dumps(LABELS))
    return load_benchmark(root)


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


def test_a_perfect_review_resolves_and_keeps_its_artifact(
    bench: Benchmark, store: ArtifactStore
) -> None:
    check_prompt = (
        "import os\nprompt = open(os.environ['WFBENCH_PROMPT_FILE']).read()\n"
        "assert '/review-output/review-output.json' in prompt, prompt\n"
        "assert prompt.startswith('Fix add()'), prompt\n"
    )
    rec = cell(bench, store, review_arm(writer(PERFECT, before=check_prompt)), task="rev")
    assert rec.error_kind is None and rec.resolved, rec.error_detail
    assert rec.review is not None and rec.review.weighted_f1 == 1.0
    assert rec.review_evidence_valid is True
    assert rec.review_artifact is not None
    assert json.loads(Path(rec.review_artifact.path).read_text()) == PERFECT
    assert rec.patch is not None and rec.churn_files == 0


def test_an_imperfect_review_is_a_scored_valid_negative(
    bench: Benchmark, store: ArtifactStore
) -> None:
    soft = {**PERFECT, "verdict": "comment", "findings": [{**FINDING, "blocking": False}]}
    rec = cell(bench, store, review_arm(writer(soft)), task="rev")
    assert rec.error_kind is ErrorKind.ORACLE_FAILED and not rec.resolved
    assert rec.review is not None and rec.review.verdict_correct is False
    assert rec.review.true_positives == 1 and "verdict comment (wrong)" in rec.error_detail


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("pass", "never written"),
        (writer("not json"), "not valid JSON"),
        (writer({**PERFECT, "extra": 1}), "exactly the keys"),
        (writer(""), "is empty"),
        (
            "import os\nos.symlink('/workspace/calc/__init__.py', "
            "'/review-output/review-output.json')",
            "symlink",
        ),
    ],
)
def test_an_unusable_artifact_is_review_evidence_invalid(
    bench: Benchmark, store: ArtifactStore, code: str, message: str
) -> None:
    rec = cell(bench, store, review_arm(code), task="rev")
    assert rec.error_kind is ErrorKind.REVIEW_EVIDENCE_INVALID
    assert is_excluded(rec.error_kind) and is_systemic(rec.error_kind)
    assert message in rec.error_detail
    assert rec.review is None and rec.review_evidence_valid is False


def test_the_worktree_is_read_only_for_a_review_session(
    bench: Benchmark, store: ArtifactStore
) -> None:
    # The attack: a reviewer "fixes" the code (or plants files) instead of only reviewing it.
    attempt = (
        "outcome = 'wrote'\n"
        "try:\n"
        "    open('/workspace/calc/__init__.py', 'w').write('pwned = True\\n')\n"
        "except OSError:\n"
        "    outcome = 'denied'\n"
        "try:\n"
        "    open('/workspace/planted.py', 'w').write('x')\n"
        "except OSError:\n"
        "    outcome += '+denied'\n"
    )
    doc = {**PERFECT, "findings": [{**FINDING, "scenario": "OUTCOME"}]}
    code = writer(doc, before=attempt).replace("'OUTCOME'", "' + outcome + '")
    code = attempt + (
        "import json\ndoc = " + repr(doc) + "\ndoc['findings'][0]['scenario'] = outcome\n"
        "open('/review-output/review-output.json', 'w').write(json.dumps(doc))\n"
    )
    rec = cell(bench, store, review_arm(code), task="rev")
    assert rec.review_artifact is not None
    stored = json.loads(Path(rec.review_artifact.path).read_text())
    assert stored["findings"][0]["scenario"] == "denied+denied"
    assert rec.patch is not None and Path(rec.patch.path).read_text() == ""
    assert rec.resolved


def test_a_review_arm_never_runs_on_an_implementation_task(
    bench: Benchmark, store: ArtifactStore
) -> None:
    rec = cell(bench, store, review_arm(writer(PERFECT)), task="alpha")
    assert rec.error_kind is ErrorKind.INFRA_ERROR and "review arm" in rec.error_detail


def test_applicability_and_pairing_rules(bench: Benchmark) -> None:
    review = review_arm("pass")
    impl = ArmSpec.model_validate(
        {"agent": {"adapter": "replay", "predictions": "r.jsonl"}, "skills": "none"}
    )
    assert review.applies_to(bench.task("rev").spec)
    assert not review.applies_to(bench.task("alpha").spec)
    assert impl.applies_to(bench.task("alpha").spec)
    assert not impl.applies_to(bench.task("rev").spec)
    with pytest.raises(ValueError, match="one session"):
        ArmSpec.model_validate(
            {
                "agent": {"adapter": "replay", "predictions": "r.jsonl"},
                "skills": "none",
                "kind": "review",
                "phases": [{"name": "a"}, {"name": "b"}],
            }
        )


def test_labels_that_do_not_parse_fail_validation_before_any_cell(tmp_path: Path) -> None:
    from bench_assets.kernel.errors import ValidationFailed

    root = make_bench(tmp_path / "tasks")
    d = add_task(
        root,
        "rev",
        oracle={"files": ["labels.json"]},
        review={"labels": "labels.json"},
    )
    (d / "oracle" / "labels.json").write_text('{"schema_version": 1, "findings": [{"id": 1}]}')
    with pytest.raises(ValidationFailed, match=r"review\.labels.*exactly the keys"):
        load_benchmark(root)


@pytest.mark.slow
def test_real_cli_writes_its_review_outside_the_read_only_worktree(
    tmp_path: Path,
    claude_cli: Path,  # noqa: F811
) -> None:
    """The real CLI in a review session: the review lands in /review-output; edits are refused."""
    from bench_assets.agents.base import SessionContext
    from bench_assets.agents.claude_code import ClaudeCodeAdapter
    from bench_assets.cells.review_cells import grade_review, new_output_dir
    from bench_assets.config.models import ClaudeCodeAgent
    from tests.mock_anthropic import MockMessagesAPI, steps, tool_use
    from tests.test_claude_code_real import KEY, MODEL, _workdir

    work = _workdir(tmp_path)
    out = new_output_dir(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    read = tool_use("toolu_r", "Read", {"file_path": "/workspace/calc/__init__.py"})
    tamper = tool_use(
        "toolu_t", "Write", {"file_path": "/workspace/calc/__init__.py", "content": "pwned\n"}
    )
    review = dict(PERFECT, findings=[dict(FINDING, path="calc/__init__.py", line=2, end_line=2)])
    write = tool_use(
        "toolu_w",
        "Write",
        {"file_path": "/review-output/review-output.json", "content": json.dumps(review)},
    )
    agent = ClaudeCodeAgent(
        adapter="claude-code", executable=str(claude_cli), env=["ANTHROPIC_API_KEY"]
    )
    with MockMessagesAPI(steps(read, tamper, write)) as api:
        arm = agent.model_copy(update={"api_base_url": api.url})
        ctx = SessionContext(
            task_id="rev",
            arm="review",
            run=0,
            prompt="Review the change.",
            model=MODEL,
            effort=None,
            workdir=work,
            scratch=scratch,
            timeout_s=180.0,
            secrets_env={"ANTHROPIC_API_KEY": KEY},
            review_output=out,
        )
        res = ClaudeCodeAdapter(arm).run(ctx)
    assert res.ok, res.error_detail
    assert (work / "calc" / "__init__.py").read_text() == "def add(a, b):\n    return a - b\n"
    labels = json.dumps(
        dict(LABELS, findings=[dict(LABELS["findings"][0], line_start=2, line_end=2)])
    ).encode()
    graded = grade_review(out, labels)
    assert graded.valid and graded.score is not None and graded.score.oracle_passed


def test_aggregates_plan_only_the_arms_that_apply_to_a_task(tmp_path: Path) -> None:
    from bench_assets.defs.decision import applicable_cells

    root = make_bench(tmp_path / "tasks")
    d = add_task(root, "rev", oracle={"files": ["labels.json"]}, review={"labels": "labels.json"})
    (d / "oracle" / "labels.json").write_text(json.dumps(LABELS))
    cfg = (root / "bench.yaml").read_text()
    (root / "bench.yaml").write_text(
        cfg
        + "  review:\n    agent: {adapter: replay, predictions: replays/w.jsonl}\n"
        + "    skills: incumbent\n    kind: review\n"
    )
    b = load_benchmark(root)
    planned = [("comparator_cells", f"{a}.r0") for a in ("baseline", "workflow", "review")]
    assert [c for _, c in applicable_cells(b, "rev", planned)] == ["review.r0"]
    assert [c for _, c in applicable_cells(b, "alpha", planned)] == ["baseline.r0", "workflow.r0"]
