"""Snapshots of the incumbent skill tree: content-addressed, read-only, with a manifest."""

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bench_assets.kernel.errors import InputError
from bench_assets.kernel.fsutil import (
    atomic_write_bytes,
    atomic_write_json,
    make_tree_readonly,
    publish_dir,
)
from bench_assets.kernel.hashing import sha256_json, tree_manifest
from bench_assets.kernel.store import ArtifactStore

_LITTER = frozenset({"__pycache__", ".DS_Store"})
TEMP_TAG = ".wfbench-apply-"
"""Marks the staged (``.new``) and backup (``.bak``) files that :mod:`bench_assets.generation.apply`
writes next to a target; defined here, with :func:`find_leftovers`, because a snapshot of the
skill tree must refuse them too (and the inputs may not import the generation)."""


def find_leftovers(skills_dir: Path) -> list[str]:
    """Every file or directory in the skill tree named like an application's temporary file.

    Symlinked directories are not followed. A scanner of the skill tree (the incumbent snapshot)
    must refuse a tree for which this is not empty: see "Leftovers" in
    :mod:`bench_assets.generation.apply`.

    Args:
        skills_dir: The skill tree.

    Returns:
        Relative posix paths, sorted.
    """
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(skills_dir):
        here = Path(dirpath)
        for name in (*dirnames, *filenames):
            if TEMP_TAG in name:
                found.append((here / name).relative_to(skills_dir).as_posix())
        dirnames[:] = [d for d in dirnames if TEMP_TAG not in d]
    return sorted(found)


class SkillsSnapshot(BaseModel):
    """Identity of one skill tree."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str
    files: list[dict[str, object]]
    file_count: int
    bytes: int


def describe(src: Path) -> SkillsSnapshot:
    """Manifest and digest of the skill tree at ``src`` (symlinks are refused)."""
    if not src.is_dir():
        raise InputError(f"skill tree {src} does not exist (bench.yaml skills.source)")
    manifest = tree_manifest(src, exclude=_LITTER)
    links = [e["path"] for e in manifest if "symlink" in e]
    if links:
        raise InputError(f"skill tree {src} contains symlinks: {', '.join(links[:5])}")
    leftovers = find_leftovers(src)
    if leftovers:
        raise InputError(
            f"skill tree {src} holds leftovers of an interrupted apply "
            f"({', '.join(leftovers[:5])}); run `wfbench apply` to recover it (it rolls forward "
            "or back); they are never copied into a snapshot"
        )
    return SkillsSnapshot(
        digest=sha256_json(manifest),
        files=manifest,
        file_count=len(manifest),
        bytes=sum(int(e["size"]) for e in manifest),
    )


def snapshot(src: Path, artifacts: ArtifactStore) -> tuple[SkillsSnapshot, Path]:
    """Store the skill tree read-only under ``skills/<digest>/``; idempotent."""
    snap = describe(src)
    final = artifacts.skills(snap.digest)
    if (final / "manifest.json").is_file():
        return snap, final
    staging = artifacts.staging("skills")
    for entry in snap.files:
        rel = str(entry["path"])
        mode = 0o555 if entry["exec"] else 0o444
        atomic_write_bytes(staging / "files" / rel, (src / rel).read_bytes(), mode=mode)
    if snap.files and describe(staging / "files").digest != snap.digest:
        raise InputError(f"skill tree {src} changed while it was being captured")
    atomic_write_json(staging / "manifest.json", snap.model_dump(mode="json"), mode=0o444)
    make_tree_readonly(staging)
    return snap, publish_dir(staging, final, record="manifest.json")
