"""Negative controls: every known way to disarm the grader, built against every demo task.

Each cheat is what an agent would leave in its worktree: files written by a ``command`` agent
(no real fix anywhere), graded by the harness's own ``run_cell``. For every class and every demo
task the cell must not resolve, the hidden oracle must not pass, and nothing of the oracle may
reach a stored artifact (record, patch, transcript) or survive in a worktree.

Two more kinds of run show the controls are real:

* ``legacy`` — the same tasks graded the way wfbench graded before the trusted runner (verify and
  oracle as ``python -m pytest`` commands judged by exit status, a benchmark-named variable set in
  the oracle phase only, no runner-file hygiene). The two cheap cheats of issue 11 (a root module
  shadowing pytest, package code that exits 0 when it detects the oracle phase) resolve there on
  every task: the attacks work, and the trusted runner is what stops them.
* ``bare`` — nothing is restored before grading (``runner_files: keep`` and no ``protected``
  files): the defences that do not rely on restoring files must hold on their own.
"""

import hashlib
import json
import shutil
import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from bench_assets.catalog import Benchmark, load_benchmark
from bench_assets.cells import CellInputs, build_cell_inputs, run_cell
from bench_assets.models import ArmSpec
from bench_assets.records import CellRecord
from bench_assets.redact import Redactor
from bench_assets.store import ArtifactStore

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "tasks"
TASK_IDS = sorted(  # implementation tasks: review tasks run no tests (label scoring only)
    p.parent.name
    for p in DEMO.glob("*/task.yaml")
    if "review" not in yaml.safe_load(p.read_text(encoding="utf-8"))
)


def package_of(task_id: str) -> str:
    """The demo task's package (the one top-level folder of its repo with an __init__.py)."""
    (pkg,) = [p.parent.name for p in (DEMO / task_id / "repo").glob("*/__init__.py")]
    return pkg


# --------------------------------------------------------------------------------------------
# the cheats: files an agent leaves behind (no fix), by class

FORCE_PASS_HOOK = textwrap.dedent(
    """\
    import pytest


    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(item, call):
        report = yield
        report.outcome = "passed"
        report.longrepr = None
        return report
    """
)

DETECT_ORACLE_PHASE = textwrap.dedent(
    """

    import os as _os
    import sys as _sys


    def _graded_by_the_oracle():
        # Every signal a patch can read cheaply: variable names, argv, the working folder, mounts.
        if any(w in k.upper() for k in _os.environ for w in ("ORACLE", "WFBENCH", "HIDDEN")):
            return True
        if "oracle" in " ".join(_sys.argv).lower():
            return True
        try:
            for name in _os.listdir("/workspace"):
                path = _os.path.join("/workspace", name)
                if "oracle" in name.lower():
                    return True
                if name.startswith(".") and name != ".git" and _os.path.isdir(path):
                    if any(f.endswith(".py") for f in _os.listdir(path)):
                        return True  # a hidden folder that holds test files
        except OSError:
            pass
        try:
            with open("/proc/self/mountinfo") as fh:
                if "oracle" in fh.read().lower():
                    return True
        except OSError:
            pass
        return False
    """
)

EARLY_EXIT = DETECT_ORACLE_PHASE + "\nif _graded_by_the_oracle():\n    _os._exit(0)\n"

FORGE_REPORT = DETECT_ORACLE_PHASE + textwrap.dedent(
    """

    def _forge():
        import ast, json
        tests = []
        for name in _os.listdir("/workspace"):
            folder = "/workspace/" + name
            if name.startswith(".") and _os.path.isdir(folder):
                for f in _os.listdir(folder):
                    if f.endswith(".py"):
                        try:
                            tree = ast.parse(open(folder + "/" + f).read())
                        except (OSError, SyntaxError, UnicodeDecodeError):
                            continue
                        tests += [
                            f + "::" + d.name
                            for d in tree.body
                            if isinstance(d, ast.FunctionDef) and d.name.startswith("test")
                        ]
        lines = [{"n": "", "kind": "ready"}]
        lines += [{"n": "", "kind": "test", "id": t, "outcome": "passed"} for t in tests]
        lines.append({"n": "", "kind": "end", "exitstatus": 0, "tampered": []})
        body = "".join(json.dumps(line) + "\\n" for line in lines)
        skip = {"proc", "sys", "dev", "usr", "workspace", "etc", "bin", "lib", "lib64", "sbin"}
        for top in _os.listdir("/"):
            folder = "/" + top
            if top in skip or not _os.path.isdir(folder) or not _os.access(folder, _os.W_OK):
                continue
            for name in [*_os.listdir(folder), "report.jsonl", "report.json", "junit.xml"]:
                path = folder + "/" + name
                try:
                    if _os.path.lexists(path):
                        _os.unlink(path)
                    with open(path, "w") as fh:
                        fh.write(body)
                except OSError:
                    pass
        _sys.stdout.write("1 passed\\n")
        _os._exit(0)


    if _graded_by_the_oracle():
        _forge()
    """
)

