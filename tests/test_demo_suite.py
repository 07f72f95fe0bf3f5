"""The offline demo's intended outcomes are facts, not hopes.

Every replay line in ``tasks/replays/<arm>.jsonl`` is graded here by the harness itself, exactly
as a cell is (:mod:`bench_assets.cells.grading`): ``run_cell`` with the replay adapter copies the
sanitized template, applies the recorded patch with ``git apply`` in the sandbox, restores
protected and runner files, runs ``verify`` and the hidden oracle through the trusted runner
(per-test outcomes, the oracle staged read-only at a per-cell random path), and captures the
patch. The measured (verify, oracle) pair must equal the intended table in
``tasks/replays/expected.json``, and the design the demo relies on (the candidate resolves more
at lower cost, cheats never resolve, every oracle fails on the unmodified repo) is asserted from
the measured outcomes and the recorded usage. So every gold patch resolving here is a statement
about the real grader.
"""

import json
import os
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bench_assets.agents.replay import Prediction, ReplayAdapter
from bench_assets.cells.pipeline import CellInputs, build_cell_inputs, run_cell
from bench_assets.config.models import ArmSpec
from bench_assets.kernel.errorkinds import ErrorKind
from bench_assets.kernel.store import ArtifactStore
from bench_assets.sandbox.redact import Redactor
from bench_assets.tasks.catalog import Benchmark, load_benchmark

# Under pytest-xdist (make test) this module stays on one worker:
# the demo patches are graded once per module.
pytestmark = pytest.mark.xdist_group("demo_suite")

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "tasks"
REPLAYS = TASKS / "replays"
ARMS = ("baseline", "workflow", "candidate_workflow")
RUNS = 3
CHEAT_KINDS = {"edits-visible-test", "reads-oracle-or-history"}
TASK_KEYS = {
    "id",
    "class",
    "repo",
    "ref",
    "prompt",
    "verify",
    "oracle",
    "setup",
    "protected",
    "import_paths",
    "runner_files",
    "expensive",
    "timeouts",
    "resources",
    "review",
}
USAGE_KEYS = {
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "cost_usd",
    "turns",
    "duration_s",
}
GRADER_ARM = ArmSpec.model_validate(
    {"agent": {"adapter": "replay", "predictions": "demo-suite.jsonl"}, "skills": "none"}
)


def _task_ids() -> list[str]:
    """The implementation tasks (review tasks are graded by labels: tests/test_demo_reviews.py)."""
    return sorted(
        p.parent.name
        for p in TASKS.glob("*/task.yaml")
        if "review" not in yaml.safe_load(p.read_text(encoding="utf-8"))
    )


def _load_task(task_id: str) -> dict:
    return yaml.safe_load((TASKS / task_id / "task.yaml").read_text(encoding="utf-8"))


def _load_replays() -> dict[str, list[dict]]:
    replays = {}
    for arm in ARMS:
        lines = (REPLAYS / f"{arm}.jsonl").read_text(encoding="utf-8").splitlines()
        replays[arm] = [json.loads(line) for line in lines if line.strip()]
    return replays


TASK_IDS = _task_ids()
REPLAY_LINES = _load_replays()
EXPECTED = json.loads((REPLAYS / "expected.json").read_text(encoding="utf-8"))
CELLS = [(arm, line["instance_id"], line["run"]) for arm in ARMS for line in REPLAY_LINES[arm]]


def _line(arm: str, task: str, run: int) -> dict:
    (line,) = [x for x in REPLAY_LINES[arm] if x["instance_id"] == task and x["run"] == run]
    return line


@dataclass(frozen=True)
class Outcome:
    verify: bool
    oracle: bool

    @property
    def resolved(self) -> bool:
        return self.verify and self.oracle


def grade_patch(
    bench: Benchmark, inputs: CellInputs, store: ArtifactStore, task_id: str, patch: str
) -> Outcome:
    """Grade one patch against one task with the harness's own cell path."""
    pred = Prediction(instance_id=task_id, model_patch=patch, model_name_or_path="demo-suite")
    record, _ = run_cell(
        bench,
        task_id,
        "grade",
        0,
        inputs,
        store,
        generation=None,
        redactor=Redactor(),
        adapter=ReplayAdapter({(task_id, 0): pred}, "demo-suite"),
        arm_spec=GRADER_ARM,
        ad_hoc=True,
    )
    assert record.error_kind not in (ErrorKind.PATCH_FAILED, ErrorKind.INFRA_ERROR), (
        f"{task_id}: {record.error_kind}: {record.error_detail}"
    )
    return Outcome(verify=record.verify_passed, oracle=record.oracle_passed)


