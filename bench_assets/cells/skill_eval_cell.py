"""Grading one cell of a skill-eval task: the hidden graders on the recorded run.

Called by :func:`bench_assets.cells.pipeline.run_cell` in place of verify and the oracle when the
task has a ``skill_eval`` section. Like a code task, what is graded is what was **recorded**: the
agent's patch is captured against the base (:func:`bench_assets.cells.grading.capture_patch`) and
applied to the untouched base copy (:func:`~bench_assets.cells.grading.rebuild`); the graders read
that tree and the transcript the harness recorded from the CLI's standard output. The graders file
reaches the harness from the oracle snapshot only now, after the agent exited.
"""

import os
import re
from pathlib import Path

from bench_assets.cells.grading import Grade, capture_patch, rebuild
from bench_assets.cells.worktree import CellWorktree
from bench_assets.kernel.errorkinds import ErrorKind, is_excluded
from bench_assets.scorers.skill_eval import parse_grading
from bench_assets.scorers.skill_graders import (
    MAX_VIEW_CHARS,
    FileReader,
    Judge,
    RunGrade,
    grade_run,
)

_HEADER = re.compile(rb"^diff --git (\"?)a/(.*?)\1 (\"?)b/(.*?)\3$")


def _unquote(raw: bytes, quoted: bool) -> str:
    if not quoted:
        return raw.decode("utf-8", "replace")
    return raw.decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")


def created_paths(patch: bytes) -> list[str]:
    """Paths a git patch adds (``new file mode``), sorted: the files the agent *created*."""
    out: list[str] = []
    current: str | None = None
    for line in patch.splitlines():
        m = _HEADER.match(line)
        if m is not None:
            current = _unquote(m.group(4), bool(m.group(3)))
        elif current is not None and line.startswith(b"new file mode"):
            out.append(current)
            current = None
        elif line.startswith((b"@@", b"GIT binary patch")):
            current = None
    return sorted(set(out))


def tree_reader(root: Path) -> FileReader:
    """Reads a regular file under ``root`` as text; ``None`` for a missing file, a symlink or a
    path that leaves the tree (the agent cannot point a grader at a file it does not own)."""
    real_root = os.path.realpath(root)

    def read(rel: str) -> str | None:
        path = os.path.realpath(root / rel)
        if not path.startswith(real_root + os.sep) or os.path.islink(root / rel):
            return None
        if not os.path.isfile(path):  # a folder, a FIFO: nothing a grader may read
            return None
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_VIEW_CHARS)
        except (OSError, ValueError):
            return None
        return data.decode("utf-8", "replace")

    return read


def grade_skill_eval(
    wt: CellWorktree,
    grading_file: bytes | None,
    transcript: bytes | None,
    *,
    scratch: Path,
    with_plugin: bool,
    session_kind: ErrorKind | None,
    session_detail: str,
    judge: Judge | None = None,
) -> tuple[Grade, RunGrade | None, str]:
    """The cell's :class:`Grade` (``oracle_passed`` = resolved), the graders' verdict, and a
    detail for the record when the hidden grading could not be read."""
    # A case has no visible verify: verify_passed mirrors the graders' verdict, so the overfitting
    # signal (verify passed, oracle failed) never fires on a skill-eval cell.
    grade = Grade()
    if grading_file is None:
        grade.oracle_error = ErrorKind.ORACLE_UNAVAILABLE
        return grade, None, "the hidden graders file is missing from the oracle snapshot"
    grading = parse_grading(grading_file, "oracle/skill_eval.json")
    patch_file = capture_patch(wt, scratch, grade)
    created = created_paths(patch_file.read_bytes())
    graded = rebuild(wt, patch_file, grade)
    if graded is None:
        return grade, None, grade.patch_failed
    # A session the adapter judged systemic (crash, API failure) is never a "did not trigger".
    error = (session_detail or str(session_kind)) if is_excluded(session_kind) else None
    run = grade_run(
        grading,
        transcript or b"",
        created,
        tree_reader(graded.path),
        with_plugin=with_plugin,
        session_error=error,
        judge=judge,
    )
    grade.oracle_passed = grade.verify_passed = run.resolved
    detail = ""
    if run.session_error is not None:
        detail = f"session error, not graded: {run.session_error}"
    elif not run.resolved:
        score = "unknown" if run.score is None else f"{run.score:g}"
        failed = [o.name for o in run.graders if o.scored and o.passed is not True]
        detail = (
            f"graders: score {score} < threshold {run.threshold:g} "
            f"(not passed: {', '.join(failed[:8])})"
        )
    return grade, run, detail


def skill_error_kind(
    session_ok: bool, session_kind: ErrorKind | None, grade: Grade, run: RunGrade | None
) -> ErrorKind | None:
    """The cell's error kind under skill-eval semantics (``None``: resolved).

    Unlike a code task, a run that hit its turn or budget limit is graded on what it produced (the
    reference, §1.6) and resolves when its score meets the threshold; no patch is needed (an
    answer is work). A session error or an undecided grader is excluded, never a negative.
    """
    if is_excluded(session_kind):
        return session_kind
    if not session_ok and session_kind is None:
        return ErrorKind.SESSION_ERROR
    if grade.infra_detail:
        return ErrorKind.INFRA_ERROR
    if grade.patch_failed:
        return ErrorKind.PATCH_FAILED
    if run is None:
        return grade.oracle_error or ErrorKind.ORACLE_UNAVAILABLE
    if run.session_error is not None:
        return ErrorKind.SESSION_ERROR
    if run.resolved:
        return None
    if run.score is None:
        return ErrorKind.EVIDENCE_UNVERIFIED
    if session_kind is not None:
        return session_kind
    return ErrorKind.ORACLE_FAILED