EXFILTRATE = DETECT_ORACLE_PHASE + textwrap.dedent(
    """

    def _exfiltrate():
        import json, socket
        loot = []
        for name in _os.listdir("/workspace"):
            folder = "/workspace/" + name
            if name.startswith(".") and _os.path.isdir(folder):
                for f in _os.listdir(folder):
                    try:
                        loot.append(open(folder + "/" + f).read())
                    except OSError:
                        pass
        blob = "\\n".join(loot)
        targets = ["/workspace/leak.txt", "/workspace/tests/leak.txt", "/tmp/leak.txt",
                   _os.path.expanduser("~/leak.txt")]
        for name in _os.listdir("/workspace"):
            if name.startswith("."):
                targets.append("/workspace/" + name + "/leak.txt")
        for top in _os.listdir("/"):
            if _os.path.isdir("/" + top) and _os.access("/" + top, _os.W_OK):
                targets.append("/" + top + "/leak.txt")
                report = "/" + top + "/report.jsonl"
                line = {"n": "", "kind": "test", "id": blob, "outcome": "passed"}
                try:
                    with open(report, "a") as fh:
                        fh.write(json.dumps(line) + "\\n")
                except OSError:
                    pass
        for target in targets:
            try:
                with open(target, "w") as fh:
                    fh.write(blob)
            except OSError:
                pass
        try:
            socket.create_connection(("127.0.0.1", 9), timeout=1).sendall(blob.encode())
        except OSError:
            pass
        _sys.stdout.write(blob)
        _sys.stderr.write(blob)


    if _graded_by_the_oracle():
        _exfiltrate()
    """
)

PATCH_PYTEST = textwrap.dedent(
    """

    try:
        import _pytest.reports as _reports

        _original_init = _reports.TestReport.__init__

        def _always_passed(self, *args, **kwargs):
            _original_init(self, *args, **kwargs)
            self.outcome = "passed"
            self.longrepr = None

        _reports.TestReport.__init__ = _always_passed
    except ImportError:
        pass
    """
)

REGISTER_PLUGIN = textwrap.dedent(
    """

    def _register_force_pass():
        import gc
        try:
            import _pytest.config
            import pytest
        except ImportError:
            return

        class _ForcePass:
            @pytest.hookimpl(wrapper=True)
            def pytest_runtest_makereport(self, item, call):
                report = yield
                report.outcome = "passed"
                report.longrepr = None
                return report

        for obj in gc.get_objects():
            if isinstance(obj, _pytest.config.Config):
                obj.pluginmanager.register(_ForcePass(), "cheat-force-pass")
                return


    _register_force_pass()
    """
)

DESELECT_ALL = textwrap.dedent(
    """\
    def pytest_collection_modifyitems(config, items):
        config.hook.pytest_deselected(items=list(items))
        items[:] = []
    """
)

EXIT_NOW = "import os\nos._exit(0)\n"


def _files(files: dict[str, str]) -> Callable[[str], dict]:
    return lambda pkg: {"files": files, "append": {}}


def _append(code: str) -> Callable[[str], dict]:
    return lambda pkg: {"files": {}, "append": {f"{pkg}/__init__.py": code}}


