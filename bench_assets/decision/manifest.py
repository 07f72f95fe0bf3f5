"""A generation's evidence set: the manifest, written as cells are planned, read by the decision.

A decision must rest on exactly the cells planned for its generation, each verified — never on
"the latest record of each partition", which after a kill, a failed cell or a concurrent run can
be another candidate's. So planning writes, per task, the cells the decision will use
(:class:`ManifestCell`: key, role, the identity digest the evidence must have, and for a reused
cell the run and data version it is reused from) into ``generations/<g>/tasks/<task>.json``
beside a header (:class:`ManifestHeader`: candidate, overlay and skills digests, the tasks
snapshot). The decision reads them back (:func:`load_manifest`) and, per cell, accepts only a
materialization that :func:`accept` verifies:

* a **reused** cell: the materialization of the named run, with the named data version;
* a **paid** cell: a materialization whose record was made in this generation;
* always: the record file's content digest equals the materialization's data version (a record
  edited after it was written, or truncated, is refused), its identity digest equals the planned
  one (a candidate cell's identity includes the overlay digest, so another candidate's cell never
  passes), and it is not an ad-hoc cell.

Anything else is missing evidence, named, and the gate can only answer ``insufficient_evidence``.
"""

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from bench_assets.cells.records import CellRecord, load_verified
from bench_assets.gate.models import Look
from bench_assets.kernel.errors import InputError, RecordCorrupt
from bench_assets.kernel.fsutil import FileCache, atomic_write_json, read_model

SCHEMA_VERSION = 1


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


D = TypeVar("D", bound=_Doc)


class ManifestHeader(_Doc):
    """What a generation is about; written once, before any cell is paid."""

    schema_version: Literal[1] = 1
    generation: str
    candidate: str
    overlay_digest: str
    skills_digest: str
    tasks: list[str]
    """Every task the generation plans (its manifest is complete when each has a task file)."""
    tasks_dir: str
    """The benchmark directory the generation's runs read (its snapshot)."""
    tasks_digest: str
    """Content digest of that directory when the generation started."""
    created_at: str


class ManifestCell(_Doc):
    """One cell the decision will use, and the evidence it must have."""

    task: str
    cell: str
    asset: Literal["comparator_cells", "candidate_cells"]
    role: Literal["comparator", "candidate"]
    identity_digest: str
    action: Literal["run", "reuse"]
    kind: str
    """The planner's reason kind (``missing``, ``canary``, ``reusable``, ...)."""
    source_run_id: str | None = None
    """For a reused cell: the run whose materialization is the evidence."""
    source_data_version: str | None = None
    look: int = Field(default=1, ge=1)
    """The sequential look that planned the cell (1: the generation's plan; later: a top-up or a
    comparator re-payment, see :class:`LookRecord`)."""


class TaskManifest(_Doc):
    """The planned cells of one task."""

    schema_version: Literal[1] = 1
    generation: str
    task: str
    cells: list[ManifestCell]


class Manifest(_Doc):
    """A generation's whole evidence set."""

    header: ManifestHeader
    tasks: dict[str, TaskManifest]

    @property
    def complete(self) -> bool:
        """Every task of the generation has been planned."""
        return all(t in self.tasks for t in self.header.tasks)

    def cells(self) -> list[ManifestCell]:
        """Every planned cell, by task then cell key."""
        return [c for t in sorted(self.tasks) for c in self.tasks[t].cells]


def header_path(folder: Path) -> Path:
    """The header file in a generation's folder."""
    return folder / "manifest.json"


def task_path(folder: Path, task: str) -> Path:
    """One task's planned cells in a generation's folder."""
    return folder / "tasks" / f"{task}.json"


def write_header(folder: Path, header: ManifestHeader) -> None:
    """Write the header (atomically); a resumed generation must keep the same one."""
    atomic_write_json(header_path(folder), header.model_dump(mode="json"))


def write_task(folder: Path, manifest: TaskManifest) -> None:
    """Write one task's planned cells (atomically), before any of them is paid."""
    atomic_write_json(task_path(folder, manifest.task), manifest.model_dump(mode="json"))


def _load(path: Path, model: type[D]) -> D:
    return read_model(
        path,
        model,
        what="generation manifest",
        error=InputError,
        hint="the generation cannot be decided; run `wfbench evolve` to plan it again",
    )


def load_header(folder: Path) -> ManifestHeader | None:
    """A generation's header, or None when it was never planned."""
    path = header_path(folder)
    if not path.exists():
        return None
    out = _load(path, ManifestHeader)
    assert isinstance(out, ManifestHeader)
    return out


def load_manifest(folder: Path) -> Manifest | None:
    """A generation's header and every task planned so far (None: never planned)."""
    header = load_header(folder)
    if header is None:
        return None
    tasks: dict[str, TaskManifest] = {}
    for task in header.tasks:
        path = task_path(folder, task)
        if path.exists():
            tm = _task_files.get(path, _load_task)
            if tm.generation != header.generation or tm.task != task:
                raise InputError(f"{path}: belongs to {tm.generation}/{tm.task}, not {task}")
            tasks[task] = tm
    return Manifest(header=header, tasks=tasks)


