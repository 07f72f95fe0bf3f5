"""Pure parts of a generation: ids, the candidate queue, and the outage breaker.

The generation itself is run by :mod:`bench_assets.driver.evolve`; see the README section
"Generations, reuse and the gate".

A generation id is ``g`` + four digits, one more than the highest id in the decision ledger.
The queue proposer takes the first queued candidate (sorted by id) that no earlier generation
evaluated, as recorded in the ledger. The outage breaker counts consecutive *systemic* failures
(:func:`~bench_assets.errorkinds.is_systemic`) in submission order; at ``limits.outage_streak`` it
trips, no further cell is scheduled, and the generation is aborted (its decision can only be
``insufficient_evidence``).
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
