"""A real-code task: a published library, a bug injected, its own upstream tests as the oracle.

The library is ``inflection`` 0.5.1 (MIT, pure Python), whose sdist ships its test suite
(``test_inflection.py``, a few hundred parametrized cases). The sdist is fetched once from PyPI
with pip and cached under ``~/.cache/wfbench-test`` (or ``$WFBENCH_TEST_CACHE``), checked
against a pinned sha256; when it cannot be fetched the tests are skipped with the reason shown.

The task is built from it the way a benchmark author would: the package becomes the inline repo
with one real-looking bug (``ordinal()`` forgets that 13 takes "th", so 13, 113, -13 … become
"13rd"), a small visible smoke test is added, and the upstream test file is hidden as the oracle
with ``fail_to_pass`` (the ordinal tests) and ``pass_to_pass`` (every other upstream test). The
gold patch resolves; a wrong fix (special-casing 13 alone) and an empty patch do not.
"""

import difflib
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from bench_assets.agents.replay import Prediction, ReplayAdapter
from bench_assets.cells.pipeline import build_cell_inputs, run_cell
from bench_assets.config.models import ArmSpec
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.redact import Redactor
from bench_assets.tasks.catalog import load_benchmark
from bench_assets.tasks.discovery import discover_tests
from tests.conftest import make_bench, write_yaml

# Under pytest-xdist (make test) this module stays on one worker:
# the real sdist task is built once per module.
pytestmark = pytest.mark.xdist_group("real_task")

PACKAGE = "inflection"
VERSION = "0.5.1"
SDIST = f"{PACKAGE}-{VERSION}.tar.gz"
SDIST_SHA256 = "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417"
CACHE = Path(os.environ.get("WFBENCH_TEST_CACHE", Path.home() / ".cache" / "wfbench-test"))
TASK_ID = "inflection-ordinal-teens"
SOURCE = "inflection/__init__.py"
CORRECT = "    if number % 100 in (11, 12, 13):\n"
BUG = "    if number % 100 in (11, 12):\n"
WRONG_FIX = "    if number % 100 in (11, 12) or number == 13:\n"
FAIL_TO_PASS = ["test_inflection.py::test_ordinal", "test_inflection.py::test_ordinalize"]
SMOKE_TEST = """\
import inflection


def test_camelize():
    assert inflection.camelize("device_type") == "DeviceType"


def test_first_ordinals():
    assert [inflection.ordinalize(n) for n in (1, 2, 3, 4)] == ["1st", "2nd", "3rd", "4th"]
"""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_sdist() -> Path:
    """The cached sdist, fetched once with pip; skips, saying why, when PyPI is out of reach."""
    cached = CACHE / SDIST
    if cached.is_file() and _sha256(cached) == SDIST_SHA256:
        return cached
    CACHE.mkdir(parents=True, exist_ok=True)
    download = CACHE / f".download-{os.getpid()}"
    shutil.rmtree(download, ignore_errors=True)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
            + ["--disable-pip-version-check", "-q", "-d", str(download), f"{PACKAGE}=={VERSION}"],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"real-code task: could not fetch {SDIST} from PyPI ({e})")
    got = download / SDIST
    if done.returncode != 0 or not got.is_file():
        why = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no file"]
        shutil.rmtree(download, ignore_errors=True)
        pytest.skip(f"real-code task: could not fetch {SDIST} from PyPI ({why[0]})")
    assert _sha256(got) == SDIST_SHA256, f"{SDIST} from PyPI does not match the pinned sha256"
    os.replace(got, cached)
    shutil.rmtree(download, ignore_errors=True)
    return cached


