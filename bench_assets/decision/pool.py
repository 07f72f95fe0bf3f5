"""Pooled comparator history (issue 13): earlier records of a comparator cell that count as extra
comparator runs at no cost.

A comparator cell partition (``<task>/<arm>.r<k>``) is re-materialized by every canary and every
re-payment; each materialization names its record. The records of the *same identity* as the one
the generation's evidence rests on (identical model, agent, inputs, run index, ...), recorded
within ``reuse.max_age_days`` and valid, are the same experiment repeated: the gate pools them as
extra comparator runs (:attr:`bench_assets.gate.RunOutcome.pooled`) and controls their drift
against this generation's fresh comparator runs (:mod:`bench_assets.gate.paired2`).

Pure: the caller reads the partitions :func:`history_cells` names (in one bulk lookup) and hands
in their materializations as :class:`CellView` objects.
"""

import datetime as dt
from collections.abc import Mapping, Sequence

from bench_assets.decision.aggregate import TaskAggregate, verify_passed_oracle_failed
from bench_assets.decision.documents import CellView
from bench_assets.gate import RunOutcome
from bench_assets.kernel.errorkinds import is_excluded

POOL_RUN_BASE = 1000
"""Pooled outcomes are numbered from here per task, apart from planned run indices."""


def _metric(view: CellView, metric: str) -> float | None:
    value = {
        "cost_usd": view.record.cost_usd,
        "total_tokens": view.record.total_tokens,
        "turns": view.record.turns,
        "duration_s": view.record.duration_s,
    }[metric]
    return None if value is None else float(value)


def history_cells(aggs: list[TaskAggregate], arm: str) -> list[tuple[str, str]]:
    """The ``(task, cell)`` partitions whose history :func:`pooled_outcomes` reads: ``arm``'s
    evidence cells, in the aggregates' order."""
    return [(agg.task, e.cell) for agg in aggs for e in agg.evidence if e.arm == arm]


def pooled_outcomes(
    aggs: list[TaskAggregate],
    arm: str,
    *,
    metric: str,
    now: dt.datetime,
    max_age_days: int,
    history: Mapping[tuple[str, str], Sequence[CellView]],
) -> list[RunOutcome]:
    """Earlier valid records of ``arm``'s cells with the identity of the generation's evidence.

    Args:
        aggs: The tasks' aggregates (their evidence rows name the records in use).
        arm: The comparator arm.
        metric: The policy metric.
        now: The decision time.
        max_age_days: Older records are not pooled.
        history: ``(task, cell)`` → that partition's materializations, newest first, for
            the cells :func:`history_cells` names (a cell left out has no history).

    Returns:
        One pooled outcome per distinct extra record, newest first per task; records already
        used as evidence, other identities, ad-hoc, excluded and expired records are left out.
    """
    out: list[RunOutcome] = []
    max_age = dt.timedelta(days=max_age_days)
    for agg in aggs:
        used = {e.record_id for e in agg.evidence}
        seen: set[str] = set()
        n = 0
        for e in agg.evidence:
            if e.arm != arm:
                continue
            views = history.get((agg.task, e.cell), ())
            current = next((v for v in views if v.record.record_id == e.record_id), None)
            if current is None:
                continue
            for v in views:
                rec = v.record
                if rec.record_id in used or rec.record_id in seen:
                    continue
                seen.add(rec.record_id)
                recorded = dt.datetime.fromisoformat(rec.recorded_at)
                if (
                    rec.identity_digest != current.record.identity_digest
                    or rec.ad_hoc
                    or is_excluded(rec.error_kind)
                    or now - recorded > max_age
                    or recorded > now
                ):
                    continue
                out.append(
                    RunOutcome(
                        task=agg.task,
                        arm=arm,
                        run=POOL_RUN_BASE + n,
                        resolved=rec.resolved,
                        error_kind=rec.error_kind,
                        metric=_metric(v, metric),
                        reused=False,
                        pooled=True,
                        generation=rec.generation,
                        record_id=rec.record_id,
                        data_version=v.data_version or rec.data_version,
                        recorded_at=recorded,
                        pooled_from=e.cell,
                        pooled_run_id=v.run_id,
                        verify_passed_oracle_failed=verify_passed_oracle_failed(
                            rec.error_kind, rec.verify_passed, rec.oracle_passed
                        ),
                    )
                )
                n += 1
    return out
