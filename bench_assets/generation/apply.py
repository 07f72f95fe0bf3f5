"""Apply a promoted candidate overlay to the incumbent skill tree, as a crash-safe transaction.

This is the last step of a generation (:mod:`bench_assets.driver.evolve`), run when
``apply.on_promote`` is set, or by ``wfbench apply``; see the README section "Generations, reuse
and the gate".

An overlay is a folder laid out like the skill tree; each of its files replaces or adds one file.
Applying happens in two moments:

* **At decision time** :func:`plan_application` records, for every overlay file, the sha256 of the
  incumbent file it will replace (``None`` when it adds a file). The decision stores this mapping
  as ``target_base_digests``.
* **At apply time** :func:`apply_overlay` replaces the files only if every one of them still has
  the digest the decision was made on, so a file edited meanwhile is never silently overwritten.

The write-ahead journal
-----------------------

Every application is described, before its first write, by a journal (:class:`ApplyJournal`, a
typed, schema-versioned JSON document written atomically with :func:`fsutil.atomic_write_bytes`
and made durable with :func:`fsutil.fsync_dir`). It names every target, the digest it must have
before (``None``: absent), the staged copy and its backup (``.<name>.wfbench-apply-<token>.new`` /
``.bak``, beside the target), the digest it has after, the directories the application creates,
the ledger entry it will append, and the **phase**:

``prepared``
    written before anything else; no target has been touched yet.
``committing``
    every staged copy is durable (its inode is recorded); targets may now be replaced.
``committed``
    (only without a ledger) every target is in place, read back and fsynced.

The journal lives **beside the skill tree, outside it**: ``tasks/.skills`` + :data:`JOURNAL_SUFFIX`
for ``tasks/skills`` (see :func:`journal_path`). Beside, because whoever touches the tree (an
``apply`` with any artifact root, or none; ``evolve``; the driver) finds it from the tree alone, on
the same filesystem as the staged files it names; outside, because nothing that scans the tree
(the incumbent snapshot, the worktree install) may ever see it. The artifact store was rejected:
a tree applied with one ``$WFBENCH_ARTIFACTS`` and recovered with another would silently lose its
journal.

**The commit point** is the moment the application is durably *recorded*: its ledger entry is in
the ledger file (whether or not the head anchor was written after it), or, when no ledger is
given, the journal reached ``committed``. Both happen only after every target was replaced, read
back and fsynced. Before it, an interrupted application is rolled **back** (the tree becomes
byte-identical to before, nothing is recorded); after it, **forward** (backups are removed, the
ledger's head anchor is re-written if the interruption fell between the ledger write and its
anchor). Never half.

:func:`recover` settles an unfinished journal under the same :func:`fsutil.locked` lock as
:func:`apply_overlay` (which calls it first, too). It is driven by the journal and by what is on
disk, never by memory, so it is idempotent: a kill during recovery is settled by the next one. An
in-process failure midway is settled by the very same code, from the journal on disk.

Leftovers
---------

Staged and backup files are named with :data:`~bench_assets.inputs.skills.TEMP_TAG`. Those of a
journaled application are removed by its recovery (the journal's token proves they are ours and
redundant). Any other file or directory carrying the tag, in the overlay or in the skill tree, is
**refused**, naming it, never ignored and never deleted: in the tree, an orphan ``.bak`` may be the
only copy of bytes a person must look at (a rollback that met a concurrent edit keeps it on
purpose), and deleting it would lose them, while ignoring it would let the incumbent snapshot copy
it; in an overlay, it is the sign of an overlay copied from a half-applied tree, and skipping it
would apply a set other than the one reviewed and digested.
:func:`~bench_assets.inputs.skills.find_leftovers` lists them for other scanners (it lives with the
skill snapshot, which must refuse them too).

The phases of :func:`apply_overlay`, holding the skill tree's lock:

1. **Recover** any unfinished journal; refuse leftovers no journal accounts for.
2. **Check** (nothing is written; a problem raises
   :class:`~bench_assets.kernel.errors.ApplyRefused`): the decision is a generation's ``promote``
   (an ad-hoc decision is never applied); overlay files and expected digests name the same paths;
   every path is relative and stays inside the tree; no overlay file, target or directory on the way
   is a symlink; every target is a regular file or absent and has the expected digest; the ledger
   verifies and the record fits in it.
3. **Journal** (``prepared``), then **stage** each new file under its temporary name (fsynced),
   creating missing directories, then journal ``committing``.
4. **Commit**, file by file in path order, as a compare-and-swap: the target is hard-linked to its
   backup, the backup's digest is checked, the staged file is renamed over the target (a file
   expected absent is put in place with :func:`os.link`, which fails if one appeared). Every target
   is read back; directories are fsynced.
5. **Record** (the commit point): the ledger entry (decision ``applied``, payload ``apply_id`` =
   the journal's token and every file's old and new digest), or journal ``committed``.
6. **Clean up**: backups removed, directories fsynced, journal removed.

Rollback never overwrites a file that changed after it was replaced (its inode or digest differ
from the staged copy's): it leaves that file, keeps its backup and raises
:class:`~bench_assets.kernel.errors.ApplyFailed` with ``restored=False`` naming both.

Residual risk, accepted: between taking a file's backup and renaming over it (microseconds) an
editor that replaces the file by rename would lose its edit; an editor writing in place inside that
window is caught by the read-back check. Backups need hard links (every local Linux filesystem).

Fault injection: tests pass a ``hook`` (:data:`ApplyHook`) to interrupt in process, and kill a
real process at a named point with ``WFBENCH_TEST_CRASH_AT=<phase>:<k>`` (:func:`_crash_point`,
which sends the process ``SIGKILL``; unset, it does nothing).

Why one file over 500 lines: the crash-safety argument (check, journal, stage, compare-and-swap
commit, commit point, roll back or forward) has to be read as one piece; every phase is a section.
Looked at again for issue 28: the journal's models could stand apart, but :func:`_prepare`,
:func:`_forward` and :func:`_settle` each rely on every invariant of the journal they write or
read, and a reader checking one against the other needs both in view; only what another room needs
left (the leftover scan, for the skill snapshot: :mod:`bench_assets.inputs.skills`).
"""

