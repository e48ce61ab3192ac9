"""The one table, the ratios and targets, the JSON file and the latency chart."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import Row, percentile

CDF_POINTS = (0, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 100)


@dataclass
class Target:
    name: str
    goal: str
    value: float | None
    threshold: float
    higher_is_better: bool
    unit: str = ""

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        if self.higher_is_better:
            return self.value >= self.threshold
        return self.value <= self.threshold

    def line(self) -> str:
        status = {True: "MET ", False: "MISS", None: "n/a "}[self.met]
        value = "-" if self.value is None else f"{self.value:.2f}{self.unit}"
        return f"  [{status}] {self.name:<46} {value:>10}   goal {self.goal}"


class Results:
    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = list(rows)
        self._by_key = {r.key: r for r in self.rows}

    def get(self, key: str) -> Row | None:
        return self._by_key.get(key)

    def first(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.name == name), None)

    def rate(self, key: str) -> float | None:
        row = self.get(key)
        return row.rate if row else None

    def by_name(self, name: str) -> list[Row]:
        return [r for r in self.rows if r.name == name]


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def server_ms(row: Row | None) -> float | None:
    """Milliseconds of the measured server process's CPU per operation."""
    if row is None or row.server_cpu_s is None or row.ops == 0:
        return None
    return row.server_cpu_s * 1000 / row.ops


GHZ_UNS = ("ghz accept", "ghz accept+log", "ghz accept+webhook")


def webhook_floor(res: Results, setting: str) -> float | None:
    """Echo CPU per call plus POST-loop CPU per POST: what receiving a call and making
    one webhook POST cost with nothing else in between."""
    echo = server_ms(res.get(f"ghz echo {setting}"))
    post = server_ms(res.get(f"aiohttp POST {setting}"))
    return echo + post if echo is not None and post is not None else None


def ratios(res: Results) -> dict[str, str]:
    """Row key -> 'UNS ÷ baseline' text for the table's last column."""
    out: dict[str, dict[str, float | None]] = {}
    for name in GHZ_UNS:
        for row in res.by_name(name):
            c = row.setting
            out[row.key] = {"echo-cpu": _div(server_ms(row), server_ms(res.get(f"ghz echo {c}")))}
            if name == "ghz accept+webhook":
                out[row.key]["echo+post-cpu"] = _div(server_ms(row), webhook_floor(res, c))
    for row in res.by_name("accept"):
        c = row.setting
        out[row.key] = {
            "pgbench-tx": _div(row.rate, res.rate(f"pgbench accept-tx {c}")),
            "echo": _div(row.rate, res.rate(f"grpc echo {c}")),
            "echo-p50": _div(row.pct(50), _pct(res.get(f"grpc echo {c}"), 50)),
        }
        if c == "c=16":
            out[row.key]["defer"] = _div(row.rate, res.rate("procrastinate defer c=16"))
    deliver = res.get("deliver c=16")
    if deliver is not None:
        peer = res.first("procrastinate process")
        out[deliver.key] = {
            "accept": _div(deliver.rate, res.rate("accept c=16")),
            "process": _div(deliver.rate, peer.rate if peer else None),
        }
    for row in res.by_name("batch accept"):
        out[row.key] = {
            "pgbench-batch": _div(row.rate, res.rate(f"pgbench batch-insert {row.setting}")),
            "InsertMany": _div(row.rate, res.rate(f"river InsertMany {row.setting}")),
        }
    batch_drain, river_work = res.first("batch drain"), res.first("river work")
    if batch_drain is not None:
        out[batch_drain.key] = {
            "river-work": _div(batch_drain.rate, river_work.rate if river_work else None)
        }
    growth = res.by_name("growth")
    if len(growth) == 2:
        out[growth[1].key] = {"empty-p50": _div(growth[1].pct(50), growth[0].pct(50))}
    single = res.get("pgbench single-row c=16")
    tx = res.get("pgbench accept-tx c=16")
    if single and tx:
        out[tx.key] = {"single-row": _div(tx.rate, single.rate)}
    return {
        key: " ".join(f"{v:.2f}x {name}" for name, v in parts.items() if v is not None)
        for key, parts in out.items()
    }


def _pct(row: Row | None, q: float) -> float | None:
    return row.pct(q) if row else None


