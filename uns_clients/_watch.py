"""``EventStream`` and ``BlockingEventStream``: WatchEvents subscriptions that survive
disconnects, for asyncio and for blocking code.

The server streams events in sequence order and, while nothing matches, heartbeats that
carry its high-water sequence ("every future event on this stream has a greater
sequence"). So the client keeps one number, the *cursor*: the sequence of the last event
it yielded, or a later heartbeat's high-water mark. After UNAVAILABLE (server shutdown,
database outage, lost connection, keepalive timeout) or an unexpected end of stream, it
waits (exponential backoff with jitter) and calls WatchEvents again with
``after_sequence=cursor``: the server then sends every matching event committed after
it, so the caller sees no gap and no repetition. RATE_LIMITED (the server shed the
stream's start) is retried the same way, after the RetryInfo delay. Any other error
(permission denied, history compacted, unimplemented, ...) ends the iteration by
raising it.

One caveat belongs to the protocol: a stream opened "from now" (``after_sequence=0``
without ``replay_history``) has no position until its first event or heartbeat; a
disconnect before either resumes "from now" again. ``positioned()`` waits for that
position, so a caller can subscribe "from now" and only then send. Persist ``cursor``
and pass it as ``after_sequence`` to resume across process restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

import grpc

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_clients._config import ClientConfig
from uns_clients._errors import RateLimited, Unavailable, UnsError, error_from_rpc
from uns_clients._retry import backoff_seconds, retry_delay_seconds

if TYPE_CHECKING:
    from collections.abc import Sequence

log = logging.getLogger("uns_clients")

_WatchCall = grpc.aio.UnaryStreamCall[pb.WatchEventsRequest, pb.WatchEventsResponse]


def _ended_by_server() -> Unavailable:
    return Unavailable("the server ended the stream", code=grpc.StatusCode.UNAVAILABLE)


class _Position:
    """What both streams share: the cursor, and what each response and failure does
    to it. Neither I/O nor waiting happens here."""

    def __init__(self, config: ClientConfig, request: pb.WatchEventsRequest) -> None:
        self._config = config
        self._request = request
        self.cursor: int = request.after_sequence
        """Resume position: every matching event after it is still to come. Starts at the
        ``after_sequence`` given to ``watch()``; advances with each yielded event and each
        heartbeat."""
        self.reconnects: int = 0
        """How many times the stream was re-opened after a failure."""
        self._last_event_sequence = request.after_sequence
        self._positioned = False
        self._early: deque[t.Event] = deque()  # read by positioned(), not yet yielded
        self._failures = 0

    def _resume_request(self) -> pb.WatchEventsRequest:
        request = pb.WatchEventsRequest()
        request.CopyFrom(self._request)
        request.after_sequence = self.cursor
        return request

    def _take(self, response: pb.WatchEventsResponse) -> t.Event | None:
        """A response read: the event to yield, or None (a heartbeat, a repeat)."""
        if self._failures:
            log.info("WatchEvents resumed after sequence %d", self.cursor)
        self._failures = 0
        self._positioned = True
        which = response.WhichOneof("response")
        if which == "heartbeat":
            self.cursor = max(self.cursor, response.heartbeat.high_water_sequence)
        elif which == "event":
            event = response.event
            if event.sequence > self._last_event_sequence:  # else yielded before a reconnect
                self._last_event_sequence = event.sequence
                return event
        return None

    def _yielded(self, event: t.Event) -> t.Event:
        # Moved here, not on reading: an event positioned() keeps is still to come.
        self.cursor = max(self.cursor, event.sequence)
        return event

    def _backoff(self, error: UnsError, cause: BaseException | None) -> float:
        """Seconds to wait before reconnecting; raises ``error`` unless it is
        UNAVAILABLE within the configured number of attempts."""
        if not isinstance(error, Unavailable | RateLimited):
            raise error from cause
        self._failures += 1
        limit = self._config.watch_max_reconnect_attempts
        if limit is not None and self._failures > limit:
            raise error from cause
        if error.retry_delay is not None:  # shed (RATE_LIMITED): wait what it asked
            delay = retry_delay_seconds(error.retry_delay)
        else:
            delay = backoff_seconds(self._config, self._failures)
        log.warning(
            "WatchEvents interrupted (%s); reconnecting in %.2fs after sequence %d",
            error,
            delay,
            self.cursor,
            extra={"reason": error.reason, "cursor": self.cursor},
        )
        return delay


class EventStream(_Position):
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
        super().__init__(config, request)
        self._stub = stub
        self._metadata = tuple(metadata)
        self._call: _WatchCall | None = None
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
        return self._yielded(event)

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
        if self.closed:
            raise StopAsyncIteration
        if self._call is None:
            request = self._resume_request()
            self._call = self._stub.WatchEvents(request, metadata=self._metadata, timeout=None)
        try:
            response = await self._call.read()
        except grpc.aio.AioRpcError as exc:
            self._call = None
            if self.closed:
                raise StopAsyncIteration from None
            await self._after_failure(error_from_rpc(exc), exc)
            return None
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
            await self._after_failure(_ended_by_server(), None)
            return None
        return self._take(response)

    async def _after_failure(self, error: UnsError, cause: BaseException | None) -> None:
        delay = self._backoff(error, cause)
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


class BlockingEventStream(_Position):
    """``EventStream`` for blocking code: ``for event in client.watch(...)``, the same
    resume rules, ``positioned()`` and ``cursor``. ``close()`` (or ``with``) ends it,
    from any thread: an iteration waiting for the next event then stops."""

    def __init__(
        self,
        stub: pb_grpc.NotificationServiceStub,
        config: ClientConfig,
        request: pb.WatchEventsRequest,
        metadata: Sequence[tuple[str, str]],
    ) -> None:
        super().__init__(config, request)
        self._stub = stub
        self._metadata = tuple(metadata)
        self._call: Iterator[pb.WatchEventsResponse] | None = None
        self._lock = threading.Lock()  # close() from another thread races _read()
        self._closed = threading.Event()

    @property
    def closed(self) -> bool:
        """True after ``close()``."""
        return self._closed.is_set()

    def __iter__(self) -> BlockingEventStream:
        return self

    def __next__(self) -> t.Event:
        event = self._early.popleft() if self._early else None
        while event is None:
            event = self._read()
        return self._yielded(event)

    def positioned(self) -> int:
        """See ``EventStream.positioned``."""
        with contextlib.suppress(StopIteration):
            while not self._positioned:
                event = self._read()
                if event is not None:
                    self._early.append(event)
        return self.cursor

    def _read(self) -> t.Event | None:
        with self._lock:
            if self.closed:
                raise StopIteration
            if self._call is None:
                request = self._resume_request()
                self._call = self._stub.WatchEvents(request, metadata=self._metadata, timeout=None)
            call = self._call
        try:
            response = next(call)
        except grpc.RpcError as exc:
            self._call = None
            if self.closed:
                raise StopIteration from None
            self._after_failure(error_from_rpc(exc), exc)
            return None
        except StopIteration:
            self._call = None
            if self.closed:
                raise
            self._after_failure(_ended_by_server(), None)
            return None
        return self._take(response)

    def _after_failure(self, error: UnsError, cause: BaseException | None) -> None:
        if not self._closed.wait(timeout=self._backoff(error, cause)):
            self.reconnects += 1

    def close(self) -> None:
        """End the subscription; an iteration waiting in another thread stops."""
        with self._lock:
            self._closed.set()
            call, self._call = self._call, None
        if isinstance(call, grpc.Future):
            call.cancel()

    def __enter__(self) -> BlockingEventStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
