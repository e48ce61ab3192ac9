"""``--phases``: where the server's CPU goes, per phase, in the ghz workload.

The ghz UNS servers then run with ``UNS_PHASE_CPU=1`` (uns_server.observability.phases)
and a metrics endpoint; ``uns_phase_cpu_seconds_total{phase}`` is read just before and
just after each measured window (outside it, so the scrape's own CPU is not in the
window), and the difference per call is printed as one table. The accounting costs a
few per cent of the server's CPU: quote the ratios from a run without ``--phases``.
"""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.cpu import CpuMeter, Window
from bench.stats import Row
from uns_server.observability.phases import PHASES

METRIC = "uns_phase_cpu_seconds_total"
GROUP_SUM, GROUP_COUNT = "uns_intake_group_size_sum", "uns_intake_group_size_count"
SCRAPE_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Sample:
    """Counters read from the metrics endpoint (totals, or a window's differences)."""

    phase_cpu_s: dict[str, float]
    intake_calls: float = 0.0
    intake_transactions: float = 0.0

    def __sub__(self, before: Sample) -> Sample:
        return Sample(
            {k: v - before.phase_cpu_s.get(k, 0.0) for k, v in self.phase_cpu_s.items()},
            self.intake_calls - before.intake_calls,
            self.intake_transactions - before.intake_transactions,
        )

    def extra(self) -> dict[str, Any]:
        """What a row keeps of it (``Row.extra``)."""
        if not self.intake_transactions:
            return {"phase_cpu_s": self.phase_cpu_s}
        return {
            "phase_cpu_s": self.phase_cpu_s,
            "intake_calls": self.intake_calls,
            "intake_transactions": self.intake_transactions,
        }


def _scrape(url: str) -> Sample:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_SECONDS) as reply:
        text = reply.read().decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    return Sample(
        {s.labels["phase"]: float(s.value) for s in samples if s.name == METRIC},
        sum(float(s.value) for s in samples if s.name == GROUP_SUM),
        sum(float(s.value) for s in samples if s.name == GROUP_COUNT),
    )


def calls_per_intake_transaction(row: Row) -> float | None:
    """Group commit at work in a window: SendNotification calls per intake transaction."""
    txs = row.extra.get("intake_transactions")
    return row.extra["intake_calls"] / txs if txs else None


@dataclass
class PhaseMeter:
    """A CpuMeter, plus the server's per-phase CPU over the same window when
    ``metrics_url`` is set and answers (a ``--before`` tree may predate the endpoint
    or the accounting: its windows then have no phases)."""

    meter: CpuMeter
    metrics_url: str | None = None
    _before: Sample | None = field(default=None)

    async def _read(self) -> Sample | None:
        if not self.metrics_url:
            return None
        try:
            return await asyncio.to_thread(_scrape, self.metrics_url)
        except OSError:
            return None

    async def start(self) -> None:
        self._before = await self._read()
        self.meter.start()

    async def stop(self) -> tuple[Window, Sample | None]:
        window = self.meter.stop()
        before = self._before
        after = await self._read() if before is not None else None
        if before is None or after is None or not after.phase_cpu_s:
            return window, None
        return window, after - before


def table(rows: list[Row]) -> list[str]:
    """ms of server CPU per call by phase, one column per row that has them."""
    measured = [r for r in rows if r.extra.get("phase_cpu_s") and r.ops]
    if not measured:
        return []
    header = ("phase", *(f"{r.name.removeprefix('ghz ')} {r.setting}" for r in measured))
    lines: list[tuple[str, ...]] = [header]
    for phase in PHASES:
        lines.append(
            (phase, *(f"{r.extra['phase_cpu_s'].get(phase, 0.0) * 1000 / r.ops:.3f}"
                      for r in measured))
        )  # fmt: skip
    lines.append(
        ("sum of phases", *(f"{sum(r.extra['phase_cpu_s'].values()) * 1000 / r.ops:.3f}"
                            for r in measured))
    )  # fmt: skip
    lines.append(
        ("server CPU (/proc)",
         *("-" if r.server_cpu_s is None else f"{r.server_cpu_s * 1000 / r.ops:.3f}"
           for r in measured))
    )  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    ]
    return [
        "Server CPU per call by phase, ms (--phases: UNS_PHASE_CPU=1, which costs a few per cent;",
        "each task step is charged to its phase; see uns_server/observability/phases.py):",
        *(f"  {line}" for line in out),
    ]
