"""Server-rendered SVG charts (no script): per-minute bars over the last hour.

Only presentation attributes, never ``style``: the console's CSP forbids inline styles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD = 600, 140, 24


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[float]  # one per bucket, oldest first
    unit: str


def minute_buckets(
    points: Sequence[tuple[datetime, float]], now: datetime, minutes: int = 60
) -> list[list[float]]:
    """``points`` (time, value) into ``minutes`` one-minute buckets ending at ``now``."""
    start = now - timedelta(minutes=minutes)
    buckets: list[list[float]] = [[] for _ in range(minutes)]
    for at, value in points:
        if start <= at <= now:
            index = min(int((at - start).total_seconds() // 60), minutes - 1)
            buckets[index].append(value)
    return buckets


def bar_chart(series: Series, title: str) -> Markup:
    values = list(series.values)
    top = max(values, default=0.0) or 1.0
    n = max(len(values), 1)
    step = (WIDTH - 2 * PAD) / n
    bars = []
    for i, v in enumerate(values):
        h = (HEIGHT - 2 * PAD) * (v / top)
        x = PAD + i * step
        y = HEIGHT - PAD - h
        tip = escape(f"{60 - i} min ago: {v:g} {series.unit}")
        bars.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(step - 1, 1):.1f}" '
            f'height="{h:.1f}" fill="#1a73e8"><title>{tip}</title></rect>'
        )
    label = escape(title)
    axis = (
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'stroke="#888"/>'
        f'<text x="{PAD}" y="{PAD - 8}" font-size="12" fill="#333">{escape(series.label)}'
        f" (max {top:g} {escape(series.unit)})</text>"
        f'<text x="{PAD}" y="{HEIGHT - 6}" font-size="11" fill="#666">-60 min</text>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 6}" font-size="11" fill="#666" '
        'text-anchor="end">now</text>'
    )
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{label}</title>{axis}{"".join(bars)}</svg>'
    )