def targets(res: Results) -> list[Target]:
    accept16 = res.get("accept c=16")
    a16 = accept16.rate if accept16 else None
    deliver = res.get("deliver c=16")
    peer_process = res.first("procrastinate process")
    watch = res.by_name("watch")
    watch_100 = res.get("watch subs=100")
    watch_big = max(watch, key=lambda r: int(r.setting.split("=")[1]), default=None)
    drain = res.first("drain")
    growth = res.by_name("growth")
    out = [
        Target("accept c=16 / pgbench accept-tx c=16", ">= 0.50",
               _div(a16, res.rate("pgbench accept-tx c=16")), 0.5, True, "x"),
        Target("accept c=16 / grpc echo c=16", ">= 0.50",
               _div(a16, res.rate("grpc echo c=16")), 0.5, True, "x"),
        Target("accept c=16 / procrastinate defer c=16", ">= 1.00",
               _div(a16, res.rate("procrastinate defer c=16")), 1.0, True, "x"),
        Target("deliver c=16 / accept c=16", ">= 0.50",
               _div(deliver.rate if deliver else None, a16), 0.5, True, "x"),
        Target("deliver c=16 / procrastinate process", ">= 1.50",
               _div(deliver.rate if deliver else None,
                    peer_process.rate if peer_process else None), 1.5, True, "x"),
        Target("watch p99 at 100 subscribers", "<= 25 ms",
               watch_100.pct(99) if watch_100 else None, 25.0, False, " ms"),
    ]  # fmt: skip
    if watch_big is not None and watch_big is not watch_100:
        n = watch_big.setting.split("=")[1]
        goal = "<= 100 ms" + ("" if n == "1000" else " (goal is at 1000)")
        out.append(Target(f"watch p99 at {n} subscribers", goal, watch_big.pct(99), 100.0, False,
                          " ms"))  # fmt: skip
    if drain is not None:
        projected = drain.extra.get("projected_seconds_for_100k")
        out.append(Target("drain 100k: seconds (projected from rate)", "< 300 s", projected,
                          300.0, False, " s"))  # fmt: skip
    if len(growth) == 2:
        ratio = _div(growth[1].pct(50), growth[0].pct(50))
        out.append(Target("growth p50: history / empty", "<= 1.25", ratio, 1.25, False, "x"))
    pages = [r for r in res.by_name("console") if r.latencies_ms and r.extra.get("indexed", True)]
    if pages:
        slowest = max(pages, key=lambda r: r.pct(95) or 0.0)
        out.append(Target(f"console p95 server ms, slowest ({slowest.setting})"[:46], "< 100 ms",
                          slowest.pct(95), CONSOLE_TARGET_MS, False, " ms"))  # fmt: skip
    return out + ghz_targets(res) + batch_targets(res)


BATCH_ACCEPT_GOAL = 10_000.0  # accepted notifications/s on this 2-core machine
BATCH_DRAIN_GOAL = 5_000.0  # delivered/s from a backlog (log channel)


def batch_targets(res: Results) -> list[Target]:
    """Issue 33 item 5: the batch intake beside pgbench and River."""
    accept, drain = res.first("batch accept"), res.first("batch drain")
    if accept is None and drain is None:
        return []
    rate = accept.rate if accept else None
    setting = accept.setting if accept else ""
    return [
        Target("batch accept / pgbench batch-insert", ">= 0.50",
               _div(rate, res.rate(f"pgbench batch-insert {setting}")), 0.5, True, "x"),
        Target("batch accept / River InsertMany", ">= 0.50",
               _div(rate, res.rate(f"river InsertMany {setting}")), 0.5, True, "x"),
        Target("batch accept, notifications/s", ">= 10,000/s", rate, BATCH_ACCEPT_GOAL, True,
               "/s"),
        Target("batch drain (log channel), delivered/s", ">= 5,000/s",
               drain.rate if drain else None, BATCH_DRAIN_GOAL, True, "/s"),
    ]  # fmt: skip


def batch_bound(res: Results, cores: int | None) -> list[str]:
    """What two cores allow the batch rows: the server, PostgreSQL and the load
    generator share them, so a rate cannot pass cores ÷ (all their CPU per item)."""
    lines = []
    for name, goal in (("batch accept", BATCH_ACCEPT_GOAL), ("batch drain", BATCH_DRAIN_GOAL)):
        row = res.first(name)
        cpu = _cpu_per_op(row)
        if row is None or cpu is None or not cores or not row.rate:
            continue
        server = (row.server_cpu_s or 0.0) * 1000 / row.ops
        db = (row.db_cpu_s or 0.0) * 1000 / row.ops
        gen = (row.client_cpu_s or 0.0) * 1000 / row.ops
        ceiling = cores * 1000 / cpu
        lines.append(
            f"  {name}: {cpu:.3f} ms CPU per item (uns-server {server:.3f}, PostgreSQL "
            f"{db:.3f}, load generator {gen:.3f}); {cpu * row.rate / 1000:.2f} of {cores} "
            f"cores busy; at most {ceiling:,.0f}/s here ({ceiling / goal:.2f}x the goal; "
            f"the goal needs <= {cores * 1000 / goal:.3f} ms per item)"
        )
        if server:  # one uns-server process runs its Python on one core
            lines.append(
                f"    one uns-server process (one core for its Python): at most "
                f"{1000 / server:,.0f}/s ({1000 / server / goal:.2f}x the goal; the goal "
                f"needs <= {1000 / goal:.3f} ms of server CPU per item)"
            )
    return (
        ["CPU budget of the batch rows (all processes, per notification):", *lines] if lines else []
    )


