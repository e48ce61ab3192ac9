"""``AsyncClient`` (grpc.aio) and, in ``_blocking_client``, ``Client`` (blocking gRPC
stubs): the same methods, the same retries, the same typed errors. Both return the
generated ``uns.v1`` messages, and both run the calls ``_calls`` builds (one builder
per RPC: request, retries, result).

Retries follow the table in ``_retry``: SendNotification repeats its idempotency key
(generated before the first attempt when the caller gives none), reads and Acknowledge
retry UNAVAILABLE, Replay and ResolveFailure retry only RATE_LIMITED (shed before the
server acted), after the delay its RetryInfo gives.
"""

# ruff: noqa: ASYNC109 -- ``timeout`` is the gRPC deadline sent to the server with each
# attempt, not a local cancel scope; asyncio.timeout() cannot express it.
from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from types import TracebackType
from typing import Any, Unpack
from weakref import WeakSet

import grpc

from uns.v1 import heartbeat_service_pb2 as hpb
from uns.v1 import heartbeat_service_pb2_grpc as hpb_grpc
from uns.v1 import maintenance_service_pb2 as mpb
from uns.v1 import maintenance_service_pb2_grpc as mpb_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_clients import _calls as calls
from uns_clients import _convert
from uns_clients import _maintenance as windows
from uns_clients._calls import Call, Out, Req, Resp
from uns_clients._config import ClientConfig
from uns_clients._convert import EventKindLike, SendFields
from uns_clients._errors import UnsError, error_from_rpc
from uns_clients._people import AsyncPeople
from uns_clients._retry import async_retrying
from uns_clients._watch import EventStream


def resolve_config(config: ClientConfig | str, api_key: str | None) -> ClientConfig:
    if isinstance(config, str):
        return ClientConfig(target=config, api_key=api_key)
    return config if api_key is None else replace(config, api_key=api_key)


def channel_credentials(config: ClientConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=config.root_certificates,
        private_key=config.client_private_key,
        certificate_chain=config.client_certificate_chain,
    )


