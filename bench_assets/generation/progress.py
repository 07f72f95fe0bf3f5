"""Progress of a generation: a pure tally (done/total, spend, ETA) and the terminal display.

:class:`GenerationTally` counts a generation's cells. Its total is fixed up front — every cell
of the benchmark (tasks × arms × runs) — so ``done/total`` never grows mid-run: a cell the
planner reuses (or that was already paid before a resume) counts as done when its task is
planned; a paid cell counts when its run ends. A systemic failure the generation re-pays
(``policy.retries``) is a *retry*, not a cell: it adds to the spend and the retry count, never to
``done`` (so ``done`` never passes ``total``); the cell counts once, when its last attempt ends.
It sums the spend (unmeasured costs are counted, never taken as 0) and estimates the time left
from the paid cells' pace.

:class:`LiveProgress` shows the tally: a live ``rich`` status line on a terminal, with the
driver's messages scrolling above it; plain lines (the driver's messages, each finished cell
carrying the counts, spend and ETA) when stderr is not a terminal or ``--json`` is given.
No Dagster import: the driver feeds the tally.
"""

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.text import Text


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


@dataclass
class GenerationTally:
    """Counts of one generation's cells; thread-safe, clock injectable for tests."""

    clock: Callable[[], float] = time.monotonic
    total: int = 0
    tasks: int = 0
    tasks_planned: int = 0
    carried: int = 0
    """Cells not paid this time: reused by the planner, or already paid before a resume."""
    submitted: int = 0
    paid_done: int = 0
    resolved: int = 0
    failed: int = 0
    """Paid cells that ended with an error kind (a valid negative or an excluded run)."""
    retries: int = 0
    """Re-payments of cells that ended with a systemic failure (counted apart from ``done``)."""
    spend_usd: float = 0.0
    unmeasured: int = 0
    started: float | None = None
    _first_paid: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self, *, tasks: int, cells: int) -> None:
        """Fix the total: every cell of every task (only the arms that apply to each task)."""
        with self._lock:
            self.tasks, self.total = tasks, cells
            self.started = self.clock()

    def planned(self, *, cells: int, submitted: int) -> None:
        """A task was planned: ``submitted`` of its ``cells`` will be paid, the rest are done."""
        with self._lock:
            self.tasks_planned += 1
            self.submitted += submitted
            self.carried += max(cells - submitted, 0)
            if submitted and self._first_paid is None:
                self._first_paid = self.clock()

    def more(self, *, cells: int, submitted: int) -> None:
        """A sequential look planned ``cells`` more cells, ``submitted`` of them to be paid."""
        with self._lock:
            self.total += cells
            self.submitted += submitted
            self.carried += max(cells - submitted, 0)

    def cell_done(self, *, resolved: bool, error_kind: str | None, cost_usd: float | None) -> None:
        """A paid cell's run ended (its last attempt)."""
        with self._lock:
            self.paid_done += 1
            if resolved:
                self.resolved += 1
            elif error_kind:
                self.failed += 1
            self._spent(cost_usd)

    def retried(self, *, cost_usd: float | None) -> None:
        """A paid cell's run ended with a systemic failure and the cell is paid again: its spend
        counts, the cell does not (it is done when its retry ends)."""
        with self._lock:
            self.retries += 1
            self._spent(cost_usd)

    def retry_planned(self) -> None:
        """A resumed generation re-pays a cell whose attempt before the interruption failed
        systemically (the cell is among the ``submitted`` of its task's :meth:`planned`)."""
        with self._lock:
            self.retries += 1

    def _spent(self, cost_usd: float | None) -> None:
        if cost_usd is None:
            self.unmeasured += 1
        else:
            self.spend_usd += cost_usd

    @property
    def done(self) -> int:
        """Cells finished: carried over plus paid and ended."""
        return self.carried + self.paid_done

    def eta_s(self) -> float | None:
        """Seconds left at the paid cells' pace so far; ``None`` before the first one ends.

        Tasks not yet planned are assumed to pay as many cells as the planned ones did on average.
        """
        with self._lock:
            if self._first_paid is None or self.paid_done == 0:
                return None if self.done < self.total else 0.0
            pace = (self.clock() - self._first_paid) / self.paid_done
            left = self.submitted - self.paid_done
            unplanned = self.tasks - self.tasks_planned
            if unplanned > 0 and self.tasks_planned:
                left += round(unplanned * self.submitted / self.tasks_planned)
            return max(left, 0) * pace

    def spend(self) -> str:
        """``$0.42`` (``+ 2 unmeasured`` when some paid cell reported no cost)."""
        text = f"${self.spend_usd:.2f}"
        return f"{text} + {self.unmeasured} unmeasured" if self.unmeasured else text

    def brief(self) -> str:
        """Counts, spend and ETA in one phrase (what a plain progress line carries)."""
        eta = self.eta_s()
        eta_text = "ETA —" if eta is None else f"ETA {_duration(eta)}"
        retried = f", {self.retries} retried" if self.retries else ""
        return (
            f"{self.resolved} resolved, {self.failed} failed, {self.carried} reused{retried}; "
            f"spent {self.spend()}; {eta_text}"
        )

    def line(self) -> str:
        """The whole status line: ``[12/28 cells] 3 resolved, ...; elapsed 1m02s``."""
        elapsed = 0.0 if self.started is None else self.clock() - self.started
        return f"[{self.done}/{self.total} cells] {self.brief()}; elapsed {_duration(elapsed)}"


class LiveProgress:
    """Show a generation's progress on ``stream`` (stderr): live on a terminal, else plain lines.

    Use as a context manager; pass :meth:`message` as the driver's ``progress`` callback and
    :attr:`tally` as its tally.
    """

    def __init__(
        self, *, plain: bool = False, stream: IO[str] | None = None, tally: GenerationTally | None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tally = tally if tally is not None else GenerationTally()
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.live_mode = isatty and not plain
        self._console = Console(file=self.stream, highlight=False) if self.live_mode else None
        self._live: Live | None = None

    def __enter__(self) -> "LiveProgress":
        if self._console is not None:
            self._live = Live(
                _StatusLine(self.tally),
                console=self._console,
                refresh_per_second=4,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
            self._live = None
        if self.tally.total:
            self.message(self.tally.line())

    def message(self, text: str) -> None:
        """One line of the driver's narration, above the live line (or as a plain line)."""
        if self._console is not None:
            self._console.print(Text(f"  {text}"))
        else:
            self.stream.write(f"  {text}\n")
            self.stream.flush()


class _StatusLine:
    """A renderable re-read at every refresh, so ETA and elapsed time tick between events."""

    def __init__(self, tally: GenerationTally) -> None:
        self.tally = tally

    def __rich__(self) -> Any:
        t = self.tally
        width = 24
        filled = width * t.done // t.total if t.total else 0
        bar = Text("━" * filled, style="green") + Text("━" * (width - filled), style="grey37")
        return Text.assemble("⏳ ", bar, " ", Text(t.line(), style="bold"))
