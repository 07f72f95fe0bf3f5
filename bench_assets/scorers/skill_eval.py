"""The typed hidden grading of an imported skill-eval case (``claude plugin eval``, skill-creator).

An imported case is a wfbench task (``task.yaml`` with a ``skill_eval`` section, see
:class:`bench_assets.config.models.SkillEvalSpec`) whose grading is not ``verify`` plus a pytest
oracle but a list of **graders**, stored like the oracle in ``<task>/oracle/skill_eval.json``:
staged only after the agent exited, never in the agent's worktree. This module is that file's schema
(:class:`SkillEvalGrading`, ``schema_version`` 1, ``extra="forbid"`` everywhere).

The six grader kinds and their options follow ``claude plugin eval`` exactly (the reference
``skill-eval-formats.md`` §1.5, defaults made explicit as the first-party result JSON does):

- ``regex``: ``pattern`` (a JavaScript regex), ``flags`` (``i``, ``m``, ``s``, ``u``; ``g``/``y``
  accepted and without effect), ``match`` (``contains`` | ``not_contains`` | ``count:N``),
  ``target`` (``last_message`` | ``trace`` | ``files`` | ``{source: file, path: P}``);
- ``tool_used``: ``tool``, ``input_match`` (regex over the JSON-encoded input), ``min`` (default
  1), ``max`` (default unlimited);
- ``tool_order``: ``before`` / ``after``, each a tool name or ``{tool, input_match}``;
- ``file_exists``: ``path`` (glob over the files the agent *created*), ``exists`` (default true);
- ``llm``: ``criteria``, ``focus`` (as ``target``); 2 of 3 judge votes;
- ``baseline``: ``criteria`` and the reference transcript ``baseline_file`` (its text is stored
  here, ``baseline_transcript``, so the judge reads it without the case folder).

Every grader has ``weight`` (> 0, default 1) and ``arm`` (``with-only`` | ``both`` | unset).
``mock_calls`` targets are refused: wfbench runs no MCP mocks.
"""

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION: Literal[1] = 1
GRADING_FILE = "skill_eval.json"
"""The hidden grading's file name among the task's ``oracle.files``."""
JUDGE_KINDS = frozenset({"llm", "baseline"})

_COUNT_RE = re.compile(r"^count:(0|[1-9][0-9]{0,5})$")
_JS_FLAGS = frozenset("gimsuy")
_INLINE_FLAGS = re.compile(r"\(\?[a-zA-Z]+[:)]")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileTarget(_Strict):
    """One workspace file's contents after the run."""

    source: Literal["file"]
    path: str = Field(min_length=1)

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.split("/"):
            raise ValueError(f"file target {v!r} must be a path inside the workspace")
        return _no_dot_slash(v)


def _no_dot_slash(v: str) -> str:
    """``./report.md`` is the workspace's ``report.md`` (created paths never start with ``./``)."""
    while v.startswith("./"):
        v = v[2:]
    if not v:
        raise ValueError("a path naming the workspace itself")
    return v


Target = Literal["last_message", "trace", "files"] | FileTarget


def check_js_regex(pattern: str, what: str) -> str:
    """``pattern`` compiles, and uses nothing JavaScript lacks that Python would accept.

    Inline flag groups such as ``(?i)`` are a syntax error in JavaScript (the reference: "inline
    ``(?i)`` is not supported"); accepting them would pass cases the first-party tool fails.
    """
    if _INLINE_FLAGS.search(pattern) or "(?P<" in pattern:
        raise ValueError(
            f"{what} {pattern!r} uses Python-only regex syntax ((?i), (?P<...>)); "
            "write JavaScript regex (use flags: i)"
        )
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{what} {pattern!r} is not a valid regex: {e}") from None
    return pattern


class _GraderBase(_Strict):
    name: str = Field(min_length=1, max_length=200)
    weight: float = Field(default=1.0, gt=0)
    arm: Literal["with-only", "both"] | None = None
    note: str | None = None
    """A grader file's free-text body where the type takes none (kept, never graded)."""


class RegexGrader(_GraderBase):
    """Passes when ``pattern`` is found in the target (``match`` decides how)."""

    type: Literal["regex"] = "regex"
    pattern: str = Field(min_length=1)
    flags: str = ""
    match: str = "contains"
    target: Target = "last_message"

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str) -> str:
        return check_js_regex(v, "pattern")

    @field_validator("flags")
    @classmethod
    def _flags(cls, v: str) -> str:
        bad = sorted(set(v) - _JS_FLAGS)
        if bad or len(set(v)) != len(v):
            raise ValueError(f"flags {v!r}: only the JavaScript flags g, i, m, s, u, y, once each")
        return v

    @field_validator("match")
    @classmethod
    def _match(cls, v: str) -> str:
        if v not in ("contains", "not_contains") and not _COUNT_RE.match(v):
            raise ValueError(f"match {v!r} must be contains, not_contains or count:N")
        return v


