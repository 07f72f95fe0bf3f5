"""Typed documents that cross the Dagster boundary: a cell's materialization and the decision.

A cell's facts live in its record (:class:`~bench_assets.cells.records.CellRecord`,
``record.json``); what the Dagster materialization of a cell partition adds is lineage — where the
record is, the identity it was made for, whether this materialization reused it and from which run.
That part is :class:`CellMaterialization`: written as metadata by ``defs/cells.py``
(``to_metadata``) and read back by the planner, the decision, the CLI and the proposer
(``from_metadata``). Display-only metadata (cost, tokens, churn, ...) is derived from the record and
never parsed back: anything that needs a measurement reads the record, through :func:`load_cell`.
Unknown is ``None`` everywhere, never a string such as ``"-"`` or ``"unmeasured"``.

:class:`DecisionDocument` is ``decision.json``: the gate's :class:`~bench_assets.gate.Decision`
plus what the generation decided about (candidate, digests, the overlay and skill tree paths,
apply's compare-and-swap digests) and the lineage of every evidence cell. The decision asset
writes it; ``explain``, ``report``, ``apply``, the proposer and the UI metadata read it.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, model_validator

from bench_assets.cells.records import CellRecord, load_verified
from bench_assets.decision.aggregate import TaskAggregate
from bench_assets.decision.ledger import DecisionKind
from bench_assets.gate import Decision
from bench_assets.gate.review import ReviewDecision
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.errors import InputError, RecordCorrupt
from bench_assets.kernel.fsutil import FileCache, read_model

CELL_MATERIALIZATION_SCHEMA = 1
DECISION_SCHEMA: Literal[2] = 2
"""2 added ``kind`` and ``refused``; schema-1 documents still load."""


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CellMaterialization(_Doc):
    """What one materialization of a cell partition says about its record (lineage only)."""

    cell_schema: Literal[1] = 1
    record_path: str
    identity_digest: str
    error_kind: ErrorKind | None
    """The record's error kind; ``None`` for a valid session."""
    generation: str | None
    """The generation that paid for the record; ``None`` for one made outside any generation."""
    recorded_at: str
    reused: bool
    """This materialization ran no session: it re-recorded an earlier record."""
    reused_from_run: str | None = None
    """For a reused materialization: the run whose materialization it re-recorded."""
    reused_data_version: str | None = None
    ran_because: str | None = None
    """For a fresh materialization: why the cell was paid for (e.g. ``identity changed``)."""

    @classmethod
    def fresh(cls, record: CellRecord, path: Path, because: str) -> "CellMaterialization":
        """The lineage of a materialization that records ``record`` as paid (not reused)."""
        return cls(
            record_path=str(path),
            identity_digest=record.identity_digest,
            error_kind=record.error_kind,
            generation=record.generation,
            recorded_at=record.recorded_at,
            reused=False,
            ran_because=because,
        )

    def to_metadata(self) -> dict[str, Any]:
        """Plain metadata values (``None`` becomes Dagster's null value)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any], where: str) -> "CellMaterialization":
        """Read the lineage fields back from a materialization's metadata values.

        Args:
            md: Metadata values (plus tags, ignored) as :func:`record_metadata` returns them.
            where: The partition, for the error message.

        Raises:
            InputError: The metadata is not a cell materialization of this schema.
        """
        fields = {k: md[k] for k in cls.model_fields if k in md}
        try:
            return cls.model_validate(fields)
        except ValidationError as e:
            bad = sorted({".".join(str(p) for p in err["loc"]) for err in e.errors()})
            raise InputError(
                f"{where}: materialization metadata is not a cell materialization "
                f"(fields {', '.join(bad)}); re-materialize the partition"
            ) from None


class CellView(_Doc):
    """One cell partition's latest materialization with its record, as readers use it."""

    task: str
    cell: str
    asset: str
    run_id: str | None
    """The run of the latest materialization."""
    data_version: str | None
    materialization: CellMaterialization
    record: CellRecord

    @property
    def arm(self) -> str:
        """The arm name (the cell key without ``.r<k>``)."""
        return self.record.arm

    @property
    def source_run_id(self) -> str | None:
        """The run that paid for the session behind this cell's record."""
        return self.materialization.reused_from_run if self.materialization.reused else self.run_id


