"""The tamper-evident, append-only ledger of promotion decisions (`wfbench ledger verify`).

Every gate decision and every application is appended; see the README section "Generations,
reuse and the gate".

The ledger is a JSONL file, one entry per line, each line the canonical JSON
(:func:`hashing.canonical_json`) of a :class:`LedgerEntry`::

    {candidate, decision, decision_digest, generation, hash, kind, payload, prev_hash,
     recorded_at, schema_version, seq}

``kind`` (schema 2) says what the decision rests on: ``generation`` — a generation's evidence
manifest, every cell verified against it (``wfbench evolve``, ``wfbench decide --generation``) —
or ``ad_hoc`` — the latest records, each verified against the identity its arm has now (``wfbench
decide`` without a generation, a decision materialized from the UI). ``wfbench apply`` applies
only a generation-backed promote. An application (``decision: applied``) has the kind of the
decision it applied. Schema-1 entries (written before the field) have none; :attr:`LedgerEntry.
basis` reads one from their generation id. A schema version lower than the entry before it is a
fault.

``hash`` is ``sha256(canonical_json(entry without "hash"))`` and ``prev_hash`` is the previous
entry's ``hash`` (64 zeros for the first entry, ``seq`` 1). :func:`verify` re-derives everything and
names the first bad line and its ``seq``:

* an edited byte anywhere in an entry: the line is no longer JSON, no longer an entry, no longer
  canonical (a byte edit that keeps the same value, e.g. inside whitespace, changes the canonical
  form), or its hash no longer matches its content;
* a removed, inserted or reordered entry: a ``seq`` gap or a ``prev_hash`` that does not match the
  entry before it;
* a truncated or garbled last line: not JSON, or no newline at the end of the file;
* a removed *last* entry, or an entry appended with a correct chain by hand: the chain alone cannot
  tell, so every append also records the head (``seq`` and ``hash`` of the last entry) in a sidecar
  file ``<ledger>.head`` (canonical JSON, checked byte for byte), and :func:`verify` checks the
  ledger against it. An anchor kept elsewhere (e.g. the head recorded in the decision's
  materialization metadata) can be passed as ``expected_head``; only such an external anchor
  defeats someone who rewrites the ledger *and* the sidecar together, since the hashes are not
  keyed.

Durability: :func:`append` never appends in place. Under an exclusive lock on the ledger's directory
it reads and verifies the whole ledger, then writes the whole new file through
:func:`fsutil.atomic_write_bytes` (temp file, fsync, rename) and fsyncs the directory, then does the
same for the head. A crash therefore leaves the old ledger or the new one, never a torn line (an
``O_APPEND`` write that is cut by a crash or a full disk can leave half a line, which would then
need a repair step that is indistinguishable from tampering). Rewriting costs O(size) per append; a
ledger gains one small entry per generation (about 52 a year), so that is negligible. A crash
*between* the ledger rename and the head rename leaves exactly one entry beyond the head (or, for
the very first append, a one-entry ledger with no head at all), which :func:`verify` reports
loudly: the chain alone cannot tell it from a forged append.

Repair (``wfbench ledger repair``): :func:`repair` re-anchors a ledger whose *only* fault is that
missing head write, and refuses everything else (a broken chain, an edited byte, a head anchor
ahead of the file or behind by more than one entry, a garbled anchor, a missing anchor beside more
than one entry), changing nothing. A caller that knows which entry it was appending (the apply
journal, :mod:`bench_assets.generation.apply`) passes its hash as ``expect_hash``, so only that
entry is accepted.

Why one file over 500 lines: verification, append, anchoring and repair share one format and
one chain invariant; the docstring above states it once and every function below keeps it.
"""

import contextlib
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bench_assets.cells.records import now_iso
from bench_assets.kernel.errors import LedgerError
from bench_assets.kernel.fsutil import atomic_write_bytes, fsync_dir, locked
from bench_assets.kernel.hashing import canonical_json, sha256_json, short

