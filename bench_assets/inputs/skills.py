"""Snapshots of the incumbent skill tree: content-addressed, read-only, with a manifest."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bench_assets.generation.apply import find_leftovers
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
    return snap, publish_dir(staging, final)
