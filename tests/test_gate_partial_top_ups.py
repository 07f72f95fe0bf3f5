"""Partial top-ups (issue 23, the 50-task expected-cells row): a top-up adds ``top_up_share`` of
the first look's candidate cells on the tasks with the fewest planned runs, chosen by a digest of
the look and task id (never by an outcome); the next look's information fractions come from the
runs each task had; a chosen task's missing top-up run is insufficient; the look's record names
the tasks, ``explain`` shows them, and a stored schema-6 decision reads back as paying every
task."""

import json

from bench_assets.config.models import PolicyConfig
from bench_assets.decision.explain import v2_lines
from bench_assets.gate import Decision, decide
from bench_assets.gate.sequential import planned_after, top_up_count, top_up_tasks
from tests.test_gate import CAND, INC, Cells, costs, gate, rules, runs

V3 = PolicyConfig(min_runs=1)
N = 50
TASKS = [f"task-{i:02d}" for i in range(N)]


def test_a_top_up_pays_a_share_of_the_first_looks_cells_round_the_tasks() -> None:
    assert V3.top_up_share == 1 / 6 and V3.max_looks == 7
    # a sixth of the first look's cells: 5 of 10 tasks at 3 runs, 9 of 50 at 1 run
    assert top_up_count(10, 3, V3.top_up_share, 1) == 5
    assert top_up_count(N, 1, V3.top_up_share, 1) == 9
    assert top_up_count(2, 1, V3.top_up_share, 1) == 1
    assert top_up_count(10, 3, 1 / 3, 1) == 10, "a third at 3 runs: every task, the old design"
    assert top_up_count(N, 1, 1.0, 2) == 25, "two runs each on half the tasks: the same cells"
    first = top_up_tasks(TASKS, dict.fromkeys(TASKS, 1), 17, 1)
    assert len(first) == 17 and first == sorted(first)
    assert first == top_up_tasks(list(reversed(TASKS)), dict.fromkeys(TASKS, 1), 17, 1)
    assert first != top_up_tasks(TASKS, dict.fromkeys(TASKS, 1), 17, 2), "the look is in the key"
    # successive top-ups go round the tasks before any task gets a third run
    after = planned_after(TASKS, dict.fromkeys(TASKS, 1), 17, 1, 3, 1)
    assert sorted(after.values()) == [2] * 49 + [3]
    second = top_up_tasks(TASKS, {t: 2 if t in first else 1 for t in TASKS}, 17, 2)
    assert not set(first) & set(second)
    two = planned_after(TASKS, dict.fromkeys(TASKS, 1), 17, 1, 2, 1)
    assert {t for t, r in two.items() if r == 2} == set(first) | set(second)


def _world(extra: dict[str, str] | None = None) -> dict[str, Cells]:
    """50 tasks, the comparator 5 of 6 resolved, the candidate one run 40 of 50 resolved and
    30 % cheaper: non-inferiority not shown yet at one run, far from futility."""
    out = {}
    for i, task in enumerate(TASKS):
        base = 0.5 + 0.01 * i
        cand = "N" if i % 5 == 0 else "Y"
        cand += (extra or {}).get(task, "")
        out[task] = runs(task, INC, "YYYYYN", costs(base, 6)) + runs(
            task, CAND, cand, costs(base * 0.7, len(cand))
        )
    return out


def test_an_inconclusive_look_pays_a_share_of_the_tasks_and_the_next_look_reads_them() -> None:
    one = decide(gate(_world(), V3, planned_runs={INC: 6, CAND: 1}))
    assert one.next_action == "top_up", one.reasons
    assert one.paired_v2 is not None
    look1 = one.paired_v2.looks[-1]
    chosen = look1.top_up_tasks
    assert chosen == top_up_tasks(TASKS, dict.fromkeys(TASKS, 1), 9, 1)
    assert any("on 9 of 50 tasks" in f.message for f in one.findings if f.rule == "sequential")
    # Look 2: the chosen tasks have a second run (resolved: the candidate looks better there).
    paid = dict.fromkeys(chosen, "Y")
    two = decide(
        gate(_world(paid), V3, planned_runs={INC: 6, CAND: 1}, look=2, prior_looks=[look1])
    )
    assert two.paired_v2 is not None and "missing_cells" not in rules(two)
    look2 = two.paired_v2.looks[-1]
    assert look2.candidate_runs_mean == (N + 9) / N and look2.candidate_runs_per_task == 1
    assert look1.information_resolve is not None and look2.information_resolve is not None
    assert look1.information_resolve < look2.information_resolve < 1
    if look2.action == "top_up":  # the next top-up goes to tasks that have had one run only
        assert look2.top_up_tasks is not None and not set(look2.top_up_tasks) & set(chosen)
    # control: the whole top-up design at this look reads the same evidence as "every task"
    full = decide(
        gate(_world(), V3.model_copy(update={"top_up_share": 1.0}), planned_runs={INC: 6, CAND: 1})
    )
    assert full.paired_v2 is not None and full.paired_v2.looks[-1].top_up_tasks is None
    # A chosen task whose top-up run has no outcome is insufficient, like any missing cell.
    short = {t: "Y" for t in chosen[1:]}
    gap = decide(
        gate(_world(short), V3, planned_runs={INC: 6, CAND: 1}, look=2, prior_looks=[look1])
    )
    missing = [f for f in gap.findings if f.rule == "missing_cells"]
    assert [f.task for f in missing] == [chosen[0]] and "r1" in missing[0].message
    # explain names the tasks the look paid
    text = "\n".join(v2_lines(two))
    assert "on 9 task(s) with the fewest planned candidate runs" in text
    assert chosen[0] in text and "1.18 (at least 1) candidate runs per task" in text


def test_a_stored_schema_6_decision_reads_back_as_paying_every_task() -> None:
    d = decide(gate(_world(), V3, planned_runs={INC: 6, CAND: 1}))
    raw = json.loads(d.model_dump_json())
    assert raw["schema_version"] == 7 and raw["policy"]["top_up_share"] == 1 / 6
    raw["schema_version"] = 6
    del raw["policy"]["top_up_share"]
    for lk in raw["paired_v2"]["looks"]:
        lk.pop("top_up_tasks", None)
        lk.pop("candidate_runs_mean", None)
    back = Decision.model_validate(raw)
    assert back.policy.top_up_share == 1.0
    # a look that paid every task is stored without the field, as before schema 7
    assert "top_up_tasks" not in json.dumps(raw["paired_v2"]["looks"])
    assert Decision.model_validate_json(d.model_dump_json()) == d


def test_an_ad_hoc_decision_at_the_last_look_reads_the_design_on_the_mean() -> None:
    """An ad-hoc decision (no generation: the last look, no look on record, no plan) has no
    per-task history; it reads the design's schedule on the mean runs, as before partial
    top-ups, instead of treating every earlier look as having had all of today's runs (which
    divided by a zero information step)."""
    for w in (_world(), _world(dict.fromkeys(TASKS, "Y"))):
        d = decide(gate(w, V3, look=V3.max_looks))
        assert d.paired_v2 is not None and d.decision != "insufficient_evidence", d.reasons
        lk = d.paired_v2.looks[-1]
        assert lk.information_resolve == 1.0 and 0 < lk.alpha_resolve < V3.resolve_error
        assert lk.top_up_tasks is None
