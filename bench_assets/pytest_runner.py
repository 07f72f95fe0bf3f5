"""The trusted test runner: the program the harness starts inside the sandbox to run pytest.

It is harness-owned and never imported by the harness itself: the grader copies this file into a
read-only folder outside the worktree and runs ``<harness python> -I <folder>/pytest_runner.py``
with the run's specification on standard input (JSON). It imports only the standard library and
pytest, and it must keep doing so: nothing of ``bench_assets`` exists inside the sandbox.

What it does, in order, before any file of the worktree can run:

1. reads the specification from stdin (so nothing about the run is in ``argv`` or the
   environment, and verify and the oracle look the same from outside);
2. imports pytest, its default plugins and the modules it needs (pluggy, iniconfig, packaging),
   and a few common standard modules, while the worktree is not on ``sys.path`` — isolated mode
   (``-I``) already dropped the script folder, the current folder, ``PYTHON*`` variables and the
   user site, so a worktree ``pytest.py``, ``sitecustomize.py``, ``usercustomize.py`` or
   ``*.pth`` is never loaded;
3. switches bytecode caches off (``sys.pycache_prefix`` names a folder that does not exist) and
   builds ``sys.path`` as: standard library, then the oracle stage, then the task's import paths
   (the code under test), then site-packages — the worktree is never ahead of the runner or the
   standard library;
4. opens the report file (outside the worktree) and remembers a nonce that exists only in this
   process's memory, then snapshots the identity of the pytest internals a test outcome flows
   through;
5. runs ``pytest.main`` with the harness's options: the given paths, ``--rootdir``, the ini file
   the harness chose (``-c``), ``--confcutdir``, importlib import mode, no cache, no colour.

Before pytest starts, the runner writes ``READY`` and a digest of the nonce as the first bytes of
its stdout: a pipe the code under test cannot take back, so the harness can tell "the runner
itself failed" (a harness failure) from anything the worktree did afterwards.

The report is JSON lines, each carrying the nonce: one ``test`` line per test (its
outcome from the setup, call and teardown reports), ``collect-error`` and ``deselected`` lines,
and an ``end`` line with pytest's exit status and any pytest internals or plugins that were
replaced or registered by code under test (``tampered``). No ``end`` line means the process
stopped early.
"""

import hashlib
import json
import os
import sys

_write = os.write
_dumps = json.dumps

READY = "pytest_runner ready "
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")

_WATCHED = (
    "_pytest.runner.runtestprotocol",
    "_pytest.runner.call_and_report",
    "_pytest.runner.call_runtest_hook",
    "_pytest.runner.check_interactive_exception",
    "_pytest.runner.pytest_runtest_makereport",
    "_pytest.runner.CallInfo.from_call",
    "_pytest.reports.TestReport.__init__",
    "_pytest.reports.TestReport.from_item_and_call",
    "_pytest.reports.BaseReport.passed",
    "_pytest.reports.BaseReport.failed",
    "_pytest.reports.BaseReport.skipped",
    "_pytest.python.Function.runtest",
    "_pytest.python.pytest_pyfunc_call",
    "_pytest.skipping.pytest_runtest_makereport",
    "_pytest.skipping.evaluate_xfail_marks",
    "_pytest.main.pytest_runtestloop",
    "_pytest.main.Session.perform_collect",
    "_pytest.terminal.TerminalReporter.pytest_runtest_logreport",
    "pluggy._callers._multicall",
    "pluggy._hooks.HookCaller.__call__",
    "pluggy._manager.PluginManager._hookexec",
    "pluggy._manager.PluginManager.register",
)
"""Functions every test outcome flows through; replacing one is reported as tampering."""


def _read_spec() -> dict:  # type: ignore[type-arg]
    raw = sys.stdin.buffer.read()
    spec = json.loads(raw.decode("utf-8"))
    if not isinstance(spec, dict):
        raise SystemExit("wfbench runner: the specification must be a JSON object")
    return spec


COMMON_STDLIB = (
    "argparse",
    "collections",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "io",
    "itertools",
    "math",
    "pprint",
    "random",
    "string",
    "textwrap",
    "typing",
    "unittest",
)
"""Imported up front with their bytecode caches: once bytecode caches are switched off for the
rest of the run, a module imported later is compiled from source (correct, but slower)."""


def _preimport() -> None:
    import _pytest.config

    # pytest.main imports these itself (debugging/argcomplete/faulthandler plugins): load them now,
    # while their bytecode caches may still be read.
    names = ["pluggy", "iniconfig", "packaging.version", "_pytest._argcomplete", "pdb"]
    names += ["faulthandler", "readline", *COMMON_STDLIB]
    names += [f"_pytest.{p}" for p in _pytest.config.default_plugins]
    for name in names:
        try:
            __import__(name)
        except ImportError:
            pass


def _set_path(stage: str, import_paths: list[str]) -> None:
    import site

    site_dirs = set(site.getsitepackages())
    first_site = next((i for i, p in enumerate(sys.path) if p in site_dirs), len(sys.path))
    stdlib = sys.path[:first_site]
    rest = sys.path[first_site:]
    sys.path[:] = [*stdlib, stage, *import_paths, *rest]


