"""Apply a promoted candidate overlay to the incumbent skill tree.

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

:func:`apply_overlay` works in phases, holding an exclusive lock (``flock``) on the skill tree's
directory so two applications cannot interleave:

1. **Check** (nothing is written; any problem raises :class:`~bench_assets.errors.ApplyRefused`):
   the decision is ``promote``; the overlay's files and the expected digests name exactly the same
   paths; every path is relative and stays inside the skill tree; no overlay file, target or
   directory on the way to a target is a symlink; every target is a regular file or absent; every
   target's current digest equals the expected one; the ledger verifies and the record fits in it.
2. **Stage**: each new file is written next to its target under a temporary name
   (``.<name>.wfbench-apply-<token>.new``) through :func:`fsutil.atomic_write_bytes`, which fsyncs
   it. Missing directories are created (and remembered).
3. **Commit**, file by file in path order, as a compare-and-swap: the target's current bytes are
   kept as a hard-linked backup (``.<name>.wfbench-apply-<token>.bak``), the backup's digest is
   checked against the expected one, then the staged file is renamed over the target. A file the
   decision expected to be absent is put in place with :func:`os.link`, which fails if a file
   appeared meanwhile. Afterwards every target is read back and checked, and the directories are
   fsynced.
4. **Record**: a ledger entry (decision ``applied``) with every file's old and new digest; then the
   backups are removed.

Any failure or interruption in phases 2–4 rolls back: every replaced file is renamed back from its
backup, every added file and staged temp is removed, and created directories are removed, so the
tree is byte-identical to before; then :class:`~bench_assets.errors.ApplyFailed` is raised
(``restored=True``). Rollback never overwrites a file that changed after it was replaced (its inode
or digest differ): it leaves that file and its backup in place and raises ``ApplyFailed`` with
``restored=False`` naming them.

Residual risk, accepted: between taking a file's backup and renaming over it (microseconds) an
editor that replaces the file by rename would lose its edit; an editor writing in place inside that
window is caught by the read-back check. The backups need a filesystem with hard links (every
local Linux filesystem). A crash after the commit and before the ledger entry leaves the applied
files and their ``.bak`` backups on disk, without a ledger entry.

Tests inject failures through the ``hook`` argument of :func:`apply_overlay` (see
:data:`ApplyHook`).

Why one file over 500 lines: the crash-safety argument (check, stage, compare-and-swap commit,
rollback, ledger entry) has to be read as one piece; every phase is a section below.
"""

import contextlib
import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from bench_assets import fsutil
from bench_assets import ledger as ledger_store
from bench_assets.errors import ApplyFailed, ApplyRefused, LedgerError
from bench_assets.hashing import canonical_json, sha256_bytes

PROMOTE = "promote"
"""The only decision that may be applied."""
APPLIED = "applied"
"""The ledger decision recorded for a successful application."""
TEMP_TAG = ".wfbench-apply-"
"""Marks the staged (``.new``) and backup (``.bak``) files written next to a target."""

_LITTER = frozenset({"__pycache__", ".DS_Store"})
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NEW_FILE_MODE = 0o644
_NEW_EXEC_MODE = 0o755

ApplyPhase = Literal["staged", "replaced"]
ApplyHook = Callable[[ApplyPhase, int, str], None]
"""Called as ``hook(phase, k, path)``: after the k-th file (1-based, path order) was written to
its temporary name (``"staged"``) or put in place (``"replaced"``). An exception raised by the
hook is treated exactly like a failure of the application at that point (tests use it to
interrupt an application midway, or to edit a target concurrently)."""


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


@dataclass(frozen=True)
class _Target:
    rel: str
    path: Path
    expected: str | None
    data: bytes
    new_sha256: str
    mode: int


@dataclass(frozen=True)
class _Done:
    target: _Target
    backup: Path | None
    inode: int


