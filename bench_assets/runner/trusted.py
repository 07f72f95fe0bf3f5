"""Running a cell's tests in a way the worktree cannot shadow, hook, skip or tell apart.

``verify`` and the hidden oracle both run through :func:`run_phase`, inside the sandbox, with the
worktree read-only. The two phases of a cell see the same sandbox: the same environment (no
benchmark-named variable), the same argv, the same working directory, and the same three mounts
at per-cell random paths:

* ``/workspace/.<32 hex>`` — the oracle stage: one host folder, empty and read-only during
  ``verify``, holding the oracle files (read-only) during the oracle run. The mount point is made
  in the graded tree (rebuilt from the recorded patch, never the agent's) and removed after;
* ``/<32 hex>`` — an empty, writable folder for the runner's report (emptied and made anew for
  each phase at the same host path, so nothing written during ``verify`` survives into the
  oracle run and the mount table is the same in both);
* ``/<32 hex>`` — the trusted runner (:mod:`bench_assets.runner.pytest_runner`) and an empty
  ``pytest.ini``, read-only.

With the trusted runner (``verify: {pytest: [...]}``, an oracle without ``command``) the harness
starts ``<harness python> -I <runner>`` and sends the run's specification on stdin; the runner
writes a per-test report (JSON lines, each carrying a nonce that exists only in the runner's
memory) and the verdict is read from it, never from the exit status:

* ``verify`` passes when the session ran to its end, at least one test passed and none failed or
  errored (skips are the agent's own business: ``verify`` is a signal, never proof);
* the oracle passes when the session ran to its end and every *expected* test — the task's
  ``fail_to_pass`` + ``pass_to_pass``, or by default every test found in the oracle files by
  :func:`discover_tests` — is reported ``passed`` (not skipped, xfailed, xpassed, deselected or
  missing). An early exit, zero tests, or fewer than expected fails with a detail such as
  ``expected 7 oracle tests, 0 reported``.

A report line without the nonce, a missing ``end`` line, or pytest internals replaced during the
run fail the phase. A runner that could not even start (before any worktree file ran) is a
harness failure: ``infra_failed`` tells the caller so.

A custom command (a ``verify`` string, ``oracle.command``) runs under ``/bin/sh -c`` in the same
sandbox and is graded by its exit status alone; ``{oracle_dir}`` in an oracle command is the
stage folder.

Why one file over 500 lines: the mounts, the specification sent on stdin, the report's parsing
and the verdict rules are one protocol with :mod:`bench_assets.runner.pytest_runner`; kept together,
a change to one side cannot silently disagree with the other.
"""

import hashlib
import json
import os
import re
import secrets
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from bench_assets.config.models import ORACLE_DIR_PLACEHOLDER
from bench_assets.inputs.oracle import OracleSnapshot
from bench_assets.kernel.fsutil import (
    atomic_write_bytes,
    atomic_write_text,
    make_tree_readonly,
    remove_tree,
)
from bench_assets.sandbox.process import (
    WORKSPACE,
    ExecResult,
    Isolation,
    Mount,
    SandboxSpec,
    run,
    sandbox_env,
)
from bench_assets.tasks.discovery import discover_tests

RUNNER_SOURCE = Path(__file__).with_name("pytest_runner.py")
READY = "pytest_runner ready "
"""Must equal ``pytest_runner.READY`` (the runner cannot import the harness)."""
RUNNER_NAME = "pytest_runner.py"
REPORT_NAME = "report.jsonl"
EMPTY_INI = "pytest.ini"
MAX_REPORT_BYTES = 8 * 1024 * 1024
MAX_RECORDED_TESTS = 2000
MAX_ID_CHARS = 500

Outcome = Literal[
    "passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected", "missing"
]
"""One test's outcome; ``missing`` = expected but never reported."""
_WORST_FIRST: tuple[Outcome, ...] = (
    "failed",
    "error",
    "xpassed",
    "xfailed",
    "skipped",
    "deselected",
    "missing",
)
Expectation = Literal["fail_to_pass", "pass_to_pass", "collected"]


# --------------------------------------------------------------------------------------------
# what is recorded


