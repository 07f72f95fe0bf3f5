"""Grading a cell after its agent exited: patch first, then the tests on what was recorded.

Order (steps 2–4 of the README section "How a cell runs, and what it records"):

1. restore protected files and the runner files of the agent's diff
   (:mod:`bench_assets.runner.hygiene`) in the agent's worktree;
2. capture the patch against the base — files the tree's own ignore rules hide included, the
   harness's paths (skills, graph, phase documents) and interpreter caches left out — with its
   churn and the binary files it holds;
3. **grade what was recorded**: apply that patch to an untouched copy of the base (the agent never
   saw it; :func:`bench_assets.cells.worktree.prepare` keeps it) and run ``verify`` and the hidden
   oracle there. A patch that does not apply is ``patch-failed``. Anything the patch does not show —
   a file in ``.git``, a path the capture leaves out — does not exist where the tests run, so the
   recorded patch reproduces its own grade;
4. plant **tamper canaries** in both phases (:mod:`bench_assets.runner.canary_plant`): copies of
   real tests that must fail (one-off mutants of an expected literal, and one that always fails per
   module), under random names, mixed among the real tests. They are not expected tests; a canary
   reported *passed*, or the trusted runner reporting its own machinery replaced, makes the cell
   ``grader-tampered``.

Both test phases run through :func:`bench_assets.runner.trusted.run_phase` with the same sandbox and
the same mounts (same host folders), so the code under test cannot tell them apart except by the
test files that were added. With the trusted runner the verdicts are per-test
(:func:`~bench_assets.runner.trusted.judge_verify`,
:func:`~bench_assets.runner.trusted.judge_oracle`): an early exit, zero tests or a missing expected
test fails; a custom command is graded by its exit status and gets no canary (it reports no per-test
outcome).
"""

import os
import random
import secrets
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from bench_assets.cells.worktree import CellWorktree, capture_pathspec, restore_protected
from bench_assets.config.models import PytestRun
from bench_assets.inputs.oracle import OracleSnapshot
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.fsutil import (
    atomic_write_bytes,
    make_tree_readonly,
    make_tree_writable,
    remove_tree,
)
from bench_assets.kernel.hashing import sha256_bytes
from bench_assets.runner import canaries as canaries_mod
from bench_assets.runner import hygiene
from bench_assets.runner.canaries import CanaryOutcome
from bench_assets.runner.canary_plant import plant as plant_canaries
from bench_assets.runner.trusted import (
    Layout,
    Outcome,
    PhaseResult,
    Report,
    expected_oracle_tests,
    judge_command,
    judge_oracle,
    judge_verify,
    matches_test_id,
    new_layout,
    run_phase,
    strip_ready,
)
from bench_assets.sandbox.gitrepo import git_script_in_sandbox
from bench_assets.sandbox.process import Mount

MAX_PATCH_BYTES = 1024 * 1024
TAMPER_CANARIES = True
"""Plant tamper canaries in every graded run. A switch for tests only (the negative control in
``tests/test_cheats.py`` shows the force-pass cheats resolve without them); nothing else sets it."""
MUTANTS_PER_MODULE = 2
"""Mutants per verify test module (the agent saw those tests: verify canaries are a signal)."""
ORACLE_MUTANTS_PER_MODULE = 8
"""Mutants per oracle module: one per test with a mutable site before any gets two, the
``fail_to_pass`` tests first. A forger that spares every test with a near-identical twin (to
spare the mutants it cannot tell from the originals) must then spare the tests it needs."""
MAX_VERIFY_MODULES = 50
"""Verify test modules that get canaries (a bound on adversarial trees; the first found)."""
CAPTURE_MOUNT = "/wfbench-capture"


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
    patch_failed: str = ""
    """Why the recorded patch did not apply to the base (empty when it applied)."""
    binary_files: list[str] = field(default_factory=list)
    """Files of the patch git shows as binary (flagged in the record)."""
    churn_files: int = 0
    churn_insertions: int = 0
    churn_deletions: int = 0
    capture_s: float = 0.0
    canaries: list[CanaryOutcome] = field(default_factory=list)
    """Every tamper canary planted, by phase, with its outcome."""
    tampered: list[str] = field(default_factory=list)
    """Why the grade is ``grader-tampered``: canaries that passed, runner machinery replaced."""


def _split_canaries(
    rep: Report, planted: list[canaries_mod.Canary]
) -> tuple[Report, list[tuple[str, Outcome]]]:
    """The report without the canaries' lines, and the canaries' own (id, outcome) lines."""
    ids = [c.id for c in planted]
    mine: list[tuple[str, Outcome]] = []
    real: list[tuple[str, Outcome]] = []
    for line in rep.tests:
        (mine if any(matches_test_id(c, line[0]) for c in ids) else real).append(line)
    return replace(rep, tests=real), mine


