"""Before/after pairs (``python -m bench --before REV``), side by side.

The accept, deliver and ghz workloads measure each UNS row from both trees in the same
run, several windows of each, interleaved (bench/workloads/common.py). Here each row
and level gets: the server CPU per call of each tree (median of its windows, and their
spread), after ÷ before (of the medians, and per round, since the two windows of a
round saw the most similar load), and p50 latency; then issue 24's ratios (÷ echo)
per tree and, with ``--phases``, the CPU by phase of both trees. All of it is
Markdown, to be pasted into docs/PERFORMANCE.md as it is.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench import report
from bench.phases import calls_per_intake_transaction
from bench.stats import Row
from uns_server.observability.phases import PHASES

TREES = ("before", "after")


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


@dataclass
class Side:
    """One tree's windows of one row at one level, in the order they were measured."""

    windows: list[Row]

    def per_window(self, measure: Callable[[Row], float | None]) -> list[float | None]:
        return [measure(r) for r in self.windows]

    @property
    def cpu(self) -> list[float | None]:
        """ms of server CPU per call, per window."""
        return self.per_window(report.server_ms)

    @property
    def cpu_median(self) -> float | None:
        return _median(self.cpu)

    @property
    def p50(self) -> float | None:
        """Median of the windows' p50 latencies."""
        return _median(self.per_window(lambda r: r.pct(50)))

    def spread(self) -> str:
        values = [v for v in self.cpu if v is not None]
        if len(values) < 2:
            return ""
        return f" ({min(values):.3f}-{max(values):.3f})"

    @property
    def revision(self) -> str:
        return str(self.windows[0].extra.get("tree_revision", "?")) if self.windows else "?"


@dataclass
class Pair:
    name: str
    setting: str
    before: Side
    after: Side

    @property
    def ratio(self) -> float | None:
        """after ÷ before, of the medians."""
        return _ratio(self.after.cpu_median, self.before.cpu_median)

    @property
    def round_ratios(self) -> list[float | None]:
        """after ÷ before within each round."""
        return [_ratio(a, b) for a, b in zip(self.after.cpu, self.before.cpu, strict=False)]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def pairs(res: report.Results) -> list[Pair]:
    """Every (row, level) measured from both trees, in the order of the rows."""
    sides: dict[tuple[str, str], dict[str, list[Row]]] = {}
    for row in res.rows:
        if row.tree in TREES:
            by_tree = sides.setdefault((row.name, row.setting), {t: [] for t in TREES})
            by_tree[row.tree].append(row)
    return [
        Pair(name, setting, Side(by_tree["before"]), Side(by_tree["after"]))
        for (name, setting), by_tree in sides.items()
    ]