def load_cell(task: str, cell: str, asset: str, md: Mapping[str, Any]) -> CellView | None:
    """The view of one partition from its latest metadata, verified against its record.

    ``None`` when the record cannot be evidence or be reused: its file is gone, unreadable or
    not a record, or its content digest differs from the data version Dagster recorded when it
    was materialized (edited after it was written). Such a cell is paid again.
    """
    where = f"{asset}[{task}|{cell}]"
    mat = CellMaterialization.from_metadata(md, where)
    path = Path(mat.record_path)
    if not path.is_file():
        return None
    data_version = md.get("data_version")
    try:
        record, digest = load_verified(path, data_version)
    except RecordCorrupt:
        return None
    if data_version is not None and data_version != digest:
        return None
    return CellView(
        task=task,
        cell=cell,
        asset=asset,
        run_id=md.get("run_id"),
        data_version=data_version,
        materialization=mat,
        record=record,
    )


class CellLineage(_Doc):
    """Where one evidence cell of a decision came from."""

    task: str
    cell: str
    run_id: str | None
    """The run whose materialization supplied the record."""
    data_version: str
    generation: str | None
    """The generation that paid for the record."""
    reused: bool
    source_run_id: str | None
    """For reused evidence: the run that paid for the session."""

    def source(self) -> str:
        """``fresh`` or ``reused from run <id> (<generation>)`` — how a reader names it."""
        if not self.reused:
            return "fresh"
        gen = self.generation or "outside any generation"
        return f"reused from run {self.source_run_id} ({gen})"


class RefusedCell(_Doc):
    """A planned cell that is not evidence of a decision, and why (e.g. its record was made for
    another identity: another candidate's overlay, changed inputs; or edited after it was
    written)."""

    task: str
    cell: str
    reason: str


AGGREGATE_SET_SCHEMA: Literal[1] = 1


class AggregateSet(_Doc):
    """Every task's aggregate of one evidence set (``aggregates``, one materialization).

    Written once per decision (and per sequential look) by the ``aggregates`` asset, content-
    addressed; ``promotion_decision`` and ``benchmark_report`` read it back and the decision
    re-verifies every evidence row (``defs/evidence.verify_evidence``).
    """

    aggregate_set_schema: Literal[1] = AGGREGATE_SET_SCHEMA
    generation: str | None
    """The generation whose manifest named the evidence; ``None`` for an ad-hoc set."""
    kind: DecisionKind
    """``generation``: exactly the manifest's cells; ``ad_hoc``: the latest records, each
    verified against the identity its arm has now."""
    tasks: list[TaskAggregate]
    """One aggregate per decided task, in task order."""
    refused: list[RefusedCell]
    """The planned cells that are not evidence, each with the reason."""


AGGREGATE_SETS_KEPT = 2
"""Aggregate sets :func:`load_aggregate_set` keeps parsed per process."""
_aggregate_sets: FileCache[AggregateSet] = FileCache(AGGREGATE_SETS_KEPT)


def load_aggregate_set(path: Path) -> AggregateSet:
    """Read an aggregate set; errors name the file and the fields.

    One decision reads the same set three times (the caller's completeness check, the decision,
    the report): 9,000 evidence rows at 1,000 tasks, parsed once per process while the file is
    unchanged (:class:`~bench_assets.kernel.fsutil.FileCache`: any write, rename over or
    ``touch`` reads it again). Treat the result as read-only (``model_copy`` to change it).

    Raises:
        InputError: Missing, unreadable or not an aggregate set of this schema.
    """
    try:
        return _aggregate_sets.get(path, _read_aggregate_set)
    except OSError:
        return _read_aggregate_set(path)  # cannot be stat'ed: read_model names the problem


def _read_aggregate_set(path: Path) -> AggregateSet:
    return read_model(
        path,
        AggregateSet,
        what="aggregate set",
        error=InputError,
        hint="materialize `aggregates` again",
    )


