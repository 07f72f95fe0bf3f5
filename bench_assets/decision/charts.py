"""The report's charts, as inline SVG (no external assets, no JavaScript).

Per task, resolve rate and median cost by arm (:func:`bars`, grouped bars), and a
candidate-vs-incumbent scatter of median cost per task (:func:`scatter_svg`): points below the
diagonal are tasks the candidate made cheaper; hollow points are tasks where it resolved less.
The scatter's error bars are the min–max cost over each arm's valid runs (horizontal: incumbent,
vertical: candidate); a point with one valid run or an unknown spread has no bar. Drawn apart from
:mod:`bench_assets.decision.report`, which places them in its HTML page.
"""

import html
from collections.abc import Sequence

from bench_assets.decision.aggregate import ArmAggregate, TaskAggregate
from bench_assets.decision.spread import ERROR_BAR_LEGEND, bar_spread, error_bar_svg

PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#B279A2", "#E45756", "#72B7B2"]


def resolve_rate(a: ArmAggregate) -> float | None:
    return a.resolved / a.valid_runs if a.valid_runs else None


def bars(title: str, aggs: Sequence[TaskAggregate], arms: list[str], value: str, unit: str) -> str:
    width, height, left, bottom, top = 720, 260, 50, 60, 30
    tasks = [a.task for a in aggs]
    values = []
    for agg in aggs:
        row = []
        for arm in arms:
            a = agg.arms.get(arm)
            v = None if a is None else (resolve_rate(a) if value == "rate" else a.median_cost_usd)
            row.append(v)
        values.append(row)
    vmax = max([v for row in values for v in row if v is not None] + [1e-9])
    if value == "rate":
        vmax = 1.0
    plot_w, plot_h = width - left - 10, height - bottom - top
    group_w = plot_w / max(len(tasks), 1)
    bar_w = group_w * 0.8 / max(len(arms), 1)
    out = [
        f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">',
        f'<text x="{left}" y="18" class="t">{html.escape(title)}</text>',
    ]
    for i in range(5):
        y = top + plot_h - plot_h * i / 4
        out.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" class="g"/>')
        out.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" class="a" text-anchor="end">'
            f"{vmax * i / 4:.2g}{unit}</text>"
        )
    for ti, task in enumerate(tasks):
        x0 = left + ti * group_w + group_w * 0.1
        for ai, arm in enumerate(arms):
            v = values[ti][ai]
            x = x0 + ai * bar_w
            if v is None:
                out.append(
                    f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h - 4}" class="a" '
                    'text-anchor="middle">n/a</text>'
                )
                continue
            h = plot_h * v / vmax
            out.append(
                f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w - 2:.1f}" '
                f'height="{h:.1f}" fill="{PALETTE[ai % len(PALETTE)]}">'
                f"<title>{html.escape(task)} · {html.escape(arm)}: {v:.3g}{unit}</title></rect>"
            )
        label = html.escape(task if len(task) <= 18 else task[:17] + "…")
        out.append(
            f'<text x="{x0 + group_w * 0.4:.1f}" y="{height - bottom + 16}" class="a" '
            f'text-anchor="middle">{label}</text>'
        )
    for ai, arm in enumerate(arms):
        lx = left + ai * 170
        out.append(
            f'<rect x="{lx}" y="{height - 22}" width="12" height="12" '
            f'fill="{PALETTE[ai % len(PALETTE)]}"/>'
        )
        out.append(f'<text x="{lx + 16}" y="{height - 12}" class="a">{html.escape(arm)}</text>')
    out.append("</svg>")
    return "\n".join(out)


SCATTER_SIZE, SCATTER_PAD = 360, 50
"""The scatter's square viewBox side and its plot margin, in SVG units."""