SCHEMA_VERSION = 2
"""Schema of new entries: 2 added ``kind``; schema-1 entries still verify."""
GENESIS = "0" * 64
"""``prev_hash`` of the first entry."""
HEAD_SUFFIX = ".head"
MAX_PAYLOAD_BYTES = 16 * 1024
"""The payload is a small summary; the full decision lives in its own file, bound by its digest."""
FILE_MODE = 0o444
"""Ledger and head are read-only on disk: appends replace the file, nothing edits it in place."""

_HEX64 = r"^[0-9a-f]{64}$"

DecisionKind = Literal["generation", "ad_hoc"]
"""What a decision rests on: a generation's evidence manifest, or the latest records (ad hoc)."""


class LedgerEntry(BaseModel):
    """One decision, chained to the one before it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    schema_version: int = Field(ge=1, le=SCHEMA_VERSION)
    seq: int = Field(ge=1)
    recorded_at: str
    generation: str | None
    decision: str = Field(min_length=1)
    """The gate's outcome, e.g. ``promote``, ``keep_incumbent``, ``insufficient_evidence``."""
    candidate: str | None
    """The candidate the decision is about (overlay id or digest)."""
    decision_digest: str = Field(pattern=_HEX64)
    """``sha256_json`` of the full decision document."""
    payload: dict[str, Any]
    prev_hash: str = Field(pattern=_HEX64)
    hash: str = Field(pattern=_HEX64)
    kind: DecisionKind | None = None
    """What the decision rests on (schema 2; see the module docstring). ``None`` only on a
    schema-1 entry, written before the field existed."""

    @model_validator(mode="after")
    def _kind_by_schema(self) -> "LedgerEntry":
        if (self.kind is None) != (self.schema_version == 1):
            raise ValueError(
                "kind is required from schema 2 on, and absent before"
                if self.kind is None
                else "a schema-1 entry has no kind"
            )
        return self

    @property
    def basis(self) -> DecisionKind:
        """:attr:`kind`; for a schema-1 entry, ``generation`` when it names one, else
        ``ad_hoc``."""
        if self.kind is not None:
            return self.kind
        return "generation" if self.generation else "ad_hoc"


class LedgerHead(BaseModel):
    """The last entry of a ledger: an anchor to verify it against."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    seq: int = Field(ge=0)
    """0 for an empty ledger."""
    hash: str = Field(pattern=_HEX64)


class VerifyResult(BaseModel):
    """What :func:`verify` found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool
    entries: int
    """Entries that verified (all of them when ``ok``; those before the first bad one otherwise)."""
    head: LedgerHead
    """The last entry that verified."""
    first_bad_line: int | None = None
    """1-based line number of the first bad entry (where a missing entry belongs)."""
    first_bad_seq: int | None = None
    """The ``seq`` found on (or, for a missing entry, expected at) that line, when known."""
    reason: str | None = None

    def message(self, path: Path) -> str:
        """One line for people.

        Args:
            path: The ledger file.

        Returns:
            ``ledger <path>: OK …`` or ``ledger <path>: FAILED at line L (seq S): reason …``.
        """
        if self.ok:
            return (
                f"ledger {path}: OK, {self.entries} entries, head seq {self.head.seq} "
                f"hash {short(self.head.hash)}"
            )
        if self.first_bad_line is None:
            return f"ledger {path}: FAILED: {self.reason} ({self.entries} entries verified)"
        seq = "?" if self.first_bad_seq is None else str(self.first_bad_seq)
        return (
            f"ledger {path}: FAILED at line {self.first_bad_line} (seq {seq}): {self.reason} "
            f"({self.entries} entries before it verified)"
        )


def head_path(path: Path) -> Path:
    """The sidecar head anchor of a ledger file."""
    path = Path(path)
    return path.with_name(path.name + HEAD_SUFFIX)


def _entry_hash(obj: Mapping[str, Any]) -> str:
    return sha256_json({k: v for k, v in obj.items() if k != "hash"})