class TestOutcome(BaseModel):
    """One test as the cell record keeps it."""

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    """Node id: relative to the worktree (verify) or to the oracle folder (oracle)."""
    outcome: Outcome
    expected_as: Expectation | None = None
    """Oracle tests: why the test is expected (declared list, or found in the oracle files)."""


class PhaseResult(BaseModel):
    """What one grading phase (``verify`` or the oracle) found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runner: Literal["pytest", "command"]
    """The trusted pytest runner (per-test outcomes), or a custom command (exit status)."""
    passed: bool
    detail: str
    """Why, in one line: ``12 passed``, ``expected 7 oracle tests, 0 reported``, …"""
    exit_status: int
    timed_out: bool
    duration_s: float
    tests: list[TestOutcome] = Field(default_factory=list)
    """Per-test outcomes: every reported test (verify, capped), or every expected test (oracle).
    Empty for a custom command, which reports none."""
    reported: int | None = None
    """Tests the runner reported (None for a custom command)."""


# --------------------------------------------------------------------------------------------
# expected oracle tests


@dataclass(frozen=True)
class ExpectedTest:
    """A test the oracle must report as passed."""

    id: str
    expected_as: Expectation


def expected_oracle_tests(
    snapshot: OracleSnapshot, payloads: dict[str, bytes]
) -> list[ExpectedTest]:
    """The tests the oracle must report passed: the declared lists, else every test found."""
    if snapshot.fail_to_pass or snapshot.pass_to_pass:
        return [ExpectedTest(t, "fail_to_pass") for t in snapshot.fail_to_pass] + [
            ExpectedTest(t, "pass_to_pass") for t in snapshot.pass_to_pass
        ]
    out: list[ExpectedTest] = []
    for f in snapshot.files:
        try:
            found = discover_tests(f.name, payloads[f.name])
        except SyntaxError:
            continue
        out += [ExpectedTest(t, "collected") for t in found]
    return out


# --------------------------------------------------------------------------------------------
# the report


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    n: str


class _Test(_Line):
    kind: Literal["test"]
    id: str
    outcome: Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed"]


class _Deselected(_Line):
    kind: Literal["deselected"]
    id: str


class _CollectError(_Line):
    kind: Literal["collect-error"]
    id: str


class _End(_Line):
    kind: Literal["end"]
    exitstatus: int
    tampered: list[str]


_LINE = TypeAdapter(_Test | _Deselected | _CollectError | _End)


@dataclass
class Report:
    """A parsed runner report; only lines carrying the run's nonce count."""

    finished: bool = False
    exitstatus: int | None = None
    tampered: list[str] = field(default_factory=list)
    tests: list[tuple[str, Outcome]] = field(default_factory=list)
    collect_errors: int = 0
    foreign_lines: int = 0
    """Lines the runner did not write (no or wrong nonce, malformed, after the end line)."""
    oversized: bool = False


def parse_report(data: bytes, nonce: str, *, oversized: bool = False) -> Report:
    """Parse a report; a line without ``nonce`` counts as foreign and is otherwise ignored."""
    rep = Report(oversized=oversized)
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            line = _LINE.validate_json(raw)
        except ValidationError:
            rep.foreign_lines += 1
            continue
        if not secrets.compare_digest(line.n, nonce) or rep.finished:
            rep.foreign_lines += 1
            continue
        if isinstance(line, _Test):
            rep.tests.append((line.id, line.outcome))
        elif isinstance(line, _Deselected):
            rep.tests.append((line.id, "deselected"))
        elif isinstance(line, _CollectError):
            rep.collect_errors += 1
        else:
            rep.finished = True
            rep.exitstatus = line.exitstatus
            rep.tampered = list(line.tampered)
    return rep