class ToolCall(_Strict):
    """A tool name, optionally narrowed by a regex over its JSON-encoded input."""

    tool: str = Field(min_length=1)
    input_match: str | None = None

    @field_validator("input_match")
    @classmethod
    def _input(cls, v: str | None) -> str | None:
        return None if v is None else check_js_regex(v, "input_match")


class ToolUsedGrader(_GraderBase):
    """Passes when the number of matching calls to ``tool`` is in ``[min, max]``."""

    type: Literal["tool_used"] = "tool_used"
    tool: str = Field(min_length=1)
    input_match: str | None = None
    min: int = Field(default=1, ge=0)
    max: int | None = Field(default=None, ge=0)

    @field_validator("input_match")
    @classmethod
    def _input(cls, v: str | None) -> str | None:
        return None if v is None else check_js_regex(v, "input_match")


def _tool_call(v: Any) -> Any:
    return {"tool": v} if isinstance(v, str) else v


class ToolOrderGrader(_GraderBase):
    """Passes when the first matching ``before`` call precedes the first matching ``after``."""

    type: Literal["tool_order"] = "tool_order"
    before: ToolCall
    after: ToolCall

    @field_validator("before", "after", mode="before")
    @classmethod
    def _name(cls, v: Any) -> Any:
        return _tool_call(v)


class FileExistsGrader(_GraderBase):
    """Passes when a created file matches ``path`` (``exists: false``: when none does)."""

    type: Literal["file_exists"] = "file_exists"
    path: str = Field(min_length=1)
    exists: bool = True

    @field_validator("path")
    @classmethod
    def _glob(cls, v: str) -> str:
        return _no_dot_slash(v)


class LlmGrader(_GraderBase):
    """A judge votes PASS on ``criteria`` in at least 2 of 3 votes."""

    type: Literal["llm"] = "llm"
    criteria: str = Field(min_length=1)
    focus: Target = "last_message"


class BaselineGrader(_GraderBase):
    """A judge finds the run meets ``criteria`` at least as well as the reference transcript."""

    type: Literal["baseline"] = "baseline"
    criteria: str = Field(min_length=1)
    baseline_file: str = Field(min_length=1)
    baseline_transcript: str
    """The reference transcript's text, copied from the case folder at import."""


Grader = Annotated[
    RegexGrader | ToolUsedGrader | ToolOrderGrader | FileExistsGrader | LlmGrader | BaselineGrader,
    Field(discriminator="type"),
]


class HumanLabel(_Strict):
    """A person's verdict on one judge grader for one recorded run, to measure the judge's
    agreement with people (never used to grade). Imported from the case folder's
    ``human-labels.yaml`` (a wfbench addition: a list of these mappings)."""

    grader: str
    session_id: str = Field(min_length=1)
    """The Claude Code session the label is about (``session_id`` of its stream-json events)."""
    passed: bool


class SkillEvalGrading(_Strict):
    """``oracle/skill_eval.json``: the hidden grading of one imported case."""

    schema_version: Literal[1] = SCHEMA_VERSION
    source: Literal["claude-plugin-eval", "skill-creator"]
    case: str = Field(min_length=1)
    threshold: float = Field(default=1.0, ge=0, le=1)
    """A cell resolves when its run score is at least this (``claude plugin eval --threshold``)."""
    ablation: Literal["with-without", "none"] = "with-without"
    """``with-without``: the two-arm exclusions apply (Skill ``tool_used`` and ``arm: with-only``
    graders are shown, not scored), as the first-party tool does when a plugin resolves."""
    graders: list[Grader] = Field(min_length=1, max_length=100)
    labels: list[HumanLabel] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names(self) -> "SkillEvalGrading":
        names = [g.name for g in self.graders]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"grader names used twice: {', '.join(dup)}")
        unknown = sorted({lb.grader for lb in self.labels} - set(names))
        if unknown:
            raise ValueError(f"labels name unknown graders: {', '.join(unknown)}")
        judged = {g.name for g in self.graders if g.type in JUDGE_KINDS}
        plain = sorted({lb.grader for lb in self.labels} - judged)
        if plain:
            raise ValueError(f"labels are for judge graders only, not {', '.join(plain)}")
        return self

    def label(self, grader: str, session_id: str | None) -> bool | None:
        """The human verdict on ``grader`` for that session, if one was given."""
        for lb in self.labels:
            if lb.grader == grader and lb.session_id == session_id:
                return lb.passed
        return None

    @property
    def needs_judge(self) -> bool:
        """Whether any grader calls a judge model (it must be pinned before paid work)."""
        return any(g.type in JUDGE_KINDS for g in self.graders)


def parse_grading(data: bytes, where: str) -> SkillEvalGrading:
    """The hidden grading file, or :class:`~bench_assets.kernel.errors.InputError` naming the
    field."""
    from pydantic import ValidationError

    from bench_assets.kernel.errors import InputError

    try:
        return SkillEvalGrading.model_validate_json(data)
    except ValidationError as e:
        err = e.errors()[0]
        fld = ".".join(str(p) for p in err["loc"]) or "(document)"
        raise InputError(f"{where}: field '{fld}': {err['msg']}") from None