def _check_json(value: Any, where: str) -> None:
    """Only plain JSON that survives a round trip unchanged may enter the ledger."""
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: non-finite number {value!r}")
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"{where}: string is not valid Unicode") from exc
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: key {key!r} is not a string")
            _check_json(item, f"{where}.{key}")
        return
    raise ValueError(f"{where}: {type(value).__name__} is not JSON")


def _bad(
    entries: list[LedgerEntry], line: int | None, seq: int | None, reason: str
) -> VerifyResult:
    head = LedgerHead(seq=entries[-1].seq, hash=entries[-1].hash) if entries else _empty_head()
    return VerifyResult(
        ok=False,
        entries=len(entries),
        head=head,
        first_bad_line=line,
        first_bad_seq=seq,
        reason=reason,
    )


def _empty_head() -> LedgerHead:
    return LedgerHead(seq=0, hash=GENESIS)


def _scan(data: bytes) -> tuple[list[LedgerEntry], VerifyResult | None]:
    """Parse and chain-check every line; stop at the first bad one."""
    entries: list[LedgerEntry] = []
    terminated = data.endswith(b"\n")
    lines = data.split(b"\n")
    lines = lines[:-1] if terminated or not data else lines
    prev = GENESIS
    for number, raw in enumerate(lines, start=1):
        cut = not terminated and number == len(lines)
        cut_note = " (no newline at end of file: truncated?)" if cut else ""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return entries, _bad(entries, number, None, f"line is not UTF-8{cut_note}")
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            return entries, _bad(entries, number, None, f"line is not JSON ({msg}){cut_note}")
        if not isinstance(obj, dict):
            return entries, _bad(entries, number, None, f"line is not a JSON object{cut_note}")
        raw_seq = obj.get("seq")
        seq = raw_seq if isinstance(raw_seq, int) and not isinstance(raw_seq, bool) else None
        try:
            entry = LedgerEntry.model_validate(obj)
        except ValidationError as exc:
            fields = sorted({".".join(str(p) for p in e["loc"]) or "-" for e in exc.errors()})
            whole = [str(e["msg"]) for e in exc.errors() if not e["loc"]]  # a model-level rule
            said = f": {'; '.join(whole)}" if whole else ""
            reason = f"not a ledger entry (bad fields: {', '.join(fields)}{said}){cut_note}"
            return entries, _bad(entries, number, seq, reason)
        problems: list[str] = []
        if canonical_json(obj) != text:
            problems.append("line is not in canonical form (bytes were edited)")
        if _entry_hash(obj) != entry.hash:
            problems.append("hash does not match the entry's content (the entry was edited)")
        expected = len(entries) + 1
        if entry.seq != expected:
            problems.append(
                f"seq {entry.seq} where {expected} was expected "
                "(an entry was removed, inserted or reordered)"
            )
        if entry.prev_hash != prev:
            before = "the genesis hash" if not entries else f"the hash of seq {entries[-1].seq}"
            problems.append(f"prev_hash does not match {before} (chain broken)")
        if entries and entry.schema_version < entries[-1].schema_version:
            problems.append(
                f"schema {entry.schema_version} after an entry of schema "
                f"{entries[-1].schema_version} (written outside the ledger API)"
            )
        if cut:
            problems.append("no newline at end of file (truncated or appended by hand)")
        if problems:
            return entries, _bad(entries, number, entry.seq, "; ".join(problems))
        entries.append(entry)
        prev = entry.hash
    return entries, None