def _resolve(dotted: str) -> object | None:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is None:
            continue
        obj: object = mod
        for attr in parts[i:]:
            holder = getattr(obj, "__dict__", {})
            if attr in holder:
                obj = holder[attr]
            else:
                found = getattr(obj, attr, None)
                if found is None:
                    return None
                obj = found
        return obj
    return None


def _identity(obj: object) -> tuple[int, int]:
    for attr in ("__func__", "fget"):
        inner = getattr(obj, attr, None)
        if inner is not None:
            obj = inner
            break
    code = getattr(obj, "__code__", None)
    return id(obj), id(code)


class Reporter:
    """The pytest plugin that writes the per-test report (registered by object, not by name)."""

    def __init__(self, fd: int, nonce: str, id_prefix: str) -> None:
        self._fd = fd
        self._nonce = nonce
        self._prefix = id_prefix
        self._phases: dict[str, dict[str, str]] = {}
        self._watched = {name: _resolve(name) for name in _WATCHED}
        self._snapshot = {
            name: (obj, _identity(obj)) for name, obj in self._watched.items() if obj is not None
        }
        self._armed = False
        self._late_plugins: list[str] = []

    def _emit(self, **fields: object) -> None:
        line = _dumps({"n": self._nonce, **fields}, ensure_ascii=True) + "\n"
        _write(self._fd, line.encode("ascii"))

    def _id(self, nodeid: str) -> str:
        if self._prefix and nodeid.startswith(self._prefix):
            return nodeid[len(self._prefix) :]
        return nodeid

    def pytest_collectstart(self) -> None:
        self._armed = True

    def pytest_plugin_registered(self, plugin: object, plugin_name: str) -> None:
        if not self._armed:
            return
        file = getattr(plugin, "__file__", None)
        if isinstance(plugin, type(sys)) and file and os.path.basename(file) == "conftest.py":
            return
        if isinstance(plugin, type(sys)) and file and sys.modules.get(plugin.__name__) is plugin:
            return  # a module named in a test module's pytest_plugins
        self._late_plugins.append(str(plugin_name or type(plugin).__name__))

    def pytest_collectreport(self, report: object) -> None:
        if getattr(report, "failed", False):
            self._emit(kind="collect-error", id=self._id(str(getattr(report, "nodeid", ""))))

    def pytest_deselected(self, items: list[object]) -> None:
        for item in items:
            self._emit(kind="deselected", id=self._id(str(getattr(item, "nodeid", ""))))

    def pytest_runtest_logreport(self, report: object) -> None:
        nodeid = str(getattr(report, "nodeid", ""))
        when = str(getattr(report, "when", ""))
        outcome = str(getattr(report, "outcome", ""))
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if outcome == "skipped" else "xpassed"
        self._phases.setdefault(nodeid, {})[when] = outcome

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        phases = self._phases.pop(nodeid, {})
        setup, call, teardown = (phases.get(w) for w in ("setup", "call", "teardown"))
        if setup == "failed" or teardown == "failed":
            outcome = "error"
        elif setup in ("skipped", "xfailed", "xpassed"):
            outcome = setup
        elif call is None:
            outcome = "error"
        else:
            outcome = call
        if outcome not in OUTCOMES:
            outcome = "error"
        self._emit(kind="test", id=self._id(nodeid), outcome=outcome)

    def pytest_sessionfinish(self, exitstatus: object) -> None:
        tampered = [
            name
            for name, (obj, ident) in self._snapshot.items()
            if _resolve(name) is not obj or _identity(obj) != ident
        ]
        tampered += [f"plugin registered by code under test: {p}" for p in self._late_plugins]
        self._emit(kind="end", exitstatus=int(exitstatus), tampered=tampered)  # type: ignore[call-overload]


def main() -> int:
    """Run pytest as the specification on stdin says; return its exit status."""
    spec = _read_spec()
    sys.dont_write_bytecode = True
    _preimport()
    import pytest

    # From here on no bytecode cache is read or written (the prefix names a folder that does not
    # exist): a __pycache__ the agent left in the worktree, for a module or for pytest's rewritten
    # conftest/test files, never runs; what runs is the source the recorded patch shows.
    sys.pycache_prefix = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no-bytecode")
    _set_path(str(spec["stage"]), [str(p) for p in spec["import_paths"]])
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(str(spec["report"]), flags, 0o600)
    reporter = Reporter(fd, str(spec["nonce"]), str(spec.get("id_prefix", "")))
    digest = hashlib.sha256(str(spec.pop("nonce")).encode()).hexdigest()[:32]
    _write(1, f"{READY}{digest}\n".encode("ascii"))
    args = [
        *[str(a) for a in spec["args"]],
        "--rootdir",
        str(spec["rootdir"]),
        "-c",
        str(spec["ini"]),
        "--confcutdir",
        str(spec["rootdir"]),
        "--import-mode=importlib",
        "-p",
        "no:cacheprovider",
        "--color=no",
        "--code-highlight=no",
        "-q",
    ]
    return int(pytest.main(args, plugins=[reporter]))


if __name__ == "__main__":
    sys.exit(main())
