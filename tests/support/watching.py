"""Collect WatchEvents until a condition holds — waiting on the stream, not on sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tests.support.server import Client
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t

WAIT_SECONDS = 30.0


async def events_until(
    client: Client,
    request: pb.WatchEventsRequest,
    done: Callable[[list[t.Event]], bool],
    within: float = WAIT_SECONDS,
) -> list[t.Event]:
    seen: list[t.Event] = []
    call = client.WatchEvents(request, timeout=None)

    async def consume() -> None:
        async for response in call:
            if response.HasField("event"):
                seen.append(response.event)
                if done(seen):
                    return

    try:
        await asyncio.wait_for(consume(), within)
    finally:
        call.cancel()
    return seen


def kinds(events: list[t.Event]) -> list[str]:
    return [t.EventKind.Name(e.kind).removeprefix("EVENT_KIND_") for e in events]


def has_kind(notification_id: str, kind: int) -> Callable[[list[t.Event]], bool]:
    return lambda seen: any(e.notification_id == notification_id and e.kind == kind for e in seen)
