"""Collect WatchEvents until a condition holds — waiting on the stream, not on sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

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


WatchCall = grpc.aio.UnaryStreamCall[pb.WatchEventsRequest, pb.WatchEventsResponse]


async def positioned(call: WatchCall, within: float = WAIT_SECONDS) -> list[t.Event]:
    """Read ``call`` (an open WatchEvents call) up to its first heartbeat and return the
    catch-up events that came before it (none for a quiet stream "from now").

    The server sends that heartbeat once it has read the stream's start and subscribed,
    so every event committed after this returns is delivered. A stream "from now"
    (``after_sequence`` 0 without ``replay_history``) starts wherever the server is when
    the request arrives: trigger the events a test waits for only after this. Reads by
    async iteration (as ``async for``/``anext(aiter(call))`` do; grpc forbids mixing
    that with ``call.read()``)."""
    events: list[t.Event] = []
    stream = aiter(call)
    async with asyncio.timeout(within):
        while not (response := await anext(stream)).HasField("heartbeat"):
            events.append(response.event)
    return events


def kinds(events: list[t.Event]) -> list[str]:
    return [t.EventKind.Name(e.kind).removeprefix("EVENT_KIND_") for e in events]


def has_kind(notification_id: str, kind: int) -> Callable[[list[t.Event]], bool]:
    return lambda seen: any(e.notification_id == notification_id and e.kind == kind for e in seen)