def _check_head(entries: list[LedgerEntry], head: LedgerHead, source: str) -> VerifyResult | None:
    """Compare the verified chain with an anchor; ``None`` when they agree."""
    n = len(entries)
    if head.seq > n:
        missing = f"seq {n + 1}" if head.seq == n + 1 else f"seq {n + 1}..{head.seq}"
        return _bad(
            entries,
            n + 1,
            n + 1,
            f"the ledger ends at seq {n} but {source} records seq {head.seq}: "
            f"{missing} removed (truncated ledger)",
        )
    at = entries[head.seq - 1].hash if head.seq else GENESIS
    if at != head.hash:
        return _bad(
            entries[: max(head.seq - 1, 0)],
            head.seq or 1,
            head.seq or None,
            f"hash of seq {head.seq} differs from {source} (the ledger was rewritten)",
        )
    if head.seq < n:
        return _bad(
            entries[: head.seq],
            head.seq + 1,
            head.seq + 1,
            f"entry after the head recorded in {source} (seq {head.seq}): appended outside "
            "the ledger API, or an append was interrupted (see `wfbench ledger repair`)",
        )
    return None


def _read_head(path: Path) -> LedgerHead | None | str:
    """The sidecar anchor, ``None`` when absent, or a problem description."""
    hp = head_path(path)
    if not hp.exists():
        return None
    raw = hp.read_bytes()
    try:
        head = LedgerHead.model_validate_json(raw)
    except ValidationError:
        return f"head anchor {hp.name} is unreadable (edited?)"
    if raw != _head_bytes(head):
        return f"head anchor {hp.name} is not in canonical form (edited?)"
    return head


def verify_bytes(
    data: bytes, *, head: LedgerHead | None = None, expected_head: LedgerHead | None = None
) -> VerifyResult:
    """Check ledger content against optional anchors, without touching any file.

    Args:
        data: The ledger file's bytes.
        head: The sidecar head anchor, when there is one.
        expected_head: An anchor kept outside the ledger's directory.

    Returns:
        The result; when not ``ok`` it names the first bad line and its ``seq``.
    """
    entries, bad = _scan(data)
    if bad is not None:
        return bad
    for anchor, source in ((head, "the head anchor"), (expected_head, "the expected head")):
        if anchor is not None and (problem := _check_head(entries, anchor, source)) is not None:
            return problem
    last = LedgerHead(seq=entries[-1].seq, hash=entries[-1].hash) if entries else _empty_head()
    return VerifyResult(ok=True, entries=len(entries), head=last)


def verify(path: Path, *, expected_head: LedgerHead | None = None) -> VerifyResult:
    """Check every byte of a ledger file and its head anchor.

    Args:
        path: The ledger file. A missing ledger without a head anchor is an empty, valid ledger;
            a non-empty ledger without its head anchor fails.
        expected_head: An anchor kept outside the ledger's directory, checked as well.

    Returns:
        The result; when not ``ok`` it names the first bad line and its ``seq``.
    """
    path = Path(path)
    data = path.read_bytes() if path.exists() else b""
    anchor = _read_head(path)
    if isinstance(anchor, str):
        entries, bad = _scan(data)
        return bad if bad is not None else _bad(entries, None, None, anchor)
    result = verify_bytes(data, head=anchor, expected_head=expected_head)
    if result.ok and anchor is None and result.entries:
        return _bad(
            read_entries(data), None, None, f"head anchor {head_path(path).name} is missing"
        )
    return result


def read_entries(data: bytes) -> list[LedgerEntry]:
    """The entries of ledger bytes up to the first bad line (no anchor check).

    Args:
        data: The ledger file's bytes.

    Returns:
        The entries that verify as a chain, in order.
    """
    return _scan(data)[0]


def read(path: Path, *, expected_head: LedgerHead | None = None) -> list[LedgerEntry]:
    """Every entry of a ledger that verifies.

    Args:
        path: The ledger file.
        expected_head: An external anchor, as for :func:`verify`.

    Returns:
        The entries in order.

    Raises:
        LedgerError: The ledger does not verify; the message names the first bad entry.
    """
    path = Path(path)
    result = verify(path, expected_head=expected_head)
    if not result.ok:
        raise LedgerError(result.message(path))
    return read_entries(path.read_bytes() if path.exists() else b"")


