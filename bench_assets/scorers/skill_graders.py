"""Deterministic transcript graders of imported skill-eval cases, as pure functions.

Input: the cell's recorded ``claude -p --output-format stream-json --verbose`` transcript (the
harness recorded it from the CLI's standard output; the agent cannot rewrite it after the fact),
the paths the agent **created** (from the recorded patch against the base: scaffold files are in
the base, so they are not "created"; edited files are not either) and a reader for one file of the
final worktree. Output: one :class:`GraderOutcome` per grader with its explanation, and the run
score (:func:`grade_run`). Semantics follow ``claude plugin eval`` (reference
``skill-eval-formats.md`` §1.5–1.6 and §1.11); where the reference marks a detail UNCONFIRMED, the
choice made here is stated:

- **views**: ``last_message`` is the ``result`` event's ``result`` text when the session ended
  with one, else the text of the last assistant message (UNCONFIRMED upstream); ``trace`` is the
  recorded ``assistant``/``user`` lines and the terminal ``result`` event exactly as printed, one
  per line (JSON-escaped, so match ``\\"`` not ``"``). Which event kinds the first-party trace
  holds is UNCONFIRMED in the docs; published suites match the final reply in it as
  ``"result":"…"`` (a ``target: trace`` grader of ``xsyetopz/dotclaude``), so the ``result``
  event is kept; ``system`` events (init lists every tool and skill) and ``rate_limit_event``
  are not; ``files`` the created paths, sorted, one per line;
- **tool calls** are the ``tool_use`` blocks of ``assistant`` events, deduplicated by id, in
  stream order, sub-agent calls included (UNCONFIRMED upstream); ``input_match`` is searched in
  the input encoded as ``JSON.stringify`` does (no spaces, key order as sent);
- **regex** is JavaScript's: without ``u``, ``\\w``/``\\d``/``\\b`` are ASCII; ``count:N`` counts
  non-overlapping matches;
- **score** = weighted share of the *scored* graders that passed. With ``ablation:
  with-without`` every ``tool_used`` grader with ``tool: Skill`` and every ``arm: with-only``
  grader is excluded from the score in both arms (shown in the with-plugin arm, omitted from the
  without arm) unless it says ``arm: both``; when every grader would be excluded they are all
  scored;
- **judge graders** (``llm``, ``baseline``) are graded by a judge callable (:data:`Judge`);
  without one their outcome is unknown (``passed: None``) and so is the score: unknown is not zero;
- **a session that errored** (crash, API failure, malformed or truncated stream — never a turn or
  budget limit, which the reference grades on what the run produced) gets no score at all: its
  graders are still evaluated and recorded for the reader, but the cell is a session error, never
  a "did not trigger" (the pitfall of both first-party tools).
"""

import fnmatch
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from bench_assets.scorers.skill_eval import (
    JUDGE_KINDS,
    FileExistsGrader,
    FileTarget,
    Grader,
    RegexGrader,
    SkillEvalGrading,
    Target,
    ToolCall,
    ToolOrderGrader,
    ToolUsedGrader,
)

SKILL_TOOL = "Skill"
MAX_VIEW_CHARS = 4_000_000
"""A view longer than this is cut (a regex over tens of MB is an attack, not a grade)."""


class GraderOutcome(BaseModel):
    """One grader's verdict on one run, as recorded in the cell record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: str
    weight: float
    passed: bool | None
    """``None``: could not be decided (a judge grader without a judge, a judge that failed)."""
    explanation: str
    scored: bool
    """Counts toward the run score (``False``: a two-arm exclusion, shown only)."""
    with_only: bool
    judged: bool = False
    """The judge model was called for this grader (its cost is then in ``judge_cost_usd``,
    ``None`` when the API did not report usage)."""
    judge_votes: list[bool] | None = None
    judge_cost_usd: float | None = None
    human_label: bool | None = None
    """A person's verdict on this judge grader for this session, when the task carries one."""


