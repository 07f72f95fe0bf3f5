"""The cyclic collector is paused only for the bounded work wrapped in ``gc_paused``."""

import gc
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench_assets.kernel import gcpause
from bench_assets.kernel.gcpause import gc_paused


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_paused_inside_and_resumed_after():
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_blocks_resume_only_at_the_outermost():
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "an inner block must not resume the outer block's pause"
    assert gc.isenabled()


def test_resumed_after_an_exception():
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_as_a_decorator_each_call_pauses_and_resumes():
    seen: list[bool] = []

    @gc_paused()
    def work(x: int) -> int:
        seen.append(gc.isenabled())
        return x + 1

    assert work(1) == 2 and work(2) == 3
    assert seen == [False, False]
    assert gc.isenabled()


def test_overlapping_threads_resume_when_the_last_one_leaves():
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=other)
    with gc_paused():
        t.start()
        assert inside.wait(5)
    assert not gc.isenabled(), "the other thread is still inside its block"
    leave.set()
    t.join(5)
    assert gc.isenabled()


def test_the_console_script_freezes_the_heap_before_the_process_exits(
    monkeypatch: pytest.MonkeyPatch,
):
    """``wfbench`` (the click group called as a script) freezes and says the process ends with
    its command; ``main.main`` (tests) does neither."""
    from bench_assets.cli import main

    monkeypatch.setattr(gcpause, "_exits_after_command", False)
    gc.unfreeze()
    try:
        with pytest.raises(SystemExit):
            main.main(["--version"])
        assert gc.get_freeze_count() == 0 and not gcpause._exits_after_command
        with pytest.raises(SystemExit):
            main(["--version"])
        assert gc.get_freeze_count() > 0 and gcpause._exits_after_command
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("exits", [True, False])
def test_a_whole_command_leaves_the_collector_off_only_in_a_process_that_exits_after_it(
    monkeypatch: pytest.MonkeyPatch, exits: bool
):
    monkeypatch.setattr(gcpause, "_exits_after_command", exits)
    with gc_paused(until_exit=True):
        with gc_paused():  # materialize_decision's own pause, nested
            pass
        assert not gc.isenabled()
    assert gc.isenabled() is not exits
    # work that is not the whole command (a decision inside `wfbench evolve`) always resumes
    gc.enable()
    with gc_paused():
        pass
    assert gc.isenabled()


@pytest.mark.parametrize("exits", [True, False])
@pytest.mark.parametrize("command", ["plan", "decide"])
def test_plan_and_decide_are_such_commands(
    monkeypatch: pytest.MonkeyPatch, bench_dir: Path, exits: bool, command: str
):
    from bench_assets.cli import main

    monkeypatch.setattr(gcpause, "_exits_after_command", exits)
    res = CliRunner().invoke(main, [command, "--tasks", str(bench_dir), "--json"])
    assert res.exit_code == 0 or command == "decide", res.output  # decide: no cells yet
    assert gc.isenabled() is not exits
