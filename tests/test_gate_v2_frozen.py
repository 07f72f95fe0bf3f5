"""Gate v2 (``paired_v2``) is frozen: it is kept to read and recompute decisions stored before v3,
so a refactor of the code it shares with v3 must not move one of its decisions.

A seeded corpus of 160 v2 gate inputs (5–20 tasks; one to four looks; fresh, reused and pooled
comparator runs; drift; cheaper, equal and worse candidates; a task broken; excluded, missing and
unmeasured cells; repaid comparators; with and without the spend limit) is decided, and the
SHA-256 of the inputs and of the decisions is compared with the digests taken at ad5962b, before
``paired2``/``paired3`` shared any helper. A decision's ``schema_version`` and the v3-only
``regression_veto`` field are left out of the digest: they are layout, not v2's rules.
"""

import datetime as dt
import hashlib
import json
import random

from bench_assets.config.models import PolicyConfig
from bench_assets.gate import GateInput, RunOutcome, decide
from bench_assets.kernel.errorkinds import ErrorKind

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
INC, CAND = "workflow", "candidate_workflow"

INPUTS_SHA256 = "c9c5d571dd3d8f47c5d3c9d40bf99f714666b3f9d59c80b8abbc08e8a0dec839"
DECISIONS_SHA256 = "d45d449b5ea45f406841c594131a513833116ccffa7c075faf632c532deb6810"


def _run(
    rng: random.Random,
    task: str,
    arm: str,
    run: int,
    p: float,
    cost: float,
    *,
    reused: bool = False,
    pooled: bool = False,
    age: float = 1.0,
    glitch: bool = False,
) -> RunOutcome:
    resolved = rng.random() < p
    kind = None if resolved else ErrorKind.ORACLE_FAILED
    metric: float | None = round(cost * rng.lognormvariate(0, 0.3), 6)
    u = rng.random() if glitch else 1.0
    if u < 0.01 and not pooled:
        resolved, kind, metric = False, ErrorKind.INFRA_ERROR, None
    elif u < 0.015:
        metric = None
    return RunOutcome(
        task=task,
        arm=arm,
        run=run,
        resolved=resolved,
        error_kind=kind,
        metric=metric,
        reused=reused,
        pooled=pooled,
        generation="g0" if pooled else "g1" if reused else "g2",
        record_id=f"{task}-{arm}-{run}",
        data_version=f"dv-{task}-{arm}-{run}",
        recorded_at=NOW - dt.timedelta(days=age),
    )


def corpus() -> list[GateInput]:
    """The seeded v2 inputs."""
    out = []
    for i in range(160):
        rng = random.Random(1000 + i)
        max_looks = rng.choice([1, 2, 4])
        top_up = rng.choice([1, 2])
        policy = PolicyConfig(
            name="paired_v2",
            max_looks=max_looks,
            top_up_runs=top_up,
            pooled_history=rng.random() < 0.7,
            max_total_spend_ratio=rng.choice([1.0, None]),
        )
        look = rng.randint(1, max_looks)
        n = rng.choice([5, 8, 10, 20])
        drift = rng.choice([0.0, 0.0, 0.05, 0.15])
        ratio = rng.choice([1.0, 0.8, 0.7, 1.1])
        drop = rng.choice([0.0, 0.0, 0.1, 0.3])
        fresh_comp = rng.choice([1, 3])
        pool = rng.choice([0, 3, 9])
        cand_runs = 3 + (look - 1) * top_up
        glitch = rng.random() < 0.25
        tasks = [f"task-{t:02d}" for t in range(n)]
        outcomes = []
        for t, task in enumerate(tasks):
            p = rng.uniform(0.2, 1.0)
            q = 0.05 if t == 0 and rng.random() < 0.2 else max(0.0, p - drop)
            base = rng.uniform(0.2, 2.0)
            for r in range(3):
                old = r >= fresh_comp
                c = base * (1 + drift) if old else base
                outcomes.append(
                    _run(rng, task, INC, r, p, c, reused=old, age=20 if old else 1, glitch=glitch)
                )
            for k in range(pool):
                outcomes.append(
                    _run(rng, task, INC, 100 + k, p, base * (1 + drift), pooled=True, age=30 + k)
                )
            for r in range(cand_runs):
                if glitch and rng.random() < 0.005:
                    continue  # a missing cell
                outcomes.append(_run(rng, task, CAND, r, q, base * ratio, glitch=glitch))
        out.append(
            GateInput(
                policy=policy,
                model="claude-sonnet-4-5-20250929",
                incumbent_arm=INC,
                candidate_arm=CAND,
                tasks=tasks,
                outcomes=outcomes,
                aborted=False,
                now=NOW,
                max_age_days=90,
                planned_runs={INC: 3, CAND: cand_runs},
                look=look,
                comparator_repaid=rng.random() < 0.1,
            )
        )
    return out


def digests() -> tuple[str, str, set[str]]:
    """SHA-256 of the inputs and of the decisions (see the module docstring), and the kinds of
    decision the corpus reached."""
    inputs = hashlib.sha256()
    decisions = hashlib.sha256()
    kinds = set()
    for inp in corpus():
        inputs.update(inp.model_dump_json().encode())
        d = decide(inp)
        kinds.add(d.decision)
        data = json.loads(d.model_dump_json())
        data.pop("schema_version")
        if data.get("paired_v2"):
            data["paired_v2"].pop("regression_veto", None)
        decisions.update(json.dumps(data, sort_keys=True).encode())
    return inputs.hexdigest(), decisions.hexdigest(), kinds


def test_v2_decisions_are_those_of_ad5962b() -> None:
    inputs, decisions, kinds = digests()
    assert kinds == {"promote", "keep_incumbent", "insufficient_evidence"}  # the corpus is varied
    assert (inputs, decisions) == (INPUTS_SHA256, DECISIONS_SHA256)
