"""Pure parts of a generation: ids, the candidate queue, and the outage breaker.

The generation itself is run by :mod:`bench_assets.driver.evolve`; see the README section
"Generations, reuse and the gate".

A generation id is ``g`` + four digits, one more than the highest id in the decision ledger.
The queue proposer takes the first queued candidate (sorted by id) that no earlier generation
evaluated, as recorded in the ledger. The outage breaker counts consecutive *systemic* failures
(:func:`~bench_assets.kernel.errorkinds.is_systemic`) in submission order; at
``limits.outage_streak`` it trips, no further cell is scheduled, and the generation is aborted (its
decision can only be ``insufficient_evidence``). The spend cap (:class:`SpendCap`,
``limits.max_spend_usd``) stops a generation the same way once its paid cells have spent the cap.
"""

import contextlib
import datetime as dt
import os
import re
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path

from bench_assets.kernel.errorkinds import ErrorKind, is_systemic
from bench_assets.kernel.errors import GenerationBusy
from bench_assets.kernel.fsutil import LockHeld, owner_lock

GENERATION_RE = re.compile(r"^g(\d{4,})$")


def next_generation(previous: Iterable[str | None]) -> str:
    """The id after the highest well-formed id in ``previous`` (``g0001`` when there is none)."""
    numbers = [int(m.group(1)) for g in previous if g and (m := GENERATION_RE.match(g))]
    return f"g{max(numbers, default=0) + 1:04d}"


def next_candidate(queued: Iterable[str], evaluated: Iterable[str | None]) -> str | None:
    """The first queued candidate id (sorted) not evaluated yet, or None."""
    done = {e for e in evaluated if e}
    for cid in sorted(queued):
        if cid not in done:
            return cid
    return None


def next_candidate_requeue(
    queued: Iterable[str], outcomes: Iterable[tuple[str | None, str]], requeue: int
) -> str | None:
    """The next candidate when ``insufficient_evidence`` keeps a candidate queued (issue 13).

    Args:
        queued: Queued candidate ids.
        outcomes: ``(candidate, decision)`` of every past evaluation.
        requeue: How many more times a candidate whose every decision was
            ``insufficient_evidence`` is evaluated again.

    Returns:
        The first never-evaluated candidate (sorted); else the insufficient one evaluated fewest
        times (then by id) with attempts left; else None. A candidate with any ``promote`` or
        ``keep_incumbent`` decision is never evaluated again.
    """
    attempts: dict[str, int] = {}
    decided: set[str] = set()
    for cid, decision in outcomes:
        if not cid:
            continue
        attempts[cid] = attempts.get(cid, 0) + 1
        if decision != "insufficient_evidence":
            decided.add(cid)
    fresh = next_candidate(queued, attempts)
    if fresh is not None:
        return fresh
    again = [
        (attempts[c], c)
        for c in queued
        if c in attempts and c not in decided and attempts[c] <= requeue
    ]
    return min(again)[1] if again else None


class OutageBreaker:
    """Trips after ``streak`` consecutive systemic failures, counted in submission order."""

    def __init__(self, streak: int) -> None:
        if streak < 1:
            raise ValueError("streak must be >= 1")
        self.streak = streak
        self.current = 0
        self.tripped = False
        self.trip_kinds: list[str] = []

    def observe(self, kind: ErrorKind | None) -> bool:
        """Record one finished cell; return True when the breaker is (now) tripped."""
        if self.tripped:
            return True
        if is_systemic(kind):
            self.current += 1
            self.trip_kinds.append(str(kind))
            if self.current >= self.streak:
                self.tripped = True
        else:
            self.current = 0
            self.trip_kinds.clear()
        return self.tripped


class SpendCap:
    """Trips once the paid cells of a generation have spent ``limit_usd`` (issue 12, M8).

    Each paid cell adds its reported ``cost_usd``. A cell whose cost is unknown (a killed
    session reports none) counts at ``ceiling_usd``, its arm's per-session budget, when there is
    one; otherwise the spend can no longer be bounded and the cap trips: unknown is not zero.
    With ``limit_usd`` None the cap never trips.
    """

    def __init__(self, limit_usd: float | None) -> None:
        if limit_usd is not None and limit_usd <= 0:
            raise ValueError("limit_usd must be > 0")
        self.limit_usd = limit_usd
        self.spent_usd = 0.0
        self.cells = 0
        self.at_ceiling = 0
        self.tripped = False
        self.reason = ""

    def observe(self, cell: str, cost_usd: float | None, ceiling_usd: float | None) -> bool:
        """Record one paid cell; return True when the cap is (now) tripped."""
        if self.limit_usd is None or self.tripped:
            return self.tripped
        self.cells += 1
        if cost_usd is not None:
            self.spent_usd += cost_usd
        elif ceiling_usd is not None:
            self.spent_usd += ceiling_usd
            self.at_ceiling += 1
        else:
            self.tripped = True
            self.reason = (
                f"spend cap ${self.limit_usd:g} can no longer be enforced: cell {cell} reported "
                "no cost and its arm has no max_budget_usd to bound it"
            )
            return True
        if self.spent_usd >= self.limit_usd:
            self.tripped = True
            bounded = (
                f", {self.at_ceiling} counted at their session budget" if self.at_ceiling else ""
            )
            self.reason = (
                f"spend cap reached: ${self.spent_usd:.4f} of ${self.limit_usd:g} spent by "
                f"{self.cells} paid cell(s){bounded}"
            )
        return self.tripped


_HELD: set[str] = set()
"""Writer locks this process holds (so a nested ``writer_lock`` does not lock itself out)."""


@contextlib.contextmanager
def writer_lock(path: Path, command: str) -> Iterator[None]:
    """One writer per instance: evolve, decide, apply and ledger repair hold this lock.

    A second writer fails at once with :class:`~bench_assets.kernel.errors.GenerationBusy` (exit 2)
    naming the holder — its pid, host, start time and command. The kernel drops the lock when the
    holder dies (even ``kill -9``), so a dead holder never blocks anyone. Re-entrant within one
    process (the CLI takes it before opening the Dagster instance; the driver takes it again).
    """
    key = str(path.resolve())
    if key in _HELD:
        yield
        return
    owner = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
    }
    try:
        with owner_lock(path, owner):
            _HELD.add(key)
            try:
                yield
            finally:
                _HELD.discard(key)
    except LockHeld as e:
        held = e.owner or {}
        who = (
            f"`{held.get('command', 'wfbench')}` (pid {held.get('pid', '?')} on "
            f"{held.get('host', '?')}, since {held.get('started_at', '?')})"
        )
        raise GenerationBusy(
            f"{path}: another wfbench writer is running: {who}; wait for it to finish, or stop "
            "it — the lock is released as soon as it exits"
        ) from None