def _is_evidence(canary: CanaryOutcome, real: list[tuple[str, Outcome]]) -> bool:
    """Whether a canary that passed proves tampering. An always-fails canary: always. A mutant:
    only when the real test it copies passed too — a wrong but honest answer can equal a
    mutant's changed literal (``side + side`` gives 6 where the test expects 9 and a mutant 6),
    and then the real test fails; a forgery passes both."""
    if canary.kind != "mutant" or canary.copies is None:
        return True
    got = [o for i, o in real if matches_test_id(canary.copies, i)]
    return bool(got) and all(o == "passed" for o in got)


def _judge_canaries(
    phase: str,
    planted: list[canaries_mod.Canary],
    lines: list[tuple[str, Outcome]],
    real: list[tuple[str, Outcome]],
    run: PhaseResult,
    grade: Grade,
) -> PhaseResult:
    """Record the phase's canaries; a phase whose canary proves tampering did not pass
    (returned). ``real``: the phase's real tests and their outcomes."""
    outcomes = canaries_mod.judge(planted, lines, phase=phase)
    if phase == "oracle":  # a mutant's detail quotes an oracle literal: nothing of it is kept
        outcomes = [c.model_copy(update={"detail": ""}) for c in outcomes]
    grade.canaries += outcomes
    fired = [c for c in canaries_mod.fired(outcomes) if _is_evidence(c, real)]
    for c in fired:
        grade.tampered.append(f"{phase} canary {c.id} ({c.kind}) passed")
    if not fired:
        return run
    detail = f"{len(fired)} tamper canary test(s) that must fail passed; {run.detail}"
    return run.model_copy(update={"passed": False, "detail": detail})


def _runner_tampering(phase: str, rep: Report | None, grade: Grade) -> None:
    if rep is not None and rep.tampered:
        grade.tampered += [f"{phase}: {t}" for t in rep.tampered[:10]]


def _test_modules(root: Path, paths: list[str]) -> list[Path]:
    """Test modules under the verify paths, pytest's default naming, symlinks never followed."""
    found: list[Path] = []
    for rel in paths:
        top = root / rel
        if top.is_symlink():
            continue
        if top.is_file():
            found.append(top)
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith(".py") and (
                    name.startswith("test_") or name[:-3].endswith("_test")
                ):
                    found.append(Path(dirpath) / name)
    return [p for p in found if not p.is_symlink() and p.is_file()][:MAX_VERIFY_MODULES]


def standalone_module(
    folder: Path, root: Path, rng: random.Random
) -> tuple[Path, bytes, list[canaries_mod.Canary]] | None:
    """A new test module in ``folder`` holding one always-failing canary, for a phase where no
    module could take one (named like its neighbours; None if no free name was found)."""
    stems = sorted(p.stem for p in folder.glob("test_*.py")) if folder.is_dir() else []
    words = [w for s in stems for w in s.split("_")[1:] if w.isalpha()] or ["checks", "basics"]
    for _ in range(20):
        name = f"test_{rng.choice(words)}_{rng.choice(words)}.py".replace("__", "_")
        path = folder / name
        if not os.path.lexists(path):
            data, made = plant_canaries(path.relative_to(root).as_posix(), b"", rng)
            return (path, data, made) if made else None
    return None


