"""Generation progress: a total fixed up front, spend that never takes unknown as 0, an ETA."""

import io

from bench_assets.generation.progress import GenerationTally, LiveProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_total_is_fixed_up_front_and_reused_cells_count_as_done() -> None:
    clock = Clock()
    t = GenerationTally(clock=clock)
    t.start(tasks=2, cells=12)
    assert (t.done, t.total) == (0, 12)
    assert t.eta_s() is None and "ETA —" in t.brief()
    t.planned(cells=6, submitted=2)  # task 1: 4 reused, 2 to pay
    assert (t.done, t.total) == (4, 12)
    clock.now += 30
    t.cell_done(resolved=True, error_kind=None, cost_usd=0.25)
    # 1 paid cell took 30 s; 1 submitted left + task 2 assumed to pay 2 like task 1 -> 3 x 30 s.
    assert t.eta_s() == 90
    t.planned(cells=6, submitted=1)
    assert (t.done, t.total) == (10, 12), "the total never grows when a task is planned"
    assert t.eta_s() == 60
    clock.now += 30
    t.cell_done(resolved=False, error_kind="verify-failed", cost_usd=None)
    t.cell_done(resolved=False, error_kind=None, cost_usd=0.5)
    assert (t.done, t.resolved, t.failed, t.carried) == (12, 1, 1, 9)
    assert t.spend() == "$0.75 + 1 unmeasured"
    assert "1 resolved, 1 failed, 9 reused" in t.brief()
    assert t.line().startswith("[12/12 cells]") and "elapsed 1m00s" in t.line()


def test_nothing_to_pay_has_no_eta_until_the_end() -> None:
    t = GenerationTally(clock=Clock())
    t.start(tasks=1, cells=3)
    t.planned(cells=3, submitted=0)
    assert t.done == t.total == 3 and t.eta_s() == 0.0


def test_not_a_terminal_gives_plain_lines_with_the_counts() -> None:
    out = io.StringIO()  # isatty() is False
    with LiveProgress(stream=out, tally=None) as live:
        assert not live.live_mode
        live.tally.start(tasks=1, cells=2)
        live.message("inputs ready: t1")
    text = out.getvalue()
    assert text.splitlines() == ["  inputs ready: t1", f"  {live.tally.line()}"]
    assert "\x1b" not in text, "no terminal control codes in plain output"


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_live_line_unless_json_is_asked_for() -> None:
    assert LiveProgress(stream=FakeTty(), tally=None).live_mode
    assert not LiveProgress(stream=FakeTty(), tally=None, plain=True).live_mode
    out = FakeTty()
    with LiveProgress(stream=out, tally=None) as live:
        live.tally.start(tasks=1, cells=2)
        live.tally.planned(cells=2, submitted=1)
        live.message("inputs ready: t1")
    assert "inputs ready: t1" in out.getvalue()
    assert "[1/2 cells]" in out.getvalue()


def test_a_retry_is_counted_as_a_retry_never_as_a_cell_past_the_total() -> None:
    """Issue 29: with retries the live line read [80/78]; a re-paid cell is done once."""
    t = GenerationTally(clock=Clock())
    t.start(tasks=1, cells=2)
    t.planned(cells=2, submitted=2)
    t.retried(cost_usd=0.1)  # cell 1 failed systemically and is paid again
    t.retried(cost_usd=None)  # ... and again, its cost unknown
    assert (t.done, t.total, t.retries) == (0, 2, 2)
    t.cell_done(resolved=True, error_kind=None, cost_usd=0.25)
    t.cell_done(resolved=False, error_kind="infra-error", cost_usd=0.25)
    assert (t.done, t.total, t.retries) == (2, 2, 2)
    assert t.spend() == "$0.60 + 1 unmeasured", "a failed attempt's spend still counts"
    assert "0 reused, 2 retried;" in t.brief()
    t.retry_planned()  # a resumed generation re-pays a cell that failed before the kill
    assert (t.done, t.retries) == (2, 3)
