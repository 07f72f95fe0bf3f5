"""Typed documents of ``wfbench import commits``: a task's ``mined.json``, the ledger, the report.

- ``<tasks>/<id>/mined.json`` (:class:`MinedTask`): where the task came from and how it was
  validated — every run's per-test outcomes on the base and with the gold patch, the lists that
  went into ``task.yaml``, what leak control did. The task's own record of its validation.
- ``<tasks>/.wfbench-mined/<repo key>.json`` (:class:`MineLedger`): every examined commit's
  verdict, so a re-run over the same range examines nothing twice (an accepted commit is its task
  folder; a rejected one keeps its reason while the miner and the options that decide validation
  are unchanged).
- the ``--json`` report (:class:`MineReport`): one :class:`CandidateLine` per examined commit,
  accepted task ids, rejections by reason, the time spent.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bench_assets.runner.trusted import Outcome

MINER = "commits-1"
"""Version of the mining rules; a cached rejection from another version is examined again."""

Status = Literal["accepted", "unchanged", "rejected", "skipped"]
SkipReason = Literal["root-commit", "outside-paths", "no-test-change", "no-source-change"]
"""Why a commit is not a candidate at all."""
RejectReason = Literal[
    "oracle-too-large",
    "not-text",
    "leak-in-base",
    "prompt-empty",
    "environment-failed",
    "gold-does-not-apply",
    "run-incomplete",
    "no-fail-to-pass",
    "flaky",
    "gold-fails",
    "bad-test-ids",
    "invalid-task",
    "task-exists",
    "harness-error",
]
"""Why a candidate was not imported (a closed set; the detail says more)."""


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MinedSource(_Doc):
    """The commit a task was mined from."""

    repo: str
    commit: str
    parent: str
    """The base: pinned as the task's ``ref``."""
    merge: bool
    subject: str


class MinedValidation(_Doc):
    """The sandboxed runs that decided the task's expected tests."""

    repeats: int
    base_runs: list[dict[str, Outcome]]
    """Per run, every oracle test's outcome on the sanitized base (ids relative to the oracle)."""
    base_collect_errors: list[int]
    gold_runs: list[dict[str, Outcome]]
    gold_collect_errors: list[int]
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    not_expected: dict[str, str] = Field(default_factory=dict)
    """Oracle tests left out of both lists, with why (e.g. skipped with the gold patch)."""
    verify: list[str] | None
    """The visible test files ``verify`` runs (None: the default that always passes)."""
    verify_detail: str
    seconds: float


class MinedLeaks(_Doc):
    """What leak control found and did."""

    prompt_redactions: list[str]
    template_sha: str
    """The sanitized template the validation ran in (built with the fix and oracle forbidden)."""
    template_checks: list[str]


class MinedTask(_Doc):
    """``<tasks>/<id>/mined.json``."""

    schema_version: Literal[1] = 1
    miner: str = MINER
    source: MinedSource
    validation: MinedValidation
    leaks: MinedLeaks
    gold_file: str
    """The predictions file (relative to the tasks folder) holding this task's gold patch."""
    gold_sha256: str


class LedgerEntry(_Doc):
    """One examined commit's verdict."""

    status: Literal["accepted", "rejected", "skipped"]
    reason: str | None = None
    detail: str = ""
    task_id: str | None = None
    miner: str = MINER
    options: str
    """Digest of the options that decide validation (environment, repeats)."""


class MineLedger(_Doc):
    """``<tasks>/.wfbench-mined/<repo key>.json``."""

    schema_version: Literal[1] = 1
    repo: str
    entries: dict[str, LedgerEntry] = Field(default_factory=dict)


class CandidateLine(_Doc):
    """What happened to one examined commit (one printed line)."""

    commit: str
    subject: str
    merge: bool
    status: Status
    reason: str | None = None
    detail: str = ""
    task_id: str | None = None
    cached: bool = False
    """The verdict came from the ledger (nothing was run)."""
    seconds: float


class MineReport(_Doc):
    """The ``--json`` report of one import."""

    schema_version: Literal[1] = 1
    repo: str
    tasks_dir: str
    range: str | None
    since: str | None
    paths: list[str]
    commits: int
    """First-parent commits examined."""
    candidates: int
    """Commits that change both a test module and a source file (validated or cached)."""
    accepted: list[str]
    """Tasks written by this run."""
    unchanged: list[str]
    """Tasks already imported (left exactly as they are)."""
    rejected_by_reason: dict[str, list[str]]
    """Reason -> commits."""
    skipped_by_reason: dict[str, int]
    """Commits that are not candidates, by reason."""
    seconds: float
    seconds_per_candidate: float | None
    """Mean wall time of a candidate validated by this run (None: none was)."""
    lines: list[CandidateLine]
