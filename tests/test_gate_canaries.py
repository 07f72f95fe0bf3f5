"""Gate canaries (issue 13, item 2): the drift estimate's evidence is paid on every task.

The v2 gate bounds the drift between fresh and reused comparator evidence per task, from tasks
that have both; ``bench/gate_calibration.py`` assumes ``reuse.gate_canaries_per_task`` fresh
comparator runs on every task. These tests hold the planner to that: each generation pays that
many fresh cells per task of every comparator arm a candidate is gated against (``pairs_with``),
on the tasks where that arm applies, rotated by generation number, chosen independently of the
order in which tasks become ready. The other comparator arms keep ``reuse.canaries`` per
generation, chosen among cells that exist.
"""

import datetime as dt
import random
from typing import Any

from bench_assets.cells.pipeline import InputIdentity
from bench_assets.config.models import ReuseConfig
from bench_assets.driver import plan as plan_mod
from bench_assets.driver.plan import generation_canaries, generation_tasks, plan_task
from bench_assets.generation.planner import (
    PlannedCell,
    PriorCell,
    choose_canaries,
    choose_gate_canaries,
    summary,
)
from bench_assets.inputs.binding import TaskBinding
from bench_assets.tasks.catalog import load_benchmark
from tests.conftest import DEMO_TASKS, bench_script

NOW = dt.datetime(2026, 11, 30, 3, 0, tzinfo=dt.UTC)

# task -> applicable arms, as Benchmark.arms_for answers for a bench like the demo's
APPLIES = {
    "alpha": ["baseline", "cand", "workflow"],
    "beta": ["baseline", "cand", "workflow"],
    "gamma": ["baseline", "cand", "workflow"],
    "review-a": ["cand_review", "review"],
    "review-b": ["cand_review", "review"],
}


def gate(
    generation: str,
    per_task: int = 1,
    runs: int = 3,
    applies: dict[str, list[str]] | None = None,
) -> set[tuple[str, str, int]]:
    return choose_gate_canaries(
        applies or APPLIES, ["workflow", "review"], runs, generation, per_task
    )


def test_default_is_one_gate_canary_per_task_and_calibration_plays_it() -> None:
    assert ReuseConfig().gate_canaries_per_task == 1
    calibration = bench_script("gate_calibration")
    assert calibration.CANARIES_PER_TASK == ReuseConfig().gate_canaries_per_task


def test_every_applicable_task_gets_exactly_n_gate_canaries_per_gated_arm() -> None:
    for n in (1, 2, 3):
        chosen = gate("g0005", per_task=n)
        for task, arms in APPLIES.items():
            for arm in ("workflow", "review"):
                got = [r for t, a, r in chosen if (t, a) == (task, arm)]
                assert len(got) == (n if arm in arms else 0), (task, arm, n)
                assert len(set(got)) == len(got)
        # never an arm that is not gated, never a cell that does not exist
        assert {a for _, a, _ in chosen} == {"workflow", "review"}
        assert all(a in APPLIES[t] and 0 <= r < 3 for t, a, r in chosen)


def test_more_gate_canaries_than_runs_pays_every_run_once() -> None:
    chosen = gate("g0002", per_task=5)
    assert {(t, a, r) for t, a, r in chosen if t == "alpha"} == {
        ("alpha", "workflow", r) for r in range(3)
    }


def test_gate_canaries_rotate_over_every_run_index() -> None:
    for per_task in (1, 2):
        seen: dict[tuple[str, str], set[int]] = {}
        for g in range(1, 4):
            for t, a, r in gate(f"g{g:04d}", per_task=per_task):
                seen.setdefault((t, a), set()).add(r)
        assert all(runs == {0, 1, 2} for runs in seen.values()), per_task
    assert gate("g0001") != gate("g0002"), "the run index moves with the generation"


def test_gate_canaries_are_independent_of_task_order() -> None:
    items = list(APPLIES.items())
    want = gate("g0007", per_task=2)
    for seed in range(5):
        random.Random(seed).shuffle(items)
        assert gate("g0007", per_task=2, applies=dict(items)) == want
    # a task's gate canaries do not depend on which other tasks are in the generation
    alone = gate("g0007", per_task=2, applies={"beta": APPLIES["beta"]})
    assert alone == {c for c in want if c[0] == "beta"}


def test_zero_turns_gate_canaries_off() -> None:
    assert gate("g0003", per_task=0) == set()


def test_health_canaries_land_only_on_cells_that_exist() -> None:
    """``reuse.canaries`` of an implementation arm must not be spent on a review task (where the
    arm has no cell): before, the demo's review canary fell on an implementation task and was
    lost."""
    tasks = sorted(APPLIES)
    for g in range(1, 20):
        chosen = choose_canaries(tasks, ["baseline", "review"], 3, f"g{g:04d}", 1, APPLIES)
        assert sorted(a for _, a, _ in chosen) == ["baseline", "review"], g
        assert all(a in APPLIES[t] for t, a, _ in chosen), g


# --- the demo's generation plan ---------------------------------------------------------------