class AsyncClient:
    """The asyncio client.

    ::

        async with AsyncClient("127.0.0.1:50051", api_key=key) as uns:
            sent = await uns.send(notification_type="disk.full", intent="WARNING",
                                  title="Disk almost full", message="92%", source="monitor")
            async for event in uns.watch(notification_ids=[sent.notification_id],
                                         replay_history=True):
                ...

    Every method raises a subclass of ``UnsError`` on failure. ``timeout`` (seconds) bounds
    each attempt; ``None`` uses ``ClientConfig.timeout_seconds``.
    """

    def __init__(self, config: ClientConfig | str, *, api_key: str | None = None) -> None:
        """Connect lazily to ``config`` (a ``ClientConfig`` or a ``HOST:PORT`` target);
        ``api_key`` overrides the configuration's."""
        self.config: ClientConfig = resolve_config(config, api_key)
        options = self.config.grpc_options()
        if self.config.tls:
            self._channel = grpc.aio.secure_channel(
                self.config.target, channel_credentials(self.config), options=options
            )
        else:
            self._channel = grpc.aio.insecure_channel(self.config.target, options=options)
        self._stub = pb_grpc.NotificationServiceStub(self._channel)
        self._maintenance = mpb_grpc.MaintenanceServiceStub(self._channel)
        self._metadata = self.config.auth_metadata()
        self._streams: WeakSet[EventStream] = WeakSet()
        self.people = AsyncPeople(self._channel, self._unary)
        """People, rotations and who is on call (``uns.v1.RecipientService``)."""
        self._heartbeats = hpb_grpc.HeartbeatServiceStub(self._channel)

    async def send(
        self, *, timeout: float | None = None, **fields: Unpack[SendFields]
    ) -> pb.SendNotificationResponse:
        """Accept an obligation (SendNotification). Retries UNAVAILABLE and
        DEADLINE_EXCEEDED with the same idempotency key, so a retry never creates a second
        notification: the server answers the original with ``idempotent_replay=True``."""
        return await self.send_request(_convert.send_request(fields), timeout=timeout)

    async def send_request(
        self, request: pb.SendNotificationRequest, *, timeout: float | None = None
    ) -> pb.SendNotificationResponse:
        """``send()`` for a ready-made request; one without an idempotency key is sent as a
        copy with a new one."""
        return await self._call(calls.send(request), timeout)

    async def send_many(
        self,
        requests: Iterable[SendFields | pb.SendNotificationRequest],
        *,
        timeout: float | None = None,
    ) -> builtins.list[pb.SendNotificationResponse | UnsError]:
        """Send up to 1,000 notifications in one call (BatchSendNotifications): each
        request a ``SendFields`` mapping (``send()``'s keyword arguments) or a ready-made
        ``SendNotificationRequest``. Answers one entry per request, in order: the
        response ``send()`` would return, or the ``UnsError`` it would raise (an
        invalid or conflicting item fails alone; the request budget is charged for
        the whole batch, so a RATE_LIMITED batch is retried whole, as ``send()`` is).
        Items without an idempotency key get one before the first attempt, so the
        call retries like ``send()``. More than 1,000 requests raises ``InvalidRequest``."""
        return await self._call(calls.send_many(requests), timeout)

    async def simulate(
        self, *, timeout: float | None = None, **fields: Unpack[SendFields]
    ) -> pb.SimulateResponse:
        """Resolve the policy exactly as ``send()`` would, without writing anything."""
        return await self.simulate_request(
            _convert.send_request(fields, generate_key=False), timeout=timeout
        )

    async def simulate_request(
        self, request: pb.SendNotificationRequest, *, timeout: float | None = None
    ) -> pb.SimulateResponse:
        """``simulate()`` for a ready-made request."""
        return await self._call(calls.simulate(request), timeout)

    async def get(self, notification_id: str, *, timeout: float | None = None) -> t.Notification:
        """Read one notification (GetNotification)."""
        return await self._call(calls.get(notification_id), timeout)

    async def list(
        self, *, filter: str = "", page_size: int = 0, timeout: float | None = None
    ) -> AsyncIterator[t.Notification]:
        """Every notification matching ``filter`` (AIP-160 subset, e.g.
        ``'state = FAILED AND dead_letter = true'``), newest first, fetching pages of
        ``page_size`` (0: the server's default) as the iteration goes."""
        token = ""
        while True:
            page = await self.list_page(
                filter=filter, page_size=page_size, page_token=token, timeout=timeout
            )
            for notification in page.notifications:
                yield notification
            token = page.next_page_token
            if not token:
                return

    async def list_page(
        self,
        *,
        filter: str = "",
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> pb.ListNotificationsResponse:
        """One page of ListNotifications, for callers that keep the page token."""
        return await self._call(calls.list_page(filter, page_size, page_token), timeout)

    async def acknowledge(
        self,
        notification_id: str,
        *,
        dismiss: bool = False,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> pb.AcknowledgeResponse:
        """Settle a PENDING acknowledgement as ACKED (or DISMISSED). Retries UNAVAILABLE:
        the server returns the original settlement to the same actor repeating the same
        outcome (``idempotent_replay=True``). Needs a responder key whose tenants (its
        own principal and its ``responds_for``) hold the notification, or an operator
        key; any other id raises ``NotFound``."""
        return await self._call(calls.acknowledge(notification_id, dismiss, metadata), timeout)

    async def snooze(
        self, notification_id: str, seconds: float, *, timeout: float | None = None
    ) -> t.Notification:
        """Snooze a pending acknowledgement for ``seconds`` (1 to 86,400): the answer
        stays owed, but its reminders, escalation steps and deadline pause; at the end
        it is PENDING again. Who may acknowledge may snooze (``acknowledge``'s keys)."""
        return await self._call(calls.snooze(notification_id, seconds), timeout)

    async def replay(
        self,
        notification_id: str,
        *,
        reason: str = "",
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> t.Notification:
        """Open a new delivery cycle for a dead-lettered notification (operator). ``reason``
        (at most 1024 characters) is recorded in the REPLAY_REQUESTED event. Not retried.

        ``validate_only``: change nothing; return the notification as the replay would,
        or raise the refusal it would meet; retried on UNAVAILABLE, like a read."""
        return await self._call(calls.replay(notification_id, reason, validate_only), timeout)

    async def withdraw(
        self, notification_id: str, *, reason: str = "", timeout: float | None = None
    ) -> t.Notification:
        """Withdraw an obligation that no longer stands (WithdrawNotification; the owning
        producer or an operator). Before delivery the notification becomes WITHDRAWN;
        with a pending ack, the ack does, and reminders and escalation steps stop.
        Raises ``NotWithdrawable`` once settled. Repeating it is safe (the same caller
        gets the withdrawn notification back), so it is retried on UNAVAILABLE."""
        return await self._call(calls.withdraw(notification_id, reason), timeout)

    async def resolve_failure(
        self,
        notification_id: str,
        *,
        reason: str = "",
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> t.Notification:
        """Clear the dead-letter flag without replaying (operator). ``reason`` (at most 1024
        characters) is recorded in the FAILURE_RESOLVED event. Not retried.

        ``validate_only``: change nothing; return the notification as the resolution
        would, or raise the refusal it would meet; retried on UNAVAILABLE, like a read."""
        return await self._call(
            calls.resolve_failure(notification_id, reason, validate_only), timeout
        )

    async def put_maintenance_window(
        self,
        window_id: str,
        *,
        start_time: datetime,
        end_time: datetime,
        notification_types: Iterable[str],
        reason: str = "",
        timeout: float | None = None,
    ) -> mpb.MaintenanceWindow:
        """Create or replace a maintenance window (operator): notifications of these
        types (exact names, or prefixes ending in ``*``) accepted or falling due while
        it is open stay PENDING until ``end_time`` (aware datetimes); SAFETY intent is
        never held. Retried on UNAVAILABLE (a put by id repeats harmlessly)."""
        call = windows.put(window_id, start_time, end_time, notification_types, reason)
        return await self._call(call, timeout)

    async def get_maintenance_window(
        self, window_id: str, *, timeout: float | None = None
    ) -> mpb.MaintenanceWindow:
        """One maintenance window (operator); ``NotFound`` when there is none."""
        return await self._call(windows.get(window_id), timeout)

    async def list_maintenance_windows(
        self, *, timeout: float | None = None
    ) -> builtins.list[mpb.MaintenanceWindow]:
        """Every maintenance window, ended ones too, by window_id (operator)."""
        out: builtins.list[mpb.MaintenanceWindow] = []
        token = ""
        while True:
            page = await self._call(windows.list_page(windows.PAGE_SIZE, token), timeout)
            out += page.windows
            token = page.next_page_token
            if not token:
                return out

    async def delete_maintenance_window(
        self, window_id: str, *, timeout: float | None = None
    ) -> mpb.MaintenanceWindow:
        """End a maintenance window now and remove it (operator): what it held is due
        at once. Returns the window as it was. Not retried."""
        return await self._call(windows.delete(window_id), timeout)

    def watch(
        self,
        *,
        after_sequence: int = 0,
        notification_ids: Iterable[str] = (),
        kinds: Iterable[EventKindLike] = (),
        notification_type: str = "",
        replay_history: bool = False,
    ) -> EventStream:
        """Subscribe to events (WatchEvents): an async iterator that reconnects on
        UNAVAILABLE and resumes after the last event (or heartbeat) it saw.

        ``after_sequence``: start after this sequence (a saved ``EventStream.cursor``);
        0 means "from now", or all retained history with ``replay_history``. Filters
        combine with AND. Nothing is sent until the first ``__anext__`` (or
        ``positioned()``, which waits until a stream "from now" has its start).
        """
        request = _convert.watch_request(
            after_sequence=after_sequence,
            notification_ids=notification_ids,
            kinds=kinds,
            notification_type=notification_type,
            replay_history=replay_history,
        )
        stream = EventStream(self._stub, self.config, request, self._metadata)
        self._streams.add(stream)
        return stream

    async def close(self) -> None:
        """End open watch streams and close the channel."""
        for stream in builtins.list(self._streams):
            await stream.aclose()
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def beat(
        self, heartbeat_id: str, *, timeout: float | None = None
    ) -> hpb.HeartbeatMonitor:
        """Report that the job ``heartbeat_id`` watches ran (HeartbeatService.Beat; a
        producer's or the operator's key): its deadline moves to now + interval +
        grace, and a page its silence raised is withdrawn ("heartbeat resumed").
        Returns the heartbeat after the beat. Retries UNAVAILABLE."""
        return await self._call(calls.beat(heartbeat_id), timeout, self._heartbeats)

    async def _call(
        self, call: Call[Any, Resp, Out], timeout: float | None, stub: Any = None
    ) -> Out:
        if stub is None:
            stub = self._maintenance if call.service == windows.SERVICE else self._stub
        method = getattr(stub, call.rpc)
        response: Resp = await self._unary(
            call.rpc, method, call.request, call.retry_on, timeout, call.context
        )
        return call.result(response)

    async def _unary(
        self,
        rpc: str,
        method: grpc.aio.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        retry_on: tuple[type[UnsError], ...],
        timeout: float | None,
        context: Mapping[str, str] | None = None,
    ) -> Resp:
        deadline = self.config.timeout_seconds if timeout is None else timeout
        async for attempt in async_retrying(self.config, rpc, retry_on, context):
            with attempt:
                try:
                    return await method(request, timeout=deadline, metadata=self._metadata)
                except grpc.aio.AioRpcError as exc:
                    raise error_from_rpc(exc) from exc
        raise AssertionError("unreachable: tenacity re-raises the last error")
