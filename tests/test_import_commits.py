"""`wfbench import commits`: a repository with a real history -> validated tasks, graded.

The repository is built here (:func:`build_history`), 11 commits, first-parent line:

====  ===============================================  ===========================================
 #     commit                                           expected
====  ===============================================  ===========================================
 c0    root: calc/ops.py with bugs, visible tests       skipped (root-commit)
 c1    fix add() of negatives + a new test using a      accepted, f2p test_add_negative
       fixture of tests/conftest.py
 c2    refactor without tests                           skipped (no-test-change)
 c3    docstring + a test that passes before the fix    rejected (no-fail-to-pass)
 c4    fix sub(); the message names the test and        accepted, prompt redacted
       quotes the fix line
 c5    README only                                      skipped (no-test-change)
 m6    merge of branch fix-div (its commit: div()       accepted as one task (merge)
       returns None + tests/test_div.py)
 c7    add power(): the test cannot even import on      accepted, f2p = both tests (collect error)
       the base
 c8    fix absolute() + a flaky coin-flip test          rejected (flaky)
====  ===============================================  ===========================================

One module-scoped import (first ``--range c0..c4``, then the whole history) is shared by the
assertions; the gold replays and empty patches are graded once through ``wfbench grade``.
"""

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bench_assets.cli import main
from bench_assets.mining import history, leaks
from bench_assets.mining.documents import MinedTask, MineReport
from bench_assets.mining.folders import GOLD_FILE
from bench_assets.tasks.catalog import load_benchmark

# Under pytest-xdist (make test) this module stays on one worker:
# the mined history is imported once per module.
pytestmark = pytest.mark.xdist_group("import_commits")

ENV = {
    "GIT_AUTHOR_NAME": "dev",
    "GIT_AUTHOR_EMAIL": "dev@example.invalid",
    "GIT_COMMITTER_NAME": "dev",
    "GIT_COMMITTER_EMAIL": "dev@example.invalid",
}

OPS = """\
def add(a, b):
    if b < 0:
        return a - b
    return a + b


def sub(a, b):
    return b - a


def mul(a, b):
    return a * b


def div(a, b):
    return a / b


def absolute(x):
    return int(x) if x > 0 else int(-x)
"""
TEST_OPS = """\
from calc.ops import add, sub


def test_add_plain():
    assert add(2, 3) == 5


def test_sub_zero():
    assert sub(4, 4) == 0
"""
TEST_MISC = "def test_truth():\n    assert 1 + 1 == 2\n"
CONFTEST = "import pytest\n\n\n@pytest.fixture\ndef minus_three():\n    return -3\n"
TEST_DIV = """\
from calc.ops import div


def test_div_by_zero():
    assert div(1, 0) is None


def test_div_plain():
    assert div(6, 3) == 2
"""
TEST_POWER = """\
from calc.ops import power


def test_power_square():
    assert power(3, 2) == 9


def test_power_zero():
    assert power(5, 0) == 1
"""
TEST_FLAKY = """\
import os

import pytest

from calc.ops import absolute


def test_absolute_float():
    assert absolute(-2.5) == 2.5


@pytest.mark.parametrize("i", range(8))
def test_coin(i):
    assert os.urandom(1)[0] < 128
"""
SUB_MESSAGE = """\
Fix sub(): the operands were swapped

test_sub_order failed because sub(5, 3) gave -2. The fix:

    return a - b
"""


