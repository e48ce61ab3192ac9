"""The overview: counts by state, per-channel health, delivery charts, live tail.

Counts are capped (``COUNT_CAP``, shown as "10000+") and each runs on an index; the
queue's three (due, in flight, scheduled) come from one capped pass over the PENDING
rows, each a lower bound ("N+") when the backlog is larger; health
and charts read the events of the last hour among the newest ``EVENT_WINDOW`` sequences
(a primary-key range), so the page costs the same however large the tables grow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlencode

from aiohttp import web

from uns_server.domain.enums import EventKind, Status
from uns_server.domain.records import RecentEvent
from uns_server.http.console.charts import Series, bar_chart, minute_buckets
from uns_server.http.console.context import Console
from uns_server.http.console.render import render
from uns_server.http.console.sessions import Session

COUNT_CAP = 10_000
# ~2,000 notifications' events: a bounded read (~15 ms at 1M rows on 2 loaded cores).
EVENT_WINDOW = 10_000
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


HEALTH_KINDS = (EventKind.ACCEPTED, EventKind.CHANNEL_ATTEMPT_RESULT, EventKind.DELIVERY_RESULT)


def _delivered(r: RecentEvent) -> bool:
    return bool(r.kind == EventKind.DELIVERY_RESULT and r.status == Status.DELIVERED)


def unmatched(rows: list[RecentEvent]) -> list[str]:
    """Delivered notifications whose ACCEPTED event is older than the window (a retry
    long after the accept): their ``created_at`` is read by primary key."""
    accepted = {r.notification_id for r in rows if r.kind == EventKind.ACCEPTED}
    return [r.notification_id for r in rows if _delivered(r) and r.notification_id not in accepted]


def digest(rows: list[RecentEvent], created: dict[str, datetime]) -> Recent:
    """Rows of ``console.recent_events`` (the payload's fields already taken out);
    a delivery's latency from its ACCEPTED event in the window, else ``created``."""
    recent = Recent()
    accepted = {r.notification_id: r.at for r in rows if r.kind == EventKind.ACCEPTED}
    for r in rows:
        if r.kind == EventKind.CHANNEL_ATTEMPT_RESULT:
            name = r.channel or "?"
            h = recent.channels.setdefault(name, ChannelHealth(name))
            h.attempts += 1
            if r.success:
                h.successes += 1
                h.last_success_at = r.at
            else:
                h.last_error = r.error or "unknown error"
                h.last_error_at = r.at
        elif _delivered(r):
            recent.delivered.append((r.at, 1.0))
            start = accepted.get(r.notification_id) or created.get(r.notification_id)
            if start is not None:
                recent.latency.append((r.at, (r.at - start).total_seconds()))
    return recent


def _card(
    key: str, label: str, filter_text: str, counts: dict[str, int], queue: dict[str, int],
    queue_over: bool,
) -> tuple[str, int, str, bool]:  # fmt: skip
    """(label, number shown, its list's filter, whether it is "at least" the number)."""
    if key in queue:
        return label, queue[key], filter_text, queue_over
    n = counts[key]
    return label, min(n, COUNT_CAP), filter_text, n > COUNT_CAP


async def channel_health(c: Console) -> dict[str, ChannelHealth]:
    """Each channel's last hour (the overview's health table), for other pages: every
    configured channel, even one without attempts."""
    now = c.clock()
    async with c.store.read() as tx:
        rows = await tx.console.recent_events(HEALTH_KINDS, now - timedelta(hours=1), EVENT_WINDOW)
    health = digest(rows, {}).channels
    for name in c.channels:
        health.setdefault(name, ChannelHealth(name))
    return health


def health_text(
    name: str,
    health: dict[str, ChannelHealth],
    configured: tuple[str, ...],
    endpoints: Mapping[str, str] | None = None,
) -> str:
    """One line: "hook at 10.0.0.7:443: 0% of 3 attempts in the last hour; last error:
    ..." (where its provider is, when it has one)."""
    if name not in configured:
        return f"{name}: not configured on this server"
    where = (endpoints or {}).get(name)
    label = f"{name} at {where}" if where else name
    h = health.get(name) or ChannelHealth(name)
    if not h.attempts:
        return f"{label}: no attempt in the last hour"
    text = f"{label}: {h.success_rate} of {h.attempts} attempts succeeded in the last hour"
    if h.last_error:
        text += f"; last error: {h.last_error}"
    return text


async def overview(request: web.Request, session: Session, c: Console) -> web.StreamResponse:
    now = c.clock()
    async with c.store.read() as tx:
        queue, queue_over = await tx.console.queue_counts(now, COUNT_CAP)
        counts = await tx.console.state_counts(now, COUNT_CAP)
        rows = await tx.console.recent_events(HEALTH_KINDS, now - timedelta(hours=1), EVENT_WINDOW)
        missing = unmatched(rows)
        created = await tx.console.created_at(missing) if missing else {}
    recent = digest(rows, created)
    per_minute = [float(len(b)) for b in minute_buckets(recent.delivered, now)]
    latency = [
        round(sorted(b)[len(b) // 2], 3) if b else 0.0 for b in minute_buckets(recent.latency, now)
    ]
    return render(
        request,
        "overview.html",
        title="Overview",
        counts=[_card(k, label, f, counts, queue, queue_over) for k, label, f in COUNT_LABELS],
        channels=sorted(recent.channels.values(), key=lambda h: h.name),
        endpoints=c.endpoints,
        rate_chart=bar_chart(Series("Delivered per minute", per_minute, "delivered"), "Rate"),
        latency_chart=bar_chart(
            Series("Median accept-to-delivery latency", latency, "s"), "Latency"
        ),
        window=EVENT_WINDOW,
        tail=_tail(request),
    )


TAIL_ROWS = (25, 50, 200)


def _tail(request: web.Request) -> dict[str, object]:
    """The live tail's filters (kind, type) and its row cap, from the query: the
    stream URL they make and the values the form shows."""
    kind = request.query.get("kind", "")
    kind = kind if kind in {k.value for k in EventKind} else ""
    ntype = request.query.get("type", "").strip()[:255]
    raw = request.query.get("rows", "")
    rows = int(raw) if raw.isdigit() and int(raw) in TAIL_ROWS else 50
    query = urlencode([(k, v) for k, v in (("kind", kind), ("type", ntype)) if v])
    return {
        "kind": kind,
        "type": ntype,
        "rows": rows,
        "row_choices": TAIL_ROWS,
        "kinds": [k.value for k in EventKind],
        "sse": "/console/events" + (f"?{query}" if query else ""),
    }
