"""``EventStream``: a WatchEvents subscription that survives disconnects.

The server streams events in sequence order and, while nothing matches, heartbeats that
carry its high-water sequence ("every future event on this stream has a greater
sequence"). So the client keeps one number, the *cursor*: the sequence of the last event
it yielded, or a later heartbeat's high-water mark. After UNAVAILABLE (server shutdown,
database outage, lost connection, keepalive timeout) or an unexpected end of stream, it
waits (exponential backoff with jitter) and calls WatchEvents again with
``after_sequence=cursor``: the server then sends every matching event committed after
it, so the caller sees no gap and no repetition. Any other error (permission denied,
history compacted, unimplemented, ...) ends the iteration by raising it.

One caveat belongs to the protocol: a stream opened "from now" (``after_sequence=0``
without ``replay_history``) has no position until its first event or heartbeat; a
disconnect before either resumes "from now" again. ``await stream.positioned()`` waits
for that position, so a caller can subscribe "from now" and only then send. Persist
``cursor`` and pass it as ``after_sequence`` to resume across process restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING

import grpc

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_clients._config import ClientConfig
from uns_clients._errors import Unavailable, UnsError, error_from_rpc
from uns_clients._retry import backoff_seconds

if TYPE_CHECKING:
    from collections.abc import Sequence

log = logging.getLogger("uns_clients")

_WatchCall = grpc.aio.UnaryStreamCall[pb.WatchEventsRequest, pb.WatchEventsResponse]


class EventStream:
    """An async iterator of ``uns.v1.types_pb2.Event`` that reconnects and resumes by itself.

    ``async for event in client.watch(...)`` is all a caller needs. ``cursor`` is the
    position to persist for resuming later; ``aclose()`` (or ``async with``) ends the
    subscription.
    """

    def __init__(
        self,
        stub: pb_grpc.NotificationServiceAsyncStub,
        config: ClientConfig,
        request: pb.WatchEventsRequest,
        metadata: Sequence[tuple[str, str]],
    ) -> None:
        self._stub = stub
        self._config = config
        self._request = request
        self._metadata = tuple(metadata)
        self.cursor: int = request.after_sequence
        """Resume position: every matching event after it is still to come. Starts at the
        ``after_sequence`` given to ``watch()``; advances with each yielded event and each
        heartbeat."""
        self.reconnects: int = 0
        """How many times the stream was re-opened after a failure."""
        self._last_event_sequence = request.after_sequence
        self._positioned = False
        self._early: deque[t.Event] = deque()  # read by positioned(), not yet yielded
        self._call: _WatchCall | None = None
        self._failures = 0
        self._closed = asyncio.Event()

    @property
    def closed(self) -> bool:
        """True after ``aclose()``."""
        return self._closed.is_set()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> t.Event:
        event = self._early.popleft() if self._early else None
        while event is None:
            event = await self._read()
        # Moved here, not on reading: an event positioned() keeps is still to come.
        self.cursor = max(self.cursor, event.sequence)
        return event

    async def positioned(self) -> int:
        """Open the stream if needed and wait until the server has placed it (its first
        event or heartbeat); return ``cursor``. Every matching event committed after
        this returns will be yielded: subscribe "from now", await this, then send. An
        event read meanwhile is kept for the iteration. Raises what iterating would
        raise; returns at once on a closed stream."""
        with contextlib.suppress(StopAsyncIteration):
            while not self._positioned:
                event = await self._read()
                if event is not None:
                    self._early.append(event)
        return self.cursor

    async def _read(self) -> t.Event | None:
        """One response: the event to yield, or None (a heartbeat, a repeat, a
        reconnect)."""
        while True:
            if self.closed:
                raise StopAsyncIteration
            call = self._call or self._open()
            try:
                response = await call.read()
            except grpc.aio.AioRpcError as exc:
                self._call = None
                if self.closed:
                    raise StopAsyncIteration from None
                await self._after_failure(error_from_rpc(exc), exc)
                continue
            except asyncio.CancelledError:
                # aclose() from another task cancels the call under our read().
                self._call = None
                task = asyncio.current_task()
                if self.closed and (task is None or not task.cancelling()):
                    raise StopAsyncIteration from None
                raise
            if not isinstance(response, pb.WatchEventsResponse):  # grpc.aio.EOF
                self._call = None
                if self.closed:
                    raise StopAsyncIteration
                await self._after_failure(
                    Unavailable("the server ended the stream", code=grpc.StatusCode.UNAVAILABLE),
                    None,
                )
                continue
            if self._failures:
                log.info("WatchEvents resumed after sequence %d", self.cursor)
            self._failures = 0
            self._positioned = True
            which = response.WhichOneof("response")
            if which == "heartbeat":
                self.cursor = max(self.cursor, response.heartbeat.high_water_sequence)
            elif which == "event":
                event = response.event
                if event.sequence <= self._last_event_sequence:
                    return None  # already yielded before a reconnect
                self._last_event_sequence = event.sequence
                return event
            return None

    def _open(self) -> _WatchCall:
        request = pb.WatchEventsRequest()
        request.CopyFrom(self._request)
        request.after_sequence = self.cursor
        self._call = self._stub.WatchEvents(request, metadata=self._metadata, timeout=None)
        return self._call

    async def _after_failure(self, error: UnsError, cause: BaseException | None) -> None:
        if not isinstance(error, Unavailable):
            raise error from cause
        self._failures += 1
        limit = self._config.watch_max_reconnect_attempts
        if limit is not None and self._failures > limit:
            raise error from cause
        delay = backoff_seconds(self._config, self._failures)
        log.warning(
            "WatchEvents interrupted (%s); reconnecting in %.2fs after sequence %d",
            error,
            delay,
            self.cursor,
            extra={"reason": error.reason, "cursor": self.cursor},
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closed.wait(), timeout=delay)
        if not self.closed:
            self.reconnects += 1

    async def aclose(self) -> None:
        """End the subscription; a pending ``__anext__`` ends the iteration."""
        self._closed.set()
        call, self._call = self._call, None
        if call is not None:
            call.cancel()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