def _git(repo: Path, *args: str, when: int = 0) -> str:
    env = {**os.environ, **ENV}
    stamp = f"{1_700_000_000 + when * 3600} +0000"
    env.update({"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp})
    return subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()


def _commit(repo: Path, n: int, message: str, files: dict[str, str]) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, when=n)
    return _git(repo, "rev-parse", "HEAD")


def build_history(repo: Path) -> dict[str, str]:
    """The repository of the module docstring; its commits by name."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    ops = OPS
    shas: dict[str, str] = {}
    base = {
        "calc/__init__.py": "",
        "calc/ops.py": ops,
        "tests/test_ops.py": TEST_OPS,
        "tests/test_misc.py": TEST_MISC,
        "tests/conftest.py": CONFTEST,
        "setup.cfg": "[tool:pytest]\ntestpaths = tests\n",
    }
    shas["c0"] = _commit(repo, 0, "Initial calculator", base)
    ops = ops.replace("    if b < 0:\n        return a - b\n    return a + b", "    return a + b")
    # The new test needs a fixture of tests/conftest.py, which the staged oracle must bring.
    test_ops = (
        TEST_OPS + "\n\ndef test_add_negative(minus_three):\n    assert add(2, minus_three) == -1\n"
    )
    shas["c1"] = _commit(
        repo,
        1,
        "Fix add() with a negative operand",
        {"calc/ops.py": ops, "tests/test_ops.py": test_ops},
    )
    ops = ops.replace("def mul(a, b):\n    return a * b", "def mul(a, b):\n    return b * a")
    shas["c2"] = _commit(repo, 2, "Refactor mul() for symmetry", {"calc/ops.py": ops})
    ops = ops.replace("def mul(a, b):\n", 'def mul(a, b):\n    """The product of a and b."""\n')
    test_ops += "\n\ndef test_mul():\n    assert __import__('calc.ops').ops.mul(2, 4) == 8\n"
    shas["c3"] = _commit(
        repo, 3, "Document mul() and test it", {"calc/ops.py": ops, "tests/test_ops.py": test_ops}
    )
    ops = ops.replace("    return b - a", "    return a - b")
    test_ops += "\n\ndef test_sub_order():\n    assert sub(5, 3) == 2\n"
    shas["c4"] = _commit(repo, 4, SUB_MESSAGE, {"calc/ops.py": ops, "tests/test_ops.py": test_ops})
    _git(repo, "checkout", "-q", "-b", "fix-div")
    div_fixed = ops.replace(
        "    return a / b", "    if b == 0:\n        return None\n    return a / b"
    )
    shas["b1"] = _commit(
        repo,
        5,
        "Return None from div() by zero\n\nDividing by zero raised ZeroDivisionError.",
        {"calc/ops.py": div_fixed, "tests/test_div.py": TEST_DIV},
    )
    _git(repo, "checkout", "-q", "main")
    shas["c5"] = _commit(repo, 6, "Document the calculator", {"README.md": "# calc\n"})
    _git(repo, "merge", "-q", "--no-ff", "-m", "Merge branch 'fix-div'", "fix-div", when=7)
    shas["m6"] = _git(repo, "rev-parse", "HEAD")
    ops = div_fixed + "\n\ndef power(base, exp):\n    return base**exp\n"
    shas["c7"] = _commit(
        repo, 8, "Add power(base, exp)", {"calc/ops.py": ops, "tests/test_power.py": TEST_POWER}
    )
    ops = ops.replace("int(x) if x > 0 else int(-x)", "x if x > 0 else -x")
    shas["c8"] = _commit(
        repo,
        9,
        "Fix absolute() for floats",
        {"calc/ops.py": ops, "tests/test_flaky.py": TEST_FLAKY},
    )
    return shas


def _cli(*args: str) -> Any:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == 0, res.output
    return res


def _snapshot(tasks: Path) -> dict[str, bytes]:
    return {
        p.relative_to(tasks).as_posix(): p.read_bytes() for p in tasks.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Build the repository, import c0..c4, then everything, then everything again; grade."""
    root = tmp_path_factory.mktemp("mine")
    saved = {k: os.environ.get(k) for k in ("WFBENCH_ARTIFACTS", "DAGSTER_HOME")}
    os.environ["WFBENCH_ARTIFACTS"] = str(root / "artifacts")
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        repo = root / "calc"
        shas = build_history(repo)
        tasks = root / "tasks"
        started = time.monotonic()
        first = _cli(
            "import",
            "commits",
            str(repo),
            "--tasks",
            str(tasks),
            "--range",
            f"{shas['c0']}..{shas['c4']}",
            "--json",
        )
        first_report = MineReport.model_validate_json(first.stdout)
        after_first = _snapshot(tasks)
        full = _cli("import", "commits", str(repo), "--tasks", str(tasks), "--json")
        full_report = MineReport.model_validate_json(full.stdout)
        after_full = _snapshot(tasks)
        again = _cli("import", "commits", str(repo), "--tasks", str(tasks))
        import_s = time.monotonic() - started
        ids = sorted(t for t in os.listdir(tasks) if (tasks / t / "task.yaml").is_file())
        empty = root / "empty.jsonl"
        empty.write_text(
            "".join(
                json.dumps({"instance_id": t, "model_name_or_path": "empty", "model_patch": ""})
                + "\n"
                for t in ids
            )
        )
        t0 = time.monotonic()
        reports = {}
        for name, preds in (("gold", tasks / GOLD_FILE), ("empty", empty)):
            out = root / f"{name}-report.json"
            _cli("grade", "--predictions", str(preds), "--tasks", str(tasks), "--report", str(out))
            reports[name] = json.loads(out.read_text())
        grade_s = time.monotonic() - t0
        print(f"\nimport (3 runs): {import_s:.1f} s; grade gold + empty: {grade_s:.1f} s")
        return {
            "repo": repo,
            "shas": shas,
            "tasks": tasks,
            "ids": ids,
            "first": first_report,
            "full": full_report,
            "again": again.stdout,
            "after_first": after_first,
            "after_full": after_full,
            "after_again": _snapshot(tasks),
            "grades": reports,
            "artifacts": root / "artifacts",
        }
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _task_id(mined: dict[str, Any], name: str) -> str:
    return f"calc-{mined['shas'][name][:12]}"


def _by_commit(report: MineReport) -> dict[str, Any]:
    return {ln.commit: ln for ln in report.lines}


@pytest.mark.slow
def test_exactly_the_right_commits_become_tasks_with_the_right_fail_to_pass(
    mined: dict[str, Any],
) -> None:
    shas = mined["shas"]
    lines = {**_by_commit(mined["full"]), **_by_commit(mined["first"])}
    verdict = {
        name: (lines[sha].status, lines[sha].reason) for name, sha in shas.items() if sha in lines
    }
    assert verdict == {
        "c0": ("skipped", "root-commit"),
        "c1": ("accepted", None),
        "c2": ("skipped", "no-test-change"),
        "c3": ("rejected", "no-fail-to-pass"),
        "c4": ("accepted", None),
        "c5": ("skipped", "no-test-change"),
        "m6": ("accepted", None),
        "c7": ("accepted", None),
        "c8": ("rejected", "flaky"),
    }, verdict
    assert shas["b1"] not in lines  # a merged branch's commit is part of its merge, never twice
    rules = history.read_rules(mined["repo"], shas["c0"])  # the repository's own pytest config
    assert (rules.source, rules.testpaths) == ("setup.cfg", ("tests",))
    expected = {
        "c1": ["tests/test_ops.py::test_add_negative"],
        "c4": ["tests/test_ops.py::test_sub_order"],
        "m6": ["tests/test_div.py::test_div_by_zero"],
        "c7": ["tests/test_power.py::test_power_square", "tests/test_power.py::test_power_zero"],
    }
    assert mined["ids"] == sorted(_task_id(mined, n) for n in expected)
    for name, f2p in expected.items():
        doc = yaml.safe_load((mined["tasks"] / _task_id(mined, name) / "task.yaml").read_text())
        assert doc["oracle"]["fail_to_pass"] == f2p, (name, doc["oracle"])
        assert doc["ref"] == _git(mined["repo"], "rev-parse", f"{shas[name]}^1")
    m6 = yaml.safe_load((mined["tasks"] / _task_id(mined, "m6") / "task.yaml").read_text())
    assert m6["oracle"]["pass_to_pass"] == ["tests/test_div.py::test_div_plain"]
    # The base's tests/conftest.py goes with the staged oracle (marked: the visible one differs).
    assert m6["oracle"]["files"] == ["tests/conftest.py", "tests/test_div.py"]
    staged = (mined["tasks"] / _task_id(mined, "m6") / "oracle/tests/conftest.py").read_bytes()
    assert staged.startswith(CONFTEST.encode()) and staged != CONFTEST.encode()
    assert m6["verify"] == {"pytest": ["tests/test_misc.py", "tests/test_ops.py"]}
    assert "Return None from div() by zero" in m6["prompt"]  # the merged branch's message
    flaky = lines[shas["c8"]].detail
    assert "test_coin" in flaky and "over 3 runs" in flaky


@pytest.mark.slow
def test_validation_is_recorded_in_the_task_and_the_gold_stays_outside(
    mined: dict[str, Any],
) -> None:
    tid = _task_id(mined, "c1")
    rec = MinedTask.model_validate_json((mined["tasks"] / tid / "mined.json").read_text())
    assert rec.source.commit == mined["shas"]["c1"] and rec.validation.repeats == 3
    assert len(rec.validation.base_runs) == len(rec.validation.gold_runs) == 3
    assert all(
        r["tests/test_ops.py::test_add_negative"] == "failed" for r in rec.validation.base_runs
    )
    assert all(
        r["tests/test_ops.py::test_add_negative"] == "passed" for r in rec.validation.gold_runs
    )
    c7 = MinedTask.model_validate_json(
        (mined["tasks"] / _task_id(mined, "c7") / "mined.json").read_text()
    )
    assert c7.validation.base_collect_errors == [1, 1, 1]  # power() does not exist on the base
    gold = [json.loads(x) for x in (mined["tasks"] / GOLD_FILE).read_text().splitlines()]
    assert sorted(g["instance_id"] for g in gold) == mined["ids"]
    assert all("tests/" not in g["model_patch"] for g in gold)
    for tid in mined["ids"]:
        folder = mined["tasks"] / tid
        assert not any("gold" in p.name or p.suffix == ".diff" for p in folder.rglob("*"))
    load_benchmark(mined["tasks"])  # `wfbench validate` accepts the result


@pytest.mark.slow
def test_the_prompt_names_no_oracle_test_and_quotes_no_fix(mined: dict[str, Any]) -> None:
    tid = _task_id(mined, "c4")
    doc = yaml.safe_load((mined["tasks"] / tid / "task.yaml").read_text())
    assert "test_sub_order" not in doc["prompt"] and "return a - b" not in doc["prompt"]
    assert leaks.HIDDEN_TEST in doc["prompt"] and "operands were swapped" in doc["prompt"]
    line = _by_commit(mined["first"])[mined["shas"]["c4"]]
    assert "prompt redacted" in line.detail and "test_sub_order" in line.detail
    rec = MinedTask.model_validate_json((mined["tasks"] / tid / "mined.json").read_text())
    assert any("quoting the fix" in n for n in rec.leaks.prompt_redactions)
    assert "oracle-blobs-absent" in rec.leaks.template_checks


@pytest.mark.slow
def test_gold_resolves_every_task_and_an_empty_patch_none_through_grade(
    mined: dict[str, Any],
) -> None:
    gold, empty = mined["grades"]["gold"], mined["grades"]["empty"]
    assert gold["resolved_ids"] == mined["ids"], gold
    assert empty["resolved_ids"] == [] and gold["error_ids"] == [], empty
    records = [json.loads(p.read_text()) for p in mined["artifacts"].rglob("record.json")]
    assert len(records) == 2 * len(mined["ids"])
    # The empty patch was graded, not waved through: its oracle ran and failed on every task.
    kinds = sorted((r["producer"], r["error_kind"] or "") for r in records)
    n = len(mined["ids"])
    assert kinds == [("empty", "oracle-failed")] * n + [("gold", "")] * n, kinds


@pytest.mark.slow
def test_a_reimport_changes_nothing_and_a_new_range_adds_tasks(mined: dict[str, Any]) -> None:
    first, full = mined["first"], mined["full"]
    assert sorted(first.accepted) == sorted(_task_id(mined, n) for n in ("c1", "c4"))
    assert sorted(full.unchanged) == sorted(first.accepted)
    assert sorted(full.accepted) == sorted(_task_id(mined, n) for n in ("m6", "c7"))
    added = set(mined["after_full"]) - set(mined["after_first"])
    assert all(
        mined["after_first"][k] == mined["after_full"][k]
        for k in mined["after_first"]
        if not k.startswith((".wfbench-mined", "replays/"))
    )
    assert added and mined["after_again"] == mined["after_full"]
    assert "0 accepted" in mined["again"] and "4 unchanged" in mined["again"]
    cached = [ln for ln in full.lines if ln.status == "rejected"]
    assert [ln.cached for ln in cached] == [True, False]  # c3 from the ledger, c8 validated
    assert full.rejected_by_reason == {
        "no-fail-to-pass": [mined["shas"]["c3"]],
        "flaky": [mined["shas"]["c8"]],
    }
    assert full.seconds > 0 and full.seconds_per_candidate is not None


# -- pure parts and refusals --------------------------------------------------------------------


def test_bad_invocations_are_refused_before_any_work(tmp_path: Path) -> None:
    both = CliRunner().invoke(
        main, ["import", "commits", str(tmp_path), "--since", "2024-01-01", "--range", "a..b"]
    )
    assert both.exit_code == 2 and "--since and --range exclude each other" in both.output
    plain = tmp_path / "plain"
    plain.mkdir()
    res = CliRunner().invoke(
        main, ["import", "commits", str(plain), "--tasks", str(tmp_path / "t")]
    )
    assert res.exit_code == 2 and "not a readable git repository" in res.output, res.output
    assert not (tmp_path / "t").exists()


def test_tests_are_recognised_by_pytest_config_and_convention() -> None:
    rules = history.TestRules(python_files=("check_*.py",), testpaths=("qa",), source="pytest.ini")
    assert rules.is_test_module("pkg/check_x.py") and not rules.is_test_module("pkg/test_x.py")
    assert rules.is_test("qa/data.json") and rules.is_test("tests/helpers.py")
    assert rules.is_test("src/conftest.py") and not rules.is_test("src/pkg/mod.py")
    default = history.TestRules()
    assert default.is_test_module("test_inflection.py") and default.is_test_module("a/b_test.py")


def test_import_paths_follow_pytest_pythonpath_and_the_src_layout() -> None:
    from bench_assets.mining.importer import _import_paths

    base = {"a": "src/pkg/__init__.py", "b": "lib/x.py", "c": "tests/test_x.py"}
    rules = history.TestRules(pythonpath=("lib", "missing", "../up"))
    assert _import_paths(base, rules) == ["lib", "src", "."]
    assert _import_paths({"a": "pkg/__init__.py"}, history.TestRules()) == ["."]


def test_paths_narrow_the_candidates() -> None:
    changes = [history.Change("M", "src/pkg/a.py", "0" * 40)]
    assert history.matches_paths(changes, ["src/pkg"]) and history.matches_paths(changes, ["*.py"])
    assert not history.matches_paths(changes, ["docs/*"]) and history.matches_paths(changes, [])


def test_redaction_removes_test_names_and_quotes_of_the_fix_but_keeps_the_story() -> None:
    patch = "--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-    return b - a\n+    return a - b\n"
    names = leaks.oracle_names(["tests/test_m.py::TestSub::test_order[1]"], ["tests/test_m.py"])
    out = leaks.redact_prompt(
        "Swap sub's operands.\nTestSub::test_order caught it\n```\n+    return a - b\n```\n",
        names,
        patch,
    )
    assert "test_order" not in out.text and "TestSub" not in out.text
    assert "return a - b" not in out.text and "Swap sub's operands." in out.text
    assert len(out.notes) == 2
    assert leaks.redact_prompt("diff --git a/m.py b/m.py\n", names, patch).text == ""


def test_a_base_holding_the_fix_is_a_leak_unless_empty_or_removed() -> None:
    base = {"abc": "vendor/m.py", history.EMPTY_BLOB: "pkg/__init__.py", "def": "bench/x.py"}
    post = {"m.py": "abc", "pkg/new/__init__.py": history.EMPTY_BLOB, "y.py": "def"}
    assert leaks.base_leaks(base, post, removed=["bench"]) == [
        "m.py (its content is vendor/m.py in the base)"
    ]
