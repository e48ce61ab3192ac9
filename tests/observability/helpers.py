"""Scrape the real Prometheus endpoint and read samples by name and labels."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import RunningServer


@dataclass(frozen=True)
class Scrape:
    text: str
    samples: tuple[tuple[str, dict[str, str], float], ...]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels``."""
        return sum(
            v
            for n, sample_labels, v in self.samples
            if n == name and all(sample_labels.get(k) == want for k, want in labels.items())
        )

    def has(self, name: str) -> bool:
        return any(n == name for n, _, _ in self.samples)


async def scrape(server: RunningServer) -> Scrape:
    port = server.app.telemetry.metrics_port
    assert port, "start the server with metrics_listen"
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert reply.status_code == 200
    samples = tuple(
        (s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    )
    return Scrape(reply.text, samples)