class DecisionDocument(_Doc):
    """``decision.json``: the verdict, what it was about and the evidence it rests on."""

    decision_schema: Literal[1, 2] = DECISION_SCHEMA
    kind: DecisionKind | None = None
    """What the decision rests on (schema 2): ``generation`` — the cells its generation's
    manifest planned, each verified against it — or ``ad_hoc`` — the latest record of each cell,
    verified against the identity its arm has now. ``None`` only in a schema-1 document."""
    generation: str | None
    candidate: str
    overlay_digest: str
    incumbent_skills_digest: str
    overlay_files: str
    """The candidate overlay's files (laid out like the skill tree)."""
    skills_dir: str
    """The incumbent skill tree the overlay would be applied to."""
    target_base_digests: dict[str, str | None]
    """What ``wfbench apply`` compares against: the incumbent files the overlay replaces."""
    decision: Decision
    lineage: list[CellLineage]
    review_decisions: list[ReviewDecision] = []
    """One review-gate decision per review candidate arm (``gate/review.py``)."""
    review_required: list[str] = []
    """The review candidate arms whose decision must be ``promote`` too: those exercising a skill
    the overlay changes (the original required ``candidate_review`` only for a review overlay)."""
    refused: list[RefusedCell] = []
    _lineage_index: dict[tuple[str, str], CellLineage] | None = PrivateAttr(default=None)
    """Planned cells that are not evidence, each with the reason (schema 2)."""

    @model_validator(mode="after")
    def _kind_by_schema(self) -> "DecisionDocument":
        if (self.kind is None) != (self.decision_schema == 1):
            raise ValueError("kind is required from decision_schema 2 on, and absent before")
        return self

    @property
    def basis(self) -> DecisionKind:
        """:attr:`kind`; for a schema-1 document, ``generation`` when it names one."""
        if self.kind is not None:
            return self.kind
        return "generation" if self.generation else "ad_hoc"

    @property
    def verdict(self) -> str:
        """What is applied: ``promote`` only when the decision and every required review decision
        promote; else ``keep_incumbent`` if any of them keeps; else ``insufficient_evidence``."""
        required = [
            r.decision for r in self.review_decisions if r.candidate_arm in self.review_required
        ]
        all_ = [self.decision.decision, *required]
        if all(v == "promote" for v in all_):
            return "promote"
        return "keep_incumbent" if "keep_incumbent" in all_ else "insufficient_evidence"

    def lineage_of(self, task: str, arm: str, run: int) -> CellLineage | None:
        """The lineage of one evidence cell (indexed once: a decision at 1,000 tasks has 9,000
        evidence cells, each looked up)."""
        if self._lineage_index is None:
            self._lineage_index = {(c.task, c.cell): c for c in self.lineage}
        return self._lineage_index.get((task, f"{arm}.r{run}"))


def remember_aggregate_set(path: Path, aset: AggregateSet) -> None:
    """Keep the set just written to ``path`` for this process's next :func:`load_aggregate_set`
    (the decision and the report read it right after the aggregates wrote it: 7 MB at 1,000
    tasks)."""
    _aggregate_sets.put(path, aset)


DECISIONS_KEPT = 8
_decisions: FileCache[DecisionDocument] = FileCache(DECISIONS_KEPT)


def remember_decision(path: Path, doc: DecisionDocument) -> None:
    """Keep the decision just written to ``path`` for this process's next :func:`load_decision`
    (the report reads it right after the decision wrote it)."""
    _decisions.put(path, doc)


def load_decision(path: Path) -> DecisionDocument:
    """Read ``decision.json``; errors name the file and the fields. Kept per process while the
    file is unchanged (:class:`~bench_assets.kernel.fsutil.FileCache`); treat it as read-only.

    Raises:
        InputError: Missing, unreadable or not a decision document of this schema.
    """
    try:
        return _decisions.get(path, _read_decision)
    except OSError:
        return _read_decision(path)  # cannot be stat'ed: read_model names the problem


def _read_decision(path: Path) -> DecisionDocument:
    return read_model(
        path,
        DecisionDocument,
        what=f"decision document (schema 1 to {DECISION_SCHEMA})",
        error=InputError,
        hint="re-run `wfbench decide`",
    )