CONSOLE_TARGET_MS = 100.0


def console_pages(res: Results) -> list[str]:
    """Issue 23's target, page by page: server time (the Server-Timing header)."""
    pages = res.by_name("console")
    if not pages:
        return []
    size = pages[0].extra.get("notifications")
    events = pages[0].extra.get("events")
    head = ("page", "requests", "median ms", "p95 ms", "client median ms", "target 100 ms")
    lines: list[tuple[str, ...]] = [head]
    for r in pages:
        p95 = r.pct(95)
        met = "-" if p95 is None else "met" if p95 < CONSOLE_TARGET_MS else "MISSED"
        if not r.extra.get("indexed", True):
            met = f"(no index: {'under' if met == 'met' else 'over'})"
        met += f" ({r.note})" if r.note else ""
        client = _fmt(r.extra.get("client_p50_ms"), 1)
        lines.append((r.setting, str(r.ops), _fmt(r.pct(50), 1), _fmt(p95, 1), client, met))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) if i in (0, 5) else c.rjust(w)
                      for i, (c, w) in enumerate(zip(line, widths, strict=True))).rstrip()
            for line in lines]  # fmt: skip
    out = [
        f"Console pages, server time (Server-Timing), {_count(size)} notifications and "
        f"{_count(events)} events:",
        *(f"  {line}" for line in text),
    ]
    out += [f"  {r.setting}: {r.note}" for r in res.by_name("console idle")]
    return out


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def ghz_targets(res: Results) -> list[Target]:
    """Issue 24's CPU goals, measured with ghz: server CPU per call over echo's."""
    if not res.by_name("ghz echo"):
        return []

    def ratio(name: str, c: str) -> float | None:
        return _div(server_ms(res.get(f"{name} {c}")), server_ms(res.get(f"ghz echo {c}")))

    return [
        Target("ghz c=16: srv CPU/accept, dispatch off / echo", "<= 1.50",
               ratio("ghz accept", "c=16"), 1.5, False, "x"),
        Target("ghz c=16: srv CPU/delivered (log) / echo", "<= 2.50",
               ratio("ghz accept+log", "c=16"), 2.5, False, "x"),
        Target("ghz c=1: srv CPU/delivered (log) / echo", "<= 4.00",
               ratio("ghz accept+log", "c=1"), 4.0, False, "x"),
    ]  # fmt: skip