def plant_verify_canaries(
    tree: Path, paths: list[str], rng: random.Random
) -> tuple[list[canaries_mod.Canary], list[str]]:
    """Plant canaries into the verify test modules of the graded tree (harness-built, never the
    agent's worktree); returns them and the paths pytest must be given. Without a module that
    takes one, a standalone canary module is added beside the tests."""
    planted: list[canaries_mod.Canary] = []
    run_paths = list(paths)
    for path in _test_modules(tree, paths):
        rel = path.relative_to(tree).as_posix()
        source = path.read_bytes()
        new, made = plant_canaries(rel, source, rng, mutants=MUTANTS_PER_MODULE)
        if made:
            atomic_write_bytes(path, new, mode=os.stat(path).st_mode & 0o777)
            planted += made
    if not planted and paths:
        top = tree / paths[0]
        folder = top if top.is_dir() and not top.is_symlink() else top.parent
        if folder.is_dir() and not folder.is_symlink() and folder.resolve().is_relative_to(tree):
            alone = standalone_module(folder, tree, rng)
            if alone is not None:
                atomic_write_bytes(alone[0], alone[1])
                planted += alone[2]
                if not top.is_dir():
                    run_paths.append(alone[0].relative_to(tree).as_posix())
    return planted, run_paths


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
    planted: list[canaries_mod.Canary] = []
    paths = list(verify.pytest) if isinstance(verify, PytestRun) else None
    if paths is not None and TAMPER_CANARIES:
        planted, paths = plant_verify_canaries(wt.path, paths, _rng())
    phase = run_phase(
        layout,
        wt.path,
        phase="verify",
        pytest_paths=paths,
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
        rep, lines = _split_canaries(phase.report, planted)
        judged = judge_verify(rep, res, timeout_s, canaries=bool(planted))
        grade.verify_run = _judge_canaries("verify", planted, lines, rep.tests, judged, grade)
        _runner_tampering("verify", rep, grade)
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
    stage = layout.stage
    make_tree_writable(stage)
    staged: dict[str, bytes] = {}
    planted: list[canaries_mod.Canary] = []
    expected = expected_oracle_tests(snapshot, payloads)
    avoid = [e.id for e in expected]
    rng = _rng()
    for f in snapshot.files:
        data = payloads[f.name]
        if snapshot.command is None and TAMPER_CANARIES and f.name.endswith(".py"):
            data, made = plant_canaries(
                f.name,
                data,
                rng,
                mutants=ORACLE_MUTANTS_PER_MODULE,
                avoid=avoid,
                prefer=[e.id for e in expected if e.expected_as == "fail_to_pass"],
            )
            planted += made
        staged[f.name] = data
        atomic_write_bytes(stage / f.name, data, mode=0o444)
    if snapshot.command is None and TAMPER_CANARIES and not planted:
        alone = standalone_module(stage, stage, rng)
        if alone is not None:
            atomic_write_bytes(alone[0], alone[1], mode=0o444)
            planted += alone[2]
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
        rep, lines = _split_canaries(phase.report, planted)
        judged = judge_oracle(rep, res, timeout_s, expected)
        grade.oracle_run = _judge_canaries("oracle", planted, lines, rep.tests, judged, grade)
        _runner_tampering("oracle", rep, grade)
    else:
        grade.oracle_run = judge_command(res, timeout_s)
    grade.oracle_s = res.duration_s
    grade.oracle_passed = grade.oracle_run.passed
    grade.oracle_detail = f"hidden oracle: {grade.oracle_run.detail}"
    for f in snapshot.files:
        data = (stage / f.name).read_bytes()
        if sha256_bytes(data) != sha256_bytes(staged[f.name]):
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


def _rng() -> random.Random:
    """Canary names and places are random per phase: nothing about them can be learnt."""
    return random.Random(secrets.randbits(64))


def capture_patch(wt: CellWorktree, scratch: Path, grade: Grade) -> Path:
    """The agent's diff against the base, ignored files included, skills, graph and caches
    excluded; its churn and binary files. Returns the full patch file (what grading applies)."""
    scratch.mkdir(parents=True, exist_ok=True)
    flags = ["--cached", "--no-ext-diff", "--no-textconv", wt.base_sha]
    spec = capture_pathspec(wt.excluded_paths)
    res = git_script_in_sandbox(
        [
            ["add", "-A", "-f", *spec],
            ["diff", *flags, "--binary", *spec],
            ["diff", *flags, "--numstat", *spec],
        ],
        wt.path,
        stdout_file=(1, f"{CAPTURE_MOUNT}/patch.diff"),
        mounts=(Mount(scratch, CAPTURE_MOUNT, writable=True),),
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
        if parts[0] == "-" and parts[1] == "-":
            grade.binary_files.append(parts[2])
    return patch_file


def rebuild(wt: CellWorktree, patch_file: Path, grade: Grade) -> CellWorktree | None:
    """The graded tree: the untouched base copy with the recorded patch applied (None, and
    ``grade.patch_failed`` set, when it does not apply)."""
    if wt.base_path is None:
        raise ValueError("the worktree kept no base copy to grade in")
    graded = replace(wt, path=wt.base_path)
    if patch_file.stat().st_size == 0:
        return graded
    res = git_script_in_sandbox(
        [["apply", "--whitespace=nowarn", "--binary", f"{CAPTURE_MOUNT}/patch.diff"]],
        wt.base_path,
        mounts=(Mount(patch_file.parent, CAPTURE_MOUNT),),
        check=False,
    )
    grade.capture_s += res.duration_s
    if not res.ok:
        grade.patch_failed = f"the recorded patch does not apply to the base: {res.tail(400)}"
        return None
    return graded


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
    allow_binaries: bool = False,
) -> Grade:
    """Grade a worktree whose agent has exited (see module docstring).

    ``run_tests=False`` (a patch that did not apply) skips both test phases: the cell is
    unresolved whatever the unchanged worktree would do.
    """
    grade = Grade()
    grade.protected_changed = restore_protected(wt)
    grade.runner_files = hygiene.clean(wt.path, wt.import_paths, wt.runner_state, runner_files)
    patch_file = capture_patch(wt, stage_parent.parent / "capture", grade)
    if not run_tests:
        return grade
    graded = rebuild(wt, patch_file, grade)
    if graded is None:
        return grade
    layout = new_layout(stage_parent, graded.path, compiled_imports=allow_binaries)
    try:
        run_verify(graded, layout, verify, verify_timeout_s, tail_bytes, memory_mb, grade)
        run_oracle(graded, layout, snapshot, payloads, oracle_timeout_s, memory_mb, grade)
    finally:
        _remove_stage(graded, layout, grade)
    return grade