TASK_FILES_MAX = 20_000
"""Task manifests kept per process (a decision at 1,000 tasks reads its generation's three
times: the command, the aggregates, the gate input)."""
_task_files: FileCache[TaskManifest] = FileCache(TASK_FILES_MAX)


def _load_task(path: Path) -> TaskManifest:
    """One task manifest as read from its file (kept while the file is unchanged: frozen)."""
    tm = _load(path, TaskManifest)
    assert isinstance(tm, TaskManifest)
    return tm


def planned_tasks(folder: Path) -> list[str] | None:
    """The tasks a generation planned (its header's list), or None when it has no manifest.

    A decision covers exactly these (an ``expensive: true`` task left out is not its evidence).
    """
    header = load_header(folder)
    return None if header is None else sorted(header.tasks)


def load_complete(folder: Path) -> Manifest | None:
    """The manifest a decision uses (None: the generation was planned before manifests existed).

    Raises:
        InputError: The generation's planning never finished (a task has no plan yet): its
            decision must wait for ``wfbench evolve`` to resume it.
    """
    manifest = load_manifest(folder)
    if manifest is not None and not manifest.complete:
        missing = [t for t in manifest.header.tasks if t not in manifest.tasks]
        raise InputError(
            f"{folder}: generation {manifest.header.generation} is not fully planned (no plan yet "
            f"for {', '.join(missing[:5])}); run `wfbench evolve` to resume it"
        )
    return manifest


class Candidate(_Doc):
    """One materialization of a cell partition that might be the evidence."""

    run_id: str
    data_version: str | None
    record_path: str
    reused_from_run: str | None = None
    """The run whose session this materialization re-recorded (``None``: it paid for one)."""

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any]) -> "Candidate | None":
        """A cell materialization's metadata values (``record_metadata``) as a candidate; None
        when it names no record or run."""
        if not md.get("record_path") or not md.get("run_id"):
            return None
        reused = md.get("reused_from_run") if md.get("reused") else None
        return cls(
            run_id=str(md["run_id"]),
            data_version=md.get("data_version"),
            record_path=str(md["record_path"]),
            reused_from_run=str(reused) if reused else None,
        )


class Accepted(_Doc):
    """The verified evidence of one manifest cell."""

    cell: ManifestCell
    run_id: str
    data_version: str
    record: CellRecord
    reused: bool


def _verified(c: Candidate, identity_digest: str) -> tuple[CellRecord | None, str]:
    """The record behind one materialization if it can be evidence for a cell of this identity
    (or why not): readable, unchanged since it was recorded, made for this identity, not ad hoc.
    Every path that decides (a generation's manifest, an ad-hoc decision) checks these."""
    try:
        record, digest = load_verified(Path(c.record_path), c.data_version)
    except RecordCorrupt as e:
        return None, str(e)
    if c.data_version != digest:
        return None, (
            f"record {c.record_path} does not match the data version recorded when it was "
            "materialized (edited or corrupted after it was written)"
        )
    if record.identity_digest != identity_digest:
        overlay = f", overlay {record.overlay_digest[:12]}" if record.overlay_digest else ""
        return None, (
            f"the record of run {c.run_id} was made for another identity (generation "
            f"{record.generation or '(none)'}{overlay})"
        )
    if record.ad_hoc:
        return None, f"run {c.run_id} is an ad-hoc cell"
    return record, ""


NO_MATERIALIZATION = "no materialization of the cell"
"""Why a cell is not evidence when :func:`accept` or :func:`accept_current` judged nothing."""


def considers(cell: ManifestCell, run_id: str) -> bool:
    """Whether :func:`accept` judges a materialization of ``cell`` made by run ``run_id`` at all
    (a reused cell's evidence is the named run's; any other run's is passed over unread)."""
    return cell.action != "reuse" or run_id == cell.source_run_id


def accept(
    cell: ManifestCell, generation: str, found: Iterable[Candidate]
) -> tuple[Accepted | None, str]:
    """The newest materialization that is valid evidence for ``cell`` (or why there is none).

    Args:
        cell: The planned cell.
        generation: The generation being decided.
        found: The partition's materializations, newest first.
    """
    why = NO_MATERIALIZATION
    for c in found:
        if not considers(cell, c.run_id):
            continue
        if cell.action == "reuse" and c.data_version != cell.source_data_version:
            why = (
                f"run {c.run_id} recorded data version {c.data_version}, the plan expected another"
            )
            continue
        record, why_not = _verified(c, cell.identity_digest)
        if record is None:
            why = why_not
            continue
        if cell.action == "run" and record.generation != generation:
            why = f"not paid in {generation} (the newest matching record is from run {c.run_id})"
            continue
        return (
            Accepted(
                cell=cell,
                run_id=c.run_id,
                # _verified compared it with the record's digest: not hashed again (9,000
                # records twice per 1,000-task decision)
                data_version=str(c.data_version),
                record=record,
                reused=cell.action == "reuse",
            ),
            "",
        )
    return None, why


