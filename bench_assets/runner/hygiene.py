"""Patch hygiene: files of the agent's diff that can change how the test runner or Python behaves.

Before grading, the worktree is compared with its state before the agent ran (the template plus
``setup``), for these *runner files* only:

* ``conftest`` — a ``conftest.py`` at any depth (pytest loads it as a plugin);
* ``runner-module`` — a module or package at an import root named like the runner or a module it
  needs (``pytest``, ``_pytest``, ``pluggy``, ``py``, ``iniconfig``), which ``python -m pytest``
  would import instead of the real one;
* ``startup-hook`` — ``sitecustomize``/``usercustomize`` modules and ``*.pth`` files at an import
  root, which run when the interpreter starts;
* ``runner-config`` — ``pytest.ini``, ``.pytest.ini``, ``pytest.toml``, ``.pytest.toml`` at the
  worktree root, and ``tox.ini``/``setup.cfg``/``pyproject.toml`` there when either version has a
  pytest section;
* ``plugin-metadata`` — ``*.dist-info``/``*.egg-info`` metadata and ``*.egg-link`` at an import
  root (entry points can name pytest plugins).

Every added, modified or deleted runner file is listed; with the task's ``runner_files: restore``
(the default) it is put back to its earlier state (an added one is removed), like ``protected``
files, and the record says which. Only regular files and symlinks are compared, symlinks by
target, and nothing is read or written through a symlink.
"""

import os
import re
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bench_assets.kernel.fsutil import atomic_write_bytes, ensure_real_parents

Reason = Literal["conftest", "runner-module", "startup-hook", "runner-config", "plugin-metadata"]
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig"})
STARTUP_MODULES = frozenset({"sitecustomize", "usercustomize"})
MODULE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".pyd")
CONFIG_FILES = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml"})
MAYBE_CONFIG_FILES = frozenset({"tox.ini", "setup.cfg", "pyproject.toml"})
_PYTEST_SECTION = re.compile(rb"^\s*\[(pytest|tool:pytest|tool\.pytest[^\]]*)\]", re.M)
MAX_READ = 16 * 1024 * 1024


class RunnerFileChange(BaseModel):
    """One runner file the agent added, changed or deleted, and what grading did about it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    reason: Reason
    change: Literal["added", "modified", "deleted"]
    action: Literal["restored", "kept"]


@dataclass(frozen=True)
class Entry:
    """A runner file's state: a regular file's bytes, or a symlink's target."""

    kind: Literal["file", "symlink", "other"]
    data: bytes


def _under_root(rel: PurePosixPath, roots: Sequence[str]) -> PurePosixPath | None:
    for root in roots:
        if root == ".":
            return rel
        try:
            return rel.relative_to(root)
        except ValueError:
            continue
    return None


def reason_for(rel: str, import_roots: Sequence[str]) -> Reason | None:
    """Why the worktree path ``rel`` is a runner file (by name alone), or None."""
    path = PurePosixPath(rel)
    if path.name == "conftest.py":
        return "conftest"
    if len(path.parts) == 1 and (path.name in CONFIG_FILES or path.name in MAYBE_CONFIG_FILES):
        return "runner-config"
    sub = _under_root(path, import_roots)
    if sub is None or not sub.parts:
        return None
    first = sub.parts[0]
    stem, dot, suffix = first.partition(".")
    top_level_module = len(sub.parts) > 1 or not dot or f".{suffix}".endswith(MODULE_SUFFIXES)
    if stem in RUNNER_MODULES and top_level_module:
        return "runner-module"
    if stem in STARTUP_MODULES and top_level_module:
        return "startup-hook"
    if len(sub.parts) == 1 and first.endswith(".pth"):
        return "startup-hook"
    if first.endswith((".dist-info", ".egg-info")) or (
        len(sub.parts) == 1 and first.endswith(".egg-link")
    ):
        return "plugin-metadata"
    return None


def _entry(path: Path) -> Entry:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return Entry("symlink", os.fsencode(os.readlink(path)))
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_READ:
        # A FIFO, device or huge file is never read; it differs from any earlier state by size.
        return Entry("other", f"{st.st_mode:o}:{st.st_size}".encode())
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return Entry("file", fh.read(MAX_READ))
    finally:
        os.close(fd)


def snapshot(root: Path, import_roots: Sequence[str]) -> dict[str, Entry]:
    """Every runner file under ``root`` (``.git`` excluded), by worktree-relative path."""
    out: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == str(root):
            dirnames[:] = [d for d in dirnames if d != ".git"]
        here = Path(dirpath)
        names = list(filenames) + [d for d in dirnames if os.path.islink(here / d)]
        for name in names:
            p = here / name
            rel = p.relative_to(root).as_posix()
            if reason_for(rel, import_roots) is not None:
                out[rel] = _entry(p)
    return out


def _is_runner_file(
    rel: str, import_roots: Sequence[str], *versions: Entry | None
) -> Reason | None:
    reason = reason_for(rel, import_roots)
    if reason == "runner-config" and PurePosixPath(rel).name in MAYBE_CONFIG_FILES:
        if not any(v is not None and _PYTEST_SECTION.search(v.data) for v in versions):
            return None
    return reason


def _remove(root: Path, rel: str) -> None:
    path = ensure_real_parents(root, rel)
    if os.path.islink(path) or path.is_file() or (path.exists() and not path.is_dir()):
        os.unlink(path)
    elif path.is_dir():
        shutil.rmtree(path)


def _restore(root: Path, rel: str, entry: Entry) -> None:
    path = ensure_real_parents(root, rel)
    if os.path.lexists(path):
        _remove(root, rel)
    if entry.kind == "symlink":
        os.symlink(os.fsdecode(entry.data), path)
    elif entry.kind == "file":
        atomic_write_bytes(path, entry.data)


def _prune_empty_parents(root: Path, rel: str, import_roots: Sequence[str]) -> None:
    parent = PurePosixPath(rel).parent
    while parent.parts and reason_for(parent.as_posix(), import_roots) == "runner-module":
        path = root / parent
        if os.path.islink(path) or not path.is_dir() or any(path.iterdir()):
            return
        path.rmdir()
        parent = parent.parent


def clean(
    root: Path,
    import_roots: Sequence[str],
    before: dict[str, Entry],
    policy: Literal["restore", "keep"],
) -> list[RunnerFileChange]:
    """List (and with ``restore``, undo) every change to a runner file since ``before``."""
    now = snapshot(root, import_roots)
    changes: list[RunnerFileChange] = []
    for rel in sorted(set(now) | set(before)):
        old, new = before.get(rel), now.get(rel)
        if old == new:
            continue
        reason = _is_runner_file(rel, import_roots, old, new)
        if reason is None:
            continue
        change: Literal["added", "modified", "deleted"] = (
            "added" if old is None else "deleted" if new is None else "modified"
        )
        if policy == "restore":
            if old is None:
                _remove(root, rel)
                _prune_empty_parents(root, rel, import_roots)
            else:
                _restore(root, rel, old)
        action: Literal["restored", "kept"] = "restored" if policy == "restore" else "kept"
        changes.append(RunnerFileChange(path=rel, reason=reason, change=change, action=action))
    return changes