def read_report(path: Path) -> tuple[bytes, bool]:
    """The report's bytes (bounded) and whether it was larger than the bound.

    The folder is writable from inside the sandbox, so the file is opened without following a
    symlink and must be a regular file: a planted symlink or FIFO reads as empty.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b"", False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b"", False
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_REPORT_BYTES + 1)
    finally:
        os.close(fd)
    return data[:MAX_REPORT_BYTES], len(data) > MAX_REPORT_BYTES


# --------------------------------------------------------------------------------------------
# judging


def matches_test_id(expected: str, reported: str) -> bool:
    """Whether a reported node id is the expected one (a name without ``[params]`` stands for
    every parametrization)."""
    return reported == expected or ("[" not in expected and reported.startswith(expected + "["))


def _worst(outcomes: Sequence[Outcome]) -> Outcome:
    if not outcomes:
        return "missing"
    for o in _WORST_FIRST:
        if o in outcomes:
            return o
    return "passed"


def _counts(outcomes: Sequence[Outcome]) -> str:
    order = ("passed", *_WORST_FIRST)
    return ", ".join(f"{outcomes.count(o)} {o}" for o in order if outcomes.count(o))


def _integrity_problems(rep: Report, res: ExecResult, timeout_s: float) -> list[str]:
    problems = []
    if res.timed_out:
        problems.append(f"timed out after {timeout_s:g} s")
    elif not rep.finished:
        problems.append(f"the test runner stopped before the session ended (exit {res.returncode})")
    if rep.foreign_lines:
        problems.append(f"the report holds {rep.foreign_lines} line(s) the runner did not write")
    if rep.oversized:
        problems.append("the report is larger than the harness reads")
    if rep.tampered:
        problems.append("pytest was modified during the run: " + ", ".join(rep.tampered[:5]))
    return problems


def _short(test_id: str) -> str:
    return test_id if len(test_id) <= MAX_ID_CHARS else test_id[: MAX_ID_CHARS - 1] + "…"


TESTS_FAILED = 1
"""pytest's exit status when some test failed: with tamper canaries planted (they must fail) it
is the expected status, and the per-test outcomes say whether a real test failed."""


def judge_verify(
    rep: Report, res: ExecResult, timeout_s: float, *, canaries: bool = False
) -> PhaseResult:
    """``verify`` through the trusted runner: ran to the end, >= 1 passed, none failed.

    ``rep`` holds the real tests only; ``canaries`` says tamper canaries ran beside them, so
    pytest's "some test failed" status is expected (any other non-zero status still fails).
    """
    outcomes = [o for _, o in rep.tests]
    allowed = (0, TESTS_FAILED) if canaries else (0,)
    problems = _integrity_problems(rep, res, timeout_s)
    bad = [o for o in outcomes if o in ("failed", "error")] or rep.collect_errors
    if not problems and not outcomes:
        problems.append("no test ran")
    elif not problems and "passed" not in outcomes:
        problems.append("no test passed")
    if not problems and (bad or rep.exitstatus not in allowed):
        problems.append(f"pytest exit status {rep.exitstatus}")
    summary = _counts(outcomes) or "0 tests"
    if rep.collect_errors:
        summary += f", {rep.collect_errors} collection error(s)"
    return PhaseResult(
        runner="pytest",
        passed=not problems,
        detail="; ".join([*problems, summary]),
        exit_status=res.returncode,
        timed_out=res.timed_out,
        duration_s=round(res.duration_s, 4),
        tests=[TestOutcome(id=_short(i), outcome=o) for i, o in rep.tests[:MAX_RECORDED_TESTS]],
        reported=len(rep.tests),
    )


def judge_oracle(
    rep: Report, res: ExecResult, timeout_s: float, expected: Sequence[ExpectedTest]
) -> PhaseResult:
    """The oracle through the trusted runner: every expected test reported passed.

    Only expected tests are recorded (their ids come from the oracle files, never from the
    report), so nothing the code under test writes into the report can reach the record.
    """
    rows = []
    for e in expected:
        got = [o for i, o in rep.tests if matches_test_id(e.id, i)]
        rows.append(TestOutcome(id=_short(e.id), outcome=_worst(got), expected_as=e.expected_as))
    outcomes = [r.outcome for r in rows]
    reported = sum(o != "missing" for o in outcomes)
    problems = _integrity_problems(rep, res, timeout_s)
    if not expected:
        problems.append("the oracle files define no test")
    if reported < len(expected):
        summary = f"expected {len(expected)} oracle tests, {reported} reported"
        if reported:
            summary += f" ({_counts([o for o in outcomes if o != 'missing'])})"
    else:
        summary = f"expected {len(expected)} oracle tests: {_counts(outcomes)}"
    passed = not problems and bool(expected) and all(o == "passed" for o in outcomes)
    return PhaseResult(
        runner="pytest",
        passed=passed,
        detail="; ".join([*problems, summary]),
        exit_status=res.returncode,
        timed_out=res.timed_out,
        duration_s=round(res.duration_s, 4),
        tests=rows[:MAX_RECORDED_TESTS],
        reported=len(rep.tests),
    )


def judge_command(res: ExecResult, timeout_s: float) -> PhaseResult:
    """A custom command: its exit status decides."""
    if res.timed_out:
        detail = f"timed out after {timeout_s:g} s"
    else:
        detail = f"exit status {res.returncode}"
    return PhaseResult(
        runner="command",
        passed=res.ok,
        detail=detail,
        exit_status=res.returncode,
        timed_out=res.timed_out,
        duration_s=round(res.duration_s, 4),
    )


# --------------------------------------------------------------------------------------------
# running


@dataclass(frozen=True)
class Layout:
    """Where one cell's grading phases put things (random per cell, equal for both phases)."""

    host: Path
    """Harness folder holding the runner, the stages and the report folders."""
    stage_name: str
    """Folder in the worktree where the oracle is mounted (``.<32 hex>``)."""
    out_dest: str
    runner_dest: str
    compiled_imports: bool = False
    """The task allows compiled code from the worktree (``allow_binaries``); else source only."""

    @property
    def stage_dest(self) -> str:
        """The stage inside the sandbox."""
        return f"{WORKSPACE}/{self.stage_name}"

    @property
    def stage(self) -> Path:
        """Host folder mounted at the stage in both phases: empty during ``verify``, the staged
        oracle files during the oracle run. One folder, so the mount table's root column (the
        host path a bind mount comes from) is the same in both phases."""
        return self.host / "stage"

    @property
    def out(self) -> Path:
        """Host folder mounted writable for the runner's report: emptied and made anew for each
        phase at the same path (nothing written during ``verify`` survives into the oracle)."""
        return self.host / "out"


