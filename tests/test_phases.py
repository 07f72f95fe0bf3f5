"""Multi-session arms: phases run in order, each recorded; a missing plan fails on its own."""

import json
from pathlib import Path

import pytest

from bench_assets.agents.base import Usage
from bench_assets.agents.phases import render_prompt, sum_usage
from bench_assets.cells.pipeline import arm_identity, build_cell_inputs, cell_identity, make_adapter
from bench_assets.config.models import ArmSpec
from bench_assets.kernel.errorkinds import ErrorKind, is_excluded
from bench_assets.kernel.store import ArtifactStore
from bench_assets.tasks.catalog import Benchmark, load_benchmark
from tests.conftest import make_bench
from tests.test_cells import FIXED_CALC, cell

PLAN_PROMPT = "PLAN for: {task}"
WORK_PROMPT = "WORK on the plan at {artifact}"

# One script for both phases: it reads its prompt and acts as the phase it is asked to be.
AGENT = """
import json, os, pathlib, sys
prompt = open(os.environ['WFBENCH_PROMPT_FILE']).read()
mode = sys.argv[1]
if prompt.startswith('PLAN'):
    if mode != 'noplan':
        pathlib.Path('docs/plans').mkdir(parents=True, exist_ok=True)
        pathlib.Path('docs/plans/p1.md').write_text('# plan\\n1. fix add\\n')
    if mode == 'twoplans':
        pathlib.Path('docs/plans/p2.md').write_text('# another\\n')
    json.dump({'cost_usd': 0.25, 'input_tokens': 100, 'output_tokens': 10,
               'cache_read_input_tokens': 0, 'cache_creation_input_tokens': 0, 'turns': 3},
              open(os.environ['WFBENCH_USAGE_FILE'], 'w'))
else:
    assert prompt == 'WORK on the plan at docs/plans/p1.md', prompt
    assert pathlib.Path('docs/plans/p1.md').is_file()
    pathlib.Path('calc/__init__.py').write_text(FIX)
    if mode != 'nousage':
        json.dump({'cost_usd': 0.5, 'input_tokens': 200, 'output_tokens': 20,
                   'cache_read_input_tokens': 5, 'cache_creation_input_tokens': 1, 'turns': 4},
                  open(os.environ['WFBENCH_USAGE_FILE'], 'w'))
"""


def two_phase_arm(mode: str, **plan: object) -> ArmSpec:
    return ArmSpec.model_validate(
        {
            "agent": {
                "adapter": "command",
                "argv": ["python", "-c", f"FIX = {FIXED_CALC!r}\n" + AGENT, mode],
            },
            "skills": "none",
            "phases": [
                {"name": "plan", "prompt": PLAN_PROMPT, "artifact": "docs/plans/*.md", **plan},
                {"name": "work", "prompt": WORK_PROMPT},
            ],
        }
    )


@pytest.fixture
def bench(tmp_path: Path) -> Benchmark:
    return load_benchmark(make_bench(tmp_path / "tasks"))


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts")


def test_a_two_phase_cell_records_both_phases_and_sums_them(
    bench: Benchmark, store: ArtifactStore
) -> None:
    rec = cell(bench, store, two_phase_arm("ok"))
    assert rec.error_kind is None and rec.resolved
    assert rec.phases is not None and [p.name for p in rec.phases] == ["plan", "work"]
    plan, work = rec.phases
    assert plan.ok and plan.artifact == "docs/plans/p1.md" and plan.cost_usd == 0.25
    assert work.ok and work.artifact is None and work.cost_usd == 0.5
    assert rec.cost_usd == 0.75 and rec.turns == 7
    assert rec.input_tokens == 300 and rec.output_tokens == 30
    assert rec.total_tokens == 336
    # The plan document is the skill's output, not the fix: out of the patch and the churn.
    assert rec.patch is not None and "docs/plans" not in Path(rec.patch.path).read_text()
    assert rec.churn_files == 1