class RunGrade(BaseModel):
    """The graders' verdict on one run (one wfbench cell)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    score: float | None
    """Weighted share of scored graders passed; ``None`` when unknown (session error, undecided
    grader)."""
    threshold: float
    resolved: bool
    """``score >= threshold``; ``False`` when the score is unknown."""
    session_error: str | None
    """Why the session cannot be graded (then ``score`` is ``None``)."""
    graders: list[GraderOutcome]
    judge_cost_usd: float | None = None
    """Total judge spend of this run (``None``: no judge was called, or a call's cost is
    unknown — see ``judge_called``)."""
    judge_called: bool = False


@dataclass(frozen=True)
class Transcript:
    """The views of one stream-json transcript that graders read."""

    lines: tuple[str, ...]
    """Recorded ``assistant``/``user`` lines and ``result`` events, verbatim, in stream order."""
    calls: tuple[tuple[str, dict[str, Any]], ...]
    """(tool name, input) of every ``tool_use`` in stream order."""
    last_message: str
    result: dict[str, Any] | None
    malformed: int
    session_id: str | None = None


def parse_transcript(data: bytes) -> Transcript:
    """The grader views of a stream-json transcript (see module docstring)."""
    lines: list[str] = []
    calls: list[tuple[str, dict[str, Any]]] = []
    seen_ids: set[str] = set()
    result: dict[str, Any] | None = None
    last_text = ""
    malformed = 0
    session_id: str | None = None
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
            event = json.loads(text)
        except (UnicodeDecodeError, ValueError):
            malformed += 1
            continue
        if not isinstance(event, dict):
            malformed += 1
            continue
        kind = event.get("type")
        sid = event.get("session_id")
        if session_id is None and isinstance(sid, str) and sid:
            session_id = sid
        if kind == "result" and result is None:
            result = event
        if kind == "result":
            lines.append(text)  # the trace shows the final reply's event too (module docstring)
            continue
        if kind not in ("assistant", "user"):
            continue
        lines.append(text)
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if kind != "assistant" or not isinstance(content, list):
            continue
        texts = [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if texts and all(isinstance(t, str) for t in texts):
            last_text = "".join(texts)
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            tid, name, tool_input = block.get("id"), block.get("name"), block.get("input")
            if not isinstance(name, str) or (isinstance(tid, str) and tid in seen_ids):
                continue
            if isinstance(tid, str):
                seen_ids.add(tid)
            calls.append((name, tool_input if isinstance(tool_input, dict) else {}))
    final = result.get("result") if result is not None else None
    return Transcript(
        lines=tuple(lines),
        calls=tuple(calls),
        last_message=final if isinstance(final, str) else last_text,
        result=result,
        malformed=malformed,
        session_id=session_id,
    )


def session_problem(t: Transcript) -> str | None:
    """Why a transcript is not a gradable session (``None``: it is).

    A turn or budget limit is gradable (the reference grades such runs on what they produced);
    a stream without a result, with unparseable lines, or ending in an API or execution error is
    not.
    """
    if t.malformed:
        return f"malformed stream-json: {t.malformed} line(s) are not JSON objects"
    if t.result is None and not t.lines:
        return (
            "no stream-json events to grade (a replayed prediction of a skill-eval task needs "
            "its `transcript`)"
        )
    if t.result is None:
        return "no result event: the session did not finish"
    subtype = t.result.get("subtype")
    if subtype in ("error_max_turns", "error_max_budget_usd"):
        return None
    if subtype != "success" or t.result.get("is_error") is True:
        said = str(t.result.get("result") or "")[:200]
        return f"session ended with subtype {subtype!r}, is_error={t.result.get('is_error')!r}" + (
            f": {said}" if said else ""
        )
    return None


def js_regex(pattern: str, flags: str = "") -> re.Pattern[str]:
    """Compile a JavaScript regex with its flags (``g``/``y`` have no effect on a search)."""
    f = 0 if "u" in flags else re.ASCII
    if "i" in flags:
        f |= re.IGNORECASE
    if "m" in flags:
        f |= re.MULTILINE
    if "s" in flags:
        f |= re.DOTALL
    return re.compile(pattern, f)


def js_json(value: Any) -> str:
    """``JSON.stringify(value)``: no spaces, keys in their order, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A path glob: ``**`` any run of directories, ``*`` / ``?`` within one path segment."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape("["))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i : end + 1])[4:-3])
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


FileReader = Callable[[str], str | None]
"""Reads one worktree file as text; ``None`` when it does not exist (or is not a file)."""


def _view(target: Target, t: Transcript, created: Sequence[str], read: FileReader) -> str | None:
    if isinstance(target, FileTarget):
        text = read(target.path)
    elif target == "last_message":
        text = t.last_message
    elif target == "trace":
        text = "\n".join(t.lines)
    else:
        text = "\n".join(sorted(created))
    return None if text is None else text[:MAX_VIEW_CHARS]


def _target_name(target: Target) -> str:
    return f"file {target.path}" if isinstance(target, FileTarget) else target


def grade_regex(
    g: RegexGrader, t: Transcript, created: Sequence[str], read: FileReader
) -> tuple[bool, str]:
    """A regex grader's verdict and explanation."""
    view = _view(g.target, t, created, read)
    where = _target_name(g.target)
    if view is None:
        return False, f"{where} does not exist"
    rx = js_regex(g.pattern, g.flags)
    if g.match == "contains":
        found = rx.search(view) is not None
        return found, f"matched {g.pattern}" if found else f"pattern not found in {where}"
    if g.match == "not_contains":
        found = rx.search(view) is not None
        return (
            not found,
            f"pattern found in {where}" if found else f"no match of {g.pattern} in {where}",
        )
    want = int(g.match.split(":", 1)[1])
    n = sum(1 for _ in rx.finditer(view))
    return n == want, f"{n} match(es) of {g.pattern} in {where} (expected {want})"


def _matching(call: ToolCall, t: Transcript) -> list[int]:
    rx = js_regex(call.input_match) if call.input_match is not None else None
    return [
        i
        for i, (name, tool_input) in enumerate(t.calls)
        if name == call.tool and (rx is None or rx.search(js_json(tool_input)) is not None)
    ]


def grade_tool_used(g: ToolUsedGrader, t: Transcript) -> tuple[bool, str]:
    """A tool_used grader's verdict: matching calls within ``[min, max]``."""
    n = len(_matching(ToolCall(tool=g.tool, input_match=g.input_match), t))
    hi = "∞" if g.max is None else str(g.max)
    ok = n >= g.min and (g.max is None or n <= g.max)
    return ok, f"{g.tool} called {n}x (expected {g.min}..{hi})"


def grade_tool_order(g: ToolOrderGrader, t: Transcript) -> tuple[bool, str]:
    """The first matching ``before`` call precedes the first matching ``after`` call."""
    before, after = _matching(g.before, t), _matching(g.after, t)
    if not before or not after:
        missing = [c.tool for c, found in ((g.before, before), (g.after, after)) if not found]
        return False, f"never called: {', '.join(missing)}"
    ok = before[0] < after[0]
    return ok, (
        f"first {g.before.tool} (call {before[0] + 1}) "
        f"{'precedes' if ok else 'follows'} first {g.after.tool} (call {after[0] + 1})"
    )


def grade_file_exists(g: FileExistsGrader, created: Sequence[str]) -> tuple[bool, str]:
    """A created file matches the glob (``exists: false``: none does)."""
    rx = glob_regex(g.path)
    hits = sorted(p for p in created if rx.match(p))
    if g.exists:
        return bool(hits), f"created {hits[0]}" if hits else f"no created file matches {g.path}"
    return (
        not hits,
        f"created {hits[0]}, which matches {g.path}"
        if hits
        else f"no created file matches {g.path}",
    )


def excluded(g: Grader, ablation: str) -> bool:
    """Whether a two-arm run shows the grader without scoring it (module docstring)."""
    if ablation != "with-without" or g.arm == "both":
        return False
    return g.arm == "with-only" or (isinstance(g, ToolUsedGrader) and g.tool == SKILL_TOOL)


JudgeVerdict = tuple[bool | None, str, list[bool] | None, float | None]
"""(passed, explanation, votes, judge cost in USD) of one judge grader."""
Judge = Callable[[Grader, Transcript, Sequence[str], FileReader], JudgeVerdict]


def grade_run(
    grading: SkillEvalGrading,
    transcript: bytes,
    created: Sequence[str],
    read: FileReader,
    *,
    with_plugin: bool,
    session_error: str | None = None,
    judge: Judge | None = None,
) -> RunGrade:
    """Every grader on one run, and the run's score (module docstring).

    ``session_error``: the adapter's own verdict that the session failed (crash, API error); the
    transcript's own problems (:func:`session_problem`) are added to it.
    """
    t = parse_transcript(transcript)
    problem = session_error or session_problem(t)
    all_excluded = all(excluded(g, grading.ablation) for g in grading.graders)
    outcomes: list[GraderOutcome] = []
    for g in grading.graders:
        skip = excluded(g, grading.ablation) and not all_excluded
        if skip and not with_plugin:
            continue  # the without arm omits excluded graders entirely
        votes: list[bool] | None = None
        cost: float | None = None
        judged = False
        passed: bool | None
        if isinstance(g, RegexGrader):
            passed, why = grade_regex(g, t, created, read)
        elif isinstance(g, ToolUsedGrader):
            passed, why = grade_tool_used(g, t)
        elif isinstance(g, ToolOrderGrader):
            passed, why = grade_tool_order(g, t)
        elif isinstance(g, FileExistsGrader):
            passed, why = grade_file_exists(g, created)
        elif problem is not None:
            passed, why = None, "not judged: the session errored"
        elif judge is None:
            passed, why = None, "not judged: no judge model configured"
        else:
            passed, why, votes, cost = judge(g, t, created, read)
            judged = True
        outcomes.append(
            GraderOutcome(
                name=g.name,
                type=g.type,
                weight=g.weight,
                passed=passed,
                explanation=why,
                scored=not skip,
                with_only=skip,
                judged=judged,
                judge_votes=votes,
                judge_cost_usd=cost,
                human_label=grading.label(g.name, t.session_id) if g.type in JUDGE_KINDS else None,
            )
        )
    called = [o for o in outcomes if o.judged]
    costs = [o.judge_cost_usd for o in called]
    judge_cost = (
        round(sum(c for c in costs if c is not None), 8)
        if called and all(c is not None for c in costs)
        else None
    )
    scored = [o for o in outcomes if o.scored]
    score: float | None = None
    if problem is None and scored and all(o.passed is not None for o in scored):
        total = sum(o.weight for o in scored)
        score = round(sum(o.weight for o in scored if o.passed) / total, 6)
    return RunGrade(
        score=score,
        threshold=grading.threshold,
        resolved=score is not None and score >= grading.threshold,
        session_error=problem,
        graders=outcomes,
        judge_cost_usd=judge_cost,
        judge_called=bool(called),
    )


def needs_judge(grading: SkillEvalGrading) -> bool:
    """Whether grading this case calls a judge model."""
    return any(g.type in JUDGE_KINDS for g in grading.graders)
