"""The one gateway for files the harness writes.

Every file is written to a temporary sibling, flushed, fsynced and renamed into place, so a crash
or kill leaves either the old file or the new one, never a torn one. Content-addressed stores are
made read-only after they are complete.
"""

import contextlib
import fcntl
import json
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from bench_assets.kernel.hashing import canonical_json

_RO_FILE = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
_RO_DIR = _RO_FILE | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: Path, text: str, *, mode: int = 0o644) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(path: Path, value: Any, *, mode: int = 0o644, compact: bool = False) -> Path:
    """Write ``value`` as key-sorted JSON to ``path`` atomically: indented, or with ``compact``
    in the canonical form (:func:`~bench_assets.kernel.hashing.canonical_json`). Compact is for
    the large documents a decision writes at 1,000 tasks (the aggregate set, the gate input, the
    decision): indentation forces Python's pure-Python encoder, many times slower than the C one
    (about 3 s of a profiled 1,000-task decision). Readers parse either; ``wfbench explain
    --json`` prints them indented."""
    if compact:
        return atomic_write_canonical(path, canonical_json(value), mode=mode)
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return atomic_write_text(path, text + "\n", mode=mode)


def atomic_write_canonical(path: Path, text: str, *, mode: int = 0o644) -> Path:
    """Write canonical JSON ``text`` (:func:`~bench_assets.kernel.hashing.canonical_and_digest`,
    encoded once for the digest that names the file) as ``atomic_write_json(compact=True)``
    writes it."""
    return atomic_write_text(path, text + "\n", mode=mode)


def ensure_real_parents(root: Path, rel: str) -> Path:
    """Make every folder between ``root`` and ``root/rel`` a real folder; return ``root/rel``.

    For writing into a tree someone else controlled (a worktree after its agent exited): a
    component that is a symlink or a file is removed and replaced by an empty folder, so a write
    or unlink at the returned path can never land outside ``root`` through a planted symlink.
    """
    current = Path(root)
    for part in Path(rel).parts[:-1]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            current.mkdir()
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            os.unlink(current)
            current.mkdir()
    return Path(root) / rel


def make_tree_readonly(root: Path) -> None:
    """Remove every write bit below (and including) ``root``; symlinks are left alone."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode & ~0o222)
        for name in dirnames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode & ~0o222)
    os.chmod(root, os.stat(root).st_mode & ~0o222)


def make_tree_writable(root: Path) -> None:
    """Restore owner write bits below ``root`` (so a read-only store can be removed)."""
    if not root.exists():
        return
    os.chmod(root, os.stat(root).st_mode | stat.S_IWUSR)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)


def remove_tree(root: Path) -> None:
    """Delete ``root`` even if it was made read-only; a missing path is not an error.

    A directory is first renamed to a hidden sibling (``.removing.<name>.<random>``) in one
    atomic step, then deleted: a crash or kill in the middle leaves that sibling behind, never a
    half-deleted tree at ``root``'s path, where a content-addressed reader could take what is
    left of it for the published content. A directory that cannot be renamed (a mount point)
    is deleted in place.
    """
    if not os.path.lexists(root):
        return
    if os.path.islink(root) or root.is_file():
        os.unlink(root)
        return
    doomed = root.parent / f".removing.{root.name}.{os.urandom(6).hex()}"
    try:
        os.rename(root, doomed)
    except FileNotFoundError:
        return  # removed by someone else meanwhile
    except OSError:  # a mount point (EBUSY), a read-only parent: delete in place
        doomed = root
    make_tree_writable(doomed)
    shutil.rmtree(doomed)


PUBLISH_LOCK = ".publish.lock"
"""The lock file, beside the published folders, taken only to replace an incomplete one."""


def publish_dir(staging: Path, final: Path, *, record: str | None = None) -> Path:
    """Move a fully built ``staging`` directory to ``final`` atomically.

    When ``final`` already exists (content-addressed: another run published the same content),
    the staging copy is discarded and the existing one is kept — but only if it is complete.
    ``record`` names the file a complete publication holds (written last into ``staging``, e.g.
    ``manifest.json``): a ``final`` without it (left by a crash, a partial copy, a hand-deleted
    file) is never trusted; it is removed and ``staging`` published in its place. Without
    ``record`` (a folder a user may own, such as a task folder) an existing ``final`` is kept
    whatever it holds.

    Raises:
        OSError: ``staging`` cannot be moved into place.
    """
    if record is not None and not (staging / record).is_file():
        raise ValueError(f"{staging} has no {record}: refusing to publish an incomplete folder")
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, final)
        return final
    except OSError:
        if record is None:
            if not final.exists():
                raise
            remove_tree(staging)
            return final
    # ``final`` exists, or is being replaced right now by another publisher. Check and replace
    # under a lock, so that two publishers of the same content cannot both find it incomplete and
    # one remove what the other just published (a plain rename into an absent ``final`` needs no
    # lock: it only succeeds when nothing is there).
    lock = final.parent / PUBLISH_LOCK
    lock.touch(exist_ok=True)
    with open(lock, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        if not (final / record).is_file():
            remove_tree(final)  # incomplete: replaced, never trusted
            try:
                os.rename(staging, final)
                return final
            except OSError:
                if not (final / record).is_file():
                    raise
    remove_tree(staging)
    return final


def staging_dir(parent: Path, prefix: str) -> Path:
    """A fresh private directory under ``parent`` for building something before publishing it."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{prefix}.", dir=parent))