def _head_bytes(head: LedgerHead) -> bytes:
    return (canonical_json(head.model_dump(mode="json")) + "\n").encode("utf-8")


def _write_head(path: Path, head: LedgerHead) -> None:
    atomic_write_bytes(head_path(path), _head_bytes(head), mode=FILE_MODE)
    fsync_dir(path.parent)


def append(
    path: Path,
    *,
    decision: str,
    decision_json: Mapping[str, Any],
    generation: str | None,
    candidate: str | None,
    kind: DecisionKind,
    payload: Mapping[str, Any] | None = None,
    recorded_at: str | None = None,
    on_written: Callable[[LedgerEntry], None] | None = None,
) -> LedgerEntry:
    """Append one decision durably, after verifying the whole ledger.

    Args:
        path: The ledger file (created with its head anchor when missing).
        decision: The gate's outcome.
        decision_json: The full decision document; only its ``sha256_json`` digest is stored.
        generation: The generation id.
        candidate: The candidate the decision is about.
        kind: What the decision rests on (for an application: the applied decision's kind).
        payload: A small JSON summary (at most :data:`MAX_PAYLOAD_BYTES` as canonical JSON).
        recorded_at: UTC ISO time; now when omitted.
        on_written: Called with the entry once the ledger file holding it is durable and before
            the head anchor is written (the one moment an interruption leaves the ledger
            unverifiable until :func:`repair`); tests and the apply crash hook use it.

    Returns:
        The entry written.

    Raises:
        LedgerError: The existing ledger does not verify; nothing is written.
        ValueError: The payload or decision document is not plain JSON, or the payload is too big.
    """
    path = Path(path)
    body = dict(payload or {})
    _check_json(body, "payload")
    _check_json(dict(decision_json), "decision_json")
    size = len(canonical_json(body).encode("utf-8"))
    if size > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload is {size} bytes; the ledger keeps at most {MAX_PAYLOAD_BYTES}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.parent):  # one writer at a time per ledger folder
        result = verify(path)
        if not result.ok:
            raise LedgerError(f"refusing to append: {result.message(path)}")
        obj: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "seq": result.head.seq + 1,
            "recorded_at": recorded_at or now_iso(),
            "generation": generation,
            "decision": decision,
            "candidate": candidate,
            "decision_digest": sha256_json(dict(decision_json)),
            "payload": body,
            "prev_hash": result.head.hash,
            "kind": kind,
        }
        obj["hash"] = _entry_hash(obj)
        entry = LedgerEntry.model_validate(obj)
        old = path.read_bytes() if path.exists() else b""
        atomic_write_bytes(path, old + (canonical_json(obj) + "\n").encode("utf-8"), mode=FILE_MODE)
        fsync_dir(path.parent)
        if on_written is not None:
            on_written(entry)
        _write_head(path, LedgerHead(seq=entry.seq, hash=entry.hash))
    return entry