def scatter_svg(aggs: Sequence[TaskAggregate], incumbent: str, candidate: str) -> str:
    """Candidate vs incumbent median cost per task, with min–max error bars (see the docstring)."""
    size, pad = SCATTER_SIZE, SCATTER_PAD
    points = []
    for agg in aggs:
        inc, cand = agg.arms.get(incumbent), agg.arms.get(candidate)
        if inc is None or cand is None:
            continue
        if inc.median_cost_usd is None or cand.median_cost_usd is None:
            continue
        worse = (resolve_rate(cand) or 0.0) < (resolve_rate(inc) or 0.0)
        spreads = (bar_spread(inc.cost_usd_spread), bar_spread(cand.cost_usd_spread))
        points.append((agg.task, inc.median_cost_usd, cand.median_cost_usd, worse, spreads))
    tops = [v for p in points for v in (p[1], p[2])]
    tops += [s.max for p in points for s in p[4] if s is not None]
    vmax = max(tops + [1e-9]) * 1.1
    scale = (size - 2 * pad) / vmax
    out = [
        f'<svg viewBox="0 0 {size} {size}" role="img" aria-label="candidate vs incumbent" '
        'style="max-width:420px">',
        f'<text x="{pad}" y="18" class="t">median cost $ per task</text>',
        f'<text x="{size / 2}" y="{size - 12}" class="a" text-anchor="middle">'
        f"{html.escape(incumbent)} (incumbent)</text>",
        f'<text x="14" y="{size / 2}" class="a" text-anchor="middle" '
        f'transform="rotate(-90 14 {size / 2})">{html.escape(candidate)} (candidate)</text>',
        f'<line x1="{pad}" y1="{size - pad}" x2="{size - pad}" y2="{pad}" class="d"/>',
        f'<line x1="{pad}" y1="{size - pad}" x2="{size - pad}" y2="{size - pad}" class="g"/>',
        f'<line x1="{pad}" y1="{size - pad}" x2="{pad}" y2="{pad}" class="g"/>',
        f'<text x="{size - pad}" y="{size - pad + 16}" class="a" text-anchor="end">'
        f"{vmax:.2g}</text>",
        f'<text x="{pad - 6}" y="{pad + 4}" class="a" text-anchor="end">{vmax:.2g}</text>',
    ]
    if any(s is not None for p in points for s in p[4]):
        out.append(f'<text x="{pad}" y="34" class="a">{html.escape(ERROR_BAR_LEGEND)}</text>')
    for task, x, y, _, (inc_s, cand_s) in points:
        cx, cy = pad + x * scale, size - pad - y * scale
        if inc_s is not None:
            ends = (pad + inc_s.min * scale, pad + inc_s.max * scale)
            out.append(error_bar_svg(task, incumbent, "x", inc_s, ends, cy))
        if cand_s is not None:
            ends = (size - pad - cand_s.min * scale, size - pad - cand_s.max * scale)
            out.append(error_bar_svg(task, candidate, "y", cand_s, ends, cx))
    for task, x, y, worse, _ in points:
        cx, cy = pad + x * scale, size - pad - y * scale
        fill = "none" if worse else PALETTE[1]
        out.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="6" fill="{fill}" stroke="{PALETTE[1]}" '
            f'stroke-width="2"><title>{html.escape(task)}: {x:.4f} → {y:.4f}</title></circle>'
        )
        # Every point is labelled, so tasks are identifiable without hovering.
        anchor = "end" if cx > size / 2 else "start"
        dx = -9 if anchor == "end" else 9
        out.append(
            f'<text x="{cx + dx:.1f}" y="{cy + 4:.1f}" class="a" text-anchor="{anchor}" '
            'stroke="#fff" stroke-width="3" paint-order="stroke">'
            f"{html.escape(task)}</text>"
        )
    if not points:
        out.append(
            f'<text x="{size / 2}" y="{size / 2}" class="a" text-anchor="middle">'
            "no task with measured cost on both arms</text>"
        )
    out.append("</svg>")
    return "\n".join(out)