import errno
import json
import os
import re
import secrets
import signal
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench_assets.cells.records import now_iso
from bench_assets.decision import ledger as ledger_store
from bench_assets.decision.ledger import DecisionKind
from bench_assets.inputs.skills import TEMP_TAG, find_leftovers
from bench_assets.kernel import fsutil
from bench_assets.kernel.errors import ApplyFailed, ApplyRefused, LedgerError
from bench_assets.kernel.hashing import canonical_json, sha256_bytes, sha256_json

PROMOTE = "promote"
"""The only decision that may be applied."""
GENERATION: DecisionKind = "generation"
"""The only kind of decision that may be applied: one resting on a generation's manifest."""
APPLIED = "applied"
"""The ledger decision recorded for a successful application."""
JOURNAL_SUFFIX = ".wfbench-apply.journal.json"
"""The journal of skill tree ``<parent>/<name>`` is ``<parent>/.<name>`` + this."""
JOURNAL_SCHEMA_VERSION: Literal[1] = 1
CRASH_ENV = "WFBENCH_TEST_CRASH_AT"
"""Test-only: ``<phase>:<k>`` kills the applying process with SIGKILL at that point."""

_LITTER = frozenset({"__pycache__", ".DS_Store"})
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX64_PATTERN = r"^[0-9a-f]{64}$"
_NEW_FILE_MODE = 0o644
_NEW_EXEC_MODE = 0o755

ApplyPhase = Literal[
    "journaled", "staged", "replaced", "synced", "ledger-written", "recorded", "undone"
]
"""Named points of an application (``k`` counts files, 1-based in path order, or is 1):

``journaled`` the journal was written (``prepared``); ``staged`` the k-th file was written to its
temporary name; ``replaced`` the k-th file was put in place; ``synced`` every file is in place,
read back and fsynced, the record is next; ``ledger-written`` the ledger file holds the entry but
its head anchor is not written yet; ``recorded`` the commit point was passed; ``undone`` (recovery
only) the k-th file was settled while rolling back or forward."""
ApplyHook = Callable[[ApplyPhase, int, str], None]
"""Called as ``hook(phase, k, path)`` at each point of :data:`ApplyPhase` but ``undone``. An
exception raised by the hook is treated exactly like a failure of the application at that point
(tests use it to interrupt an application midway, or to edit a target concurrently)."""


class AppliedFile(BaseModel):
    """One file an application wrote."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    """Relative posix path inside the skill tree."""
    old_sha256: str | None
    """Digest of the incumbent file it replaced; ``None`` when the file was added."""
    new_sha256: str
    """Digest of the overlay file now in place."""


class ApplyResult(BaseModel):
    """What :func:`apply_overlay` did."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: list[AppliedFile]
    """Every file written, in path order."""
    ledger_seq: int | None
    """``seq`` of the ledger entry recording the application; ``None`` when no ledger was given."""

    @property
    def replaced(self) -> list[str]:
        """Paths of incumbent files that were replaced."""
        return [f.path for f in self.files if f.old_sha256 is not None]

    @property
    def added(self) -> list[str]:
        """Paths of files that did not exist before."""
        return [f.path for f in self.files if f.old_sha256 is None]


