"""Sanitized clone templates: the only tree an agent (or proposer) ever starts from.

A read-only mask over a normal clone is not enough: ``git log``, ``git show`` or a loose object
could hand the agent the fix or the hidden test. So the template is a fresh repository holding one
**parentless** commit with a fixed identity and date (the same input always gives the same
sanitized SHA), benchmark-owned paths removed, no refs, tags, remotes, reflogs or pseudo-refs, and
every unreachable object pruned. :func:`verify_template` then checks all of that again, plus that
the original commit and every oracle file's blob cannot be read from it, and fails loudly
(:class:`~bench_assets.kernel.errors.SanitizeError`) if any check does not hold. The README section
"What the agent can never see" summarizes these guarantees.
"""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bench_assets.kernel.errors import CommandError, SanitizeError
from bench_assets.kernel.fsutil import atomic_write_json, publish_dir, remove_tree
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox import gitrepo
from bench_assets.sandbox.process import Isolation, run

SANITIZED_MESSAGE = "wfbench sanitized task snapshot\n"
TEMPLATE_RECORD = ".wfbench-template.json"
PSEUDO_REFS = (
    "AUTO_MERGE",
    "BISECT_START",
    "CHERRY_PICK_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "ORIG_HEAD",
    "REBASE_HEAD",
    "REVERT_HEAD",
    "shallow",
    "packed-refs",
)