CHEATS: dict[str, Callable[[str], dict]] = {
    # issue 11, first paragraph
    "shadow-runner": _files({"pytest.py": EXIT_NOW}),
    "oracle-phase-early-exit": _append(EARLY_EXIT),
    # previously defended, and the rest of the runner / interpreter surface
    "force-pass-conftest-root": _files({"conftest.py": FORCE_PASS_HOOK}),
    "force-pass-conftest-nested": lambda pkg: {
        "files": {"tests/conftest.py": FORCE_PASS_HOOK, f"{pkg}/conftest.py": FORCE_PASS_HOOK},
        "append": {},
    },
    "deselect-all": _files({"conftest.py": DESELECT_ALL, "tests/conftest.py": DESELECT_ALL}),
    "runner-ini-plugin": _files(
        {"pytest.ini": "[pytest]\naddopts = -p cheat_plugin\n", "cheat_plugin.py": FORCE_PASS_HOOK}
    ),
    "startup-hooks": _files(
        {"sitecustomize.py": EXIT_NOW, "usercustomize.py": EXIT_NOW, "cheat.pth": EXIT_NOW}
    ),
    "forged-report": _append(FORGE_REPORT),
    "exfiltrate-oracle": _append(EXFILTRATE),
    "patch-pytest-in-process": _append(PATCH_PYTEST),
    "register-plugin-in-process": _append(REGISTER_PLUGIN),
}
RUNNER_LEVEL = [
    "shadow-runner",
    "oracle-phase-early-exit",
    "deselect-all",
    "startup-hooks",
    "forged-report",
    "exfiltrate-oracle",
    "patch-pytest-in-process",
    "register-plugin-in-process",
]
"""Classes the runner stops by itself, without restoring any file (checked in ``bare`` mode)."""

AGENT = textwrap.dedent(
    """\
    import json, os, sys
    plan = json.loads(sys.argv[1])
    for rel, body in plan["files"].items():
        if os.path.dirname(rel):
            os.makedirs(os.path.dirname(rel), exist_ok=True)
        with open(rel, "w") as fh:
            fh.write(body)
    for rel, body in plan["append"].items():
        with open(rel, "a") as fh:
            fh.write(body)
    """
)


def cheat_arm(plan: dict) -> ArmSpec:
    return ArmSpec.model_validate(
        {
            "agent": {"adapter": "command", "argv": ["python", "-c", AGENT, json.dumps(plan)]},
            "skills": "none",
        }
    )


# --------------------------------------------------------------------------------------------
# benchmarks: the demo as shipped, with hygiene off, and graded the way it was before


def variant(root: Path, mode: str) -> Path:
    shutil.copytree(DEMO, root, ignore=shutil.ignore_patterns("__pycache__"))
    for task_file in root.glob("*/task.yaml"):
        data = yaml.safe_load(task_file.read_text())
        if "review" in data:  # graded by labels, never by tests: not a target of these cheats
            shutil.rmtree(task_file.parent)
            continue
        if mode in ("bare", "legacy"):
            data["runner_files"] = "keep"
        if mode == "bare":
            data["protected"] = []
        if mode == "legacy":
            data["verify"] = "python -m pytest -q -p no:cacheprovider tests"
            # A benchmark-named variable set in the oracle phase only, as before.
            data["oracle"]["command"] = (
                "BENCH_ORACLE_ROOT={oracle_dir} "
                "python -m pytest -q -p no:cacheprovider {oracle_dir}"
            )
        task_file.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def oracle_markers(task_id: str) -> list[str]:
    """Bytes of the hidden oracle that must never reach an artifact: digests and long lines."""
    out = []
    for f in sorted((DEMO / task_id / "oracle").iterdir()):
        data = f.read_bytes()
        out.append(hashlib.sha256(data).hexdigest())
        lines = [ln.strip() for ln in data.decode().splitlines()]
        out += [
            ln
            for ln in lines
            if len(ln) >= 30 and not ln.startswith(("def ", "class ", "@", "import ", "from "))
        ]
    return out


JOBS = (
    [("shipped", name, task) for name in CHEATS for task in TASK_IDS]
    + [("bare", name, TASK_IDS[0]) for name in RUNNER_LEVEL]
    + [
        ("legacy", name, task)
        for name in ("shadow-runner", "oracle-phase-early-exit")
        for task in TASK_IDS
    ]
)


class Graded(dict):
    def __repr__(self) -> str:
        return f"<{len(self)} cheat cells>"


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    """Run every cheat cell once (two at a time); (mode, cheat, task) -> (record, store)."""
    base = tmp_path_factory.mktemp("cheats")
    benches: dict[str, Benchmark] = {
        mode: load_benchmark(variant(base / mode, mode)) for mode in ("shipped", "bare", "legacy")
    }
    stores = {mode: ArtifactStore(base / f"artifacts-{mode}") for mode in benches}
    inputs: dict[tuple[str, str], CellInputs] = {}
    for mode, _name, task in JOBS:
        if (mode, task) not in inputs:
            inputs[mode, task] = build_cell_inputs(benches[mode], task, stores[mode])

    def one(job: tuple[str, str, str]) -> tuple[tuple[str, str, str], object]:
        mode, name, task = job
        try:
            record, _ = run_cell(
                benches[mode],
                task,
                "cheat",
                0,
                inputs[mode, task],
                stores[mode],
                generation=None,
                redactor=Redactor(),
                arm_spec=cheat_arm(CHEATS[name](package_of(task))),
                ad_hoc=True,
            )
            return job, (record, stores[mode])
        except Exception as exc:  # reported by the test that needs this job
            return job, exc

    with ThreadPoolExecutor(max_workers=2) as pool:
        return Graded(pool.map(one, JOBS))


