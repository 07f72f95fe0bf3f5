"""A queue executor leaves the process environment as it found it.

``QueueExecutor.__enter__`` sets the suite's tasks folder, the artifact root, the driver token and
the warning filter in ``os.environ`` (the code servers, the daemon and the run workers it starts
inherit them). On exit they must be put back: a second executor or a test in the same process
otherwise loads another suite's definitions (it made ``test_dagster_inputs`` fail after a
queued-generation test on the same worker)."""

import os
from typing import Any

import dagster as dg
import pytest

from bench_assets.driver import runqueue, runs, services
from bench_assets.driver.instance import StepFailed


class _BrokenLocation:
    """A workspace whose code location failed to load (no code server is started)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        pass

    def __enter__(self) -> "_BrokenLocation":
        return self

    def __exit__(self, *a: Any) -> None:
        pass

    def create_request_context(self) -> "_BrokenLocation":
        return self

    def get_code_location_error(self, name: str) -> Any:
        return type("E", (), {"message": f"{name}: cannot load\n"})()


def test_the_environment_is_restored_when_the_executor_exits(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagster._core.workspace.context as context

    monkeypatch.setattr(context, "WorkspaceProcessContext", _BrokenLocation)
    monkeypatch.setenv("WFBENCH_TASKS", "/the/suite/before")
    monkeypatch.delenv("WFBENCH_ARTIFACTS", raising=False)
    monkeypatch.delenv(services.TOKEN_ENV, raising=False)
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        executor = runqueue.QueueExecutor(
            instance,
            tasks_dir=str(tmp_path / "tasks"),
            artifact_root=str(tmp_path / "artifacts"),
            start_daemon=False,
        )
        with pytest.raises(StepFailed, match="cannot load"):
            executor.__enter__()
    assert os.environ["WFBENCH_TASKS"] == "/the/suite/before"
    for key in ("WFBENCH_ARTIFACTS", services.TOKEN_ENV, "PYTHONWARNINGS"):
        assert key not in os.environ, key


def test_a_ctrl_c_whose_interrupt_was_swallowed_still_cancels_the_next_poll(tmp_path) -> None:
    """A signal handler runs between any two bytecodes: its ``KeyboardInterrupt`` raised inside a
    garbage-collection callback is printed and dropped ("Exception ignored in ..."), and the
    generation went on paying every cell. The executor sees the signal on its wakeup pipe."""
    import signal

    swallowed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: swallowed.append(signum))
    try:
        executor = runqueue.QueueExecutor(
            None,  # type: ignore[arg-type]  # poll raises before it reads the instance
            tasks_dir=str(tmp_path),
            artifact_root=str(tmp_path),
            start_daemon=False,
        )
        executor._jobs = {"a-run": runs.Job(assets=("comparator_cells",), partition=None)}
        executor._signals.open()
        try:
            os.kill(os.getpid(), signal.SIGINT)
            assert swallowed == [signal.SIGINT]  # the handler ran and raised nothing
            with pytest.raises(KeyboardInterrupt):
                executor.poll(0.1)
        finally:
            executor.__exit__(None, None, None)
    finally:
        signal.signal(signal.SIGINT, previous)