def _patch(path: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


@pytest.fixture(scope="module")
def real_task(tmp_path_factory):
    """The benchmark holding the task, its inputs, and the buggy source the patches apply to."""
    sdist = fetch_sdist()
    base = tmp_path_factory.mktemp("real-task")
    unpacked = base / "sdist"
    with tarfile.open(sdist) as tar:
        tar.extractall(unpacked, filter="data")
    upstream = unpacked / f"{PACKAGE}-{VERSION}"
    root = make_bench(base / "tasks", tasks=())
    task = root / TASK_ID
    shutil.copytree(upstream, task / "repo", ignore=shutil.ignore_patterns("__pycache__"))
    (task / "oracle").mkdir()
    shutil.move(task / "repo" / "test_inflection.py", task / "oracle" / "test_inflection.py")
    source = (task / "repo" / SOURCE).read_text()
    assert source.count(CORRECT) == 1, "the upstream source changed shape"
    buggy = source.replace(CORRECT, BUG)
    (task / "repo" / SOURCE).write_text(buggy)
    (task / "repo" / "tests").mkdir()
    (task / "repo" / "tests" / "test_smoke.py").write_text(SMOKE_TEST)
    oracle_src = (task / "oracle" / "test_inflection.py").read_bytes()
    every = discover_tests("test_inflection.py", oracle_src)
    assert set(FAIL_TO_PASS) <= set(every) and len(every) > 20
    write_yaml(
        task / "task.yaml",
        {
            "id": TASK_ID,
            "class": "bug",
            "repo": "inline",
            "prompt": "ordinalize(13) returns '13rd' instead of '13th' (also 113, -13, ...). "
            "Please fix inflection so every number gets the right ordinal suffix.",
            "verify": {"pytest": ["tests"]},
            "oracle": {
                "files": ["test_inflection.py"],
                "fail_to_pass": FAIL_TO_PASS,
                "pass_to_pass": [t for t in every if t not in FAIL_TO_PASS],
            },
        },
    )
    bench = load_benchmark(root)
    store = ArtifactStore(base / "artifacts")
    return bench, build_cell_inputs(bench, TASK_ID, store), store, buggy


def grade(real_task, patch: str):
    bench, inputs, store, _ = real_task
    pred = Prediction(instance_id=TASK_ID, model_patch=patch, model_name_or_path="real-task")
    arm = ArmSpec.model_validate(
        {"agent": {"adapter": "replay", "predictions": "real.jsonl"}, "skills": "none"}
    )
    record, _ = run_cell(
        bench,
        TASK_ID,
        "grade",
        0,
        inputs,
        store,
        generation=None,
        redactor=Redactor(),
        adapter=ReplayAdapter({(TASK_ID, 0): pred}, "real.jsonl"),
        arm_spec=arm,
        ad_hoc=True,
    )
    return record


def test_the_gold_patch_resolves(real_task) -> None:
    buggy = real_task[3]
    rec = grade(real_task, _patch(SOURCE, buggy, buggy.replace(BUG, CORRECT)))
    assert rec.resolved and rec.error_kind is None, rec.error_detail
    assert rec.oracle_run is not None and rec.oracle_run.runner == "pytest"
    kinds = {t.expected_as for t in rec.oracle_run.tests}
    assert kinds == {"fail_to_pass", "pass_to_pass"}
    assert all(t.outcome == "passed" for t in rec.oracle_run.tests)
    assert rec.oracle_run.reported is not None and rec.oracle_run.reported > 100  # parametrized
    # No false alarm: mutants of this real suite's assertions all fail on the correct code.
    oracle_canaries = [c for c in rec.canaries or [] if c.phase == "oracle"]
    assert {c.kind for c in oracle_canaries} == {"always-fails", "mutant"}, rec.canaries
    assert not [c for c in rec.canaries or [] if c.outcome in ("passed", "xpassed")]
    assert rec.tampered == []


def test_a_wrong_fix_does_not_resolve(real_task) -> None:
    buggy = real_task[3]
    rec = grade(real_task, _patch(SOURCE, buggy, buggy.replace(BUG, WRONG_FIX)))
    assert rec.verify_passed and not rec.oracle_passed and not rec.resolved
    assert rec.error_kind is ErrorKind.ORACLE_FAILED
    assert rec.oracle_run is not None
    failed = {t.id for t in rec.oracle_run.tests if t.outcome != "passed"}
    assert failed == set(FAIL_TO_PASS), "only the fail-to-pass tests still fail"


def test_an_empty_patch_does_not_resolve(real_task) -> None:
    rec = grade(real_task, "")
    assert rec.verify_passed and not rec.oracle_passed and not rec.resolved
    assert rec.error_kind is ErrorKind.ORACLE_FAILED
    assert "expected" in rec.error_detail and "2 failed" in rec.error_detail


def test_the_task_file_round_trips(real_task) -> None:
    bench = real_task[0]
    data = yaml.safe_load((bench.root / TASK_ID / "task.yaml").read_text())
    assert data["oracle"]["fail_to_pass"] == FAIL_TO_PASS
    assert bench.task(TASK_ID).spec.oracle.trusted