def test_a_missing_plan_document_fails_the_cell_with_its_own_kind(
    bench: Benchmark, store: ArtifactStore
) -> None:
    rec = cell(bench, store, two_phase_arm("noplan"))
    assert rec.error_kind is ErrorKind.PHASE_ARTIFACT_MISSING and not rec.resolved
    assert not is_excluded(rec.error_kind)  # a valid negative, charged to the arm
    assert rec.phases is not None and [p.name for p in rec.phases] == ["plan"]  # work never ran
    assert rec.phases[0].error_kind is ErrorKind.PHASE_ARTIFACT_MISSING
    assert "phase plan" in rec.error_detail and "found 0" in rec.error_detail
    assert rec.cost_usd == 0.25  # what the plan session spent is still charged
    assert not rec.oracle_passed and rec.oracle_run is None  # tests were not run


def test_a_plan_without_any_work_is_no_work_produced(
    bench: Benchmark, store: ArtifactStore, tmp_path: Path
) -> None:
    # The work phase changes nothing: the plan document alone is not work.
    arm = two_phase_arm("ok")
    argv = list(arm.agent.argv)  # type: ignore[union-attr]
    argv[2] = argv[2].replace("pathlib.Path('calc/__init__.py').write_text(FIX)", "pass")
    lazy = arm.model_copy(update={"agent": arm.agent.model_copy(update={"argv": argv})})
    rec = cell(bench, store, lazy)
    assert rec.error_kind in (ErrorKind.VERIFY_FAILED, ErrorKind.ORACLE_FAILED)
    assert rec.churn_files == 0 and not rec.resolved


def test_two_plan_documents_are_not_one(bench: Benchmark, store: ArtifactStore) -> None:
    rec = cell(bench, store, two_phase_arm("twoplans"))
    assert rec.error_kind is ErrorKind.PHASE_ARTIFACT_MISSING
    assert "found 2" in rec.error_detail


def test_an_unreported_phase_makes_the_sum_unknown_not_a_stale_value(
    bench: Benchmark, store: ArtifactStore
) -> None:
    # The work phase writes no usage file; the plan phase's file in the shared scratch folder
    # must not be read again as the work phase's usage.
    rec = cell(bench, store, two_phase_arm("nousage"))
    assert rec.phases is not None and rec.phases[1].cost_usd is None
    assert rec.cost_usd is None and rec.total_tokens is None


def test_identity_covers_every_phase(bench: Benchmark, store: ArtifactStore) -> None:
    inputs = build_cell_inputs(bench, "alpha", store)
    base = two_phase_arm("ok")
    variants = [
        base,
        two_phase_arm("ok", timeout_s=60),
        two_phase_arm("ok", max_budget_usd=1.0),
        two_phase_arm("ok", expected_skill="plan"),
        base.model_copy(
            update={
                "phases": [
                    base.phases[0],
                    base.phases[1].model_copy(update={"prompt": "WORK harder on {artifact}"}),
                ]
            }
        ),
    ]
    digests = {
        json.dumps(
            cell_identity(bench, "alpha", "try", 0, inputs, make_adapter(bench, a), a),
            sort_keys=True,
        )
        for a in variants
    }
    assert len(digests) == len(variants)


def test_arm_identity_of_an_arm_without_new_fields_is_unchanged() -> None:
    arm = ArmSpec.model_validate(
        {"agent": {"adapter": "replay", "predictions": "r.jsonl"}, "skills": "none"}
    )
    assert arm_identity(arm) == {
        "agent": {"adapter": "replay", "predictions": "r.jsonl"},
        "skills": "none",
        "role": "comparator",
        "pairs_with": None,
    }