def _ms(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """A Markdown table, the first ``left`` columns left-aligned, the rest right."""
    align = ["---" if i < left else "---:" for i in range(len(header))]
    return [f"| {' | '.join(line)} |" for line in (header, align, *rows)]


def comparison(found: list[Pair]) -> list[str]:
    rounds = max((len(p.after.windows) for p in found), default=0)
    first = found[0]
    lines = [
        f"Before/after pairs: before = {first.before.revision}, after = "
        f"{first.after.revision}; {rounds} round(s) per row and level, the trees' windows "
        "interleaved (before, after, then after, before, ...). Server CPU per call in ms: "
        "median of the windows (min-max); after ÷ before of the medians, and per round.",
        "",
    ]
    header = ("row", "level", "before ms/call", "after ms/call", "after ÷ before",
              "per round", "p50 ms before", "p50 ms after", "p50 after ÷ before")  # fmt: skip
    body = [
        (
            p.name,
            p.setting,
            _ms(p.before.cpu_median) + p.before.spread(),
            _ms(p.after.cpu_median) + p.after.spread(),
            _x(p.ratio),
            ", ".join(_x(r) for r in p.round_ratios),
            _ms(p.before.p50, 2),
            _ms(p.after.p50, 2),
            _x(_ratio(p.after.p50, p.before.p50)),
        )
        for p in found
    ]
    return lines + _markdown(header, body, left=2)


def echo_ratios(res: report.Results) -> list[str]:
    """Issue 24's ratios per tree: server CPU per call ÷ the shared echo baseline's."""
    settings = [r.setting for r in res.by_name("ghz echo")]
    if not settings:
        return []
    views = {tree: report.for_tree(res, tree) for tree in TREES}

    def cpu(view: report.Results, name: str, c: str) -> float | None:
        return report.server_ms(view.get(f"{name} {c}"))

    header = ["level", "echo ms/call"]
    for what in ("accept ÷ echo", "accept+log ÷ echo", "accept+webhook ÷ (echo + POST)"):
        header += [f"{what}, before", "after"]
    body = []
    for c in settings:
        line = [c, _ms(cpu(res, "ghz echo", c))]
        for name in report.GHZ_UNS:
            for tree in TREES:
                view = views[tree]
                floor = (
                    report.webhook_floor(view, c)
                    if name == "ghz accept+webhook"
                    else cpu(view, "ghz echo", c)
                )
                line.append(_x(_ratio(cpu(view, name, c), floor)))
        body.append(line)
    return [
        "Issue 24's ratios, each tree against the same baselines (server CPU per call; "
        "goals at c=16: accept ≤ 1.5x, accept+log ≤ 2.5x; at c=1: accept+log ≤ 4x):",
        "",
        *_markdown(header, body),
    ]


def phase_tables(found: list[Pair]) -> list[str]:
    """``--phases``: per row, ms of server CPU per call by phase, before and after at
    each level (median of the windows)."""
    out: list[str] = []
    for name in dict.fromkeys(p.name for p in found):
        rows = [p for p in found if p.name == name and _has_phases(p)]
        if not rows:
            continue
        seen = {k for p in rows for side in (p.before, p.after) for r in side.windows
                for k in r.extra.get("phase_cpu_s", {})}  # fmt: skip
        names = [*PHASES, *sorted(seen - set(PHASES))]
        header = ["phase"] + [f"{p.setting} {tree}" for p in rows for tree in TREES]

        def cells(measure: Callable[[Row], float | None], rows: list[Pair] = rows) -> list[str]:
            return [_ms(_median(side.per_window(measure)))
                    for p in rows for side in (p.before, p.after)]  # fmt: skip

        body = [[phase, *cells(_phase_ms(phase))] for phase in names]
        body.append(["sum of phases", *cells(_phase_ms(None))])
        body.append(["server CPU (/proc)", *cells(report.server_ms)])
        body.append(["calls per intake transaction",
                     *[_ms(_median(side.per_window(calls_per_intake_transaction)), 1)
                       for p in rows for side in (p.before, p.after)]])  # fmt: skip
        out += ["", f"{name}: ms of server CPU per call by phase (--phases), median of windows:"]
        out += ["", *_markdown(header, body)]
    return out


def _has_phases(p: Pair) -> bool:
    return any(r.extra.get("phase_cpu_s") for r in (*p.before.windows, *p.after.windows))


def _phase_ms(phase: str | None) -> Callable[[Row], float | None]:
    """ms per call of one phase (None: all of them) in a window."""

    def measure(row: Row) -> float | None:
        cpu: dict[str, float] | None = row.extra.get("phase_cpu_s")
        if not cpu or not row.ops:
            return None
        spent = sum(cpu.values()) if phase is None else cpu.get(phase, 0.0)
        return spent * 1000 / row.ops

    return measure


def render(res: report.Results) -> list[str]:
    """The comparison, the ratio table per tree and (--phases) the phase tables."""
    found = pairs(res)
    if not found:
        return []
    ghz = any(p.name in report.GHZ_UNS for p in found)
    ratios = ["", *echo_ratios(res)] if ghz else []
    return [*comparison(found), *ratios, *phase_tables(found)]


def to_json(res: report.Results) -> list[dict[str, Any]]:
    return [
        {
            "name": p.name,
            "setting": p.setting,
            **{
                tree: {
                    "revision": side.revision,
                    "server_cpu_ms_per_call": side.cpu,
                    "server_cpu_ms_per_call_median": side.cpu_median,
                    "p50_ms_median": side.p50,
                    "variants": [r.variant for r in side.windows],
                }
                for tree, side in (("before", p.before), ("after", p.after))
            },
            "after_over_before": p.ratio,
            "after_over_before_per_round": p.round_ratios,
        }
        for p in pairs(res)
    ]