def _fake_inputs(task: str, overlay: str | None) -> InputIdentity:
    digest = f"d-{task}"
    binding = TaskBinding(
        task_id=task,
        task_class="demo",
        repo_kind="inline",
        repo_identity=f"inline:{task}",
        ref=None,
        resolved_sha="0" * 40,
        prompt_digest=digest,
        setup_digest=digest,
        verify_digest=digest,
        task_file_digest=digest,
        oracle_digest=digest,
        oracle_command_digest=digest,
        oracle_manifest_digest=digest,
        oracle_files=[],
        protected=[],
        expensive=False,
    )
    return InputIdentity(
        binding=binding,
        oracle_digest=digest,
        graph_digest=digest,
        sanitized_sha="1" * 40,
        skills_digest="skills",
        overlay_digest=overlay,
    )


def _plan_demo(generation: str, overlay: str, prior: dict, order: list[str]) -> list[PlannedCell]:
    bench = load_benchmark(DEMO_TASKS)
    tasks = generation_tasks(bench)
    out: list[PlannedCell] = []
    for task in order:  # one task at a time, as evolve plans a task when its inputs are ready
        out += plan_task(
            bench, task, _fake_inputs(task, overlay), prior, generation, NOW, tasks=tasks
        )
    return out


def _recorded(plan: list[PlannedCell], generation: str) -> dict[Any, PriorCell]:
    """Every planned cell recorded as a valid result of ``generation``, a day ago."""
    bench = load_benchmark(DEMO_TASKS)
    out = {}
    for c in plan:
        # the identity itself is only needed for diffs; the digest decides reuse
        out[(c.task, c.arm, c.run)] = PriorCell(
            identity={},
            identity_digest=c.identity_digest,
            error_kind=None,
            recorded_at=NOW - dt.timedelta(days=1),
            generation=generation,
        )
    assert len(out) == sum(bench.config.runs * len(bench.arms_for(t)) for t in bench.task_ids())
    return out


def test_demo_second_generation_pays_one_gate_canary_per_task_of_each_gated_arm() -> None:
    """The demo's g0002, planned by the real planner over the shipped bench.yaml with every g0001
    cell recorded: the candidate cells, one fresh ``workflow`` cell on each implementation task,
    one fresh ``review`` cell on each review task and one canary for each other comparator arm."""
    plan_mod._canary_memo.clear()
    bench = load_benchmark(DEMO_TASKS)
    tasks = generation_tasks(bench)
    g1 = _plan_demo("g0001", "overlay-1", {}, tasks)
    assert summary(g1)["run"] == 78 and summary(g1)["reuse"] == 0
    prior = _recorded(g1, "g0001")
    g2 = _plan_demo("g0002", "overlay-2", prior, list(reversed(tasks)))
    paid = [c for c in g2 if c.action == "run"]
    impl = [t for t in tasks if "workflow" in bench.arms_for(t)]
    review = [t for t in tasks if "review" in bench.arms_for(t)]
    assert (len(impl), len(review)) == (5, 3)
    by_arm: dict[str, list[PlannedCell]] = {}
    for c in paid:
        by_arm.setdefault(c.arm, []).append(c)
    assert sorted(c.task for c in by_arm["workflow"]) == impl
    assert sorted(c.task for c in by_arm["review"]) == review
    assert all(
        c.kind == "canary" and c.reason.startswith("gate canary")
        for c in by_arm["workflow"] + by_arm["review"]
    )
    for arm in ("baseline", "workflow_planned"):
        assert len(by_arm[arm]) == 1 and by_arm[arm][0].kind == "canary", arm
        assert not by_arm[arm][0].reason.startswith("gate canary")
    assert len(by_arm["candidate_workflow"]) == 15 and len(by_arm["candidate_review"]) == 9
    # the README's numbers ("Quick start": 78 + 34 cells, 34 of 78 paid in g0002)
    assert (summary(g2)["run"], summary(g2)["reuse"]) == (34, 44)
    # planning the tasks in another order chooses the same cells
    plan_mod._canary_memo.clear()
    again = _plan_demo("g0002", "overlay-2", prior, tasks)
    assert {(c.task, c.cell) for c in again if c.action == "run"} == {
        (c.task, c.cell) for c in paid
    }
    assert generation_canaries(bench, "g0002", tasks) >= {
        (c.task, c.arm, c.run) for c in paid if c.kind == "canary"
    }


def test_demo_second_generation_with_its_gate_canaries_still_promotes_on_a_5_task_drift() -> None:
    """The demo's recorded outcomes as g0002 sees them: the comparator's gate canaries fresh, its
    other runs reused from g0001. The drift estimate rests on every implementation task (it rested
    on one with a single canary per arm) and the decision stays ``promote``."""
    from bench_assets.gate import decide
    from tests.test_gate import NOW as GATE_NOW
    from tests.test_gate import _demo_world, gate

    bench = load_benchmark(DEMO_TASKS)
    tasks = generation_tasks(bench)
    plan_mod._canary_memo.clear()
    fresh = {(t, r) for t, a, r in generation_canaries(bench, "g0002", tasks) if a == "workflow"}
    world, policy = _demo_world()
    assert {t for t, _ in fresh} == set(world)
    old = GATE_NOW - dt.timedelta(days=1)
    seen = {
        t: [
            o
            if o.arm != "workflow" or (t, o.run) in fresh
            else o.model_copy(update={"reused": True, "generation": "g0001", "recorded_at": old})
            for o in cells
        ]
        for t, cells in world.items()
    }
    d = decide(gate(seen, policy))
    assert d.decision == "promote", d.reasons
    assert d.paired_v2 is not None
    drift = d.paired_v2.drift
    assert (drift.tasks, drift.fresh_runs, drift.old_runs) == (5, 5, 10)
    assert drift.verdict == "within"