class _Conflict(Exception):
    """A target no longer matches the decision while the application is under way."""


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
            if os.path.islink(here / name):
                shown = (here / name).relative_to(overlay_files).as_posix()
                raise ApplyRefused(f"overlay directory {shown!r} is a symlink")
        for name in sorted(filenames):
            if name in _LITTER:
                continue
            full = here / name
            rel = full.relative_to(overlay_files).as_posix()
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                raise ApplyRefused(f"overlay file {rel!r} is a symlink")
            if not stat.S_ISREG(st.st_mode):
                raise ApplyRefused(f"overlay file {rel!r} is not a regular file")
            found[_check_rel(rel)] = full
    if not found:
        raise ApplyRefused(f"overlay folder {overlay_files} has no files")
    return dict(sorted(found.items()))


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
            way, special file) or the overlay is empty.
    """
    skills_dir, overlay_files = Path(skills_dir), Path(overlay_files)
    _check_root(skills_dir, "skill tree")
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


def _check_ledger(ledger: Path, skills_dir: Path, decision_json: Mapping[str, Any]) -> None:
    if skills_dir.resolve() in ledger.resolve().parents:
        raise ApplyRefused(f"ledger {ledger} lies inside the skill tree {skills_dir}")
    try:
        json.dumps(dict(decision_json), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ApplyRefused(f"the decision document is not plain JSON: {exc}") from exc
    result = ledger_store.verify(ledger)
    if not result.ok:
        raise LedgerError(f"refusing to apply: {result.message(ledger)}")


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


def _payload(targets: list[_Target]) -> dict[str, Any]:
    return {
        "files": [
            {"path": t.rel, "old_sha256": t.expected, "new_sha256": t.new_sha256} for t in targets
        ]
    }


# --------------------------------------------------------------------------------------------------
# The transaction
# --------------------------------------------------------------------------------------------------


class _Transaction:
    """Staged files, backups and created directories of one application, and how to undo them."""

    def __init__(self, skills_dir: Path, hook: ApplyHook | None) -> None:
        self.skills_dir = skills_dir
        self.hook = hook
        self.token = secrets.token_hex(6)
        self.created: list[Path] = []
        self.staged: dict[str, Path] = {}
        self.done: list[_Done] = []
        self.temps: list[Path] = []
        self.dirs: set[Path] = set()

    def _temp(self, target: Path, suffix: str) -> Path:
        temp = target.with_name(f".{target.name}{TEMP_TAG}{self.token}{suffix}")
        self.temps.append(temp)
        return temp

    def stage(self, targets: list[_Target]) -> None:
        for k, t in enumerate(targets, start=1):
            for directory in _missing_dirs(self.skills_dir, t.rel):
                os.mkdir(directory)
                self.created.append(directory)
                self.dirs.add(directory.parent)
            staged = self._temp(t.path, ".new")
            fsutil.atomic_write_bytes(staged, t.data, mode=t.mode)
            self.staged[t.rel] = staged
            self.dirs.add(t.path.parent)
            if self.hook is not None:
                self.hook("staged", k, t.rel)

    def commit(self, targets: list[_Target]) -> None:
        for k, t in enumerate(targets, start=1):
            if _missing_dirs(self.skills_dir, t.rel):
                raise _Conflict(f"{t.rel}: a directory on the way vanished")
            staged = self.staged[t.rel]
            inode = os.lstat(staged).st_ino
            if t.expected is None:
                try:
                    os.link(staged, t.path, follow_symlinks=False)
                except FileExistsError:
                    raise _Conflict(f"{t.rel}: appeared since the decision") from None
                self.done.append(_Done(t, None, inode))
                os.unlink(staged)
            else:
                backup = self._temp(t.path, ".bak")
                try:
                    os.link(t.path, backup, follow_symlinks=False)
                except FileNotFoundError:
                    raise _Conflict(f"{t.rel}: vanished since the decision") from None
                old = _read_regular(backup, f"target {t.rel!r}")
                if old is None or sha256_bytes(old[0]) != t.expected:
                    raise _Conflict(f"{t.rel}: changed since the decision")
                os.replace(staged, t.path)
                self.done.append(_Done(t, backup, inode))
            if self.hook is not None:
                self.hook("replaced", k, t.rel)

    def check(self, targets: list[_Target]) -> None:
        """Read every target back: each must hold exactly the overlay's bytes."""
        for t in targets:
            now = _read_regular(t.path, f"target {t.rel!r}")
            if now is None or sha256_bytes(now[0]) != t.new_sha256:
                raise _Conflict(f"{t.rel}: changed right after it was replaced")

    def sync(self) -> None:
        for directory in sorted(self.dirs, key=lambda d: len(d.parts), reverse=True):
            if os.path.isdir(directory):
                fsutil.fsync_dir(directory)

    def rollback(self) -> list[str]:
        """Undo everything; return what could not be undone (empty when the tree is restored)."""
        problems: list[str] = []
        keep: set[Path] = set()
        for done in reversed(self.done):
            t = done.target
            try:
                st = os.lstat(t.path)
                now = _read_regular(t.path, f"target {t.rel!r}")
                ours = (
                    st.st_ino == done.inode
                    and now is not None
                    and sha256_bytes(now[0]) == t.new_sha256
                )
            except (OSError, ApplyRefused):
                ours = False
            if not ours:
                saved = f"; its previous bytes are in {done.backup}" if done.backup else ""
                problems.append(f"{t.rel} changed after it was replaced, left as it is{saved}")
                if done.backup is not None:
                    keep.add(done.backup)
                continue
            try:
                if done.backup is not None:
                    os.replace(done.backup, t.path)
                else:
                    os.unlink(t.path)
            except OSError as exc:
                problems.append(f"{t.rel} could not be restored: {exc}")
                if done.backup is not None:
                    keep.add(done.backup)
        for temp in self.temps:
            if temp in keep or not os.path.lexists(temp):
                continue
            try:
                os.unlink(temp)
            except OSError as exc:
                problems.append(f"temporary file {temp} could not be removed: {exc}")
        for directory in reversed(self.created):
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    continue  # something else put files there meanwhile: they are not ours
                problems.append(f"created directory {directory} could not be removed: {exc}")
        try:
            self.sync()
        except OSError as exc:
            problems.append(f"directories could not be fsynced: {exc}")
        return problems

    def discard_backups(self) -> None:
        """Remove the backups once the application is recorded (best effort: they are litter)."""
        for temp in self.temps:
            with contextlib.suppress(OSError):
                if os.path.lexists(temp):
                    os.unlink(temp)