class JournalFile(BaseModel):
    """One target of a journaled application."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    path: str
    """Relative posix path of the target inside the skill tree."""
    before_sha256: str | None = Field(pattern=_HEX64_PATTERN)
    """The digest the target must have before (the decision's); ``None``: it must be absent."""
    after_sha256: str = Field(pattern=_HEX64_PATTERN)
    """The digest of the overlay file the target holds after."""
    mode: int = Field(ge=0, le=0o777)
    """Permission bits the new file gets (the replaced file's, or 0644/0755 for an added one)."""
    staged: str
    """Relative path of the staged copy (``.<name>.wfbench-apply-<token>.new`` beside it)."""
    backup: str | None
    """Relative path of the backup hard link of the replaced file; ``None`` for an added file."""
    staged_inode: int | None = None
    """Inode of the staged copy, recorded in phase ``committing``: after the rename it is the
    target's, which is how recovery tells our file from one someone else wrote meanwhile."""


class JournalLedger(BaseModel):
    """The ledger entry the application appends at its commit point."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    path: str
    """Absolute path of the ledger file."""
    recorded_at: str
    decision_digest: str = Field(pattern=_HEX64_PATTERN)


class ApplyJournal(BaseModel):
    """The write-ahead journal of one application (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    schema_version: Literal[1]
    token: str = Field(pattern=r"^[0-9a-f]{12}$")
    """Names the temporary files and is the ledger payload's ``apply_id``."""
    phase: Literal["prepared", "committing", "committed"]
    candidate: str
    generation: str | None
    created_dirs: list[str]
    """Directories the application creates (relative, outermost first); removed on rollback when
    empty."""
    files: list[JournalFile] = Field(min_length=1)
    ledger: JournalLedger | None
    """``None`` when no ledger is kept: the journal's ``committed`` phase is then the commit
    point."""


class Recovery(BaseModel):
    """What :func:`recover` did with an unfinished application."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Literal["rolled_back", "rolled_forward"]
    journal: str
    """The journal file that was settled (and removed)."""
    candidate: str
    generation: str | None
    files: list[str]
    """The targets, in path order."""
    removed: list[str]
    """Temporary files removed (relative to the skill tree)."""
    ledger_reanchored: bool
    """The ledger's head anchor was re-written (the kill fell between the ledger write and it)."""
    ledger_seq: int | None
    """``seq`` of the application's ledger entry when it was rolled forward with a ledger."""
    problems: list[str]
    """What was left for a person (a concurrent edit); empty when the tree is exactly as before
    (rolled back) or as after (rolled forward)."""

    def message(self) -> str:
        """One line for people."""
        what = "rolled back" if self.action == "rolled_back" else "rolled forward"
        line = (
            f"interrupted application of {self.candidate} ({self.generation or 'no generation'}) "
            f"{what}: {len(self.files)} file(s), {len(self.removed)} temporary file(s) removed"
        )
        if self.ledger_reanchored:
            line += ", ledger head re-anchored"
        if self.problems:
            line += "; NOT settled: " + "; ".join(self.problems)
        return line


@dataclass(frozen=True)
class _Target:
    rel: str
    path: Path
    expected: str | None
    data: bytes
    new_sha256: str
    mode: int


class _Conflict(Exception):
    """A target no longer matches the decision while the application is under way."""


def _crash_point(phase: ApplyPhase, k: int) -> None:
    """Test hook: die like ``kill -9`` here when ``$WFBENCH_TEST_CRASH_AT`` is ``<phase>:<k>``."""
    if os.environ.get(CRASH_ENV) == f"{phase}:{k}":
        os.kill(os.getpid(), signal.SIGKILL)
        os._exit(137)  # pragma: no cover - SIGKILL cannot be caught


# --------------------------------------------------------------------------------------------------
# Safe inspection (no writes)
# --------------------------------------------------------------------------------------------------


def _check_rel(rel: object) -> str:
    """A relative posix path with no empty, ``.`` or ``..`` component, or a refusal."""
    if not isinstance(rel, str) or not rel:
        raise ApplyRefused(f"target path {rel!r} is not a non-empty string")
    if "\x00" in rel:
        raise ApplyRefused(f"target path {rel!r} contains a NUL byte")
    if rel.startswith("/"):
        raise ApplyRefused(f"target path {rel!r} is absolute: it escapes the skill tree")
    if any(part in ("", ".", "..") for part in rel.split("/")):
        raise ApplyRefused(
            f"target path {rel!r} has an empty, '.' or '..' component: it may escape the skill tree"
        )
    return rel


def _check_root(path: Path, what: str) -> None:
    """``path`` must be a real directory, not a symlink to one."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ApplyRefused(f"{what} {path} does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise ApplyRefused(f"{what} {path} is a symlink; refusing to follow it")
    if not stat.S_ISDIR(st.st_mode):
        raise ApplyRefused(f"{what} {path} is not a directory")


def _missing_dirs(skills_dir: Path, rel: str) -> list[Path]:
    """Directories on the way to ``rel`` that do not exist yet, outermost first.

    Raises:
        ApplyRefused: A component exists but is a symlink or not a directory.
    """
    missing: list[Path] = []
    current = skills_dir
    for part in rel.split("/")[:-1]:
        current = current / part
        if missing:
            missing.append(current)
            continue
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            missing.append(current)
            continue
        shown = current.relative_to(skills_dir).as_posix()
        if stat.S_ISLNK(st.st_mode):
            raise ApplyRefused(f"{rel}: directory {shown!r} on the way is a symlink")
        if not stat.S_ISDIR(st.st_mode):
            raise ApplyRefused(f"{rel}: {shown!r} on the way is not a directory")
    return missing


def _read_regular(path: Path, shown: str) -> tuple[bytes, os.stat_result] | None:
    """Bytes and status of a regular file, without following symlinks; ``None`` when absent.

    Raises:
        ApplyRefused: ``path`` is a symlink, a directory or another non-regular file, or cannot be
            read.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise ApplyRefused(f"{shown} is a symlink; refusing to follow it")
    if stat.S_ISDIR(st.st_mode):
        raise ApplyRefused(f"{shown} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise ApplyRefused(f"{shown} is not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ApplyRefused(f"{shown} cannot be opened: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        fst = os.fstat(fh.fileno())
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise ApplyRefused(f"{shown} was replaced while it was being read")
        return fh.read(), fst


def _scan_overlay(overlay_files: Path) -> dict[str, Path]:
    """Every file of the overlay by relative posix path (litter such as ``__pycache__`` skipped).

    Raises:
        ApplyRefused: The overlay is missing or empty, or contains a symlink or a special file.
    """
    _check_root(overlay_files, "overlay folder")

    def fail(exc: OSError) -> None:
        raise ApplyRefused(f"overlay folder {overlay_files} cannot be read: {exc}") from exc

    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(overlay_files, onerror=fail):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in _LITTER)
        for name in dirnames:
            shown = (here / name).relative_to(overlay_files).as_posix()
            if os.path.islink(here / name):
                raise ApplyRefused(f"overlay directory {shown!r} is a symlink")
            if TEMP_TAG in name:
                raise ApplyRefused(_leftover_refusal(f"overlay folder {overlay_files}", [shown]))
        for name in sorted(filenames):
            if name in _LITTER:
                continue
            full = here / name
            rel = full.relative_to(overlay_files).as_posix()
            if TEMP_TAG in name:
                raise ApplyRefused(_leftover_refusal(f"overlay folder {overlay_files}", [rel]))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                raise ApplyRefused(f"overlay file {rel!r} is a symlink")
            if not stat.S_ISREG(st.st_mode):
                raise ApplyRefused(f"overlay file {rel!r} is not a regular file")
            found[_check_rel(rel)] = full
    if not found:
        raise ApplyRefused(f"overlay folder {overlay_files} has no files")
    return dict(sorted(found.items()))


def _leftover_refusal(where: str, leftovers: list[str]) -> str:
    shown = ", ".join(repr(rel) for rel in leftovers[:10])
    more = f" and {len(leftovers) - 10} more" if len(leftovers) > 10 else ""
    return (
        f"{where} holds {len(leftovers)} leftover(s) of an interrupted application that no "
        f"journal accounts for: {shown}{more}. A '.bak' holds a file's previous bytes, a '.new' "
        "a staged overlay file; they are never copied into the incumbent. Compare each with the "
        "file beside it, keep what you need, delete them, and run again."
    )


def _refuse_leftovers(skills_dir: Path) -> None:
    leftovers = find_leftovers(skills_dir)
    if leftovers:
        raise ApplyRefused(_leftover_refusal(f"skill tree {skills_dir}", leftovers))


def _current(skills_dir: Path, rel: str) -> tuple[bytes, os.stat_result] | None:
    """The incumbent file at ``rel`` (checked to be safe), or ``None`` when it does not exist."""
    if _missing_dirs(skills_dir, rel):
        return None
    return _read_regular(skills_dir / rel, f"target {rel!r}")


def plan_application(skills_dir: Path, overlay_files: Path) -> dict[str, str | None]:
    """The digests an overlay would replace: what a decision records as ``target_base_digests``.

    Args:
        skills_dir: The incumbent skill tree (e.g. ``tasks/skills``).
        overlay_files: The candidate overlay, laid out like the skill tree.

    Returns:
        For every overlay file (relative posix path, sorted), the sha256 of the incumbent file it
        replaces, or ``None`` when it adds a file.

    Raises:
        ApplyRefused: The overlay or a target is unsafe (symlink, escaping path, directory in the
            way, special file), the overlay is empty or holds leftovers, or the tree is in the
            middle of an application (a journal, or leftovers): its digests would mean nothing.
    """
    skills_dir, overlay_files = Path(skills_dir), Path(overlay_files)
    _check_root(skills_dir, "skill tree")
    if os.path.lexists(journal_path(skills_dir)):
        raise ApplyRefused(
            f"skill tree {skills_dir} is in the middle of an application (journal "
            f"{journal_path(skills_dir)}): run `wfbench apply` or apply.recover first"
        )
    _refuse_leftovers(skills_dir)
    plan: dict[str, str | None] = {}
    for rel in _scan_overlay(overlay_files):
        current = _current(skills_dir, rel)
        plan[rel] = None if current is None else sha256_bytes(current[0])
    return plan


# --------------------------------------------------------------------------------------------------
# Checks before anything is written
# --------------------------------------------------------------------------------------------------


def _check_expected(expected: Mapping[str, str | None]) -> None:
    for rel, digest in expected.items():
        _check_rel(rel)
        if digest is not None and not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
            raise ApplyRefused(f"expected digest of {rel!r} is not a hex sha256: {digest!r}")


def _targets(
    skills_dir: Path, overlay_files: Path, expected: Mapping[str, str | None]
) -> list[_Target]:
    """Read the overlay and check every target against the decision; nothing is written."""
    overlay = _scan_overlay(overlay_files)
    unexpected = sorted(set(overlay) - set(expected))
    missing = sorted(set(expected) - set(overlay))
    if unexpected or missing:
        parts = []
        if unexpected:
            parts.append(f"overlay files the decision has no digest for: {unexpected}")
        if missing:
            parts.append(f"decision digests for files not in the overlay: {missing}")
        raise ApplyRefused("the overlay does not match the decision: " + "; ".join(parts))
    targets: list[_Target] = []
    drift: list[str] = []
    for rel, source in overlay.items():
        new = _read_regular(source, f"overlay file {rel!r}")
        if new is None:
            raise ApplyRefused(f"overlay file {rel!r} vanished while it was being read")
        data, new_stat = new
        current = _current(skills_dir, rel)
        want = expected[rel]
        if current is None:
            if want is not None:
                drift.append(f"{rel} (vanished since the decision)")
            mode = _NEW_EXEC_MODE if new_stat.st_mode & 0o111 else _NEW_FILE_MODE
        else:
            have = sha256_bytes(current[0])
            if want is None:
                drift.append(f"{rel} (appeared since the decision)")
            elif have != want:
                drift.append(f"{rel} (changed since the decision)")
            mode = stat.S_IMODE(current[1].st_mode) & 0o777
        targets.append(
            _Target(
                rel=rel,
                path=skills_dir / rel,
                expected=want,
                data=data,
                new_sha256=sha256_bytes(data),
                mode=mode,
            )
        )
    if drift:
        raise ApplyRefused(
            f"{len(drift)} target(s) differ from the digests the decision was made on: "
            + ", ".join(drift)
        )
    return targets


# --------------------------------------------------------------------------------------------------
# The journal
# --------------------------------------------------------------------------------------------------


def journal_path(skills_dir: Path) -> Path:
    """The journal of a skill tree: ``<parent>/.<name>.wfbench-apply.journal.json``.

    Args:
        skills_dir: The skill tree.

    Returns:
        The journal's path, beside the tree and outside it.
    """
    tree = Path(os.path.abspath(skills_dir))
    return tree.with_name(f".{tree.name}{JOURNAL_SUFFIX}")


def _temp_rel(rel: str, token: str, kind: Literal["new", "bak"]) -> str:
    head, _, name = rel.rpartition("/")
    temp = f".{name}{TEMP_TAG}{token}.{kind}"
    return f"{head}/{temp}" if head else temp


def _write_journal(path: Path, journal: ApplyJournal) -> None:
    fsutil.atomic_write_bytes(path, (journal.model_dump_json(indent=2) + "\n").encode("utf-8"))
    fsutil.fsync_dir(path.parent)


def _bad_journal(path: Path, skills_dir: Path, why: str) -> ApplyFailed:
    return ApplyFailed(
        f"apply journal {path} {why}; the skill tree {skills_dir} may be half-applied and was "
        "left exactly as it is: compare its files with the decision's digests, then remove the "
        f"journal and every '{TEMP_TAG}' file by hand and run again",
        restored=False,
    )


def _load_journal(path: Path, skills_dir: Path) -> ApplyJournal | None:
    """The journal at ``path``, ``None`` when there is none; a bad one is refused, not guessed."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _bad_journal(path, skills_dir, f"cannot be read ({exc})") from exc
    try:
        journal = ApplyJournal.model_validate_json(raw)
    except ValidationError as exc:
        fields = sorted({".".join(str(p) for p in e["loc"]) or "-" for e in exc.errors()})
        note = " (written by another wfbench version?)" if "schema_version" in fields else ""
        why = f"is not a valid journal (bad fields: {', '.join(fields)}){note}"
        raise _bad_journal(path, skills_dir, why) from None
    problems: list[str] = []
    for f in journal.files:
        try:
            _check_rel(f.path)
        except ApplyRefused as exc:
            problems.append(str(exc))
            continue
        backup = None if f.before_sha256 is None else _temp_rel(f.path, journal.token, "bak")
        if f.staged != _temp_rel(f.path, journal.token, "new") or f.backup != backup:
            problems.append(f"{f.path}: staged or backup name does not match the token")
    for rel in journal.created_dirs:
        try:
            _check_rel(rel)
        except ApplyRefused as exc:
            problems.append(str(exc))
    if len({f.path for f in journal.files}) != len(journal.files):
        problems.append("a target is named twice")
    if problems:
        raise _bad_journal(path, skills_dir, "is inconsistent: " + "; ".join(problems))
    return journal


def _remove_journal_temps(path: Path) -> None:
    """Remove temp files a kill left while the journal itself was being written."""
    if not path.parent.is_dir():
        return
    prefix = f".{path.name}."
    for name in os.listdir(path.parent):
        if name.startswith(prefix) and name.endswith(".tmp"):
            os.unlink(path.parent / name)


def _payload(journal: ApplyJournal) -> dict[str, Any]:
    """The ledger entry's payload: the journal's token and every file's old and new digest."""
    return {
        "apply_id": journal.token,
        "files": [
            {"path": f.path, "old_sha256": f.before_sha256, "new_sha256": f.after_sha256}
            for f in journal.files
        ],
    }


def _prepare(
    skills_dir: Path,
    targets: list[_Target],
    *,
    candidate: str,
    generation: str | None,
    ledger: Path | None,
    decision_json: Mapping[str, Any],
) -> ApplyJournal:
    token = secrets.token_hex(6)
    created: set[str] = set()
    for t in targets:
        created.update(
            d.relative_to(skills_dir).as_posix() for d in _missing_dirs(skills_dir, t.rel)
        )
    return ApplyJournal(
        schema_version=JOURNAL_SCHEMA_VERSION,
        token=token,
        phase="prepared",
        candidate=candidate,
        generation=generation,
        created_dirs=sorted(created, key=lambda rel: (rel.count("/"), rel)),
        files=[
            JournalFile(
                path=t.rel,
                before_sha256=t.expected,
                after_sha256=t.new_sha256,
                mode=t.mode,
                staged=_temp_rel(t.rel, token, "new"),
                backup=None if t.expected is None else _temp_rel(t.rel, token, "bak"),
            )
            for t in targets
        ],
        ledger=None
        if ledger is None
        else JournalLedger(
            path=os.path.abspath(ledger),
            recorded_at=now_iso(),
            decision_digest=sha256_json(dict(decision_json)),
        ),
    )


# --------------------------------------------------------------------------------------------------
# Forward: journal, stage, commit, record
# --------------------------------------------------------------------------------------------------


def _sync(directories: set[Path]) -> None:
    for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
        if os.path.isdir(directory) and not os.path.islink(directory):
            fsutil.fsync_dir(directory)


def _forward(
    skills_dir: Path,
    jpath: Path,
    journal: ApplyJournal,
    targets: list[_Target],
    *,
    ledger: Path | None,
    decision_json: Mapping[str, Any],
    hook: ApplyHook | None,
) -> int | None:
    """Run the application up to and including its commit point; return the ledger ``seq``.

    Whatever this raises, the journal on disk says how far it got, and :func:`_settle` finishes
    or undoes it.
    """

    def point(phase: ApplyPhase, k: int, rel: str) -> None:
        _crash_point(phase, k)
        if hook is not None:
            hook(phase, k, rel)

    pairs = list(zip(targets, journal.files, strict=True))
    _write_journal(jpath, journal)
    point("journaled", 1, "")

    dirs: set[Path] = set()
    for k, (t, f) in enumerate(pairs, start=1):
        for directory in _missing_dirs(skills_dir, t.rel):
            os.mkdir(directory)  # FileExistsError when someone raced us: settled as a failure
            dirs.add(directory.parent)
        fsutil.atomic_write_bytes(skills_dir / f.staged, t.data, mode=t.mode)
        dirs.add(t.path.parent)
        point("staged", k, t.rel)
    _sync(dirs)
    journal = journal.model_copy(
        update={
            "phase": "committing",
            "files": [
                f.model_copy(update={"staged_inode": os.lstat(skills_dir / f.staged).st_ino})
                for f in journal.files
            ],
        }
    )
    _write_journal(jpath, journal)

    for k, (t, f) in enumerate(pairs, start=1):
        if _missing_dirs(skills_dir, t.rel):
            raise _Conflict(f"{t.rel}: a directory on the way vanished")
        staged = skills_dir / f.staged
        if f.backup is None:
            try:
                os.link(staged, t.path, follow_symlinks=False)
            except FileExistsError:
                raise _Conflict(f"{t.rel}: appeared since the decision") from None
            os.unlink(staged)
        else:
            backup = skills_dir / f.backup
            try:
                os.link(t.path, backup, follow_symlinks=False)
            except FileNotFoundError:
                raise _Conflict(f"{t.rel}: vanished since the decision") from None
            old = _read_regular(backup, f"target {t.rel!r}")
            if old is None or sha256_bytes(old[0]) != f.before_sha256:
                raise _Conflict(f"{t.rel}: changed since the decision")
            os.replace(staged, t.path)
        point("replaced", k, t.rel)
    for t in targets:  # read back: each target must hold exactly the overlay's bytes
        now = _read_regular(t.path, f"target {t.rel!r}")
        if now is None or sha256_bytes(now[0]) != t.new_sha256:
            raise _Conflict(f"{t.rel}: changed right after it was replaced")
    _sync(dirs)
    point("synced", 1, "")

    # The commit point.
    if ledger is None:
        _write_journal(jpath, journal.model_copy(update={"phase": "committed"}))
        point("recorded", 1, "")
        return None
    assert journal.ledger is not None
    entry = ledger_store.append(
        ledger,
        decision=APPLIED,
        decision_json=decision_json,
        generation=journal.generation,
        candidate=journal.candidate,
        kind=GENERATION,  # the only kind apply_overlay applies
        payload=_payload(journal),
        recorded_at=journal.ledger.recorded_at,
        on_written=lambda _: point("ledger-written", 1, ""),
    )
    point("recorded", 1, "")
    return entry.seq


# --------------------------------------------------------------------------------------------------
# Settling a journal: roll back before the commit point, forward after it
# --------------------------------------------------------------------------------------------------


def _ledger_verdict(
    journal: ApplyJournal, jpath: Path
) -> tuple[ledger_store.LedgerEntry | None, bool]:
    """The journal's ledger entry if it was written, and whether its head anchor is missing.

    Raises:
        LedgerError: The ledger has a fault other than this application's missing head write,
            or holds an entry with this application's id but other content: nothing can be
            decided, so nothing is changed.
    """
    if journal.ledger is None:
        return None, False
    path = Path(journal.ledger.path)
    try:
        pending = ledger_store.unanchored_entry(path)
    except LedgerError as exc:
        raise LedgerError(
            f"cannot settle the interrupted application in {jpath}: {exc}; nothing was changed"
        ) from exc
    entries = ledger_store.read_entries(path.read_bytes() if path.exists() else b"")
    ours = [
        e for e in entries if e.decision == APPLIED and e.payload.get("apply_id") == journal.token
    ]
    want = (
        journal.ledger.decision_digest,
        journal.candidate,
        journal.generation,
        journal.ledger.recorded_at,
        _payload(journal),
    )
    for e in ours:
        if (
            len(ours) > 1
            or (e.decision_digest, e.candidate, e.generation, e.recorded_at, e.payload) != want
        ):
            raise LedgerError(
                f"cannot settle the interrupted application in {jpath}: ledger {path} entry seq "
                f"{e.seq} carries its apply_id {journal.token} but not its content; nothing was "
                "changed"
            )
    entry = ours[0] if ours else None
    return entry, entry is not None and pending is not None and pending.hash == entry.hash


def _look(skills_dir: Path, rel: str, shown: str) -> tuple[str, int] | None | str:
    """Digest and inode of a regular file in the tree, ``None`` when absent, or why it cannot be
    judged (a symlink, on the way or in place, is never followed)."""
    try:
        if _missing_dirs(skills_dir, rel):
            return None
        found = _read_regular(skills_dir / rel, shown)
    except ApplyRefused as exc:
        return str(exc)
    return None if found is None else (sha256_bytes(found[0]), found[1].st_ino)


def _roll_back_file(skills_dir: Path, f: JournalFile) -> str | None:
    """Put one target back as it was before; return what a person must look at, if anything."""
    target = skills_dir / f.path
    cur = _look(skills_dir, f.path, f"target {f.path!r}")
    if isinstance(cur, str):
        return f"{f.path} cannot be judged ({cur}), left as it is"
    ours = cur is not None and cur == (f.after_sha256, f.staged_inode)
    if f.backup is None:
        if ours:
            os.unlink(target)
        return None  # absent, or a file someone else put there: theirs, left as it is
    if cur is not None and cur[0] == f.before_sha256:
        return None  # never replaced, or already restored
    backup = skills_dir / f.backup
    bak = _look(skills_dir, f.backup, f"backup of {f.path!r}")
    if ours:
        if isinstance(bak, tuple) and bak[0] == f.before_sha256:
            os.replace(backup, target)
            return None
        return f"{f.path} cannot be restored: its backup {backup} is missing or changed"
    if not isinstance(bak, tuple) or (cur is not None and bak[1] == cur[1]):
        return None  # the compare-and-swap never replaced it: an edit by someone else, kept
    return (
        f"{f.path} changed after it was replaced, left as it is; its previous bytes are in {backup}"
    )


def _roll_forward_file(skills_dir: Path, f: JournalFile) -> str | None:
    """Check one target holds the applied bytes; return what a person must look at, if anything."""
    cur = _look(skills_dir, f.path, f"target {f.path!r}")
    if isinstance(cur, tuple) and cur[0] == f.after_sha256:
        return None
    kept = f"; its previous bytes are in {skills_dir / f.backup}" if f.backup else ""
    return f"{f.path} changed after the application was recorded, left as it is{kept}"


def _remove_temps(
    skills_dir: Path, journal: ApplyJournal, keep: set[str]
) -> tuple[list[str], set[Path]]:
    """Remove every temporary file carrying the journal's token; return them and their folders."""
    removed: list[str] = []
    folders: set[Path] = set()
    mark = f"{TEMP_TAG}{journal.token}."
    for f in journal.files:
        try:
            if _missing_dirs(skills_dir, f.path):
                continue
        except ApplyRefused:
            continue  # a symlink on the way now: never follow it
        folder = (skills_dir / f.path).parent
        for name in sorted(os.listdir(folder)):
            rel = (folder / name).relative_to(skills_dir).as_posix()
            if mark in name and rel not in keep and not os.path.isdir(folder / name):
                os.unlink(folder / name)
                removed.append(rel)
                folders.add(folder)
    return sorted(set(removed)), folders


def _settle(skills_dir: Path, jpath: Path) -> Recovery | None:
    """Roll the journal at ``jpath`` back or forward, remove its leftovers, remove it.

    Idempotent: every step is decided from what is on disk, and the journal goes last, so an
    interruption here is settled by the next call. Raises ``OSError`` (the journal is kept) when
    the disk refuses a step.
    """
    _remove_journal_temps(jpath)
    journal = _load_journal(jpath, skills_dir)
    if journal is None:
        return None
    entry, reanchor = _ledger_verdict(journal, jpath)
    committed = journal.phase == "committed" or entry is not None
    problems: list[str] = []
    keep: set[str] = set()
    for k, f in enumerate(journal.files, start=1):
        if committed:
            problem = _roll_forward_file(skills_dir, f)
        elif journal.phase == "committing":
            problem = _roll_back_file(skills_dir, f)
        else:
            problem = None  # "prepared": no target was touched yet
        if problem is not None:
            problems.append(problem)
            if f.backup is not None:
                keep.add(f.backup)
        _crash_point("undone", k)
    if reanchor:
        assert journal.ledger is not None and entry is not None
        ledger_store.repair(Path(journal.ledger.path), expect_hash=entry.hash)
    removed, folders = _remove_temps(skills_dir, journal, keep)
    folders.add(skills_dir)
    if not committed:
        for rel in reversed(journal.created_dirs):
            directory = skills_dir / rel
            try:
                os.rmdir(directory)
                folders.add(directory.parent)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise  # ENOTEMPTY: someone else put files there; they are not ours
    _sync(folders)
    os.unlink(jpath)
    fsutil.fsync_dir(jpath.parent)
    return Recovery(
        action="rolled_forward" if committed else "rolled_back",
        journal=str(jpath),
        candidate=journal.candidate,
        generation=journal.generation,
        files=[f.path for f in journal.files],
        removed=removed,
        ledger_reanchored=reanchor,
        ledger_seq=None if entry is None else entry.seq,
        problems=problems,
    )


def _settle_or_fail(skills_dir: Path) -> Recovery | None:
    jpath = journal_path(skills_dir)
    try:
        recovery = _settle(skills_dir, jpath)
    except OSError as exc:
        raise ApplyFailed(
            f"the interrupted application in {jpath} could not be settled ({exc}); the journal "
            "is kept and the next apply or recover retries",
            restored=False,
        ) from exc
    if recovery is not None and recovery.problems:
        raise ApplyFailed(
            f"the interrupted application in {jpath} was {recovery.action.replace('_', ' ')} "
            "but could NOT be fully settled; repair by hand: " + "; ".join(recovery.problems),
            restored=False,
        )
    return recovery


def recover(skills_dir: Path) -> Recovery | None:
    """Settle an application that a crash or kill interrupted; call before touching the tree.

    Under the skill tree's lock: an unfinished journal is rolled forward when its commit point
    was reached (the ledger holds its entry, or the journal says ``committed``; the ledger head is
    re-anchored when the kill fell between the ledger write and its anchor), back otherwise; its
    temporary files are removed and the journal last. Then the tree is scanned for leftovers no
    journal accounts for.

    Args:
        skills_dir: The incumbent skill tree (e.g. ``tasks/skills``).

    Returns:
        What was done, or ``None`` when no application was unfinished.

    Raises:
        ApplyRefused: The skill tree is missing, or holds leftovers no journal accounts for.
        ApplyFailed: The journal is unreadable (nothing changed), the disk refused a step (the
            journal is kept, retried next time), or a concurrent edit left something for a person
            (named in the message).
        LedgerError: The ledger has another fault, so the commit point cannot be decided; nothing
            was changed.
    """
    skills_dir = Path(skills_dir)
    _check_root(skills_dir, "skill tree")
    with fsutil.locked(skills_dir):  # the same lock as apply_overlay
        recovery = _settle_or_fail(skills_dir)
        _refuse_leftovers(skills_dir)
    return recovery


# --------------------------------------------------------------------------------------------------
# The entry point
# --------------------------------------------------------------------------------------------------


def _check_ledger_place(ledger: Path, skills_dir: Path, decision_json: Mapping[str, Any]) -> None:
    if skills_dir.resolve() in ledger.resolve().parents:
        raise ApplyRefused(f"ledger {ledger} lies inside the skill tree {skills_dir}")
    try:
        json.dumps(dict(decision_json), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ApplyRefused(f"the decision document is not plain JSON: {exc}") from exc


def _result(targets: list[_Target], seq: int | None) -> ApplyResult:
    return ApplyResult(
        files=[
            AppliedFile(path=t.rel, old_sha256=t.expected, new_sha256=t.new_sha256) for t in targets
        ],
        ledger_seq=seq,
    )


def apply_overlay(
    skills_dir: Path,
    overlay_files: Path,
    *,
    expected: Mapping[str, str | None],
    decision: str,
    ledger: Path | None,
    decision_json: Mapping[str, Any],
    generation: str | None,
    candidate: str,
    kind: DecisionKind,
    hook: ApplyHook | None = None,
) -> ApplyResult:
    """Replace the incumbent skill files with a promoted overlay, atomically as a set.

    Args:
        skills_dir: The incumbent skill tree (e.g. ``tasks/skills``).
        overlay_files: The candidate overlay, laid out like the skill tree.
        expected: The decision's ``target_base_digests`` (see :func:`plan_application`): for every
            overlay file, the digest its target had when the decision was made (``None``: absent).
        decision: The decision's outcome; only ``promote`` is applied.
        ledger: The decision ledger to record the application in; ``None`` records nothing (the
            journal's ``committed`` phase is then the commit point).
        decision_json: The decision document; its digest binds the ledger entry to it.
        generation: The generation the decision belongs to.
        candidate: The candidate (overlay id or digest) being applied.
        kind: What the decision rests on (:data:`~bench_assets.decision.ledger.DecisionKind`); only
        a
            ``generation`` decision is applied: an ad-hoc one is refused.
        hook: Test hook called at each point of :data:`ApplyPhase`; whatever it raises is handled
            like a failure at that point.

    Returns:
        The files written with their old and new digests, and the ledger entry's ``seq``.

    Raises:
        ApplyRefused: The application is refused before any write (not ``promote``, overlay and
            decision disagree, a target changed since the decision, an unsafe path, leftovers of
            an earlier application, ...).
        LedgerError: The ledger does not verify; nothing is written.
        ApplyFailed: A failure midway; ``restored`` tells whether every file was rolled back (an
            earlier interrupted application that cannot be settled raises it too, see
            :func:`recover`).
    """
    skills_dir, overlay_files = Path(skills_dir), Path(overlay_files)
    if decision != PROMOTE:
        raise ApplyRefused(
            f"decision is {decision!r}: only a {PROMOTE!r} decision is applied to {skills_dir}"
        )
    if kind != GENERATION:
        raise ApplyRefused(
            f"the promote of {candidate} is ad hoc (`wfbench decide` without --generation): only "
            f"a generation's promote is applied to {skills_dir}; run `wfbench evolve` to evaluate "
            f"{candidate} in a generation (or finish one with it), then `wfbench apply`"
        )
    _check_root(skills_dir, "skill tree")
    _check_expected(expected)
    if ledger is not None:
        ledger = Path(ledger)
        _check_ledger_place(ledger, skills_dir, decision_json)
    jpath = journal_path(skills_dir)
    with fsutil.locked(skills_dir):  # one application (or recovery) at a time per skill tree
        _settle_or_fail(skills_dir)
        _refuse_leftovers(skills_dir)
        if ledger is not None:
            verified = ledger_store.verify(ledger)
            if not verified.ok:
                raise LedgerError(f"refusing to apply: {verified.message(ledger)}")
        targets = _targets(skills_dir, overlay_files, expected)
        journal = _prepare(
            skills_dir,
            targets,
            candidate=candidate,
            generation=generation,
            ledger=ledger,
            decision_json=decision_json,
        )
        size = len(canonical_json(_payload(journal)).encode("utf-8"))
        if ledger is not None and size > ledger_store.MAX_PAYLOAD_BYTES:
            raise ApplyRefused(
                f"{len(targets)} files do not fit one ledger entry ({size} bytes of "
                f"{ledger_store.MAX_PAYLOAD_BYTES})"
            )
        try:
            seq = _forward(
                skills_dir,
                jpath,
                journal,
                targets,
                ledger=ledger,
                decision_json=decision_json,
                hook=hook,
            )
        except BaseException as exc:
            return _after_failure(skills_dir, jpath, targets, candidate, exc)
        _clean_up_after_commit(skills_dir, jpath, candidate)
    return _result(targets, seq)


def _clean_up_after_commit(skills_dir: Path, jpath: Path, candidate: str) -> None:
    """Clean up after the commit point (backups, journal); the application itself is done."""
    try:
        recovery = _settle(skills_dir, jpath)
    except OSError as exc:
        raise ApplyFailed(
            f"candidate {candidate} was applied to {skills_dir} and recorded, but its cleanup "
            f"failed ({exc}); the journal {jpath} is kept and the next apply or recover finishes "
            "it",
            restored=False,
        ) from exc
    if recovery is not None and recovery.problems:
        raise ApplyFailed(
            f"candidate {candidate} was applied to {skills_dir} and recorded, but: "
            + "; ".join(recovery.problems),
            restored=False,
        )


def _after_failure(
    skills_dir: Path, jpath: Path, targets: list[_Target], candidate: str, exc: BaseException
) -> ApplyResult:
    """Settle the journal after a failure midway: raise, or return when it had been committed."""
    reason = str(exc) or type(exc).__name__
    what = f"applying candidate {candidate} to {skills_dir} failed ({reason})"
    try:
        recovery = _settle(skills_dir, jpath)
    except (OSError, LedgerError, ApplyFailed) as settle_exc:
        raise ApplyFailed(
            f"{what} and could NOT be settled ({settle_exc}); the journal {jpath} is kept and the "
            "next apply or recover retries",
            restored=False,
        ) from exc
    if recovery is not None and recovery.problems:
        undone = "rolled back" if recovery.action == "rolled_back" else "rolled forward"
        raise ApplyFailed(
            f"{what} and could NOT be fully {undone}; repair by hand: "
            + "; ".join(recovery.problems),
            restored=False,
        ) from exc
    if not isinstance(exc, Exception):
        raise exc
    if recovery is not None and recovery.action == "rolled_forward":
        return _result(targets, recovery.ledger_seq)  # the commit point had been passed
    raise ApplyFailed(
        f"{what}; every file was restored and nothing was recorded", restored=True
    ) from exc