def new_layout(host: Path, worktree: Path, *, compiled_imports: bool = False) -> Layout:
    """Random paths for one cell, the read-only runner folder, and the stage mount point."""
    layout = Layout(
        host=host,
        stage_name=f".{secrets.token_hex(16)}",
        out_dest=f"/{secrets.token_hex(16)}",
        runner_dest=f"/{secrets.token_hex(16)}",
        compiled_imports=compiled_imports,
    )
    runner = host / "runner"
    atomic_write_bytes(runner / RUNNER_NAME, RUNNER_SOURCE.read_bytes(), mode=0o444)
    atomic_write_text(runner / EMPTY_INI, "[pytest]\n", mode=0o444)
    make_tree_readonly(runner)
    layout.stage.mkdir(parents=True)
    make_tree_readonly(layout.stage)
    (worktree / layout.stage_name).mkdir(mode=0o755)
    return layout


@dataclass(frozen=True)
class PhaseRun:
    """One phase's process result and, for the trusted runner, its parsed report."""

    result: ExecResult
    report: Report | None
    infra_failed: bool
    """The trusted runner did not start (before any worktree file ran): a harness failure."""


def _sandbox(
    layout: Layout,
    worktree: Path,
    stage: Path,
    out: Path,
    memory_mb: int | None,
    env_mounts: tuple[Mount, ...] = (),
) -> SandboxSpec:
    return SandboxSpec(
        workspace=worktree,
        workspace_writable=False,
        network=False,
        mounts=(
            Mount(stage, layout.stage_dest),
            Mount(out, layout.out_dest, writable=True),
            Mount(layout.host / "runner", layout.runner_dest),
            *env_mounts,
        ),
        memory_mb=memory_mb,
    )


@dataclass(frozen=True)
class PhaseCall:
    """Everything needed to start one phase's process (see :func:`prepare_phase`)."""

    argv: list[str]
    env: dict[str, str]
    stdin: bytes | None
    sandbox: SandboxSpec
    out: Path
    """Host folder mounted writable for the report."""
    nonce: str | None
    """The trusted runner's nonce (None for a custom command)."""

    @property
    def ready(self) -> bytes:
        """The ready line the trusted runner must write first (empty for a custom command)."""
        return ready_line(self.nonce) if self.nonce else b""


