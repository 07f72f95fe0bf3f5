"""Pure parts of a generation: ids, the candidate queue, and the outage breaker (SPEC §10.2).

A generation id is ``g`` + four digits, one more than the highest id in the decision ledger.
The queue proposer takes the first queued candidate (sorted by id) that no earlier generation
evaluated, as recorded in the ledger. The outage breaker counts consecutive *systemic* failures
(:func:`~bench_assets.errorkinds.is_systemic`) in submission order; at ``limits.outage_streak`` it
trips, no further cell is scheduled, and the generation is aborted (its decision can only be
``insufficient_evidence``). The spend cap (:class:`SpendCap`, ``limits.max_spend_usd``) stops a
generation the same way once its paid cells have spent the cap.
"""

import re
from collections.abc import Iterable

from bench_assets.errorkinds import ErrorKind, is_systemic

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
