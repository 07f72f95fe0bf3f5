"""Cost spread per task and arm (min–max over valid runs) and the scatter's error bars."""

import json
import math
import xml.etree.ElementTree as ET

import pytest
from pydantic import ValidationError

from bench_assets.decision.aggregate import TaskAggregate, aggregate_task
from bench_assets.decision.charts import SCATTER_PAD, SCATTER_SIZE, scatter_svg
from bench_assets.decision.spread import ERROR_BAR_LEGEND, Spread, bar_spread, min_max
from bench_assets.kernel.errorkinds import ErrorKind
from tests.test_aggregate import agg_of, fresh, rec


def test_min_max_over_measured_values() -> None:
    assert min_max([0.3, 0.1, 0.2]) == Spread(min=0.1, max=0.3, runs=3)
    assert min_max([2, 2]) == Spread(min=2.0, max=2.0, runs=2)


def test_single_run_is_a_degenerate_spread_that_is_never_drawn() -> None:
    one = min_max([0.25])
    assert one == Spread(min=0.25, max=0.25, runs=1)
    assert bar_spread(one) is None
    assert bar_spread(min_max([0.25, 0.5])) == Spread(min=0.25, max=0.5, runs=2)


@pytest.mark.parametrize("values", [[], [None], [0.1, None, 0.3], [0.1, math.nan]])
def test_unknown_is_none_never_zero(values: list[float | None]) -> None:
    assert min_max(values) is None
    assert bar_spread(None) is None


def test_spread_model_refuses_nonsense() -> None:
    with pytest.raises(ValidationError, match="above max"):
        Spread(min=0.5, max=0.1, runs=2)
    with pytest.raises(ValidationError):
        Spread(min=0.1, max=0.1, runs=0)
    with pytest.raises(ValidationError):
        Spread.model_validate({"min": 0.1, "max": 0.2, "runs": 2, "p50": 0.15})


def test_aggregate_spread_follows_the_median_rules() -> None:
    agg = agg_of(
        [
            rec("workflow", 0, cost=0.1),
            rec("workflow", 1, cost=0.4, kind=ErrorKind.ORACLE_FAILED),  # valid negative: counts
            rec("workflow", 2, cost=9.0, kind=ErrorKind.INFRA_ERROR),  # excluded: left out
            rec("cand", 0, cost=0.2),
            rec("cand", 1, cost=None),  # a valid run left cost unmeasured: unknown
            rec("solo", 0, cost=0.3),
        ]
    )
    w, c, s = agg.arms["workflow"], agg.arms["cand"], agg.arms["solo"]
    assert w.cost_usd_spread == Spread(min=0.1, max=0.4, runs=2)
    assert c.cost_usd_spread is None and c.median_cost_usd is None
    assert s.cost_usd_spread == Spread(min=0.3, max=0.3, runs=1)
    empty = aggregate_task("alpha", ["workflow.r0"], [])
    assert empty.arms["workflow"].cost_usd_spread is None


def test_an_aggregate_written_before_the_field_still_loads() -> None:
    agg = agg_of([rec("workflow", 0, cost=0.1), rec("workflow", 1, cost=0.2)])
    doc = json.loads(agg.model_dump_json())
    del doc["arms"]["workflow"]["cost_usd_spread"]
    old = TaskAggregate.model_validate(doc)
    assert old.arms["workflow"].cost_usd_spread is None
    assert old.arms["workflow"].median_cost_usd == pytest.approx(0.15)
    assert TaskAggregate.model_validate_json(agg.model_dump_json()) == agg


def _task(name: str, inc: list[float], cand: list[float]) -> TaskAggregate:
    records = [rec("workflow", i, cost=v, task=name) for i, v in enumerate(inc)]
    records += [rec("cand", i, cost=v, task=name) for i, v in enumerate(cand)]
    return aggregate_task(name, [r.cell for r in records], [fresh(r) for r in records])


def _bars(svg: ET.Element) -> dict[tuple[str, str], list[list[float]]]:
    """(task, axis) → the coordinates [x1, y1, x2, y2] of each line of that error bar."""
    out = {}
    for g in svg.iter("g"):
        if g.get("class") == "eb":
            lines = [[float(ln.get(k, "nan")) for k in ("x1", "y1", "x2", "y2")] for ln in g]
            out[(g.get("data-task", ""), g.get("data-axis", ""))] = [
                x for x in lines if len(x) == 4 and all(math.isfinite(v) for v in x)
            ]
    return out


def _circles(svg: ET.Element) -> dict[str, tuple[float, float]]:
    return {
        (c.findtext("title") or "").split(":")[0]: (float(c.get("cx", "")), float(c.get("cy", "")))
        for c in svg.iter("circle")
    }


def test_scatter_draws_min_max_bars_only_where_there_is_a_spread() -> None:
    wide = _task("wide", [0.1, 0.2, 0.4], [0.05, 0.1, 0.3])
    solo = _task("solo", [0.3], [0.2])
    svg = ET.fromstring(scatter_svg([wide, solo], "workflow", "cand"))
    # The axis runs to 1.1 × the largest value drawn, bars included (0.4).
    scale = (SCATTER_SIZE - 2 * SCATTER_PAD) / (0.4 * 1.1)

    def x(v: float) -> float:
        return SCATTER_PAD + v * scale

    def y(v: float) -> float:
        return SCATTER_SIZE - SCATTER_PAD - v * scale

    bars, circles = _bars(svg), _circles(svg)
    assert set(bars) == {("wide", "x"), ("wide", "y")}  # solo: one run per arm, no bar
    assert set(circles) == {"wide", "solo"}
    cx, cy = circles["wide"]
    assert cx == pytest.approx(x(0.2), abs=0.1) and cy == pytest.approx(y(0.1), abs=0.1)
    # Horizontal bar: the incumbent's min–max cost, through the point; then its two caps.
    bar, lo_cap, hi_cap = bars[("wide", "x")]
    assert bar == pytest.approx([x(0.1), cy, x(0.4), cy], abs=0.1)
    assert lo_cap[0] == lo_cap[2] == pytest.approx(x(0.1), abs=0.1) and lo_cap[1] < cy < lo_cap[3]
    assert hi_cap[0] == hi_cap[2] == pytest.approx(x(0.4), abs=0.1)
    # Vertical bar: the candidate's min–max cost, through the point.
    bar, lo_cap, hi_cap = bars[("wide", "y")]
    assert bar == pytest.approx([cx, y(0.05), cx, y(0.3)], abs=0.1)
    assert lo_cap[1] == lo_cap[3] == pytest.approx(y(0.05), abs=0.1)
    text = " ".join(t.text or "" for t in svg.iter("text"))
    assert ERROR_BAR_LEGEND in text


def test_scatter_without_any_spread_has_no_bar_and_no_legend() -> None:
    solo = _task("solo", [0.3], [0.2])
    # Three runs, but an aggregate written before spreads existed: unknown, so no bar.
    old = _task("old", [0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
    old = old.model_copy(
        update={
            "arms": {k: a.model_copy(update={"cost_usd_spread": None}) for k, a in old.arms.items()}
        }
    )
    svg = ET.fromstring(scatter_svg([solo, old], "workflow", "cand"))
    assert _bars(svg) == {} and set(_circles(svg)) == {"solo", "old"}
    text = " ".join(t.text or "" for t in svg.iter("text"))
    assert ERROR_BAR_LEGEND not in text