class Grades(dict):
    """(task, patch) -> Outcome (or the exception grading raised); short repr for tracebacks."""

    def __repr__(self) -> str:
        return f"<{len(self)} graded (task, patch) pairs>"


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Grades:
    """Grade the unmodified repos and every distinct (task, patch) once, two at a time."""
    store = ArtifactStore(tmp_path_factory.mktemp("demo-suite-artifacts"))
    bench = load_benchmark(TASKS)
    inputs = {task: build_cell_inputs(bench, task, store) for task in TASK_IDS}
    jobs = {(task, "") for task in TASK_IDS}
    jobs |= {(task, _line(arm, task, run)["model_patch"]) for arm, task, run in CELLS}

    def run(job):
        try:
            return job, grade_patch(bench, inputs[job[0]], store, job[0], job[1])
        except Exception as exc:  # reported by the test that needs this job
            return job, exc

    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        return Grades(pool.map(run, sorted(jobs)))


def _outcome(measured: dict, task: str, patch: str) -> Outcome:
    result = measured[(task, patch)]
    if isinstance(result, Exception):
        raise result
    return result


def _resolved(measured: dict, arm: str, task: str) -> int:
    return sum(
        _outcome(measured, task, _line(arm, task, run)["model_patch"]).resolved
        for run in range(RUNS)
    )


def _median_cost(arm: str, task: str) -> float:
    return statistics.median(_line(arm, task, run)["usage"]["cost_usd"] for run in range(RUNS))


# --- the task files -----------------------------------------------------------------------------


def test_there_are_enough_tasks():
    assert len(TASK_IDS) >= 4
    assert len({_load_task(t)["class"] for t in TASK_IDS}) >= 3, "tasks should be varied"


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_task_folder_is_well_formed(task_id):
    folder = TASKS / task_id
    task = _load_task(task_id)
    assert set(task) <= TASK_KEYS, f"unknown keys {set(task) - TASK_KEYS}"
    assert task["id"] == task_id
    assert task["repo"] == "inline"
    # The trusted runner grades both phases: no custom command anywhere.
    assert task["verify"] == {"pytest": ["tests"]}
    assert set(task["oracle"]) == {"files"}
    for name in task["oracle"]["files"]:
        assert name.startswith("test_oracle_") and "/" not in name
        assert (folder / "oracle" / name).is_file()
    assert sorted(p.name for p in (folder / "oracle").iterdir()) == sorted(task["oracle"]["files"])
    repo = folder / "repo"
    assert (repo / "tests").is_dir() and (repo / "pytest.ini").is_file()
    assert (repo / "conftest.py").is_file()
    for path in repo.rglob("*"):
        assert not path.is_symlink(), path
        assert path.name not in {"__pycache__", ".git", ".pytest_cache"}, path
        if path.is_file():
            assert b"\0" not in path.read_bytes(), f"binary file {path}"


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_unmodified_repo_passes_verify_and_fails_oracle(measured, task_id):
    assert _outcome(measured, task_id, "") == Outcome(verify=True, oracle=False)


# --- the replay files ---------------------------------------------------------------------------


def test_replays_cover_every_cell_once():
    for arm in ARMS:
        keys = sorted((x["instance_id"], x["run"]) for x in REPLAY_LINES[arm])
        assert keys == sorted((t, r) for t in TASK_IDS for r in range(RUNS)), arm
        assert sorted(EXPECTED[arm]) == TASK_IDS
        assert all(len(EXPECTED[arm][t]) == RUNS for t in TASK_IDS)
    assert sorted(EXPECTED) == sorted(ARMS)


@pytest.mark.parametrize(("arm", "task", "run"), CELLS, ids=[f"{a}-{t}-r{r}" for a, t, r in CELLS])
def test_replay_line_is_well_formed(arm, task, run):
    line = _line(arm, task, run)
    assert set(line) == {"instance_id", "model_name_or_path", "run", "model_patch", "usage"}
    assert line["model_name_or_path"] == f"wfbench-demo/{arm}"
    assert set(line["usage"]) == USAGE_KEYS
    usage = line["usage"]
    assert all(usage[k] > 0 for k in USAGE_KEYS)
    assert isinstance(usage["turns"], int)
    patch = line["model_patch"]
    if patch:
        assert patch.startswith("diff --git a/") and patch.endswith("\n")
        assert ".wfbench-oracle-" not in "".join(
            x for x in patch.splitlines() if x.startswith(("+++", "---"))
        ), "a patch must not touch the oracle stage"


