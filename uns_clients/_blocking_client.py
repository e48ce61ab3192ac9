"""``Client``: ``AsyncClient``'s methods on blocking gRPC stubs (``_client``), with the
same retries (``_retry``) and typed errors."""

# attempt, not a local cancel scope.
from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Unpack
from weakref import WeakSet

import grpc

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_clients import _convert
from uns_clients._client import Req, Resp, channel_credentials, resolve_config
from uns_clients._config import ClientConfig
from uns_clients._convert import EventKindLike, SendFields
from uns_clients._errors import UnsError, error_from_rpc
from uns_clients._retry import NO_RETRY, SAFE_RETRY_ON, SEND_RETRY_ON, sync_retrying
from uns_clients._watch import BlockingEventStream


class Client:
    """The blocking client: ``AsyncClient``'s methods on blocking gRPC stubs (no event
    loop involved), safe to share between threads; ``watch()`` returns a blocking
    iterator (``BlockingEventStream``).

    ::

        with Client("127.0.0.1:50051", api_key=key) as uns:
            sent = uns.send(notification_type="disk.full", intent="WARNING",
                            title="Disk almost full", message="92%", source="monitor")
    """

    def __init__(self, config: ClientConfig | str, *, api_key: str | None = None) -> None:
        """Connect lazily to ``config`` (a ``ClientConfig`` or a ``HOST:PORT`` target);
        ``api_key`` overrides the configuration's."""
        self.config: ClientConfig = resolve_config(config, api_key)
        options = self.config.grpc_options()
        if self.config.tls:
            self._channel = grpc.secure_channel(
                self.config.target, channel_credentials(self.config), options=options
            )
        else:
            self._channel = grpc.insecure_channel(self.config.target, options=options)
        self._stub = pb_grpc.NotificationServiceStub(self._channel)
        self._metadata = self.config.auth_metadata()
        self._streams: WeakSet[BlockingEventStream] = WeakSet()
        self._streams_lock = threading.Lock()  # threads share one Client

    def send(
        self, *, timeout: float | None = None, **fields: Unpack[SendFields]
    ) -> pb.SendNotificationResponse:
        """See ``AsyncClient.send``."""
        return self.send_request(_convert.send_request(fields), timeout=timeout)

    def send_request(
        self, request: pb.SendNotificationRequest, *, timeout: float | None = None
    ) -> pb.SendNotificationResponse:
        """See ``AsyncClient.send_request``."""
        request = _convert.with_idempotency_key(request)
        return self._unary(
            "SendNotification",
            self._stub.SendNotification,
            request,
            SEND_RETRY_ON,
            timeout,
            {"idempotency_key": request.idempotency_key},
        )

    def send_many(
        self,
        requests: Iterable[SendFields | pb.SendNotificationRequest],
        *,
        timeout: float | None = None,
    ) -> builtins.list[pb.SendNotificationResponse | UnsError]:
        """See ``AsyncClient.send_many``."""
        request = _convert.batch_request(requests)
        response = self._unary(
            "BatchSendNotifications",
            self._stub.BatchSendNotifications,
            request,
            SEND_RETRY_ON,
            timeout,
            {"requests": str(len(request.requests))},
        )
        return _convert.batch_results(response)

    def simulate(
        self, *, timeout: float | None = None, **fields: Unpack[SendFields]
    ) -> pb.SimulateResponse:
        """See ``AsyncClient.simulate``."""
        return self.simulate_request(
            _convert.send_request(fields, generate_key=False), timeout=timeout
        )

    def simulate_request(
        self, request: pb.SendNotificationRequest, *, timeout: float | None = None
    ) -> pb.SimulateResponse:
        """See ``AsyncClient.simulate_request``."""
        return self._unary(
            "Simulate",
            self._stub.Simulate,
            pb.SimulateRequest(request=request),
            SAFE_RETRY_ON,
            timeout,
        )

    def get(self, notification_id: str, *, timeout: float | None = None) -> t.Notification:
        """See ``AsyncClient.get``."""
        return self._unary(
            "GetNotification",
            self._stub.GetNotification,
            pb.GetNotificationRequest(notification_id=notification_id),
            SAFE_RETRY_ON,
            timeout,
        ).notification

    def list(
        self, *, filter: str = "", page_size: int = 0, timeout: float | None = None
    ) -> Iterator[t.Notification]:
        """See ``AsyncClient.list``."""
        token = ""
        while True:
            page = self.list_page(
                filter=filter, page_size=page_size, page_token=token, timeout=timeout
            )
            yield from page.notifications
            token = page.next_page_token
            if not token:
                return

    def list_page(
        self,
        *,
        filter: str = "",
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> pb.ListNotificationsResponse:
        """See ``AsyncClient.list_page``."""
        return self._unary(
            "ListNotifications",
            self._stub.ListNotifications,
            pb.ListNotificationsRequest(filter=filter, page_size=page_size, page_token=page_token),
            SAFE_RETRY_ON,
            timeout,
        )

    def acknowledge(
        self,
        notification_id: str,
        *,
        dismiss: bool = False,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> pb.AcknowledgeResponse:
        """See ``AsyncClient.acknowledge``."""
        request = pb.AcknowledgeRequest(notification_id=notification_id, dismiss=dismiss)
        if metadata is not None:
            request.metadata.CopyFrom(_convert.struct(metadata))
        return self._unary("Acknowledge", self._stub.Acknowledge, request, SAFE_RETRY_ON, timeout)

    def replay(
        self,
        notification_id: str,
        *,
        reason: str = "",
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> t.Notification:
        """See ``AsyncClient.replay``."""
        return self._unary(
            "Replay",
            self._stub.Replay,
            pb.ReplayRequest(
                notification_id=notification_id, reason=reason, validate_only=validate_only
            ),
            SAFE_RETRY_ON if validate_only else NO_RETRY,
            timeout,
        ).notification

    def withdraw(
        self, notification_id: str, *, reason: str = "", timeout: float | None = None
    ) -> t.Notification:
        """See ``AsyncClient.withdraw``."""
        return self._unary(
            "WithdrawNotification",
            self._stub.WithdrawNotification,
            pb.WithdrawNotificationRequest(notification_id=notification_id, reason=reason),
            SAFE_RETRY_ON,
            timeout,
        ).notification

    def resolve_failure(
        self,
        notification_id: str,
        *,
        reason: str = "",
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> t.Notification:
        """See ``AsyncClient.resolve_failure``."""
        return self._unary(
            "ResolveFailure",
            self._stub.ResolveFailure,
            pb.ResolveFailureRequest(
                notification_id=notification_id, reason=reason, validate_only=validate_only
            ),
            SAFE_RETRY_ON if validate_only else NO_RETRY,
            timeout,
        ).notification

    def watch(
        self,
        *,
        after_sequence: int = 0,
        notification_ids: Iterable[str] = (),
        kinds: Iterable[EventKindLike] = (),
        notification_type: str = "",
        replay_history: bool = False,
    ) -> BlockingEventStream:
        """See ``AsyncClient.watch``: the same subscription as a blocking iterator
        (``for event in uns.watch(...)``); ``close()`` it from any thread."""
        request = _convert.watch_request(
            after_sequence=after_sequence,
            notification_ids=notification_ids,
            kinds=kinds,
            notification_type=notification_type,
            replay_history=replay_history,
        )
        stream = BlockingEventStream(self._stub, self.config, request, self._metadata)
        with self._streams_lock:
            self._streams.add(stream)
        return stream

    def close(self) -> None:
        """End open watch streams and close the channel."""
        with self._streams_lock:
            streams = builtins.list(self._streams)
        for stream in streams:
            stream.close()
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _unary(
        self,
        rpc: str,
        method: grpc.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        retry_on: tuple[type[UnsError], ...],
        timeout: float | None,
        context: Mapping[str, str] | None = None,
    ) -> Resp:
        deadline = self.config.timeout_seconds if timeout is None else timeout
        for attempt in sync_retrying(self.config, rpc, retry_on, context):
            with attempt:
                try:
                    return method(request, timeout=deadline, metadata=self._metadata)
                except grpc.RpcError as exc:
                    raise error_from_rpc(exc) from exc
        raise AssertionError("unreachable: tenacity re-raises the last error")
