"""Grading a cell after its agent exited: visible ``verify``, the hidden oracle, patch and churn.

Order (steps 2–4 of the README section "How a cell runs, and what it records"): restore protected
files and the runner files of the agent's diff (:mod:`bench_assets.hygiene`) → ``verify``
(workspace read-only, network off, output tail kept) → oracle (staged at a per-cell random path,
read-only, offline; output never kept; staged bytes re-checked and removed) → patch and churn
captured against the base commit, excluding the skill and graph paths.

Both test phases run through :func:`bench_assets.runner.run_phase` with the same sandbox, so the
code under test cannot tell them apart except by the test files that were added. With the trusted
runner the verdicts are per-test (:func:`~bench_assets.runner.judge_verify`,
:func:`~bench_assets.runner.judge_oracle`): an early exit, zero tests or a missing expected test
fails; a custom command is graded by its exit status.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bench_assets import hygiene
from bench_assets.errorkinds import ErrorKind
from bench_assets.fsutil import atomic_write_bytes, make_tree_readonly, remove_tree
from bench_assets.gitrepo import git_script_in_sandbox
from bench_assets.hashing import sha256_bytes
from bench_assets.models import PytestRun
from bench_assets.oracle import OracleSnapshot
from bench_assets.runner import (
    Layout,
    PhaseResult,
    expected_oracle_tests,
    judge_command,
    judge_oracle,
    judge_verify,
    new_layout,
    run_phase,
    strip_ready,
)
from bench_assets.sandbox import Mount
from bench_assets.worktree import CellWorktree, restore_protected

MAX_PATCH_BYTES = 1024 * 1024


@dataclass
class Grade:
    """What grading found."""

    verify_passed: bool = False
    verify_tail: str = ""
    verify_s: float = 0.0
    verify_run: PhaseResult | None = None
    oracle_passed: bool = False
    oracle_s: float = 0.0
    oracle_run: PhaseResult | None = None
    oracle_error: ErrorKind | None = None
    """``oracle-unavailable`` / ``evidence-unverified`` when the oracle could not be trusted."""
    oracle_detail: str = ""
    infra_detail: str = ""
    """Set when the trusted runner itself could not start: a harness failure, not the agent's."""
    protected_changed: list[str] = field(default_factory=list)
    runner_files: list[hygiene.RunnerFileChange] = field(default_factory=list)
    patch: bytes = b""
    patch_truncated: bool = False
    churn_files: int = 0
    churn_insertions: int = 0
    churn_deletions: int = 0
    capture_s: float = 0.0


def _pathspec(wt: CellWorktree) -> list[str]:
    return ["--", ".", *[f":(exclude){p}" for p in wt.excluded_paths]]


def run_verify(
    wt: CellWorktree,
    layout: Layout,
    verify: str | PytestRun,
    timeout_s: float,
    tail: int,
    memory_mb: int | None,
    grade: Grade,
) -> None:
    """Run the visible verify phase with the workspace read-only and no network."""
    trusted = isinstance(verify, PytestRun)
    phase = run_phase(
        layout,
        wt.path,
        phase="verify",
        pytest_paths=verify.pytest if isinstance(verify, PytestRun) else None,
        command=None if isinstance(verify, PytestRun) else verify,
        import_paths=wt.import_paths,
        env_mounts=wt.env_mounts,
        env_paths=wt.env_paths,
        timeout_s=timeout_s,
        max_output=tail,
        memory_mb=memory_mb,
    )
    res = phase.result
    if phase.infra_failed:
        grade.infra_detail = f"the trusted test runner did not start for verify: {res.tail(600)}"
    if trusted and phase.report is not None:
        grade.verify_run = judge_verify(phase.report, res, timeout_s)
    else:
        grade.verify_run = judge_command(res, timeout_s)
    grade.verify_passed = grade.verify_run.passed
    grade.verify_s = res.duration_s
    suffix = f"\n[timed out after {timeout_s:g} s]" if res.timed_out else ""
    grade.verify_tail = strip_ready(res.tail(tail)) + suffix


