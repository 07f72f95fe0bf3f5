"""Fault injection: a real process applying an overlay is killed with SIGKILL at chosen points.

``WFBENCH_TEST_CRASH_AT=<phase>:<k>`` makes :func:`bench_assets.generation.apply._crash_point` send
its own process SIGKILL there (no ``finally``, no ``atexit``, no flush: what ``kill -9`` does).
After each kill the next command, :func:`apply.recover` in this process or ``apply_overlay`` in a
fresh one, must leave the skill tree byte for byte exactly as before or exactly as after, no
leftover, and a ledger that verifies with at most one ``applied`` entry; applying the same decision
again must never record a second one.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench_assets.decision import ledger as ledger_store
from bench_assets.generation.apply import (
    APPLIED,
    CRASH_ENV,
    JOURNAL_SUFFIX,
    apply_overlay,
    find_leftovers,
    journal_path,
    plan_application,
    recover,
)
from bench_assets.kernel import fsutil
from bench_assets.kernel.errors import ApplyRefused, LedgerError

INCUMBENT = {
    "workflow/SKILL.md": b"# workflow\nold workflow text\n",
    "review/SKILL.md": b"# review\nold review text\n",
    "untouched/SKILL.md": b"# untouched\n",
}
OVERLAY = {
    "review/SKILL.md": b"# review\nNEW review text\n",
    "workflow/SKILL.md": b"# workflow\nNEW workflow text\n",
    "workflow/extra/checklist.md": b"- [ ] new file in a new directory\n",
}
DECISION: dict[str, Any] = {"schema_version": 1, "decision": "promote", "candidate": "c1"}

CHILD = """
import json, sys
from pathlib import Path
from bench_assets.generation.apply import apply_overlay, recover
from bench_assets.kernel.errors import WfbenchError

args = json.loads(sys.argv[1])
try:
    if args["action"] == "recover":
        done = recover(Path(args["skills"]))
        print(json.dumps({"recovered": None if done is None else done.action}))
    else:
        result = apply_overlay(
            Path(args["skills"]),
            Path(args["overlay"]),
            expected=args["expected"],
            decision="promote",
            ledger=None if args["ledger"] is None else Path(args["ledger"]),
            decision_json=args["decision"],
            generation="g0001",
            candidate="c1",
            kind="generation",
        )
        print(json.dumps({"ledger_seq": result.ledger_seq}))
except WfbenchError as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    sys.exit(3)
"""

Tree = tuple[dict[str, tuple[bytes, int]], list[str]]


def tree(root: Path) -> Tree:
    """Every file's bytes and mode and every directory, hidden ones included."""
    files: dict[str, tuple[bytes, int]] = {}
    dirs: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirs += [(here / d).relative_to(root).as_posix() for d in dirnames]
        for name in filenames:
            full = here / name
            files[full.relative_to(root).as_posix()] = (full.read_bytes(), os.lstat(full).st_mode)
    return files, sorted(dirs)


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        fsutil.atomic_write_bytes(root / rel, data)
    return root


class Bench:
    """A skill tree, an overlay, a ledger holding one earlier decision, and the decision's plan."""

    def __init__(self, root: Path, *, with_ledger: bool = True) -> None:
        self.skills = write_tree(root / "tasks" / "skills", INCUMBENT)
        self.overlay = write_tree(root / "overlay" / "files", OVERLAY)
        self.ledger: Path | None = root / "ledger" / "decisions.jsonl" if with_ledger else None
        if self.ledger is not None:
            ledger_store.append(
                self.ledger,
                decision="promote",
                decision_json=DECISION,
                generation="g0001",
                candidate="c1",
                kind="generation",
            )
        self.plan = plan_application(self.skills, self.overlay)
        self.before = tree(self.skills)
        reference = root / "reference"
        shutil.copytree(self.skills, reference)
        apply_overlay(
            reference,
            self.overlay,
            expected=self.plan,
            decision="promote",
            ledger=None,
            decision_json=DECISION,
            generation="g0001",
            candidate="c1",
            kind="generation",
        )
        self.after = tree(reference)
        shutil.rmtree(reference)
        assert self.after != self.before

    def child(self, action: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
        args = {
            "action": action,
            "skills": str(self.skills),
            "overlay": str(self.overlay),
            "ledger": None if self.ledger is None else str(self.ledger),
            "expected": self.plan,
            "decision": DECISION,
        }
        env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
        if crash_at is not None:
            env[CRASH_ENV] = crash_at
        return subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(args)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def kill_at(self, action: str, point: str) -> None:
        proc = self.child(action, point)
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)

    def applied(self) -> int:
        if self.ledger is None:
            return 0
        return sum(1 for e in ledger_store.read(self.ledger) if e.decision == APPLIED)

    def assert_clean(self) -> None:
        """No journal, no journal temp, no staged or backup file, a ledger that verifies."""
        assert find_leftovers(self.skills) == []
        assert not [p.name for p in self.skills.parent.iterdir() if JOURNAL_SUFFIX in p.name]
        if self.ledger is not None:
            verified = ledger_store.verify(self.ledger)
            assert verified.ok, verified.reason

    def assert_settled(self, outcome: str) -> None:
        """Exactly before (nothing recorded) or exactly after (recorded once), and clean."""
        self.assert_clean()
        if outcome == "before":
            assert tree(self.skills) == self.before
            assert self.applied() == 0
        else:
            assert tree(self.skills) == self.after
            assert self.applied() == (0 if self.ledger is None else 1)

    def apply_again(self) -> None:
        """The same decision once more: it lands if it had been rolled back, else is refused."""
        proc = self.child("apply")
        if proc.returncode == 3:
            assert json.loads(proc.stdout)["error"] == "ApplyRefused", proc.stdout
            assert "differ from the digests the decision was made on" in proc.stdout
        else:
            assert proc.returncode == 0, (proc.stdout, proc.stderr)
        self.assert_settled("after")