class TemplateInfo(BaseModel):
    """What a sanitized template is and what was checked about it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source_sha: str
    sanitized_sha: str
    removed_paths: list[str]
    files: int
    bytes: int
    checks: list[str]


@dataclass(frozen=True)
class Template:
    """A published template: where it is and what it holds."""

    path: Path
    info: TemplateInfo


def _g(args: list[str], repo: Path) -> str:
    return gitrepo.git_out(args, cwd=repo)


def build_template(
    source_git_dir: Path,
    sha: str,
    artifacts: ArtifactStore,
    *,
    remove: list[str],
    forbidden_blobs: dict[str, bytes],
) -> Template:
    """Build (or reuse) the sanitized template of ``sha`` from ``source_git_dir``.

    Args:
        source_git_dir: the repository holding ``sha`` (bare or with a work tree).
        sha: the pinned commit.
        artifacts: the artifact store; templates are keyed by their sanitized SHA.
        remove: benchmark-owned paths removed from the tree.
        forbidden_blobs: name → bytes of files (the oracle) that must not be readable from the
            template; checked by :func:`verify_template`.
    """
    staging = artifacts.staging("template")
    work = staging / "tree"
    try:
        gitrepo.git(["init", "-q", "--template=", str(work)])
        gitrepo.git(
            [
                "fetch",
                "-q",
                "--no-tags",
                "--no-write-fetch-head",
                "--depth=1",
                f"file://{source_git_dir.resolve()}",
                sha,
            ],
            cwd=work,
        )
        gitrepo.git(["read-tree", sha], cwd=work)
        present = [p for p in remove if _g(["ls-tree", "--name-only", sha, "--", p], work)]
        if present:
            gitrepo.git(["rm", "-r", "-q", "--cached", "--", *present], cwd=work)
        tree = _g(["write-tree"], work)
        sanitized = _g(["commit-tree", tree, "-m", SANITIZED_MESSAGE], work)
        gitrepo.git(["update-ref", "--no-deref", "HEAD", sanitized], cwd=work)
        gitrepo.git(["checkout-index", "-a", "-f"], cwd=work)
        _strip_history(work)
        info = verify_template(work, sha, remove=remove, forbidden_blobs=forbidden_blobs)
        final = artifacts.template(info.sanitized_sha)
        if (final / TEMPLATE_RECORD).is_file():
            remove_tree(staging)
            return Template(final, info)
        # The record sits outside the tree the agent sees: beside the work tree in the store.
        atomic_write_json(staging / TEMPLATE_RECORD, info.model_dump(mode="json"))
        publish_dir(staging, final, record=TEMPLATE_RECORD)
        return Template(final, info)
    finally:
        if staging.exists():
            remove_tree(staging)


def template_tree(template: Template) -> Path:
    """The work tree (with its ``.git``) that cell worktrees are copied from."""
    return template.path / "tree"


def load_template(artifacts: ArtifactStore, sanitized_sha: str) -> Template | None:
    """A previously published template, if present."""
    path = artifacts.template(sanitized_sha)
    record = path / TEMPLATE_RECORD
    if not record.is_file():
        return None
    return Template(path, TemplateInfo.model_validate_json(record.read_text(encoding="utf-8")))


def _strip_history(work: Path) -> None:
    git_dir = work / ".git"
    for ref in _g(["for-each-ref", "--format=%(refname)"], work).splitlines():
        gitrepo.git(["update-ref", "-d", ref], cwd=work)
    for remote in _g(["remote"], work).splitlines():
        gitrepo.git(["remote", "remove", remote], cwd=work)
    gitrepo.git(["reflog", "expire", "--expire=now", "--all"], cwd=work)
    for name in PSEUDO_REFS:
        (git_dir / name).unlink(missing_ok=True)
    if (git_dir / "logs").exists():
        shutil.rmtree(git_dir / "logs")
    for junk in ("description", "hooks", "COMMIT_EDITMSG"):
        p = git_dir / junk
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)
    gitrepo.git(["repack", "-a", "-d", "-q"], cwd=work)
    gitrepo.git(["prune", "--expire=now"], cwd=work)
    gitrepo.git(["prune-packed"], cwd=work)


def verify_template(
    work: Path, original_sha: str, *, remove: list[str], forbidden_blobs: dict[str, bytes]
) -> TemplateInfo:
    """Check every sanitization guarantee on ``work``; raise SanitizeError on the first failure."""
    checks: list[str] = []

    def require(cond: bool, name: str, why: str) -> None:
        if not cond:
            raise SanitizeError(f"sanitized template {work}: {name} check failed: {why}")
        checks.append(name)

    git_dir = work / ".git"
    require(git_dir.is_dir() and not git_dir.is_symlink(), "self-contained", ".git is not a folder")
    alternates = git_dir / "objects" / "info" / "alternates"
    require(not alternates.exists(), "no-alternates", "object store borrows objects")
    head = _g(["rev-parse", "--verify", "HEAD^{commit}"], work)
    head_ref = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    require(head_ref == head, "detached-head", f"HEAD is {head_ref!r}, not the sanitized commit")
    parents = _g(["rev-list", "--parents", "-n", "1", head], work).split()[1:]
    require(not parents, "parentless", f"sanitized commit has parents {parents}")
    refs = _g(["for-each-ref", "--format=%(refname)"], work)
    require(not refs, "no-refs", f"refs remain: {refs.splitlines()[:5]}")
    require(not _g(["tag", "-l"], work), "no-tags", "tags remain")
    require(not _g(["remote"], work), "no-remotes", "remotes remain")
    require(not (git_dir / "logs").exists(), "no-reflogs", "reflogs remain")
    leftover = [n for n in PSEUDO_REFS if (git_dir / n).exists()]
    require(not leftover, "no-pseudo-refs", f"pseudo-refs remain: {leftover}")
    fsck = gitrepo.git(
        ["fsck", "--unreachable", "--dangling", "--no-reflogs", "--no-progress"], cwd=work
    )
    require(not fsck.text().strip(), "no-unreachable-objects", fsck.text().strip()[:300])
    if original_sha != head:
        require(
            not gitrepo.has_object(work, original_sha),
            "original-unreachable",
            f"original commit {original_sha} can still be read",
        )
    tracked = set(_g(["ls-tree", "-r", "--name-only", "HEAD"], work).splitlines())
    for path in remove:
        inside = [t for t in tracked if t == path or t.startswith(path.rstrip("/") + "/")]
        require(not inside, "benchmark-paths-absent", f"{path} is still tracked")
        require(not os.path.lexists(work / path), "benchmark-paths-absent", f"{path} is on disk")
    for name, data in sorted(forbidden_blobs.items()):
        oid = gitrepo.blob_id(work, data)
        require(
            not gitrepo.has_object(work, oid),
            "oracle-blobs-absent",
            f"the bytes of oracle file {name!r} are readable as blob {oid}",
        )
    status = gitrepo.git(["status", "--porcelain=v1", "--untracked-files=all"], cwd=work).text()
    require(not status.strip(), "clean-status", status.strip()[:300])
    files, size = _count(work)
    return TemplateInfo(
        source_sha=original_sha,
        sanitized_sha=head,
        removed_paths=list(remove),
        files=files,
        bytes=size,
        checks=sorted(set(checks)),
    )


def _count(work: Path) -> tuple[int, int]:
    files = size = 0
    for dirpath, dirnames, filenames in os.walk(work):
        if ".git" in dirnames:
            dirnames.remove(".git")
        for name in filenames:
            files += 1
            size += os.lstat(os.path.join(dirpath, name)).st_size
    return files, size


def copy_worktree(template: Template, dest: Path) -> Path:
    """Copy a template's tree to ``dest`` (copy-on-write where the filesystem allows)."""
    if dest.exists():
        raise FileExistsError(f"worktree {dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    res = run(
        ["cp", "-a", "--reflink=auto", str(template_tree(template)), str(dest)],
        isolation=Isolation.HARNESS,
        timeout_s=600,
    )
    if not res.ok:
        raise CommandError(f"copying template {template.path} to {dest} failed: {res.tail(800)}")
    return dest
