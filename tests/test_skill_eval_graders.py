"""Skill-eval transcript graders on transcripts recorded from the REAL Claude Code CLI (the pin).

The transcripts in ``tests/data/skill_eval/transcripts/`` were printed by Claude Code 2.1.332
(``claude -p --output-format stream-json --verbose``, wfbench's own sandboxed adapter) against the
mock Messages API, by ``tests/data/skill_eval/record_transcripts.py``; each ``.tree.json`` holds
what the session left in its worktree. Every expected score below is computed by hand from the
grader definitions in ``tests/data/skill_eval/plugins/relnotes/evals/``.
"""

import json
import os
from pathlib import Path

import pytest

from bench_assets.cells.skill_eval_cell import created_paths, skill_error_kind, tree_reader
from bench_assets.config.models import CLAUDE_CODE_VERSION
from bench_assets.scorers.skill_eval import SkillEvalGrading
from bench_assets.scorers.skill_graders import (
    RunGrade,
    glob_regex,
    grade_run,
    js_json,
    js_regex,
    parse_transcript,
    session_problem,
)

DATA = Path(__file__).parent / "data" / "skill_eval"
T = DATA / "transcripts"


def grading(**doc: object) -> SkillEvalGrading:
    return SkillEvalGrading.model_validate({"source": "claude-plugin-eval", "case": "c", **doc})


# The relnotes cases' graders, as the importer writes them (test_skill_eval_import checks that).
PATCH_TO_NOTES = grading(
    case="patch-to-notes",
    graders=[
        {"name": "names-version", "type": "regex", "pattern": r"4\.2\.0"},
        {"name": "no-stray-backups", "type": "file_exists", "path": "**/*.orig", "exists": False},
        {
            "name": "reads-before-writing",
            "type": "tool_order",
            "before": "Read",
            "after": {"tool": "Write", "input_match": "RELEASE_NOTES"},
        },
        {
            "name": "routed",
            "type": "tool_used",
            "tool": "Skill",
            "input_match": r'"skill"\s*:\s*"(?:[\w-]+:)?draft-release-notes"',
        },
        {
            "name": "section-written",
            "type": "regex",
            "target": {"source": "file", "path": "RELEASE_NOTES.md"},
            "pattern": r"^## 4\.2\.0\b",
            "flags": "m",
            "weight": 2,
        },
    ],
)
UNRELATED = grading(
    case="unrelated-question",
    graders=[
        {
            "name": "skill-stays-quiet",
            "type": "tool_used",
            "tool": "Skill",
            "input_match": "draft-release-notes",
            "min": 0,
            "max": 0,
            "arm": "both",
        },
        {"name": "short-answer", "type": "regex", "pattern": "teapot", "flags": "i"},
        {
            "name": "no-files",
            "type": "regex",
            "target": "files",
            "pattern": ".",
            "match": "not_contains",
        },
        {
            "name": "two-teapots-in-trace",
            "type": "regex",
            "target": "trace",
            "pattern": "teapot",
            "flags": "i",
            "match": "count:2",
        },
        {"name": "nothing-written", "type": "file_exists", "path": "*", "exists": False},
    ],
)


def run(g: SkillEvalGrading, name: str, *, with_plugin: bool = True) -> RunGrade:
    tree = json.loads((T / f"{name}.tree.json").read_text())
    files: dict[str, str] = tree["files"]
    return grade_run(
        g,
        (T / f"{name}.jsonl").read_bytes(),
        tree["created"],
        files.get,
        with_plugin=with_plugin,
    )


def outcomes(r: RunGrade) -> dict[str, tuple[bool | None, bool]]:
    return {o.name: (o.passed, o.scored) for o in r.graders}


def test_the_fixtures_were_printed_by_the_pinned_cli() -> None:
    for path in sorted(T.glob("*.jsonl")):
        init = json.loads(path.read_text().splitlines()[0])
        assert init["type"] == "system" and init["subtype"] == "init"
        assert init["claude_code_version"] == CLAUDE_CODE_VERSION, path.name