def prepare_phase(
    layout: Layout,
    worktree: Path,
    *,
    phase: Literal["verify", "oracle"],
    pytest_paths: Sequence[str] | None,
    command: str | None,
    import_paths: Sequence[str],
    memory_mb: int | None,
    env_mounts: tuple[Mount, ...] = (),
    env_paths: Sequence[str] = (),
) -> PhaseCall:
    """The process of one phase: the trusted runner on ``pytest_paths``, or ``sh -c command``.

    ``env_mounts`` / ``env_paths``: the task environment, mounted read-only and importable after
    the task's own import paths (``PYTHONPATH`` for a custom command).
    """
    out = layout.out
    if out.exists() or out.is_symlink():
        remove_tree(out)
    out.mkdir()
    spec = _sandbox(layout, worktree, layout.stage, out, memory_mb, env_mounts)
    if command is not None:
        argv = ["/bin/sh", "-c", command.replace(ORACLE_DIR_PLACEHOLDER, layout.stage_dest)]
        extra = {"PYTHONPATH": ":".join(env_paths)} if env_paths else None
        return PhaseCall(argv, sandbox_env(extra), None, spec, out, None)
    nonce = secrets.token_hex(16)
    ini = (
        f"{WORKSPACE}/pytest.ini"
        if _regular_file(worktree / "pytest.ini")
        else f"{layout.runner_dest}/{EMPTY_INI}"
    )
    run_spec = {
        "nonce": nonce,
        "report": f"{layout.out_dest}/{REPORT_NAME}",
        "rootdir": WORKSPACE,
        "ini": ini,
        "args": [_inside(p) for p in (pytest_paths or ())],
        "id_prefix": f"{layout.stage_name}/" if phase == "oracle" else "",
        "import_paths": [*(_inside(p) for p in import_paths), *env_paths],
        "stage": layout.stage_dest,
        "compiled_imports": layout.compiled_imports,
    }
    argv = [sys.executable, "-I", f"{layout.runner_dest}/{RUNNER_NAME}"]
    return PhaseCall(argv, sandbox_env(), json.dumps(run_spec).encode(), spec, out, nonce)


def finish_phase(call: PhaseCall, res: ExecResult) -> PhaseRun:
    """Read the trusted runner's report (nothing for a custom command)."""
    if call.nonce is None:
        return PhaseRun(res, None, False)
    data, oversized = read_report(call.out / REPORT_NAME)
    rep = parse_report(data, call.nonce, oversized=oversized)
    return PhaseRun(res, rep, res.stdout_head != call.ready)


def run_phase(
    layout: Layout,
    worktree: Path,
    *,
    phase: Literal["verify", "oracle"],
    pytest_paths: Sequence[str] | None,
    command: str | None,
    import_paths: Sequence[str],
    timeout_s: float,
    max_output: int,
    memory_mb: int | None,
    env_mounts: tuple[Mount, ...] = (),
    env_paths: Sequence[str] = (),
) -> PhaseRun:
    """Run one phase: the trusted runner on ``pytest_paths``, or ``command`` under ``sh -c``."""
    call = prepare_phase(
        layout,
        worktree,
        phase=phase,
        pytest_paths=pytest_paths,
        command=command,
        import_paths=import_paths,
        memory_mb=memory_mb,
        env_mounts=env_mounts,
        env_paths=env_paths,
    )
    res = run(
        call.argv,
        isolation=Isolation.SANDBOX,
        env=call.env,
        stdin=call.stdin,
        timeout_s=timeout_s,
        max_output=max_output,
        sandbox=call.sandbox,
        keep_head=len(call.ready),
    )
    return finish_phase(call, res)


def _inside(path: str) -> str:
    return WORKSPACE if path == "." else f"{WORKSPACE}/{path}"


_READY_RE = re.compile(re.escape(READY) + r"[0-9a-f]{32}\n?")


def strip_ready(text: str) -> str:
    """Output as a person reads it: without the runner's ready line."""
    return _READY_RE.sub("", text, count=1)


def ready_line(nonce: str) -> bytes:
    """What the runner writes first on stdout once it started (see module docstring)."""
    digest = hashlib.sha256(nonce.encode()).hexdigest()[:32]
    return f"{READY}{digest}\n".encode("ascii")


def _regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
