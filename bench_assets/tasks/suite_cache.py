"""The validated-suite cache: one validation of a suite per process while its files are unchanged.

A decision at 1,000 tasks validated the whole suite once per asset that reads it (about 1 s of
parsing, oracle test discovery and repository walks each time, under load several). The cache
keeps the last few validated :class:`~bench_assets.tasks.catalog.Benchmark` objects of this
process, each under the **fingerprint** of what its validation read, and serves one only when the
fingerprint of the files *now* is the same (:func:`suite_fingerprint`):

* the bytes of every file validation parses: ``bench.yaml``, each ``task.yaml`` (and a stray
  ``task.yml``), every file under a task's ``oracle/`` folder, each ``candidate.yaml``;
* the name and kind (folder or file) of every other entry under the suite's root, recursively:
  the task folders, each inline ``repo/`` (validation checks its paths, symlinks and ``.git``),
  the skill tree, the candidate queue, the predictions files. Their contents are not validated,
  so they are not read;
* with ``tasks`` (a partial load), the task folders not asked for are left out, as validation
  leaves them out.

Entries are taken in the order the file system lists them (not sorted: a third of the cost); a
folder listed in another order only makes a miss, never a wrong hit.

A suite with any symlink under its root is never cached (validation follows some symlinks, so
what it read could change outside the root); nor is a ``.git`` folder at the root walked
(validation never reads it). A task whose repository is a path outside the suite (not inline) is
checked again on every hit, exactly as validation checks it
(:func:`bench_assets.tasks.catalog.external_repo_problem`). The fingerprint is taken before and
after a validation and the result is cached only when both agree, so a file edited while it was
being validated is never served from the cache. Anything unexpected while fingerprinting (a file
that vanished, a permission error) means "not cacheable": the suite is validated in full, as
before.
"""

import os
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

from bench_assets.config.models import RESERVED_DIRS
from bench_assets.kernel.hashing import framed, sha256_bytes

FINGERPRINT_SCHEMA = "wfbench-suite-fingerprint-v1"
CONTENT_FILES = frozenset({"bench.yaml", "task.yaml", "task.yml", "candidate.yaml"})
"""Files whose bytes validation parses wherever they are (plus everything under ``oracle/``)."""
CACHE_MAX = 4
"""Validated suites kept per process (a full load and a few partial ones)."""

_cache: dict[tuple[str, tuple[str, ...] | None], tuple[str, Any]] = {}
_lock = threading.Lock()  # a code server's threads (sensors, schedules) share the cache


class _NotCacheable(Exception):
    """A symlink under the root, or a file that could not be read while fingerprinting."""


def _is_task_dir_name(name: str) -> bool:
    """Whether a top-level folder is (or should be) a task: as ``discover_task_dirs`` says."""
    return name not in RESERVED_DIRS and not name.startswith((".", "_"))


def suite_fingerprint(root: Path, tasks: Collection[str] | None) -> str | None:
    """The digest of what validating ``root`` (only ``tasks``' folders when given) reads, or
    ``None`` when the suite is not cacheable. ``root`` must already be resolved."""
    parts: list[str] = [
        FINGERPRINT_SCHEMA,
        str(root),
        "\0".join(sorted(set(tasks))) if tasks is not None else "(every task)",
    ]
    wanted = None if tasks is None else set(tasks)
    try:
        with os.scandir(root) as it:
            top = list(it)
        for entry in top:
            name = entry.name
            if entry.is_symlink():
                raise _NotCacheable(name)
            if entry.is_dir(follow_symlinks=False):
                if wanted is not None and _is_task_dir_name(name) and name not in wanted:
                    continue
                parts.append(f"{name}\0dir")
                if name == ".git":
                    continue
                _walk(entry.path, name, False, parts)
            else:
                parts.append(f"{name}\0file")
                if name in CONTENT_FILES:
                    parts.append(_content(entry.path))
    except (OSError, _NotCacheable):
        return None
    return framed(parts)


def _walk(folder: str, rel: str, oracle: bool, parts: list[str]) -> None:
    """Append every entry under ``folder`` (names and kinds; bytes of the validated files)."""
    with os.scandir(folder) as it:
        entries = list(it)
    for entry in entries:
        sub = f"{rel}/{entry.name}"
        if entry.is_symlink():
            raise _NotCacheable(sub)
        if entry.is_dir(follow_symlinks=False):
            parts.append(f"{sub}\0dir")
            in_oracle = oracle or (rel.count("/") == 0 and entry.name == "oracle")
            _walk(entry.path, sub, in_oracle, parts)
        else:
            parts.append(f"{sub}\0file")
            if oracle or entry.name in CONTENT_FILES:
                parts.append(_content(entry.path))


def _content(path: str) -> str:
    with open(path, "rb") as fh:
        return sha256_bytes(fh.read())


def cached(root: Path, tasks: Collection[str] | None, fingerprint: str | None) -> Any | None:
    """The suite validated under ``fingerprint`` in this process, if there is one."""
    if fingerprint is None:
        return None
    with _lock:
        hit = _cache.get(_key(root, tasks))
    return hit[1] if hit is not None and hit[0] == fingerprint else None


def store(root: Path, tasks: Collection[str] | None, fingerprint: str | None, bench: Any) -> None:
    """Keep ``bench`` (validated while the files had ``fingerprint``) for later loads."""
    if fingerprint is None:
        return
    key = _key(root, tasks)
    with _lock:
        _cache.pop(key, None)
        while len(_cache) >= CACHE_MAX:
            _cache.pop(next(iter(_cache)))
        _cache[key] = (fingerprint, bench)


def clear() -> None:
    """Forget every cached suite."""
    with _lock:
        _cache.clear()


def _key(root: Path, tasks: Collection[str] | None) -> tuple[str, tuple[str, ...] | None]:
    return str(root), None if tasks is None else tuple(sorted(set(tasks)))
