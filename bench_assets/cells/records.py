"""The cell record: one per cell materialization, stored as JSON beside its artifacts.

What a record holds is described in the README section "How a cell runs, and what it records".

Layout: ``cells/<task>/<arm>.r<k>/<record id>/`` holds ``patch.diff``, ``transcript.jsonl``
(redacted) and ``record.json``. The record is written last and atomically, so a crash or kill
leaves no partial record — at most an orphan artifact folder that nothing points to.
"""

import datetime as dt
import secrets
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bench_assets.agents.base import ModelUsage
from bench_assets.agents.phases import PhaseRecord
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.errors import RecordCorrupt
from bench_assets.kernel.fsutil import (
    FileCache,
    atomic_write_bytes,
    atomic_write_json,
    parse_model,
    read_model,
)
from bench_assets.kernel.hashing import sha256_bytes, sha256_json
from bench_assets.runner.canaries import CanaryOutcome
from bench_assets.runner.hygiene import RunnerFileChange
from bench_assets.runner.trusted import PhaseResult
from bench_assets.scorers.review_scoring import ReviewScore
from bench_assets.scorers.skill_graders import RunGrade

SCHEMA_VERSION = 4
"""2: per-test verify/oracle results and runner-file hygiene (trusted runner). 3: per-phase
outcomes of multi-session arms and the review score of review arms (both optional). 4: tamper
canaries and their outcomes, why a grade is ``grader-tampered``, the patch's binary files."""


class Artifact(BaseModel):
    """A stored artifact file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str
    bytes: int
    truncated: bool = False


class ReusedFrom(BaseModel):
    """Where a reused record came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    generation: str | None
    recorded_at: str
    data_version: str


