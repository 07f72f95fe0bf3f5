"""Candidate overlays: files that replace or add files of the incumbent skill tree.

A snapshot stores the overlay's files read-only under ``overlays/<digest>/files`` with
``overlay.json`` describing it: origin, which files it changes or adds, and a unified diff against
the incumbent, which is what a reviewer reads before trusting a promotion.
"""

import difflib
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
from bench_assets.tasks.catalog import Candidate


class OverlaySnapshot(BaseModel):
    """Identity and review material of one candidate overlay."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate_id: str
    title: str
    origin: str
    rationale: str
    digest: str
    incumbent_digest: str
    files: list[dict[str, object]]
    changed: list[str]
    added: list[str]
    diff: str


def describe(candidate: Candidate, incumbent_dir: Path, incumbent_digest: str) -> OverlaySnapshot:
    """Digest the overlay and diff it against the incumbent tree."""
    manifest = tree_manifest(candidate.files_dir, exclude=frozenset({"__pycache__"}))
    if not manifest:
        raise InputError(f"candidate {candidate.spec.id}: files/ is empty")
    links = [e["path"] for e in manifest if "symlink" in e]
    if links:
        raise InputError(f"candidate {candidate.spec.id}: symlinks are refused: {links[:3]}")
    changed: list[str] = []
    added: list[str] = []
    diff: list[str] = []
    for entry in manifest:
        rel = str(entry["path"])
        new = (candidate.files_dir / rel).read_text(encoding="utf-8", errors="replace")
        old_path = incumbent_dir / rel
        if old_path.is_file():
            changed.append(rel)
            old = old_path.read_text(encoding="utf-8", errors="replace")
        else:
            added.append(rel)
            old = ""
        diff.extend(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile=f"incumbent/{rel}" if rel in changed else "/dev/null",
                tofile=f"candidate/{rel}",
            )
        )
    return OverlaySnapshot(
        candidate_id=candidate.spec.id,
        title=candidate.spec.title,
        origin=candidate.spec.origin,
        rationale=candidate.spec.rationale,
        digest=sha256_json({"files": manifest}),
        incumbent_digest=incumbent_digest,
        files=manifest,
        changed=changed,
        added=added,
        diff="".join(diff),
    )


def snapshot(
    candidate: Candidate, incumbent_dir: Path, incumbent_digest: str, artifacts: ArtifactStore
) -> tuple[OverlaySnapshot, Path]:
    """Store the overlay read-only; returns its description and the stored ``files`` folder."""
    snap = describe(candidate, incumbent_dir, incumbent_digest)
    final = artifacts.overlay(snap.digest)
    if not (final / "overlay.json").is_file():
        staging = artifacts.staging("overlay")
        for entry in snap.files:
            rel = str(entry["path"])
            data = (candidate.files_dir / rel).read_bytes()
            atomic_write_bytes(
                staging / "files" / rel, data, mode=0o555 if entry["exec"] else 0o444
            )
        atomic_write_json(staging / "overlay.json", snap.model_dump(mode="json"), mode=0o444)
        make_tree_readonly(staging)
        publish_dir(staging, final, record="overlay.json")
    return snap, final / "files"