def test_replayed_two_phase_arm(tmp_path: Path) -> None:
    root = make_bench(tmp_path / "tasks")
    plan_patch = (
        "diff --git a/docs/plans/p.md b/docs/plans/p.md\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/docs/plans/p.md\n@@ -0,0 +1 @@\n+# plan\n"
    )
    fix = (
        "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n"
        "+++ b/calc/__init__.py\n@@ -2,7 +2,7 @@ import math\n \n \n def add(a, b):\n"
        "-    return a - b\n+    return a + b\n \n \n class Acc:\n"
    )
    line = {
        "instance_id": "alpha",
        "model_patch": "",
        "model_name_or_path": "rec",
        "run": 0,
        "phases": {
            "plan": {"model_patch": plan_patch, "usage": {"cost_usd": 0.1, "turns": 2}},
            "work": {"model_patch": fix, "usage": {"cost_usd": 0.2, "turns": 5}},
        },
    }
    (root / "replays" / "two.jsonl").write_text(json.dumps(line) + "\n")
    bench = load_benchmark(root)
    arm = ArmSpec.model_validate(
        {
            "agent": {"adapter": "replay", "predictions": "replays/two.jsonl"},
            "skills": "none",
            "phases": [
                {"name": "plan", "artifact": "docs/plans/*.md"},
                {"name": "work", "prompt": "{artifact}"},
            ],
        }
    )
    store = ArtifactStore(tmp_path / "artifacts")
    rec = cell(bench, store, arm)
    assert rec.resolved, (rec.error_kind, rec.error_detail)
    assert rec.cost_usd == pytest.approx(0.3) and rec.turns == 7
    assert rec.phases is not None and rec.phases[0].artifact == "docs/plans/p.md"
    # a phase without a recorded prediction is a harness problem, not the agent's
    line["phases"] = {"plan": line["phases"]["plan"]}  # type: ignore[index]
    (root / "replays" / "two.jsonl").write_text(json.dumps(line) + "\n")
    rec = cell(load_benchmark(root), store, arm)
    assert rec.error_kind is ErrorKind.INFRA_ERROR and "phase work" in rec.error_detail


def test_phase_prompts_substitute_only_their_placeholders() -> None:
    assert render_prompt("{task} / {artifact}", "use {artifact} {x}", "p.md") == (
        "use {artifact} {x} / p.md"
    )


def test_phase_validation_names_the_problem() -> None:
    agent = {"adapter": "replay", "predictions": "r.jsonl"}
    with pytest.raises(ValueError, match="declares no artifact"):
        ArmSpec.model_validate(
            {"agent": agent, "skills": "none", "phases": [{"name": "w", "prompt": "{artifact}"}]}
        )
    with pytest.raises(ValueError, match="unique"):
        ArmSpec.model_validate(
            {"agent": agent, "skills": "none", "phases": [{"name": "a"}, {"name": "a"}]}
        )
    with pytest.raises(ValueError, match="must not contain"):
        ArmSpec.model_validate(
            {"agent": agent, "skills": "none", "phases": [{"name": "a", "artifact": "../x.md"}]}
        )


def test_sum_usage_keeps_unknown_unknown() -> None:
    a = Usage(cost_usd=0.1, turns=1, input_tokens=1)
    b = Usage(cost_usd=None, turns=2, input_tokens=2)
    s = sum_usage([a, b])
    assert s.cost_usd is None and s.turns == 3 and s.input_tokens == 3 and s.output_tokens is None


def test_an_unknown_cost_cell_of_a_phased_arm_counts_every_phase_budget(tmp_path: Path) -> None:
    from bench_assets.driver.paying import session_budget as _session_budget

    agent = {"adapter": "claude-code", "max_budget_usd": 2.0}
    root = make_bench(
        tmp_path / "tasks",
        agents={"claude_code": {"version": "2.1.332"}},
        arms={
            "two": {
                "agent": agent,
                "skills": "none",
                "phases": [{"name": "plan", "max_budget_usd": 0.5}, {"name": "work"}],
            },
            "one": {"agent": agent, "skills": "none"},
            "open": {
                "agent": {"adapter": "claude-code"},
                "skills": "none",
                "phases": [{"name": "plan", "max_budget_usd": 0.5}, {"name": "work"}],
            },
        },
    )
    bench = load_benchmark(root)
    assert _session_budget(bench, "two.r0") == 2.5  # plan's own cap + the agent's for work
    assert _session_budget(bench, "one.r0") == 2.0
    assert _session_budget(bench, "open.r0") is None  # one uncapped phase: unbounded