class CellRecord(BaseModel):
    """Everything one cell did, measured, and what it rests on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    record_id: str
    task: str
    task_class: str
    arm: str
    role: Literal["comparator", "candidate"]
    run: int
    cell: str
    generation: str | None
    adapter: str
    model: str
    effort: str | None
    # usage, as reported by the agent (null = unmeasured, never 0)
    input_tokens: int | None
    output_tokens: int | None
    cache_read_input_tokens: int | None
    cache_creation_input_tokens: int | None
    total_tokens: int | None
    cost_usd: float | None
    turns: int | None
    agent_duration_s: float | None
    duration_s: float
    """Wall time of the whole cell."""
    churn_files: int
    churn_insertions: int
    churn_deletions: int
    verify_passed: bool
    oracle_passed: bool
    resolved: bool
    error_kind: ErrorKind | None
    error_detail: str
    verify_tail: str
    verify_run: PhaseResult | None = None
    """How verify ran and its per-test outcomes (None: grading did not get that far)."""
    oracle_run: PhaseResult | None = None
    """How the oracle ran and the outcome of every expected test (never its output)."""
    protected_changed: list[str]
    runner_files: list[RunnerFileChange] = []
    """Files of the agent's diff that could change the runner or interpreter, and whether they
    were restored before grading."""
    canaries: list[CanaryOutcome] | None = None
    """The tamper canaries planted in each test phase and what each reported (a canary must
    never pass). None: no test phase ran with the trusted runner, or graded before canaries."""
    tampered: list[str] = []
    """Why the cell is ``grader-tampered``: canaries that passed, runner machinery replaced."""
    binary_files: list[str] = []
    """Files of the recorded patch that git shows as binary (flagged; see the task's
    ``allow_binaries``)."""
    session_ids: list[str]
    patch: Artifact | None
    transcript: Artifact | None
    identity_digest: str
    identity: dict[str, object]
    skills_digest: str | None
    overlay_digest: str | None
    binding_digest: str
    resolved_sha: str
    sanitized_sha: str
    oracle_digest: str
    graph_digest: str
    harness_version: str
    agent_version: str | None
    sandbox_backend: str
    timings: dict[str, float]
    recorded_at: str
    ad_hoc: bool = False
    """A `wfbench try` cell: never counted as evidence."""
    model_usage: dict[str, ModelUsage] | None = None
    """Tokens and cost per model (main model, sub-agents), when the agent reports them."""
    producer: str | None = None
    """Who produced a replayed patch (the prediction's ``model_name_or_path``); ``model`` is the
    benchmark's configured model, which a replayed patch need not come from."""
    phases: list[PhaseRecord] | None = None
    """Multi-session arms: each phase's usage and outcome, in order (the usage fields above are
    their sums). None for a one-session arm."""
    review: ReviewScore | None = None
    """Review arms: the score of the review against the hidden labels (None: not scored)."""
    review_evidence_valid: bool | None = None
    """Review arms: whether the review artifact (and the labels) parsed. None on other arms."""
    review_artifact: Artifact | None = None
    """Review arms: the agent's review as written (``review.json``), when it could be read."""
    skill_eval: RunGrade | None = None
    """Skill-eval tasks: every hidden grader's outcome and explanation, and the run score
    (None on other tasks)."""

    @property
    def spend_usd(self) -> float | None:
        """What the cell cost: the agent's session plus its judge calls (skill-eval tasks),
        ``None`` when either is unknown. The spend cap counts this, not ``cost_usd`` alone."""
        se = self.skill_eval
        if self.cost_usd is None or (
            se is not None and se.judge_called and se.judge_cost_usd is None
        ):
            return None
        return self.cost_usd + (se.judge_cost_usd or 0.0 if se is not None else 0.0)

    @property
    def data_version(self) -> str:
        """Content digest of the record: the cell partition's data version."""
        return sha256_json(self.model_dump(mode="json"))


def new_record_id() -> str:
    """Sortable unique id: UTC timestamp plus randomness."""
    now = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{now}-{secrets.token_hex(3)}"


def now_iso() -> str:
    """Current UTC time, ISO 8601."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def write_artifact(folder: Path, name: str, data: bytes, truncated: bool = False) -> Artifact:
    """Store one artifact file atomically."""
    path = atomic_write_bytes(folder / name, data)
    return Artifact(path=str(path), sha256=sha256_bytes(data), bytes=len(data), truncated=truncated)


def write_record(folder: Path, record: CellRecord) -> Path:
    """Write ``record.json`` last, atomically: the commit point of a cell.

    Stored in its canonical form (one line, keys sorted: the bytes :attr:`CellRecord.data_version`
    digests, plus a newline), so a reader verifies it by hashing the file
    (:func:`load_verified`); ``python -m json.tool record.json`` shows it indented."""
    return atomic_write_json(folder / "record.json", record.model_dump(mode="json"), compact=True)


VERIFIED_CACHE_MAX = 50_000
"""Records :func:`load_verified` keeps per process (a 1,000-task generation has 9,000)."""


class _Loaded:
    """A parsed record file, the digest of its bytes and (once asked for) of its content."""

    __slots__ = ("record", "stored", "content")

    def __init__(self, record: "CellRecord", stored: str) -> None:
        self.record = record
        self.stored = stored
        self.content: str | None = None

    def digest(self, expected: str | None) -> str:
        if expected is not None and self.stored == expected:
            return expected
        if self.content is None:
            self.content = self.record.data_version
        return self.content


_verified: FileCache[_Loaded] = FileCache(VERIFIED_CACHE_MAX)
_HINT = "the cell will be paid again rather than reused"


def load_verified(path: Path, expected: str | None = None) -> tuple[CellRecord, str]:
    """:func:`load_record` and the record's content digest (its data version), computed once per
    file per process while the file is unchanged (:class:`~bench_assets.kernel.fsutil.FileCache`).

    A decision reads every evidence record twice (the aggregates, then the decision re-checks
    their rows) and the pooled history reads comparator records again: 20,000 parses and
    digests at 1,000 tasks. Any write, rename over or ``touch`` of the file reads and digests it
    again; the caller still compares the digest with the data version Dagster recorded.

    ``expected``: that data version, when the caller has it. A record stored in canonical form
    (:func:`write_record`) whose bytes hash to it is exactly the content that was digested when
    it was materialized, so it is not serialized again to be digested (at 4 KB a record, dumping
    and re-encoding it was most of a 1,000-task decision's record check); any other file — one
    written indented before records were stored canonical, or edited — has its content digested
    as before, and an edit never matches.

    Raises:
        RecordCorrupt: as :func:`load_record`, and when the file cannot be stat'ed.
    """
    try:
        loaded = _verified.get(path, _load_digested)
    except OSError as e:
        raise RecordCorrupt(f"{path}: cannot read the cell record ({e})") from None
    return loaded.record, loaded.digest(expected)


def _load_digested(path: Path) -> _Loaded:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RecordCorrupt(f"{path}: cannot read the cell record ({e}); {_HINT}") from None
    record = parse_model(
        path, data, CellRecord, what="cell record", error=RecordCorrupt, hint=_HINT
    )
    return _Loaded(record, sha256_bytes(data[:-1] if data.endswith(b"\n") else data))


def load_record(path: Path) -> CellRecord:
    """Read a stored record.

    Raises:
        RecordCorrupt: unreadable, not JSON, truncated or not a record of this schema — named by
            file, never a raw validation traceback.
    """
    return read_model(path, CellRecord, what="cell record", error=RecordCorrupt, hint=_HINT)