class RepairResult(BaseModel):
    """What :func:`repair` did."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Literal["none", "reanchored"]
    """``none``: the ledger already verified; ``reanchored``: the head anchor was re-recorded."""
    head: LedgerHead
    """The head anchor now on disk (for ``none``, the last entry)."""
    previous: LedgerHead | None
    """The anchor before the repair; ``None`` when it was missing (or for ``none``)."""
    entry: LedgerEntry | None
    """The entry the repair accepted (the one the interrupted append wrote)."""

    def message(self, path: Path) -> str:
        """One line for people.

        Args:
            path: The ledger file.

        Returns:
            What was done, naming the ledger and the accepted entry.
        """
        if self.action == "none" or self.entry is None:
            return f"ledger {path}: OK, nothing to repair (head seq {self.head.seq})"
        e = self.entry
        was = "missing" if self.previous is None else f"at seq {self.previous.seq}"
        return (
            f"ledger {path}: re-anchored head at seq {e.seq} hash {short(e.hash)} (was {was}); "
            f"accepted entry seq {e.seq}: {e.decision} of {e.candidate} in {e.generation}, "
            f"recorded {e.recorded_at}"
        )


def _unanchored(path: Path) -> tuple[LedgerEntry | None, LedgerHead | None]:
    """The entry an interrupted append left beyond the head anchor, and the anchor it left.

    Returns ``(None, None)`` when the ledger verifies.

    Raises:
        LedgerError: The ledger has any other fault; the message names the file and the fault.
    """
    result = verify(path)
    if result.ok:
        return None, None
    refuse = f"cannot repair ledger {path}"
    entries, bad = _scan(path.read_bytes() if path.exists() else b"")
    if bad is not None:
        raise LedgerError(
            f"{refuse}: the chain itself does not verify ({bad.message(path)}); only a missing "
            "head write is repaired"
        )
    anchor = _read_head(path)
    if isinstance(anchor, str):
        raise LedgerError(f"{refuse}: {anchor}; only a missing head write is repaired")
    if not entries:  # an empty ledger verifies unless an anchor points past it
        raise LedgerError(f"{refuse}: {result.reason}; only a missing head write is repaired")
    last = entries[-1]
    before = LedgerHead(seq=entries[-2].seq, hash=entries[-2].hash) if len(entries) > 1 else None
    if anchor is None:
        if before is None:
            return last, None  # the first append wrote its line, not yet its anchor
        raise LedgerError(
            f"{refuse}: head anchor {head_path(path).name} is missing beside {len(entries)} "
            "entries (only the very first append can leave no anchor); refusing to guess"
        )
    if anchor == (before or _empty_head()):
        return last, anchor
    raise LedgerError(
        f"{refuse}: {result.reason}; only a head anchor exactly one entry behind the ledger "
        "(an interrupted append) is repaired"
    )


def unanchored_entry(path: Path) -> LedgerEntry | None:
    """The entry an interrupted append left past the head anchor, without changing anything.

    Args:
        path: The ledger file.

    Returns:
        That entry when the ledger's only fault is a missing head write (what :func:`repair`
        would accept); ``None`` when the ledger verifies.

    Raises:
        LedgerError: The ledger has any other fault; the message names the file and the fault.
    """
    return _unanchored(Path(path))[0]


def repair(path: Path, *, expect_hash: str | None = None) -> RepairResult:
    """Re-anchor a ledger whose only fault is a missing head write (`wfbench ledger repair`).

    An append that is interrupted between writing the ledger and writing its head anchor leaves
    the chain intact and the anchor exactly one entry behind (or absent, for the very first
    append). That, and only that, is repaired: the anchor is re-recorded at the last entry. Any
    other fault is refused and nothing is changed.

    Args:
        path: The ledger file.
        expect_hash: When given, the unanchored entry must have this hash (a caller that knows
            which append it interrupted, such as the apply journal, accepts nothing else).

    Returns:
        What was done: ``none`` when the ledger already verifies, else ``reanchored`` with the old
        anchor and the entry accepted.

    Raises:
        LedgerError: Any other fault (broken chain, edited byte, anchor ahead of the file or more
            than one entry behind, garbled anchor, an unexpected entry); the message names the
            file and the fault, and nothing was written.
    """
    path = Path(path)
    guard = locked(path.parent) if path.parent.is_dir() else contextlib.nullcontext()
    with guard:  # one writer at a time per ledger folder
        entry, previous = _unanchored(path)
        if entry is None:
            result = verify(path)
            return RepairResult(action="none", head=result.head, previous=None, entry=None)
        if expect_hash is not None and entry.hash != expect_hash:
            raise LedgerError(
                f"cannot repair ledger {path}: the entry past the head anchor (seq {entry.seq}, "
                f"hash {short(entry.hash)}) is not the one expected ({short(expect_hash)})"
            )
        head = LedgerHead(seq=entry.seq, hash=entry.hash)
        _write_head(path, head)
    return RepairResult(action="reanchored", head=head, previous=previous, entry=entry)
