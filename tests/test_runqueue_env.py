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

from bench_assets.driver import runqueue, services
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