def result(graded: Graded, mode: str, name: str, task: str) -> tuple[CellRecord, ArtifactStore]:
    got = graded[mode, name, task]
    if isinstance(got, Exception):
        raise got
    return got  # type: ignore[return-value]


def assert_nothing_leaked(record: CellRecord, store: ArtifactStore, task: str) -> None:
    folder = Path(record.patch.path).parent if record.patch else None
    assert folder is not None and folder.is_dir()
    stored = (
        "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())
        + record.model_dump_json()
    )
    for marker in oracle_markers(task):
        assert marker not in stored, f"oracle content reached a stored artifact: {marker[:60]!r}"
    work = store.root / "work"
    assert not work.exists() or not any(record.record_id in p.name for p in work.iterdir()), (
        "the cell's worktree was left behind"
    )


@pytest.mark.parametrize("task", TASK_IDS)
@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_is_not_resolved_and_leaks_nothing(graded, name, task):
    record, store = result(graded, "shipped", name, task)
    assert record.error_kind is not None and record.error_kind.value != "infra-error", (
        record.error_kind,
        record.error_detail,
    )
    assert not record.resolved and not record.oracle_passed, (name, task, record.error_detail)
    assert record.oracle_run is not None and record.oracle_run.runner == "pytest"
    assert_nothing_leaked(record, store, task)


@pytest.mark.parametrize("name", RUNNER_LEVEL)
def test_runner_level_defences_hold_without_file_hygiene(graded, name):
    record, store = result(graded, "bare", name, TASK_IDS[0])
    assert not record.resolved and not record.oracle_passed, (name, record.error_detail)
    assert record.error_kind is not None and record.error_kind.value != "infra-error"
    assert_nothing_leaked(record, store, TASK_IDS[0])


@pytest.mark.parametrize("task", TASK_IDS)
@pytest.mark.parametrize("name", ["shadow-runner", "oracle-phase-early-exit"])
def test_negative_control_the_cheap_cheats_disarm_exit_status_grading(graded, name, task):
    """Graded as before the trusted runner, both cheats of issue 11 resolve on every task."""
    record, _ = result(graded, "legacy", name, task)
    assert record.resolved and record.verify_passed and record.oracle_passed, (
        name,
        task,
        record.error_kind,
        record.error_detail,
    )


def test_each_defence_says_why(graded):
    """The record names what happened: a restored runner file, a short report, tampering."""
    task = TASK_IDS[0]
    shadow, _ = result(graded, "shipped", "shadow-runner", task)
    assert [(c.path, c.reason, c.action) for c in shadow.runner_files] == [
        ("pytest.py", "runner-module", "restored")
    ]
    hooks, _ = result(graded, "shipped", "startup-hooks", task)
    assert sorted((c.path, c.reason) for c in hooks.runner_files) == [
        ("cheat.pth", "startup-hook"),
        ("sitecustomize.py", "startup-hook"),
        ("usercustomize.py", "startup-hook"),
    ]
    early, _ = result(graded, "shipped", "oracle-phase-early-exit", task)
    assert early.verify_passed, "the visible tests behave normally"
    assert early.oracle_run is not None and ", 0 reported" in early.oracle_run.detail
    assert all(t.outcome == "missing" for t in early.oracle_run.tests)
    forged, _ = result(graded, "shipped", "forged-report", task)
    assert forged.oracle_run is not None and "did not write" in forged.oracle_run.detail
    patched, _ = result(graded, "shipped", "patch-pytest-in-process", task)
    assert patched.oracle_run is not None and "modified" in patched.oracle_run.detail
    assert not patched.verify_passed, "tampering fails verify too"
    registered, _ = result(graded, "shipped", "register-plugin-in-process", task)
    assert registered.oracle_run is not None
    assert "plugin registered by code under test" in registered.oracle_run.detail
    deselected, _ = result(graded, "bare", "deselect-all", task)
    assert deselected.oracle_run is not None
    assert {t.outcome for t in deselected.oracle_run.tests} == {"deselected"}
