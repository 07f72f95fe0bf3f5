"""The one place digests are computed.

All digests are lowercase hex sha256, prefixed ``sha256:`` only where they are shown to people
(:func:`short`). Structured values are hashed as canonical JSON (sorted keys, compact separators,
UTF-8), so a digest never depends on dict order or whitespace. Ordered byte sequences are hashed as
*frames* (8-byte big-endian length + bytes) so that concatenations cannot collide
(``["ab", "c"]`` and ``["a", "bc"]`` differ).
"""

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    """Hex sha256 of ``text`` encoded as UTF-8."""
    return sha256_bytes(text.encode("utf-8"))


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def canonical_json(value: Any) -> str:
    """The canonical JSON text hashed by :func:`sha256_json`."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_json(value: Any) -> str:
    """Hex sha256 of the canonical JSON form of ``value``."""
    return sha256_text(canonical_json(value))


def canonical_and_digest(value: Any) -> tuple[str, str]:
    """The canonical JSON text of ``value`` and its :func:`sha256_json`, encoded once: for a
    large document stored under its own digest (a 1,000-task aggregate set or decision: each
    encoding about 0.15 s)."""
    text = canonical_json(value)
    return text, sha256_text(text)


def framed(parts: Iterable[bytes | str]) -> str:
    """Hex sha256 over length-prefixed frames of ``parts`` (str parts are UTF-8 encoded)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def tree_manifest(root: Path, *, exclude: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Sorted manifest of every regular file under ``root``: path, size, sha256, executable bit.

    Symlinks are recorded with their target instead of a content hash. Names in ``exclude`` are
    skipped at any depth.
    """
    entries: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in exclude)
        for name in sorted(filenames):
            if name in exclude:
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                entries.append({"path": rel, "symlink": os.readlink(full)})
                continue
            st = full.stat()
            entries.append(
                {
                    "path": rel,
                    "size": st.st_size,
                    "sha256": sha256_file(full),
                    "exec": bool(st.st_mode & 0o111),
                }
            )
    entries.sort(key=lambda e: e["path"])
    return entries


def tree_digest(root: Path, *, exclude: frozenset[str] = frozenset()) -> str:
    """Content digest of a directory tree (see :func:`tree_manifest`)."""
    return sha256_json(tree_manifest(root, exclude=exclude))


def short(digest: str, n: int = 12) -> str:
    """A digest shortened for display."""
    return digest[:n]