@pytest.fixture()
def bench(tmp_path: Path) -> Bench:
    return Bench(tmp_path)


# point, what the kill leaves on disk, and what the next command must make of it
POINTS = [
    ("journaled:1", "before"),  # the journal is written, nothing else
    ("staged:1", "before"),
    ("staged:3", "before"),  # after staging: every new file beside its target
    ("replaced:1", "before"),  # between file 1 and file 2 of the commit
    ("replaced:2", "before"),
    ("replaced:3", "before"),  # right after the last rename
    ("synced:1", "before"),  # every file read back and fsynced; the ledger append is next
    ("ledger-written:1", "after"),  # between the ledger write and its head anchor
    ("recorded:1", "after"),  # recorded; the backups and the journal are still there
]


def assert_really_interrupted(bench: Bench, point: str) -> None:
    """The kill left a half-done application behind (the fault is real, not a no-op)."""
    assert journal_path(bench.skills).exists()
    review = (bench.skills / "review" / "SKILL.md").read_bytes()
    workflow = (bench.skills / "workflow" / "SKILL.md").read_bytes()
    if point == "replaced:1":  # half-applied: the first file is new, the second still old
        assert (review, workflow) == (OVERLAY["review/SKILL.md"], INCUMBENT["workflow/SKILL.md"])
    if point.startswith(("staged", "replaced", "synced", "ledger", "recorded")):
        assert find_leftovers(bench.skills)
    assert bench.ledger is not None
    verified = ledger_store.verify(bench.ledger)
    if point == "ledger-written:1":  # the ledger blocks every command until it is settled
        assert not verified.ok and "an append was interrupted" in (verified.reason or "")
        with pytest.raises(LedgerError):
            ledger_store.append(
                bench.ledger,
                decision="x",
                decision_json={},
                generation=None,
                candidate=None,
                kind="ad_hoc",
            )
    else:
        assert verified.ok


@pytest.mark.parametrize(("point", "outcome"), POINTS)
def test_kill_then_recover(bench: Bench, point: str, outcome: str) -> None:
    bench.kill_at("apply", point)
    assert_really_interrupted(bench, point)

    recovery = recover(bench.skills)

    assert recovery is not None and not recovery.problems
    assert recovery.action == ("rolled_back" if outcome == "before" else "rolled_forward")
    assert recovery.ledger_reanchored == (point == "ledger-written:1")
    bench.assert_settled(outcome)
    assert recover(bench.skills) is None  # settled once and for all
    bench.apply_again()


@pytest.mark.parametrize(("point", "outcome"), POINTS)
def test_kill_then_the_next_apply_settles_first(bench: Bench, point: str, outcome: str) -> None:
    bench.kill_at("apply", point)
    assert_really_interrupted(bench, point)
    bench.apply_again()  # in a fresh process: settles the journal, then applies or refuses


@pytest.mark.parametrize(
    ("point", "outcome", "undone"),
    [("replaced:2", "before", 1), ("ledger-written:1", "after", 2)],
)
def test_kill_during_recovery_then_recover_again(
    bench: Bench, point: str, outcome: str, undone: int
) -> None:
    bench.kill_at("apply", point)
    bench.kill_at("recover", f"undone:{undone}")  # killed again, while settling
    assert journal_path(bench.skills).exists()
    recovery = recover(bench.skills)
    assert recovery is not None and not recovery.problems
    bench.assert_settled(outcome)
    bench.apply_again()


@pytest.mark.parametrize(
    ("point", "outcome"),
    [("replaced:1", "before"), ("synced:1", "before"), ("recorded:1", "after")],
)
def test_kill_without_a_ledger(tmp_path: Path, point: str, outcome: str) -> None:
    bench = Bench(tmp_path, with_ledger=False)
    bench.kill_at("apply", point)
    assert journal_path(bench.skills).exists()
    recovery = recover(bench.skills)
    assert recovery is not None and recovery.ledger_seq is None
    bench.assert_settled(outcome)


def test_a_kill_while_the_journal_was_written_leaves_only_its_temp(bench: Bench) -> None:
    jpath = journal_path(bench.skills)
    temp = jpath.with_name(f".{jpath.name}.k1ll3d.tmp")
    temp.write_bytes(b'{"schema_version": 1, "tok')
    assert recover(bench.skills) is None
    assert not temp.exists()
    bench.assert_settled("before")


def test_a_leftover_from_before_journals_is_refused_not_copied(bench: Bench) -> None:
    """The original bug: a kill left .bak/.new files that the next application copied."""
    orphan = bench.skills / "review" / ".SKILL.md.wfbench-apply-0123456789ab.new"
    fsutil.atomic_write_bytes(orphan, OVERLAY["review/SKILL.md"])
    proc = bench.child("apply")
    assert proc.returncode == 3 and json.loads(proc.stdout)["error"] == "ApplyRefused"
    assert "review/.SKILL.md.wfbench-apply-0123456789ab.new" in proc.stdout
    with pytest.raises(ApplyRefused, match="leftover"):
        recover(bench.skills)
    files, _ = tree(bench.skills)
    assert {k: v for k, v in files.items() if k != orphan.relative_to(bench.skills).as_posix()} == (
        bench.before[0]
    )
