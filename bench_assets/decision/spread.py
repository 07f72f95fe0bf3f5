"""The spread of a per-run measure over an arm's counted runs, for the report's error bars.

The rules match the medians of :mod:`bench_assets.decision.aggregate`: the spread is taken over the
valid (counted) runs only, and it is unknown (``None``) when there is no valid run or when any valid
run left the measure unmeasured — never computed from fewer runs, never 0. One valid run gives a
spread with ``min == max`` and ``runs == 1``; the report draws no bar for it
(:func:`bar_spread`). :func:`error_bar_svg` is the SVG of one bar, kept here so the report module
stays small. Plain Python; no Dagster.
"""

import html
import math
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Spread(BaseModel):
    """Minimum and maximum of one measure over an arm's valid runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: float
    max: float
    runs: int = Field(ge=1)
    """How many valid runs the spread is over (all of them measured the value)."""

    @model_validator(mode="after")
    def _ordered(self) -> "Spread":
        if self.min > self.max:
            raise ValueError(f"spread min {self.min} is above max {self.max}")
        return self


def min_max(values: Iterable[float | int | None]) -> Spread | None:
    """The min–max spread of one measure over the valid runs of an arm.

    Args:
        values: The measure of every valid run (``None`` or NaN: unmeasured).

    Returns:
        The spread, or ``None`` when there is no value or any value is unmeasured.
    """
    seen: list[float] = []
    for v in values:
        if v is None or math.isnan(float(v)):
            return None
        seen.append(float(v))
    if not seen:
        return None
    return Spread(min=min(seen), max=max(seen), runs=len(seen))


ERROR_BAR_LEGEND = "bars: min–max cost over valid runs"
"""The caption the report's scatter shows when it draws any bar (the page caption below the
chart says which bar is which arm)."""


def bar_spread(spread: Spread | None) -> Spread | None:
    """The spread to draw as an error bar: known and over at least two valid runs, else None."""
    return spread if spread is not None and spread.runs >= 2 else None


def error_bar_svg(
    task: str, arm: str, axis: str, spread: Spread, ends: tuple[float, float], at: float
) -> str:
    """One error bar: a line with a cap at each end, grouped with a hover title.

    Args:
        task: The task (``data-task`` and the title).
        arm: The arm whose spread this is (``data-arm`` and the title).
        axis: ``"x"`` for a horizontal bar, ``"y"`` for a vertical one (``data-axis``).
        spread: The spread, for the title.
        ends: The SVG coordinates of the bar's ends along ``axis`` (min, max).
        at: The SVG coordinate of the bar across ``axis`` (the point's centre).

    Returns:
        A ``<g class="eb">`` element holding three ``<line>`` elements, the bar first.
    """
    lo, hi = ends
    cap = 4
    if axis == "x":
        lines = [(lo, at, hi, at), (lo, at - cap, lo, at + cap), (hi, at - cap, hi, at + cap)]
    else:
        lines = [(at, lo, at, hi), (at - cap, lo, at + cap, lo), (at - cap, hi, at + cap, hi)]
    body = "".join(
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"/>'
        for x1, y1, x2, y2 in lines
    )
    return (
        f'<g class="eb" data-task="{html.escape(task)}" data-arm="{html.escape(arm)}" '
        f'data-axis="{axis}" stroke="#777" stroke-width="1.5">{body}'
        f"<title>{html.escape(task)} · {html.escape(arm)}: cost {spread.min:.4f}–"
        f"{spread.max:.4f} over {spread.runs} valid runs</title></g>"
    )
