"""The trusted runner: expected tests, the per-test report and its verdicts, indistinguishable
phases, runner-file hygiene, and the cell-level consequences (declared tests, patch-failed,
a runner that cannot start)."""

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from bench_assets.agents.replay import Prediction, ReplayAdapter
from bench_assets.cells.pipeline import build_cell_inputs, run_cell
from bench_assets.config.models import ArmSpec, OracleSpec, TaskSpec
from bench_assets.kernel.errorkinds import ErrorKind, is_valid_negative
from bench_assets.kernel.fsutil import make_tree_writable
from bench_assets.kernel.store import ArtifactStore
from bench_assets.runner import hygiene
from bench_assets.runner import trusted as runner
from bench_assets.runner.trusted import (
    ExpectedTest,
    Report,
    judge_oracle,
    judge_verify,
    parse_report,
)
from bench_assets.sandbox.process import ExecResult
from bench_assets.sandbox.redact import Redactor
from bench_assets.tasks.catalog import collect_issues, load_benchmark
from bench_assets.tasks.discovery import discover_tests
from tests.conftest import TASK, make_bench, write_yaml

# --------------------------------------------------------------------------------------------
# expected tests, found by parsing the oracle files


def test_discovery_follows_pytest_default_naming() -> None:
    src = textwrap.dedent(
        """\
        import unittest
        import pytest

        class Base:
            def test_inherited(self): ...

        class TestA(Base):
            def test_own(self): ...
            def helper(self): ...
            class TestInner:
                def test_deep(self): ...

        class TestWithInit:
            def __init__(self): ...
            def test_never(self): ...

        class Case(unittest.TestCase):
            def test_unit(self): ...

        class TestOptedOut:
            __test__ = False
            def test_no(self): ...

        @pytest.fixture
        def test_data(): ...

        @pytest.mark.parametrize("x", [1, 2])
        def test_param(x): ...

        async def test_async(): ...

        def check_not_a_test(): ...
        """
    )
    assert discover_tests("sub/test_x.py", src.encode()) == [
        "sub/test_x.py::test_param",
        "sub/test_x.py::test_async",
        "sub/test_x.py::TestA::test_inherited",
        "sub/test_x.py::TestA::test_own",
        "sub/test_x.py::TestA::TestInner::test_deep",
        "sub/test_x.py::Case::test_unit",
    ]
    assert discover_tests("helpers.py", src.encode()) == []
    assert discover_tests("test_off.py", b"__test__ = False\ndef test_a(): ...\n") == []
    with pytest.raises(SyntaxError):
        discover_tests("test_bad.py", b"def test_(:\n")