class Current(_Doc):
    """The verified evidence of one cell of an ad-hoc decision (no manifest)."""

    candidate: Candidate
    record: CellRecord


def accept_current(identity_digest: str, found: Iterable[Candidate]) -> tuple[Current | None, str]:
    """The newest materialization that is valid evidence for a cell whose arm has the identity
    ``identity_digest`` now — an ad-hoc decision's check, the same as a generation's but for the
    generation that paid for it (or why there is none).

    Args:
        identity_digest: The identity digest the cell's arm has now.
        found: The partition's materializations, newest first.
    """
    why = NO_MATERIALIZATION
    for c in found:
        record, why_not = _verified(c, identity_digest)
        if record is not None:
            return Current(candidate=c, record=record), ""
        why = why_not
    return None, why


class LookRecord(_Doc):
    """A sequential look that did not decide: what it saw and the cells it added.

    Written (``looks/look-<k>.json``, ``k`` = 1, 2, … in the order they happened) before any of
    its cells is merged into the task manifests or paid, so a generation killed mid-top-up resumes
    at the same look with the same cells. The final decision reads every record: its look at the
    candidate is one more than the top-ups, and their statistics are its ``prior_looks``.
    """

    schema_version: Literal[1] = 1
    generation: str
    look: int = Field(ge=1)
    """The record's place in the sequence (the gate's look number is in ``statistics``)."""
    action: Literal["top_up", "repay_comparator"]
    decided_at: str
    statistics: Look
    """The gate's statistics at this look."""
    reasons: list[str]
    """The gate's reasons at this look (why it did not decide)."""
    candidate_runs: int = Field(ge=1)
    """Candidate runs planned on every task once this look's cells are paid; a partial top-up
    (``statistics.top_up_tasks``) adds its runs only on the tasks it lists, so it leaves this
    unchanged."""
    cells: list[ManifestCell]
    """The cells this look plans: new top-up cells, or comparator cells re-planned as fresh."""


class LookHistory(NamedTuple):
    """What a generation's look records mean for its next look (the driver's and the decision's
    one reading of them)."""

    look: int
    """The gate's next look at the candidate: one more than the top-ups paid so far."""
    comparator_repaid: bool
    """Drift made the generation re-pay the comparator; its pooled history is set aside."""
    candidate_runs: int
    """Candidate runs per task planned so far (top-ups included)."""


def look_history(looks: Sequence[LookRecord], runs: int) -> LookHistory:
    """:class:`LookHistory` of ``looks`` for a benchmark planning ``runs`` runs per cell."""
    return LookHistory(
        look=1 + sum(lr.action == "top_up" for lr in looks),
        comparator_repaid=any(lr.action == "repay_comparator" for lr in looks),
        candidate_runs=looks[-1].candidate_runs if looks else runs,
    )


def look_path(folder: Path, look: int) -> Path:
    """One look's record in a generation's folder."""
    return folder / "looks" / f"look-{look}.json"


def write_look(folder: Path, record: LookRecord) -> None:
    """Write a look record (atomically), before its cells are planned into the task manifests."""
    atomic_write_json(look_path(folder, record.look), record.model_dump(mode="json"))


def load_looks(folder: Path) -> list[LookRecord]:
    """The generation's non-deciding looks, in order (1, 2, …; a gap is an error)."""
    out: list[LookRecord] = []
    while look_path(folder, len(out) + 1).exists():
        path = look_path(folder, len(out) + 1)
        rec = _load(path, LookRecord)
        assert isinstance(rec, LookRecord)
        if rec.look != len(out) + 1 or (out and rec.generation != out[0].generation):
            raise InputError(f"{path}: look {rec.look} of {rec.generation} is out of sequence")
        out.append(rec)
    stray = sorted(p.name for p in (folder / "looks").glob("look-*.json")) if out else []
    if len(stray) > len(out):
        raise InputError(f"{folder / 'looks'}: look records {', '.join(stray)} have a gap")
    return out


def merge_look(folder: Path, record: LookRecord) -> int:
    """Plan a look's cells into the task manifests (idempotent); returns the cells changed.

    A cell of the same key is replaced (a comparator cell re-planned fresh), a new key is added.
    """
    changed = 0
    by_task: dict[str, list[ManifestCell]] = {}
    for c in record.cells:
        by_task.setdefault(c.task, []).append(c)
    for task, cells in sorted(by_task.items()):
        path = task_path(folder, task)
        tm = _load(path, TaskManifest)
        assert isinstance(tm, TaskManifest)
        new = {c.cell: c for c in cells}
        merged = [new.get(c.cell, c) for c in tm.cells]
        have = {c.cell for c in tm.cells}
        merged += [c for c in cells if c.cell not in have]
        diff = sum(1 for c in merged if c not in tm.cells)
        if diff:
            changed += diff
            write_task(folder, tm.model_copy(update={"cells": merged}))
    return changed


def now_iso() -> str:
    """Current UTC time, ISO 8601."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