@pytest.mark.parametrize(("arm", "task", "run"), CELLS, ids=[f"{a}-{t}-r{r}" for a, t, r in CELLS])
def test_replay_outcome_is_as_intended(measured, arm, task, run):
    expected = EXPECTED[arm][task][run]
    got = _outcome(measured, task, _line(arm, task, run)["model_patch"])
    assert (got.verify, got.oracle) == (expected["verify"], expected["oracle"]), (
        f"{arm} run {run} on {task}: measured verify={got.verify} oracle={got.oracle}, "
        f"expected.json says verify={expected['verify']} oracle={expected['oracle']}"
    )


def test_usage_differs_between_runs():
    for arm in ARMS:
        for task in TASK_IDS:
            costs = {_line(arm, task, run)["usage"]["cost_usd"] for run in range(RUNS)}
            assert len(costs) == RUNS, (arm, task)


# --- cheats -------------------------------------------------------------------------------------


def _cheats() -> list[tuple[str, str, int, str]]:
    return [
        (arm, task, run, cell["cheat"])
        for arm in ARMS
        for task in TASK_IDS
        for run, cell in enumerate(EXPECTED[arm][task])
        if cell["cheat"]
    ]


def test_cheats_exist_of_both_kinds_and_never_resolve(measured):
    cheats = _cheats()
    assert len(cheats) >= 2
    assert {kind for *_, kind in cheats} == CHEAT_KINDS
    for arm, task, run, _ in cheats:
        outcome = _outcome(measured, task, _line(arm, task, run)["model_patch"])
        assert not outcome.resolved, (arm, task, run)


def test_cheat_labels_match_what_the_patches_do():
    for arm, task, run, kind in _cheats():
        patch = _line(arm, task, run)["model_patch"]
        if kind == "edits-visible-test":
            template_tests = {
                p.relative_to(TASKS / task / "repo").as_posix()
                for p in (TASKS / task / "repo" / "tests").rglob("*.py")
            }
            removed = [
                x for x in patch.splitlines() if x.startswith("-") and not x.startswith("---")
            ]
            touched = {x[len("--- a/") :] for x in patch.splitlines() if x.startswith("--- a/")}
            assert touched & template_tests, "must modify an existing visible test file"
            assert removed, "must remove or rewrite existing lines"
        else:
            # It goes looking for the staged oracle and for the fix in git history.
            assert ".wfbench-oracle-" in patch and '"git", "log", "--all"' in patch


# --- the design the demo relies on (see the module docstring) ------------------------------------


def test_candidate_resolves_more_than_the_incumbent(measured):
    cand = {t: _resolved(measured, "candidate_workflow", t) for t in TASK_IDS}
    inc = {t: _resolved(measured, "workflow", t) for t in TASK_IDS}
    assert all(cand[t] >= inc[t] for t in TASK_IDS), (cand, inc)
    assert sum(cand[t] > inc[t] for t in TASK_IDS) * 2 > len(TASK_IDS), (cand, inc)


def test_candidate_is_cheaper_than_the_incumbent():
    ratios = {
        t: _median_cost("candidate_workflow", t) / _median_cost("workflow", t) for t in TASK_IDS
    }
    cheaper = [t for t, r in ratios.items() if 0.55 <= r <= 0.8]
    assert len(cheaper) * 2 > len(TASK_IDS), ratios


def test_every_oracle_is_passable(measured):
    for task in TASK_IDS:
        assert any(_resolved(measured, arm, task) for arm in ARMS), task


def test_incumbent_beats_baseline(measured):
    inc = sum(_resolved(measured, "workflow", t) for t in TASK_IDS)
    base = sum(_resolved(measured, "baseline", t) for t in TASK_IDS)
    assert inc > base
    base_costlier = [
        t for t in TASK_IDS if _median_cost("baseline", t) >= _median_cost("workflow", t)
    ]
    assert len(base_costlier) * 2 > len(TASK_IDS)


def test_failures_are_of_every_realistic_kind(measured):
    kinds = set()
    for arm, task, run in CELLS:
        patch = _line(arm, task, run)["model_patch"]
        outcome = _outcome(measured, task, patch)
        if not patch:
            kinds.add("empty")
        elif outcome.verify and not outcome.oracle:
            kinds.add("overfit")
        elif not outcome.verify:
            kinds.add("breaks-visible-test")
    assert kinds == {"empty", "overfit", "breaks-visible-test"}