def fsync_dir(path: Path) -> None:
    """Flush ``path``'s directory entries to disk.

    A file created, renamed or removed inside a directory survives a crash only once the directory
    itself is fsynced; call this after :func:`os.replace` / :func:`os.link` when the change must be
    durable (an append-only ledger, an applied skill tree).
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``directory`` for the duration of the ``with`` block.

    Serializes every writer (any process, any thread) that locks the same existing directory, e.g.
    appends to the ledgers in one folder or applications to one skill tree. The lock is advisory
    and is released when the block ends or the process dies.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class LockHeld(Exception):
    """Another process holds an :func:`owner_lock`; ``owner`` is what it wrote when it took it."""

    def __init__(self, path: Path, owner: dict[str, Any] | None) -> None:
        self.path, self.owner = path, owner
        super().__init__(str(path))


@contextlib.contextmanager
def owner_lock(path: Path, owner: dict[str, Any]) -> Iterator[None]:
    """Hold an exclusive, non-blocking ``flock`` on ``path`` and say who holds it.

    The lock file records ``owner`` (pid, host, start time, command) for the message a second
    process gets (:class:`LockHeld`). The kernel releases a ``flock`` when its holder dies, even
    by ``kill -9``, so a lock is never stale: a leftover file whose owner is gone is simply taken
    over. The file is not removed on release (removing it would race with a waiting taker).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                held = json.loads(os.pread(fd, 65536, 0) or b"null")
            except ValueError:
                held = None
            raise LockHeld(path, held if isinstance(held, dict) else None) from None
        data = json.dumps(owner, sort_keys=True).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        yield
    finally:
        os.close(fd)


M = TypeVar("M", bound=BaseModel)


def read_model(
    path: Path, model: type[M], *, what: str, error: type[Exception], hint: str = ""
) -> M:
    """Read one typed JSON document; every failure is one ``error`` naming the file and fields.

    Args:
        path: The file.
        model: The pydantic model it must validate as.
        what: What the document is, for the message (``"cell record"``).
        error: The exception class to raise (from :mod:`bench_assets.kernel.errors`).
        hint: What the user can do, appended to the message.
    """
    tail = f"; {hint}" if hint else ""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{path}: cannot read the {what} ({e}){tail}") from None
    return parse_model(path, text, model, what=what, error=error, hint=hint)


def parse_model(
    path: Path,
    data: str | bytes,
    model: type[M],
    *,
    what: str,
    error: type[Exception],
    hint: str = "",
) -> M:
    """:func:`read_model` of a document whose bytes were read already (to digest them too)."""
    try:
        return model.model_validate_json(data)
    except ValidationError as e:
        tail = f"; {hint}" if hint else ""
        bad = sorted({".".join(str(p) for p in err["loc"]) or "(file)" for err in e.errors()})
        raise error(f"{path}: not a valid {what} (fields {', '.join(bad[:6])}){tail}") from None


V = TypeVar("V")


def _stat_key(path: Path) -> tuple[int, int, int, int]:
    """What :class:`FileCache` compares: inode, size, mtime and ctime (ns)."""
    st = path.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class FileCache(Generic[V]):
    """Values read from files, kept per process while each file is unchanged.

    The key is the file's inode, size, mtime and ctime, so any write, rename over or ``touch``
    (ctime cannot be set back from user space) reads the file again. At most ``max_entries``
    are kept (the oldest go first); a value is shared, so treat it as read-only.
    """

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._kept: dict[str, tuple[tuple[int, int, int, int], V]] = {}
        self._lock = threading.Lock()

    def get(self, path: Path, load: Callable[[Path], V]) -> V:
        """``load(path)``, or the value it gave for this file as it is now.

        Raises:
            OSError: ``path`` cannot be stat'ed (nothing is loaded).
        """
        key = _stat_key(path)
        hit = self._kept.get(str(path))
        if hit is not None and hit[0] == key:
            return hit[1]
        value = load(path)
        self._keep(str(path), key, value)
        return value

    def put(self, path: Path, value: V) -> None:
        """Keep ``value`` as what ``path`` holds as it is now: for a writer that has the value it
        just wrote (its next read in this process is then served without parsing the file).
        Any later change to the file reads it again.

        Raises:
            OSError: ``path`` cannot be stat'ed.
        """
        self._keep(str(path), _stat_key(path), value)

    def _keep(self, path: str, key: tuple[int, int, int, int], value: V) -> None:
        with self._lock:
            self._kept.pop(path, None)
            while len(self._kept) >= self.max_entries:
                self._kept.pop(next(iter(self._kept)))
            self._kept[path] = (key, value)