def test_a_trusted_oracle_without_tests_is_a_validation_error(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    (root / "alpha" / "oracle" / "test_oracle_alpha.py").write_text("VALUE = 1\n")
    issues, bench = collect_issues(root)
    assert bench is None
    assert any("no test found in the oracle files" in str(i) for i in issues), issues
    (root / "alpha" / "oracle" / "test_oracle_alpha.py").write_text("def test_(:\n")
    issues, _ = collect_issues(root)
    assert any("does not parse" in str(i) for i in issues), issues


def test_validation_checks_the_trusted_runners_paths(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    data = yaml.safe_load((root / "alpha" / "task.yaml").read_text())
    data["verify"] = {"pytest": ["tests", "nope"]}
    data["import_paths"] = ["src"]
    write_yaml(root / "alpha" / "task.yaml", data)
    issues, _ = collect_issues(root)
    assert sorted((i.field, i.message) for i in issues) == [
        ("import_paths.0", "'src' is not a folder of repo/"),
        ("verify.pytest.1", "'nope' does not exist in repo/"),
    ]


def test_task_file_rules_for_runners_and_declared_tests() -> None:
    def task(**kw: object) -> TaskSpec:
        return TaskSpec.model_validate({**TASK, **kw})

    assert task().import_paths == ["."] and task().runner_files == "restore"
    assert task(verify="make test").verify == "make test"  # a custom command stays possible
    with pytest.raises(ValidationError, match=r"WFBENCH_ORACLE_ROOT no longer exists"):
        task(oracle={"files": ["t.py"], "command": "pytest $WFBENCH_ORACLE_ROOT"})
    with pytest.raises(ValidationError, match=r"must name the staged folder as \{oracle_dir\}"):
        task(oracle={"files": ["t.py"], "command": "pytest"})
    with pytest.raises(ValidationError, match="only the trusted pytest runner"):
        OracleSpec.model_validate(
            {"files": ["t.py"], "command": "pytest {oracle_dir}", "fail_to_pass": ["t.py::test_a"]}
        )
    with pytest.raises(ValidationError, match="not among oracle.files"):
        OracleSpec.model_validate({"files": ["t.py"], "fail_to_pass": ["u.py::test_a"]})
    with pytest.raises(ValidationError, match="must look like"):
        OracleSpec.model_validate({"files": ["t.py"], "pass_to_pass": ["test_a"]})
    with pytest.raises(ValidationError, match="listed twice"):
        OracleSpec.model_validate(
            {"files": ["t.py"], "fail_to_pass": ["t.py::test_a"], "pass_to_pass": ["t.py::test_a"]}
        )
    with pytest.raises(ValidationError):
        task(verify={"pytest": ["../outside"]})


# --------------------------------------------------------------------------------------------
# the report and the verdicts


def _res(rc: int = 0, timed_out: bool = False) -> ExecResult:
    return ExecResult(("python",), rc, b"", b"", timed_out, 0.5)


def _report(tests: list[tuple[str, str]], *, end: bool = True, nonce: str = "N") -> bytes:
    lines = [
        {"n": nonce, "kind": "deselected", "id": i}
        if o == "deselected"
        else {"n": nonce, "kind": "test", "id": i, "outcome": o}
        for i, o in tests
    ]
    if end:
        lines.append({"n": nonce, "kind": "end", "exitstatus": 0, "tampered": []})
    return "".join(json.dumps(x) + "\n" for x in lines).encode()


def test_only_lines_with_the_runs_nonce_count() -> None:
    forged = _report([("t.py::test_a", "passed")], nonce="guess")
    real = _report([("t.py::test_a", "failed")], end=False)
    rep = parse_report(real + forged + b"not json\n", "N")
    assert rep.tests == [("t.py::test_a", "failed")]
    assert rep.foreign_lines == 3 and not rep.finished
    late = parse_report(_report([]) + _report([("t.py::test_a", "passed")]), "N")
    assert late.finished and late.tests == [] and late.foreign_lines == 2


EXPECTED = [ExpectedTest(f"t.py::test_{c}", "collected") for c in "abcdefg"]


@pytest.mark.parametrize(
    ("tests", "end", "passed", "detail"),
    [
        ([(e.id, "passed") for e in EXPECTED], True, True, "expected 7 oracle tests: 7 passed"),
        ([], True, False, "expected 7 oracle tests, 0 reported"),
        (
            [],
            False,
            False,
            "the test runner stopped before the session ended (exit 0); "
            "expected 7 oracle tests, 0 reported",
        ),
        (
            [(e.id, "passed") for e in EXPECTED[:5]],
            True,
            False,
            "expected 7 oracle tests, 5 reported (5 passed)",
        ),
        (
            [(e.id, "passed") for e in EXPECTED[:6]] + [("t.py::test_g", "skipped")],
            True,
            False,
            "expected 7 oracle tests: 6 passed, 1 skipped",
        ),
        (
            [(e.id, "passed") for e in EXPECTED[:6]] + [("t.py::test_g", "xfailed")],
            True,
            False,
            "expected 7 oracle tests: 6 passed, 1 xfailed",
        ),
        (
            [(e.id, "passed") for e in EXPECTED[:6]] + [("t.py::test_g", "deselected")],
            True,
            False,
            "expected 7 oracle tests: 6 passed, 1 deselected",
        ),
    ],
)
def test_the_oracle_passes_only_when_every_expected_test_passed(tests, end, passed, detail) -> None:
    result = judge_oracle(parse_report(_report(tests, end=end), "N"), _res(), 30, EXPECTED)
    assert (result.passed, result.detail) == (passed, detail)
    assert [t.id for t in result.tests] == [e.id for e in EXPECTED]


def test_parametrized_and_declared_ids_match_as_pytest_names_them() -> None:
    rep = parse_report(_report([("t.py::test_a[1]", "passed"), ("t.py::test_a[2]", "failed")]), "N")
    base = judge_oracle(rep, _res(), 30, [ExpectedTest("t.py::test_a", "fail_to_pass")])
    assert not base.passed and base.tests[0].outcome == "failed"
    one = judge_oracle(rep, _res(), 30, [ExpectedTest("t.py::test_a[1]", "fail_to_pass")])
    assert one.passed and one.tests[0].expected_as == "fail_to_pass"
    prefix = judge_oracle(rep, _res(), 30, [ExpectedTest("t.py::test_", "collected")])
    assert not prefix.passed and prefix.tests[0].outcome == "missing"


def test_nothing_the_report_says_beyond_expected_ids_is_recorded() -> None:
    leak = "SECRET ORACLE SOURCE"
    rep = parse_report(_report([("t.py::test_a", "passed"), (leak, "passed")]), "N")
    result = judge_oracle(rep, _res(), 30, [ExpectedTest("t.py::test_a", "collected")])
    assert result.passed and leak not in result.model_dump_json()


def test_tampering_and_foreign_lines_fail_even_when_every_test_passed() -> None:
    rep = Report(finished=True, exitstatus=0, tests=[("t.py::test_a", "passed")])
    rep.tampered = ["_pytest.runner.call_and_report"]
    assert not judge_oracle(rep, _res(), 30, [ExpectedTest("t.py::test_a", "collected")]).passed
    rep = Report(finished=True, exitstatus=0, tests=[("t.py::test_a", "passed")], foreign_lines=1)
    assert not judge_oracle(rep, _res(), 30, [ExpectedTest("t.py::test_a", "collected")]).passed
    assert not judge_verify(rep, _res(), 30).passed


@pytest.mark.parametrize(
    ("tests", "passed", "detail"),
    [
        ([("a", "passed"), ("b", "skipped")], True, "1 passed, 1 skipped"),
        ([], False, "no test ran; 0 tests"),
        ([("a", "skipped")], False, "no test passed; 1 skipped"),
        ([("a", "passed"), ("b", "failed")], False, "pytest exit status 0; 1 passed, 1 failed"),
    ],
)
def test_verify_needs_a_finished_session_with_a_pass_and_no_failure(tests, passed, detail) -> None:
    result = judge_verify(parse_report(_report(tests), "N"), _res(), 30)
    assert (result.passed, result.detail) == (passed, detail)


def test_the_report_is_never_read_through_a_symlink_or_from_a_fifo(tmp_path: Path) -> None:
    secret = tmp_path / "host-file"
    secret.write_text(_report([("t.py::test_a", "passed")]).decode())
    (tmp_path / "link").symlink_to(secret)
    assert runner.read_report(tmp_path / "link") == (b"", False)
    os.mkfifo(tmp_path / "fifo")
    assert runner.read_report(tmp_path / "fifo") == (b"", False)  # returns, never blocks
    big = tmp_path / "big"
    big.write_bytes(b"x" * (runner.MAX_REPORT_BYTES + 10))
    data, oversized = runner.read_report(big)
    assert oversized and len(data) == runner.MAX_REPORT_BYTES


# --------------------------------------------------------------------------------------------
# the two phases look the same from inside

FINGERPRINT = textwrap.dedent(
    """
    import json as _json, os as _os, socket as _socket, sys as _sys

    def _fingerprint():
        mounts = []
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                parts = line.split()
                # The whole line but the mount id and the parent's: root (the host folder a bind
                # mount comes from), mount point, options, peer groups, type, source, super options.
                # A pseudo filesystem's device number (0:N) is the kernel's counter of anonymous
                # mounts, new in every sandbox (two runs of one phase differ too): not compared.
                if parts[2].startswith("0:"):
                    parts[2] = "0:*"
                mounts.append(parts[2:])
        fp = {
            "env": dict(_os.environ),
            "argv": _sys.argv,
            "cmdline": open("/proc/self/cmdline").read(),
            "cwd": _os.getcwd(),
            "ids": [_os.getuid(), _os.getgid()],
            "hostname": _socket.gethostname(),
            "sys_path": _sys.path,
            "flags": str(_sys.flags),
            "root": sorted(_os.listdir("/")),
            "workspace": sorted(_os.listdir("/workspace")),
            "mounts": sorted(mounts),
            "writable": sorted(
                d for d in _os.listdir("/") if _os.access("/" + d, _os.W_OK)
            ),
        }
        for d in fp["writable"]:
            if d not in ("tmp", "home", "proc", "dev"):
                with open("/" + d + "/fingerprint.json", "w") as out:
                    _json.dump(fp, out)

    _fingerprint()
    """
)


def test_verify_and_oracle_phases_are_the_same_environment(tmp_path: Path) -> None:
    """Everything a patch can read cheaply (variables, argv, ids, paths, mounts, sys.path) is
    equal in both phases; only the staged test files differ."""
    root = make_bench(tmp_path / "tasks")
    wt = tmp_path / "wt"
    shutil.copytree(root / "alpha" / "repo", wt)
    with open(wt / "calc" / "__init__.py", "a") as fh:
        fh.write(FINGERPRINT)
    layout = runner.new_layout(tmp_path / "grading", wt)
    seen = {}
    for phase, paths in (("verify", ["tests"]), ("oracle", [layout.stage_name])):
        if phase == "oracle":  # staged after verify, into the same host folder
            make_tree_writable(layout.stage)
            shutil.copy(root / "alpha" / "oracle" / "test_oracle_alpha.py", layout.stage)
        done = runner.run_phase(
            layout,
            wt,
            phase=phase,
            pytest_paths=paths,
            command=None,
            import_paths=["."],
            timeout_s=60,
            max_output=4096,
            memory_mb=None,
        )
        assert not done.infra_failed and done.report is not None and done.report.finished
        seen[phase] = json.loads((layout.out / "fingerprint.json").read_text())
    assert seen["verify"]["mounts"] and all(len(m) >= 8 for m in seen["verify"]["mounts"])
    assert seen["verify"] == seen["oracle"]
    # The host folders the mounts come from are under this test's tmp_path, whose name is the
    # test's own; nothing below it may name the phase.
    names = json.dumps(seen["verify"]).replace(str(tmp_path), "").lower()
    assert "oracle" not in names and "wfbench" not in json.dumps(seen["verify"]["env"]).lower()


# --------------------------------------------------------------------------------------------
# runner-file hygiene


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("conftest.py", "conftest"),
        ("a/b/c/conftest.py", "conftest"),
        ("pytest.py", "runner-module"),
        ("pytest/__init__.py", "runner-module"),
        ("_pytest/runner.py", "runner-module"),
        ("pluggy.cpython-311-x86_64-linux-gnu.so", "runner-module"),
        ("sitecustomize.py", "startup-hook"),
        ("usercustomize/__init__.py", "startup-hook"),
        ("evil.pth", "startup-hook"),
        ("pytest.ini", "runner-config"),
        ("pyproject.toml", "runner-config"),
        ("x.dist-info/entry_points.txt", "plugin-metadata"),
        ("pkg/pytest.py", None),
        ("tests/sitecustomize.py", None),
        ("pytest_helpers.py", None),
        ("sub/pytest.ini", None),
        ("README.md", None),
    ],
)
def test_runner_files_are_recognised_by_path(path: str, reason: str | None) -> None:
    assert hygiene.reason_for(path, ["."]) == reason