def test_with_plugin_run_passes_every_grader_and_the_skill_grader_is_shown_not_scored() -> None:
    r = run(PATCH_TO_NOTES, "patch-with")
    # Scored: names-version 1 + no-stray-backups 1 + reads-before-writing 1 + section-written 2;
    # routed (tool_used Skill) is excluded in a two-arm run. 5/5 = 1.0.
    assert outcomes(r) == {
        "names-version": (True, True),
        "no-stray-backups": (True, True),
        "reads-before-writing": (True, True),
        "routed": (True, False),
        "section-written": (True, True),
    }
    assert r.score == 1.0 and r.resolved and r.session_error is None
    why = {o.name: o.explanation for o in r.graders}
    assert why["routed"] == "Skill called 1x (expected 1..∞)"
    assert why["reads-before-writing"] == "first Read (call 2) precedes first Write (call 4)"


def test_without_plugin_run_fails_each_deterministic_kind_and_omits_the_skill_grader() -> None:
    r = run(PATCH_TO_NOTES, "patch-without", with_plugin=False)
    # The run wrote RELEASE_NOTES.md.orig first (matches the Write input_match and the *.orig
    # glob), then 5.0.0: every scored grader fails. 0 / (1+1+1+2) = 0.
    assert outcomes(r) == {
        "names-version": (False, True),
        "no-stray-backups": (False, True),
        "reads-before-writing": (False, True),
        "section-written": (False, True),
    }
    assert r.score == 0.0 and not r.resolved
    why = {o.name: o.explanation for o in r.graders}
    assert why["no-stray-backups"] == "created RELEASE_NOTES.md.orig, which matches **/*.orig"
    assert why["reads-before-writing"] == "first Read (call 2) follows first Write (call 1)"


def test_weights_give_a_partial_score() -> None:
    g = grading(
        graders=[
            {"name": "read-once", "type": "tool_used", "tool": "Read", "min": 1, "max": 1},
            {"name": "trace-5", "type": "regex", "target": "trace", "pattern": r"5\.0\.0"},
            {
                "name": "section",
                "type": "regex",
                "target": {"source": "file", "path": "RELEASE_NOTES.md"},
                "pattern": r"^## 4\.2\.0",
                "flags": "m",
                "weight": 2,
            },
        ]
    )
    r = run(g, "patch-without")
    # read-once passes (1 Read), trace-5 passes, section (weight 2) fails: 2 / 4.
    assert r.score == 0.5 and not r.resolved
    # The case threshold decides: at 0.5 the same run resolves.
    half = grading(threshold=0.5, graders=g.model_dump()["graders"])
    assert run(half, "patch-without").resolved


def test_negative_control_regex_targets_and_arm_both() -> None:
    quiet = run(UNRELATED, "teapot-quiet")
    assert quiet.score == 1.0 and all(s for _, s in outcomes(quiet).values())
    fired = run(UNRELATED, "teapot-skill")
    # arm: both keeps the "never called" Skill grader scored: it fails, the other four pass.
    assert outcomes(fired)["skill-stays-quiet"] == (False, True)
    assert fired.score == 0.8 and not fired.resolved
    counts = {o.name: o.explanation for o in fired.graders}
    # The reply is in the assistant event and again in the result event: both are the trace.
    assert counts["two-teapots-in-trace"] == "2 match(es) of teapot in trace (expected 2)"
    # count:N is exact: three required, two found.
    two = grading(
        graders=[{"name": "n", "type": "regex", "target": "trace", "pattern": "teapot",
                  "flags": "i", "match": "count:3"}]
    )  # fmt: skip
    assert run(two, "teapot-skill").score == 0.0


def test_ablation_none_scores_the_skill_grader_and_all_excluded_are_scored() -> None:
    doc = PATCH_TO_NOTES.model_dump()
    none = SkillEvalGrading.model_validate({**doc, "ablation": "none"})
    r = run(none, "patch-without", with_plugin=False)
    assert outcomes(r)["routed"] == (False, True) and r.score == 0.0
    only_skill = grading(graders=[g for g in doc["graders"] if g["name"] == "routed"])
    # Every grader excluded: they are scored normally, in both arms.
    assert run(only_skill, "patch-with").score == 1.0
    assert run(only_skill, "patch-without", with_plugin=False).score == 0.0


def test_a_crashed_session_is_a_session_error_never_a_did_not_trigger() -> None:
    r = run(PATCH_TO_NOTES, "crash")
    assert r.score is None and not r.resolved
    assert r.session_error is not None and "is_error=True" in r.session_error
    # The Skill grader's evidence is still shown, but nothing is scored from it.
    assert outcomes(r)["routed"] == (False, False)
    tree = json.loads((T / "crash.tree.json").read_text())
    assert tree["session_error_kind"] == "session-error"