# --------------------------------------------------------------------------------------------------
# The entry point
# --------------------------------------------------------------------------------------------------


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
    hook: ApplyHook | None = None,
) -> ApplyResult:
    """Replace the incumbent skill files with a promoted overlay, atomically as a set.

    Args:
        skills_dir: The incumbent skill tree (e.g. ``tasks/skills``).
        overlay_files: The candidate overlay, laid out like the skill tree.
        expected: The decision's ``target_base_digests`` (see :func:`plan_application`): for every
            overlay file, the digest its target had when the decision was made (``None``: absent).
        decision: The decision's outcome; only ``promote`` is applied.
        ledger: The decision ledger to record the application in; ``None`` records nothing.
        decision_json: The decision document; its digest binds the ledger entry to it.
        generation: The generation the decision belongs to.
        candidate: The candidate (overlay id or digest) being applied.
        hook: Test hook called after each file is staged and after each is put in place (see
            :data:`ApplyHook`); whatever it raises is handled like a failure at that point.

    Returns:
        The files written with their old and new digests, and the ledger entry's ``seq``.

    Raises:
        ApplyRefused: The application is refused before any write (not ``promote``, overlay and
            decision disagree, a target changed since the decision, an unsafe path, ...).
        LedgerError: The ledger does not verify; nothing is written.
        ApplyFailed: A failure midway; ``restored`` tells whether every file was rolled back.
    """
    skills_dir, overlay_files = Path(skills_dir), Path(overlay_files)
    if decision != PROMOTE:
        raise ApplyRefused(
            f"decision is {decision!r}: only a {PROMOTE!r} decision is applied to {skills_dir}"
        )
    _check_root(skills_dir, "skill tree")
    _check_expected(expected)
    if ledger is not None:
        ledger = Path(ledger)
        _check_ledger(ledger, skills_dir, decision_json)
    with fsutil.locked(skills_dir):  # one application at a time per skill tree
        targets = _targets(skills_dir, overlay_files, expected)
        payload = _payload(targets)
        size = len(canonical_json(payload).encode("utf-8"))
        if ledger is not None and size > ledger_store.MAX_PAYLOAD_BYTES:
            raise ApplyRefused(
                f"{len(targets)} files do not fit one ledger entry ({size} bytes of "
                f"{ledger_store.MAX_PAYLOAD_BYTES})"
            )
        txn = _Transaction(skills_dir, hook)
        seq: int | None = None
        try:
            txn.stage(targets)
            txn.commit(targets)
            txn.check(targets)
            txn.sync()
            if ledger is not None:
                entry = ledger_store.append(
                    ledger,
                    decision=APPLIED,
                    decision_json=decision_json,
                    generation=generation,
                    candidate=candidate,
                    payload=payload,
                )
                seq = entry.seq
        except BaseException as exc:
            problems = txn.rollback()
            reason = str(exc) or type(exc).__name__
            what = f"applying candidate {candidate} to {skills_dir} failed ({reason})"
            if problems:
                raise ApplyFailed(
                    f"{what} and could NOT be fully rolled back; repair by hand: "
                    + "; ".join(problems),
                    restored=False,
                ) from exc
            if not isinstance(exc, Exception):
                raise
            raise ApplyFailed(
                f"{what}; every file was restored and nothing was recorded", restored=True
            ) from exc
        txn.discard_backups()
    return ApplyResult(
        files=[
            AppliedFile(path=t.rel, old_sha256=t.expected, new_sha256=t.new_sha256) for t in targets
        ],
        ledger_seq=seq,
    )
