"""Grading a cell after its agent exited: visible ``verify``, the hidden oracle, patch and churn.

Order (steps 2–4 of the README section "How a cell runs, and what it records"): restore protected
files → ``verify`` (workspace read-only, network off, output tail kept) → oracle (staged at a
random path, read-only, offline; only pass/fail is kept; staged bytes re-checked and removed) →
patch and churn captured against the base commit, excluding the skill and graph paths. Any
non-zero oracle exit — including pytest's "no tests collected" — is a failure.
"""

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from bench_assets.errorkinds import ErrorKind
from bench_assets.fsutil import atomic_write_bytes, make_tree_readonly, remove_tree
from bench_assets.gitrepo import git_script_in_sandbox
from bench_assets.graph import ORACLE_ENV, ORACLE_STAGING_PREFIX
from bench_assets.hashing import sha256_bytes
from bench_assets.oracle import OracleSnapshot
from bench_assets.sandbox import WORKSPACE, Isolation, Mount, SandboxSpec, run, sandbox_env
from bench_assets.worktree import CellWorktree, restore_protected

MAX_PATCH_BYTES = 1024 * 1024


@dataclass
class Grade:
    """What grading found."""

    verify_passed: bool = False
    verify_tail: str = ""
    verify_s: float = 0.0
    oracle_passed: bool = False
    oracle_s: float = 0.0
    oracle_error: ErrorKind | None = None
    """``oracle-unavailable`` / ``evidence-unverified`` when the oracle could not be trusted."""
    oracle_detail: str = ""
    protected_changed: list[str] = field(default_factory=list)
    patch: bytes = b""
    patch_truncated: bool = False
    churn_files: int = 0
    churn_insertions: int = 0
    churn_deletions: int = 0
    capture_s: float = 0.0


def _pathspec(wt: CellWorktree) -> list[str]:
    return ["--", ".", *[f":(exclude){p}" for p in wt.excluded_paths]]


def run_verify(
    wt: CellWorktree, command: str, timeout_s: float, tail: int, memory_mb: int | None, grade: Grade
) -> None:
    """Run the visible verify command with the workspace read-only and no network."""
    res = run(
        ["/bin/sh", "-c", command],
        isolation=Isolation.SANDBOX,
        env=sandbox_env(),
        timeout_s=timeout_s,
        max_output=tail,
        sandbox=SandboxSpec(workspace=wt.path, workspace_writable=False, memory_mb=memory_mb),
    )
    grade.verify_passed = res.ok
    grade.verify_s = res.duration_s
    suffix = f"\n[timed out after {timeout_s:g} s]" if res.timed_out else ""
    grade.verify_tail = res.tail(tail) + suffix


def run_oracle(
    wt: CellWorktree,
    snapshot: OracleSnapshot | None,
    payloads: dict[str, bytes] | None,
    stage_parent: Path,
    timeout_s: float,
    memory_mb: int | None,
    grade: Grade,
) -> None:
    """Stage the oracle at a random path, run it offline and read-only, re-check and remove it."""
    if snapshot is None or payloads is None:
        grade.oracle_error = ErrorKind.ORACLE_UNAVAILABLE
        grade.oracle_detail = "no oracle snapshot"
        return
    name = f"{ORACLE_STAGING_PREFIX}{secrets.token_hex(16)}"
    mountpoint = wt.path / name
    stage = stage_parent / name
    mountpoint.mkdir(mode=0o700)
    try:
        for f in snapshot.files:
            atomic_write_bytes(stage / f.name, payloads[f.name], mode=0o444)
        make_tree_readonly(stage)
        res = run(
            ["/bin/sh", "-c", snapshot.command],
            isolation=Isolation.SANDBOX,
            env=sandbox_env({ORACLE_ENV: f"{WORKSPACE}/{name}"}),
            timeout_s=timeout_s,
            max_output=1,  # the oracle's output is never kept
            sandbox=SandboxSpec(
                workspace=wt.path,
                workspace_writable=False,
                mounts=(Mount(stage, f"{WORKSPACE}/{name}"),),
                memory_mb=memory_mb,
            ),
        )
        grade.oracle_s = res.duration_s
        grade.oracle_passed = res.ok
        if res.timed_out:
            grade.oracle_detail = f"hidden oracle timed out after {timeout_s:g} s"
        for f in snapshot.files:
            data = (stage / f.name).read_bytes()
            if sha256_bytes(data) != f.sha256:
                grade.oracle_passed = False
                grade.oracle_error = ErrorKind.EVIDENCE_UNVERIFIED
                grade.oracle_detail = f"oracle file {f.name} changed during verification"
    finally:
        remove_tree(stage)
        if mountpoint.is_symlink() or not mountpoint.is_dir() or any(mountpoint.iterdir()):
            grade.oracle_passed = False
            grade.oracle_error = ErrorKind.EVIDENCE_UNVERIFIED
            grade.oracle_detail = "oracle mount point was tampered with"
            remove_tree(mountpoint)
        else:
            mountpoint.rmdir()


def capture_patch(wt: CellWorktree, scratch: Path, grade: Grade) -> None:
    """The agent's diff against the base (bounded) and its churn, skills and graph excluded."""
    scratch.mkdir(parents=True, exist_ok=True)
    flags = ["--cached", "--no-ext-diff", "--no-textconv", wt.base_sha]
    res = git_script_in_sandbox(
        [
            ["add", "-A", "--", "."],
            ["diff", *flags, "--binary", *_pathspec(wt)],
            ["diff", *flags, "--numstat", *_pathspec(wt)],
        ],
        wt.path,
        stdout_file=(1, "/wfbench-capture/patch.diff"),
        mounts=(Mount(scratch, "/wfbench-capture", writable=True),),
        private_index=True,
    )
    grade.capture_s += res.duration_s
    patch_file = scratch / "patch.diff"
    size = patch_file.stat().st_size
    with open(patch_file, "rb") as fh:
        grade.patch = fh.read(MAX_PATCH_BYTES)
    grade.patch_truncated = size > MAX_PATCH_BYTES
    for line in res.text().splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        grade.churn_files += 1
        grade.churn_insertions += int(parts[0]) if parts[0].isdigit() else 0
        grade.churn_deletions += int(parts[1]) if parts[1].isdigit() else 0


def grade_cell(
    wt: CellWorktree,
    *,
    verify: str,
    snapshot: OracleSnapshot | None,
    payloads: dict[str, bytes] | None,
    stage_parent: Path,
    verify_timeout_s: float,
    oracle_timeout_s: float,
    tail_bytes: int,
    memory_mb: int | None = None,
) -> Grade:
    """Grade a worktree whose agent has exited (see module docstring)."""
    grade = Grade()
    grade.protected_changed = restore_protected(wt)
    run_verify(wt, verify, verify_timeout_s, tail_bytes, memory_mb, grade)
    run_oracle(wt, snapshot, payloads, stage_parent, oracle_timeout_s, memory_mb, grade)
    capture_patch(wt, stage_parent.parent / "capture", grade)
    return grade