def test_cell_error_kinds_follow_the_reference() -> None:
    from bench_assets.cells.grading import Grade
    from bench_assets.kernel.errorkinds import ErrorKind

    ok, fired, crash = (
        run(PATCH_TO_NOTES, "patch-with"),
        run(UNRELATED, "teapot-skill"),
        run(PATCH_TO_NOTES, "crash"),
    )
    g = Grade()
    assert skill_error_kind(True, None, g, ok) is None
    assert skill_error_kind(True, None, g, fired) is ErrorKind.ORACLE_FAILED
    assert skill_error_kind(True, None, g, crash) is ErrorKind.SESSION_ERROR
    # A turn limit is graded on what the run produced: a perfect run still resolves.
    assert skill_error_kind(False, ErrorKind.TURN_LIMIT, g, ok) is None
    assert skill_error_kind(False, ErrorKind.TURN_LIMIT, g, fired) is ErrorKind.TURN_LIMIT
    undecided = grading(graders=[{"name": "j", "type": "llm", "criteria": "x"}])
    assert skill_error_kind(True, None, g, run(undecided, "patch-with")) is (
        ErrorKind.EVIDENCE_UNVERIFIED
    )


def test_views_of_the_recorded_stream() -> None:
    t = parse_transcript((T / "patch-with.jsonl").read_bytes())
    assert [name for name, _ in t.calls] == ["Skill", "Read", "Read", "Write"]
    assert t.last_message.startswith("Added the 4.2.0 section")
    kinds = [json.loads(line)["type"] for line in t.lines]
    assert set(kinds[:-1]) == {"assistant", "user"} and kinds[-1] == "result"
    assert session_problem(t) is None
    assert js_json({"skill": "a b", "n": 1}) == '{"skill":"a b","n":1}'
    truncated = b"\n".join((T / "patch-with.jsonl").read_bytes().splitlines()[:5])
    assert session_problem(parse_transcript(truncated)) is not None
    assert session_problem(parse_transcript(b"not json\n")) is not None


def test_javascript_regex_and_glob_semantics() -> None:
    assert js_regex("TEAPOT", "i").search("teapot")
    assert not js_regex("TEAPOT").search("teapot")
    assert js_regex(r"\w+").fullmatch("é") is None  # ASCII \w without the u flag
    assert js_regex(r"\w+", "u").fullmatch("é")
    assert js_regex("^b", "m").search("a\nb") and not js_regex("^b").search("a\nb")
    assert glob_regex("**/*.orig").match("RELEASE_NOTES.md.orig")
    assert glob_regex("**/*.orig").match("a/b/c.orig")
    assert not glob_regex("*.md").match("docs/a.md")
    assert glob_regex("docs/?.md").match("docs/a.md")
    with pytest.raises(ValueError, match="Python-only"):
        grading(graders=[{"name": "x", "type": "regex", "pattern": "(?i)teapot"}])
    with pytest.raises(ValueError, match="mock_calls|literal"):
        grading(graders=[{"name": "x", "type": "regex", "pattern": "a", "target": "mock_calls"}])
    with pytest.raises(ValueError, match="count:N"):
        grading(graders=[{"name": "x", "type": "regex", "pattern": "a", "match": "count:x"}])


def test_created_paths_come_from_the_recorded_patch() -> None:
    patch = json.loads((T / "patch-without.tree.json").read_text())["patch"].encode()
    assert created_paths(patch) == ["RELEASE_NOTES.md.orig"]
    quoted = b'diff --git "a/sp ace.txt" "b/sp ace.txt"\nnew file mode 100644\n'
    assert created_paths(quoted) == ["sp ace.txt"]


def test_a_file_grader_cannot_be_pointed_outside_the_tree(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "notes.md").write_text("## 4.2.0\n")
    (tmp_path / "secret").write_text("## 4.2.0\n")
    os.symlink(tmp_path / "secret", root / "link.md")
    read = tree_reader(root)
    assert read("notes.md") == "## 4.2.0\n"
    assert read("link.md") is None and read("../secret") is None and read("missing") is None


def test_a_run_without_a_transcript_is_a_session_error_naming_what_is_missing() -> None:
    r = grade_run(UNRELATED, b'{"replayed": "x", "run": 0}', [], lambda p: None, with_plugin=True)
    assert r.score is None and r.session_error is not None
    assert "needs its `transcript`" in r.session_error