def run_oracle(
    wt: CellWorktree,
    layout: Layout,
    snapshot: OracleSnapshot | None,
    payloads: dict[str, bytes] | None,
    timeout_s: float,
    memory_mb: int | None,
    grade: Grade,
) -> None:
    """Stage the oracle read-only at the cell's stage path, run it offline, re-check its bytes."""
    if snapshot is None or payloads is None:
        grade.oracle_error = ErrorKind.ORACLE_UNAVAILABLE
        grade.oracle_detail = "no oracle snapshot"
        return
    stage = layout.oracle_stage
    for f in snapshot.files:
        atomic_write_bytes(stage / f.name, payloads[f.name], mode=0o444)
    make_tree_readonly(stage)
    phase = run_phase(
        layout,
        wt.path,
        phase="oracle",
        pytest_paths=[layout.stage_name] if snapshot.command is None else None,
        command=snapshot.command,
        import_paths=wt.import_paths,
        env_mounts=wt.env_mounts,
        env_paths=wt.env_paths,
        timeout_s=timeout_s,
        max_output=1,  # the oracle's output is never kept
        memory_mb=memory_mb,
    )
    res = phase.result
    if phase.infra_failed:
        grade.infra_detail = "the trusted test runner did not start for the oracle"
    if phase.report is not None:
        expected = expected_oracle_tests(snapshot, payloads)
        grade.oracle_run = judge_oracle(phase.report, res, timeout_s, expected)
    else:
        grade.oracle_run = judge_command(res, timeout_s)
    grade.oracle_s = res.duration_s
    grade.oracle_passed = grade.oracle_run.passed
    grade.oracle_detail = f"hidden oracle: {grade.oracle_run.detail}"
    for f in snapshot.files:
        data = (stage / f.name).read_bytes()
        if sha256_bytes(data) != f.sha256:
            grade.oracle_passed = False
            grade.oracle_error = ErrorKind.EVIDENCE_UNVERIFIED
            grade.oracle_detail = f"oracle file {f.name} changed during verification"


def _remove_stage(wt: CellWorktree, layout: Layout, grade: Grade) -> None:
    mountpoint = wt.path / layout.stage_name
    if mountpoint.is_symlink() or not mountpoint.is_dir() or any(mountpoint.iterdir()):
        grade.oracle_passed = False
        grade.oracle_error = ErrorKind.EVIDENCE_UNVERIFIED
        grade.oracle_detail = "oracle mount point was tampered with"
        remove_tree(mountpoint)
    else:
        mountpoint.rmdir()
    remove_tree(layout.host)


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
    verify: str | PytestRun,
    snapshot: OracleSnapshot | None,
    payloads: dict[str, bytes] | None,
    stage_parent: Path,
    verify_timeout_s: float,
    oracle_timeout_s: float,
    tail_bytes: int,
    memory_mb: int | None = None,
    runner_files: Literal["restore", "keep"] = "restore",
    run_tests: bool = True,
) -> Grade:
    """Grade a worktree whose agent has exited (see module docstring).

    ``run_tests=False`` (a patch that did not apply) skips both test phases: the cell is
    unresolved whatever the unchanged worktree would do.
    """
    grade = Grade()
    grade.protected_changed = restore_protected(wt)
    grade.runner_files = hygiene.clean(wt.path, wt.import_paths, wt.runner_state, runner_files)
    if run_tests:
        layout = new_layout(stage_parent, wt.path)
        try:
            run_verify(wt, layout, verify, verify_timeout_s, tail_bytes, memory_mb, grade)
            run_oracle(wt, layout, snapshot, payloads, oracle_timeout_s, memory_mb, grade)
        finally:
            _remove_stage(wt, layout, grade)
    capture_patch(wt, stage_parent.parent / "capture", grade)
    return grade
