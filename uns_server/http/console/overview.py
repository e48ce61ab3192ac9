"""The overview: counts by state, per-channel health, delivery charts, live tail.

Counts are capped (``COUNT_CAP``, shown as "10000+") and each runs on an index; health
and charts read the events of the last hour among the newest ``EVENT_WINDOW`` sequences
(a primary-key range), so the page costs the same however large the tables grow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web

from uns_server.domain.enums import EventKind, Status
from uns_server.http.console.charts import Series, bar_chart, minute_buckets
from uns_server.http.console.context import Console
from uns_server.http.console.render import render
from uns_server.http.console.sessions import Session
from uns_server.store import console

COUNT_CAP = 10_000
EVENT_WINDOW = 20_000
COUNT_LABELS = (
    ("due", "Due now", "state = PENDING"),
    ("in_flight", "In flight", "state = PENDING"),
    ("scheduled", "Scheduled (retry later)", "state = PENDING"),
    ("delivered_24h", "Delivered (24 h)", "state = DELIVERED"),
    ("needs_action", "Failed, needs action", "state = FAILED AND dead_letter = true"),
    ("resolved", "Failed, resolved", "state = FAILED AND dead_letter = false"),
    ("acks_pending", "Acks pending", "ack_state = PENDING"),
    ("acks_due_1h", "Acks due within the hour", "ack_state = PENDING"),
)


@dataclass
class ChannelHealth:
    name: str
    attempts: int = 0
    successes: int = 0
    last_error: str = ""
    last_error_at: datetime | None = None
    last_success_at: datetime | None = None

    @property
    def success_rate(self) -> str:
        return f"{100 * self.successes / self.attempts:.0f}%" if self.attempts else "—"


@dataclass
class Recent:
    channels: dict[str, ChannelHealth] = field(default_factory=dict)
    delivered: list[tuple[datetime, float]] = field(default_factory=list)
    latency: list[tuple[datetime, float]] = field(default_factory=list)


def digest(rows: list[Any]) -> Recent:
    recent = Recent()
    for r in rows:
        p = r["payload"] if isinstance(r["payload"], dict) else {}
        if r["kind"] == EventKind.CHANNEL_ATTEMPT_RESULT:
            name = str(p.get("channel", "?"))
            h = recent.channels.setdefault(name, ChannelHealth(name))
            h.attempts += 1
            if p.get("success"):
                h.successes += 1
                h.last_success_at = r["at"]
            else:
                h.last_error = str(p.get("error") or "unknown error")
                h.last_error_at = r["at"]
        elif r["kind"] == EventKind.DELIVERY_RESULT and p.get("status") == Status.DELIVERED:
            recent.delivered.append((r["at"], 1.0))
            if r["created_at"] is not None:
                recent.latency.append((r["at"], (r["at"] - r["created_at"]).total_seconds()))
    return recent


async def overview(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    now = c.clock()
    conditions = console.state_conditions(now, now + timedelta(hours=1), now - timedelta(days=1))
    async with c.db.read() as conn:
        counts = {
            name: await console.capped_count(conn, where, COUNT_CAP)
            for name, where in conditions.items()
        }
        rows = await console.recent_events(
            conn,
            [EventKind.CHANNEL_ATTEMPT_RESULT, EventKind.DELIVERY_RESULT],
            now - timedelta(hours=1),
            EVENT_WINDOW,
        )
    recent = digest(rows)
    per_minute = [float(len(b)) for b in minute_buckets(recent.delivered, now)]
    latency = [
        round(sorted(b)[len(b) // 2], 3) if b else 0.0 for b in minute_buckets(recent.latency, now)
    ]
    return render(
        request,
        "overview.html",
        title="Overview",
        counts=[(label, counts[k], f, counts[k] > COUNT_CAP) for k, label, f in COUNT_LABELS],
        count_cap=COUNT_CAP,
        channels=sorted(recent.channels.values(), key=lambda h: h.name),
        rate_chart=bar_chart(Series("Delivered per minute", per_minute, "delivered"), "Rate"),
        latency_chart=bar_chart(
            Series("Median accept-to-delivery latency", latency, "s"), "Latency"
        ),
        window=EVENT_WINDOW,
    )
