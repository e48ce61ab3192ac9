"""Measurements: one ``Row`` per table line, percentiles, and the CPU it cost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values (``q`` in 0..100)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class Row:
    """One line of the table: a workload (or baseline) at one setting."""

    group: str  # "uns", "baseline" or "peer"
    name: str  # e.g. "accept", "pgbench accept-tx"
    setting: str  # e.g. "c=16", "subs=100"
    ops: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    server_cpu_s: float | None = None  # CPU seconds of the measured server process
    db_cpu_s: float | None = None  # CPU seconds of every PostgreSQL process
    client_cpu_s: float | None = None  # CPU seconds of the load generator
    rate_override: float | None = None  # when the rate is not ops/seconds (pgbench tps)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # A window of a before/after pair (python -m bench --before): "<tree> <round>",
    # e.g. "before 2"; empty for a row measured once.
    variant: str = ""

    @property
    def key(self) -> str:
        suffix = f" [{self.variant}]" if self.variant else ""
        return f"{self.name} {self.setting}".strip() + suffix

    @property
    def tree(self) -> str:
        """A pair's window: its tree ("before" or "after"); a row measured once: empty."""
        return self.variant.split(" ")[0]

    @property
    def rate(self) -> float | None:
        if self.rate_override is not None:
            return self.rate_override
        return self.ops / self.seconds if self.seconds > 0 else None

    def pct(self, q: float) -> float | None:
        return percentile(sorted(self.latencies_ms), q)

    def per_1k(self, cpu: float | None) -> float | None:
        return None if cpu is None or self.ops == 0 else cpu * 1000 / self.ops

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("latencies_ms")
        data.update(
            key=self.key,
            rate=self.rate,
            p50_ms=self.pct(50),
            p95_ms=self.pct(95),
            p99_ms=self.pct(99),
            latency_samples=len(self.latencies_ms),
            server_cpu_s_per_1k=self.per_1k(self.server_cpu_s),
            db_cpu_s_per_1k=self.per_1k(self.db_cpu_s),
            client_cpu_s_per_1k=self.per_1k(self.client_cpu_s),
        )
        return data