def ghz_cpu(res: Results) -> list[str]:
    """Server CPU per call at each ghz level, and the ratios the goals are stated in."""
    settings = [r.setting for r in res.by_name("ghz echo")]
    if not settings:
        return []
    names = ("ghz echo", *GHZ_UNS, "aiohttp POST")
    header = ("setting", "echo", "accept", "accept+log", "accept+webhook", "aiohttp POST",
              "accept/echo", "log/echo", "webhook/(echo+POST)")  # fmt: skip
    lines: list[tuple[str, ...]] = [header]

    def times(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    for c in settings:
        cpu = {name: server_ms(res.get(f"{name} {c}")) for name in names}
        echo = cpu["ghz echo"]
        lines.append((
            c, *(_fmt(cpu[name], 3) for name in names),
            times(_div(cpu["ghz accept"], echo)),
            times(_div(cpu["ghz accept+log"], echo)),
            times(_div(cpu["ghz accept+webhook"], webhook_floor(res, c))),
        ))  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return [
        "Server CPU per call, ms (ghz drives SendNotification from its own process; the POST",
        "loop is a bare aiohttp client; accept+log/+webhook count until every call is delivered):",
        *(f"  {line}" for line in text),
    ]


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def table(res: Results) -> str:
    ratio_text = ratios(res)
    header = (
        "group", "workload", "setting", "ops", "rate/s", "p50 ms", "p95 ms", "p99 ms",
        "srv CPU s/1k", "pg CPU s/1k", "gen CPU s/1k", "UNS / baseline (x = ratio)", "note",
    )  # fmt: skip
    lines = [header]
    for r in res.rows:
        lines.append(
            (
                r.group,
                r.name,
                f"{r.setting} {r.variant}".strip(),
                str(r.ops),
                _fmt(r.rate),
                _fmt(r.pct(50), 2),
                _fmt(r.pct(95), 2),
                _fmt(r.pct(99), 2),
                _fmt(r.per_1k(r.server_cpu_s), 3),
                _fmt(r.per_1k(r.db_cpu_s), 3),
                _fmt(r.per_1k(r.client_cpu_s), 3),
                ratio_text.get(r.key, ""),
                r.note,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    numeric = {3, 4, 5, 6, 7, 8, 9, 10}
    out = []
    for n, line in enumerate(lines):
        cells = [
            cell.rjust(w) if i in numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _cpu_per_op(row: Row | None) -> float | None:
    """Milliseconds of CPU per operation over every measured process (server,
    PostgreSQL, load generator); None unless all that the row has were measured."""
    if row is None or row.ops == 0 or row.server_cpu_s is None or row.client_cpu_s is None:
        return None
    return (row.server_cpu_s + (row.db_cpu_s or 0.0) + row.client_cpu_s) * 1000 / row.ops


def cpu_budget(res: Results, cores: int | None) -> list[str]:
    """Whether accept ÷ echo can reach its goal here at all: the server, PostgreSQL
    and the load generator share the cores, so accepts cannot outrun
    cores ÷ (all their CPU per accept), however the work is spread."""
    accept, echo = res.get("accept c=16"), res.get("grpc echo c=16")
    uns, echo_cpu = _cpu_per_op(accept), _cpu_per_op(echo)
    if accept is None or echo is None or uns is None or echo_cpu is None or not cores:
        return []
    if not accept.rate or not echo.rate:
        return []
    ceiling = cores * 1000 / uns
    pgbench = _div(ceiling, res.rate("pgbench accept-tx c=16"))
    pgbench_text = "-" if pgbench is None else f"{pgbench:.2f}x"
    return [
        "CPU budget at 16 producers (server + PostgreSQL + load generator):",
        f"  accept {uns:.2f} ms of CPU per call, grpc echo {echo_cpu:.2f} ms; "
        f"accept kept {uns * accept.rate / 1000:.2f} of {cores} cores busy",
        f"  at most {ceiling:,.0f} accepts/s on {cores} cores: "
        f"{ceiling / echo.rate:.2f}x echo, {pgbench_text} pgbench accept-tx",
    ]


def watch_bound(res: Results) -> list[str]:
    """The floor under the largest watch level's latency. One server process writes an
    event's copies one after another, and one load-generator process reads them one
    after another, so the last copy arrives at least subscribers x (the slower side's
    CPU per copy) after the commit, however idle the rest of the machine is."""
    levels = [r for r in res.by_name("watch") if r.ops and r.server_cpu_s is not None]
    if not levels:
        return []
    row = max(levels, key=lambda r: int(r.setting.removeprefix("subs=")))
    subscribers = int(row.setting.removeprefix("subs="))
    server = row.server_cpu_s * 1000 / row.ops if row.server_cpu_s is not None else 0.0
    client = (row.client_cpu_s or 0.0) * 1000 / row.ops
    return [
        f"Fan-out floor at {subscribers:,} watch subscribers (one process on each side):",
        f"  server {server:.3f} ms of CPU per copy, load generator {client:.3f} ms; "
        f"the last copy of an event arrives >= {subscribers * max(server, client):.0f} ms "
        "after its commit",
    ]


def processes_table(res: Results) -> list[str]:
    """Accept throughput by ``--processes N`` beside N = 1, with the load average each
    level started and ended at (bench/workloads/processes.py)."""
    levels = res.by_name("processes")
    if not levels:
        return []
    one = next((r.rate for r in levels if r.extra.get("processes") == 1), None)
    cores = levels[0].extra.get("cpu_count")
    lines = [
        f"Throughput by --processes (accept, 16 producers on their own connections, {cores} cores):"
    ]
    for r in levels:
        n = r.extra.get("processes")
        times = _div(r.rate, one)
        lines.append(
            f"  --processes {n}: {_fmt(r.rate, 0)}/s"
            + ("" if times is None else f" ({times:.2f}x one process)")
            + f", server CPU {_fmt(server_ms(r), 2)} ms per accept, load average "
            f"{r.extra.get('load_average_start', 0.0):.1f} -> "
            f"{r.extra.get('load_average_end', 0.0):.1f}"
        )
    return lines


def paired(res: Results) -> bool:
    return any(r.variant for r in res.rows)


def merge(rows: Sequence[Row]) -> Row:
    """One tree's windows of one row at one level as a single row: latencies pooled,
    ops, seconds and the other CPU columns summed, and the server CPU set so that its
    CPU per call is the median of the windows' (a drifting load moves the mean)."""
    first = rows[0]
    per_call = sorted(v for v in (server_ms(r) for r in rows) if v is not None)
    ops = sum(r.ops for r in rows)

    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v or 0.0 for v in values)

    return Row(
        group=first.group,
        name=first.name,
        setting=first.setting,
        ops=ops,
        seconds=sum(r.seconds for r in rows),
        latencies_ms=[x for r in rows for x in r.latencies_ms],
        server_cpu_s=statistics.median(per_call) * ops / 1000 if per_call else None,
        db_cpu_s=total([r.db_cpu_s for r in rows]),
        client_cpu_s=total([r.client_cpu_s for r in rows]),
        note=f"median of {len(rows)} windows",
    )


def for_tree(res: Results, tree: str) -> Results:
    """A before/after run as if only ``tree`` had run: the rows measured once, plus that
    tree's windows merged per row and level (``merge``), keyed as an unpaired run."""
    windows: dict[str, list[Row]] = {}
    for row in res.rows:
        if row.tree == tree:
            windows.setdefault(f"{row.name} {row.setting}", []).append(row)
    merged = [merge(rows) for rows in windows.values()]
    return Results([r for r in res.rows if not r.variant] + merged)


def render(res: Results, cores: int | None = None) -> str:
    """The table of every row (each window of a pair on a line of its own), the targets
    and the bounds. In a run with pairs they are the "after" tree's (the median of its
    windows), and bench/pairs.py prints the ghz block of each tree."""
    measured = for_tree(res, "after") if paired(res) else res
    heading = "Targets (issue 7; ghz: issue 24; console: issue 23; batch: issue 33)"
    if measured is not res:
        heading += "; paired rows: the after tree, median of its windows"
    lines = [table(res), "", f"{heading}:"]
    lines += [t.line() for t in targets(measured)]
    ghz = [] if measured is not res else ghz_cpu(res)  # pairs print theirs per tree
    bounds = (
        cpu_budget(measured, cores),
        watch_bound(measured),
        console_pages(measured),
        processes_table(measured),
        batch_bound(measured, cores),
    )
    for bound in (ghz, *bounds):
        if bound:
            lines += ["", *bound]
    return "\n".join(lines)


def to_json(res: Results, meta: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for r in res.rows:
        data = r.to_json()
        ordered = sorted(r.latencies_ms)
        data["latency_cdf_ms"] = {str(q): percentile(ordered, q) for q in CDF_POINTS}
        rows.append(data)
    return {
        "meta": meta,
        "rows": rows,
        "ratios": ratios(res),
        "targets": [
            {"name": t.name, "goal": t.goal, "value": t.value, "met": t.met} for t in targets(res)
        ],
    }


def write_json(
    path: Path, res: Results, meta: dict[str, Any], more: dict[str, Any] | None = None
) -> None:
    path.write_text(json.dumps(to_json(res, meta) | (more or {}), indent=2, default=str))


CHART_PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("accept vs baselines", ("accept", "grpc echo", "pgbench accept-tx", "procrastinate defer")),
    ("deliver (accept -> webhook receiver)", ("deliver",)),
    ("watch (event -> subscriber)", ("watch",)),
    ("growth (accept, 1 producer)", ("growth",)),
    ("ghz (accept latency)", ("ghz echo", *GHZ_UNS)),
)


def write_chart(path: Path, res: Results, title: str) -> bool:
    """Latency CDFs, one panel per workload family; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(3, 2, figsize=(13, 13))
    styles = ("-", "--", ":", "-.")
    for extra in axes.flat[len(CHART_PANELS) :]:
        extra.set_visible(False)
    for ax, (panel, names) in zip(axes.flat, CHART_PANELS, strict=False):
        colors: dict[str, str] = {}  # one colour per setting, one line style per workload
        for row in res.rows:
            if row.name not in names or not row.latencies_ms:
                continue
            xs = sorted(row.latencies_ms)
            ys = [100 * (i + 1) / len(xs) for i in range(len(xs))]
            color = colors.setdefault(row.setting, f"C{len(colors)}")
            style = styles[names.index(row.name) % len(styles)]
            ax.plot(xs, ys, style, color=color, label=f"{row.key} (p50 {row.pct(50):.1f} ms)")
        ax.set_title(panel)
        ax.set_xscale("log")
        ax.set_xlabel("latency, ms (log)")
        ax.set_ylabel("percentile")
        ax.set_ylim(0, 100)
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