def test_import_roots_decide_where_shadowing_modules_count() -> None:
    assert hygiene.reason_for("src/pytest.py", ["src"]) == "runner-module"
    assert hygiene.reason_for("pytest.py", ["src"]) is None


def test_hygiene_restores_removes_and_records(tmp_path: Path) -> None:
    root = tmp_path / "wt"
    (root / "tests").mkdir(parents=True)
    (root / "conftest.py").write_text("# template\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    before = hygiene.snapshot(root, ["."])
    (root / "conftest.py").write_text("# agent\n")
    (root / "tests" / "conftest.py").write_text("# agent\n")
    (root / "pytest").mkdir()
    (root / "pytest" / "__init__.py").write_text("raise SystemExit(0)\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'y'\n")  # no pytest section
    kept = hygiene.clean(root, ["."], before, "keep")
    assert [(c.path, c.change, c.action) for c in kept] == [
        ("conftest.py", "modified", "kept"),
        ("pytest/__init__.py", "added", "kept"),
        ("tests/conftest.py", "added", "kept"),
    ]
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-p x'\n")
    restored = hygiene.clean(root, ["."], before, "restore")
    assert [(c.path, c.reason, c.action) for c in restored] == [
        ("conftest.py", "conftest", "restored"),
        ("pyproject.toml", "runner-config", "restored"),
        ("pytest/__init__.py", "runner-module", "restored"),
        ("tests/conftest.py", "conftest", "restored"),
    ]
    assert (root / "conftest.py").read_text() == "# template\n"
    assert (root / "pyproject.toml").read_text() == "[project]\nname = 'x'\n"
    assert not (root / "pytest").exists() and not (root / "tests" / "conftest.py").exists()


def test_restoring_never_writes_through_a_planted_symlink(tmp_path: Path) -> None:
    """Attack: the agent replaces the folder of a protected/runner file by a symlink to a host
    folder, hoping the harness (outside the sandbox) writes the restored file there."""
    from bench_assets.cells.worktree import CellWorktree, restore_protected

    root, host = tmp_path / "wt", tmp_path / "host"
    (root / "tests").mkdir(parents=True)
    host.mkdir()
    (root / "tests" / "conftest.py").write_text("# template\n")
    (root / "sub").mkdir()
    (root / "sub" / "conftest.py").write_text("# template\n")
    before = hygiene.snapshot(root, ["."])
    wt = CellWorktree(root, "0" * 40, [], [], ["tests/conftest.py"])
    wt.protected_state = {"tests/conftest.py": b"# template\n"}
    for folder in ("tests", "sub"):
        shutil.rmtree(root / folder)
        (root / folder).symlink_to(host, target_is_directory=True)
    assert restore_protected(wt) == ["tests/conftest.py"]
    changes = hygiene.clean(root, ["."], before, "restore")
    assert [(c.path, c.change, c.action) for c in changes] == [
        ("sub/conftest.py", "deleted", "restored")
    ]
    assert list(host.iterdir()) == [], "a restore wrote outside the worktree"
    assert not (root / "tests").is_symlink() and not (root / "sub").is_symlink()
    assert (root / "tests" / "conftest.py").read_text() == "# template\n"
    assert (root / "sub" / "conftest.py").read_text() == "# template\n"


# --------------------------------------------------------------------------------------------
# cells


def _cell(root: Path, store: ArtifactStore, arm: ArmSpec, adapter=None):
    bench = load_benchmark(root)
    inputs = build_cell_inputs(bench, "alpha", store)
    record, _ = run_cell(
        bench,
        "alpha",
        "try",
        0,
        inputs,
        store,
        generation=None,
        redactor=Redactor(),
        adapter=adapter,
        arm_spec=arm,
        ad_hoc=True,
    )
    return record


FIX = "open('calc/__init__.py', 'w').write('def add(a, b):\\n    return a + b\\n')"


def _command(code: str) -> ArmSpec:
    return ArmSpec.model_validate(
        {"agent": {"adapter": "command", "argv": ["python", "-c", code]}, "skills": "none"}
    )


def test_declared_tests_decide_and_are_recorded_by_kind(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    (root / "alpha" / "oracle" / "test_oracle_alpha.py").write_text(
        textwrap.dedent(
            """\
            import pytest
            from calc import add

            def test_add():
                assert add(2, 3) == 5

            @pytest.mark.parametrize("x", [0, 1])
            def test_identity(x):
                assert add(x, 0) == x

            def test_unrelated_and_broken():
                assert False
            """
        )
    )
    data = yaml.safe_load((root / "alpha" / "task.yaml").read_text())
    data["oracle"]["fail_to_pass"] = ["test_oracle_alpha.py::test_add"]
    data["oracle"]["pass_to_pass"] = ["test_oracle_alpha.py::test_identity"]
    write_yaml(root / "alpha" / "task.yaml", data)
    store = ArtifactStore(tmp_path / "art")
    rec = _cell(root, store, _command(FIX))
    assert rec.resolved, rec.error_detail  # the broken test is not expected: SWE-bench semantics
    assert rec.oracle_run is not None
    assert [(t.id, t.outcome, t.expected_as) for t in rec.oracle_run.tests] == [
        ("test_oracle_alpha.py::test_add", "passed", "fail_to_pass"),
        ("test_oracle_alpha.py::test_identity", "passed", "pass_to_pass"),
    ]
    assert (
        rec.verify_run is not None and rec.verify_run.tests[0].id == "tests/test_calc.py::test_zero"
    )
    # Without the lists every test in the oracle files is expected, the broken one included.
    del data["oracle"]["fail_to_pass"], data["oracle"]["pass_to_pass"]
    write_yaml(root / "alpha" / "task.yaml", data)
    rec = _cell(root, store, _command(FIX))
    assert not rec.resolved and rec.error_kind is ErrorKind.ORACLE_FAILED
    assert "expected 3 oracle tests: 2 passed, 1 failed" in rec.error_detail


def test_a_patch_that_does_not_apply_is_an_unresolved_valid_negative(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    store = ArtifactStore(tmp_path / "art")
    bad = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n"
    pred = Prediction(instance_id="alpha", model_patch=bad, model_name_or_path="m")
    arm = ArmSpec.model_validate(
        {"agent": {"adapter": "replay", "predictions": "p.jsonl"}, "skills": "none"}
    )
    rec = _cell(root, store, arm, ReplayAdapter({("alpha", 0): pred}, "p.jsonl"))
    assert rec.error_kind is ErrorKind.PATCH_FAILED and is_valid_negative(rec.error_kind)
    assert not rec.resolved and rec.verify_run is None and rec.oracle_run is None
    assert "does not apply" in rec.error_detail


def test_a_runner_that_cannot_start_is_an_infra_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken_runner.py"
    broken.write_text("raise SystemExit('no runner today')\n")
    monkeypatch.setattr(runner, "RUNNER_SOURCE", broken)
    rec = _cell(make_bench(tmp_path / "tasks"), ArtifactStore(tmp_path / "art"), _command(FIX))
    assert rec.error_kind is ErrorKind.INFRA_ERROR
    assert "did not start" in rec.error_detail


STALE_BYTECODE = textwrap.dedent(
    """\
    import os, py_compile
    path = "calc/__init__.py"
    original = open(path).read()
    fixed = original.replace("return a - b", "return a + b")
    assert fixed != original and len(fixed) == len(original)
    open(path, "w").write(fixed)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    py_compile.compile(path, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    open(path, "w").write(original)  # same size; the bytecode cache now disagrees with it
    os.utime(path, (1_000_000_000, 1_000_000_000))
    """
)


@pytest.mark.parametrize("grader", ["trusted", "exit-status"])
def test_bytecode_the_patch_does_not_show_is_never_run(tmp_path: Path, grader: str) -> None:
    """Attack: leave the source as it was and hide a fix (or anything) in a __pycache__ entry
    whose timestamp and size match the source. Grading runs in a tree rebuilt from the recorded
    patch, which never holds a cache, so the hidden code runs under neither grader (before that,
    graded by exit status in the agent's worktree, it ran and the cell resolved); the trusted
    runner would not read it either (bytecode caches off)."""
    root = make_bench(tmp_path / "tasks")
    if grader == "exit-status":
        data = yaml.safe_load((root / "alpha" / "task.yaml").read_text())
        data["verify"] = "python -m pytest -q -p no:cacheprovider tests"
        data["oracle"]["command"] = "python -m pytest -q -p no:cacheprovider {oracle_dir}"
        write_yaml(root / "alpha" / "task.yaml", data)
    rec = _cell(root, ArtifactStore(tmp_path / "art"), _command(STALE_BYTECODE))
    assert not rec.oracle_passed and rec.error_kind is ErrorKind.ORACLE_FAILED
    assert rec.patch is None or b"__pycache__" not in Path(rec.patch.path).read_bytes()


IMPORT_ORDER_TEST = textwrap.dedent(
    """\
    import os, sys

    def test_the_worktree_comes_after_the_stdlib_and_the_runner():
        path = sys.path
        workspace = path.index("/workspace")
        assert path.index(os.path.dirname(os.__file__)) < workspace
        sites = [i for i, p in enumerate(path) if p.endswith("site-packages")]
        assert sites and min(sites) > workspace
        import pytest, pluggy
        assert "/workspace" not in pytest.__file__ and "/workspace" not in pluggy.__file__
        assert sys.flags.isolated and sys.flags.no_user_site and sys.flags.ignore_environment
        assert sys.dont_write_bytecode
        assert sys.pycache_prefix and "workspace" not in sys.pycache_prefix
    """
)


def test_the_code_under_test_is_importable_but_never_ahead_of_the_runner(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    (root / "alpha" / "repo" / "tests" / "test_order.py").write_text(IMPORT_ORDER_TEST)
    rec = _cell(root, ArtifactStore(tmp_path / "art"), _command(FIX))
    assert rec.resolved, rec.verify_tail
    assert rec.verify_run is not None
    assert (
        "tests/test_order.py::test_the_worktree_comes_after_the_stdlib_and_the_runner",
        "passed",
    ) in [(t.id, t.outcome) for t in rec.verify_run.tests]


def test_a_test_marked_usefixtures_is_still_an_expected_oracle_test() -> None:
    """A hidden test carrying ``@pytest.mark.usefixtures`` is a test, not a fixture: it must
    stay expected, or it could fail without failing the oracle."""
    src = textwrap.dedent(
        """\
        import pytest

        @pytest.fixture
        def test_data(): ...

        @pytest.fixture()
        def test_other(): ...

        @pytest.mark.usefixtures("tmp_path")
        def test_marked(): ...
        """
    )
    assert discover_tests("test_x.py", src.encode()) == ["test_x.py::test_marked"]
