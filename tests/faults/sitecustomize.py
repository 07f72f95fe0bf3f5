"""Test-only fault injection in every Python process a test starts (the ``wfbench`` command, the
Dagster daemon, code servers and run workers): put this folder on ``PYTHONPATH``.

``WFBENCH_TEST_DISK_FULL="<task> <cell> <flag file>"``: while the flag file exists, building that
cell's worktree fails with ``ENOSPC``, as it does when the disk holding the worktrees is full —
inside :func:`bench_assets.cells.pipeline.run_cell`, so the cell's record is the ``infra-error`` the
real code writes for it. Removing the flag file frees the space. Unset, nothing is changed.
"""

import errno
import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

_SPEC = os.environ.get("WFBENCH_TEST_DISK_FULL", "")
_MODULE = "bench_assets.cells.pipeline"


def _patch(module: ModuleType) -> None:
    task, cell, flag = _SPEC.split(" ", 2)
    real = module.prepare

    def prepare(template: Any, dest: Any, **kwargs: Any) -> Any:
        here = sys._getframe(1).f_locals  # run_cell's: the cell being run
        if (
            here.get("task_id") == task
            and f"{here.get('arm_name')}.r{here.get('run')}" == cell
            and os.path.exists(flag)
        ):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))
        return real(template, dest, **kwargs)

    module.prepare = prepare


class _Finder(importlib.abc.MetaPathFinder):
    """Patches ``bench_assets.cells.pipeline`` right after it is imported."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _SPEC:
    sys.meta_path.insert(0, _Finder())
