"""``Client``: ``AsyncClient``'s methods on blocking gRPC stubs (``_client``), running
the same calls (``_calls``: request, retries, result) with the same typed errors."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable, Iterator, Mapping
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
from uns_clients._calls import Call, Out, Resp
from uns_clients._client import channel_credentials, resolve_config
from uns_clients._config import ClientConfig
from uns_clients._convert import EventKindLike, SendFields
from uns_clients._errors import UnsError, error_from_rpc
from uns_clients._retry import sync_retrying
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
        self._maintenance = mpb_grpc.MaintenanceServiceStub(self._channel)
        self._metadata = self.config.auth_metadata()
        self._streams: WeakSet[BlockingEventStream] = WeakSet()
        self._streams_lock = threading.Lock()  # threads share one Client
        self._heartbeats = hpb_grpc.HeartbeatServiceStub(self._channel)

    def send(
        self, *, timeout: float | None = None, **fields: Unpack[SendFields]
    ) -> pb.SendNotificationResponse:
        """See ``AsyncClient.send``."""
        return self.send_request(_convert.send_request(fields), timeout=timeout)

    def send_request(
        self, request: pb.SendNotificationRequest, *, timeout: float | None = None
    ) -> pb.SendNotificationResponse:
        """See ``AsyncClient.send_request``."""
        return self._call(calls.send(request), timeout)

    def send_many(
        self,
        requests: Iterable[SendFields | pb.SendNotificationRequest],
        *,
        timeout: float | None = None,
    ) -> builtins.list[pb.SendNotificationResponse | UnsError]:
        """See ``AsyncClient.send_many``."""
        return self._call(calls.send_many(requests), timeout)

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
        return self._call(calls.simulate(request), timeout)

    def get(self, notification_id: str, *, timeout: float | None = None) -> t.Notification:
        """See ``AsyncClient.get``."""
        return self._call(calls.get(notification_id), timeout)

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
        return self._call(calls.list_page(filter, page_size, page_token), timeout)

    def acknowledge(
        self,
        notification_id: str,
        *,
        dismiss: bool = False,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> pb.AcknowledgeResponse:
        """See ``AsyncClient.acknowledge``."""
        return self._call(calls.acknowledge(notification_id, dismiss, metadata), timeout)

    def snooze(
        self, notification_id: str, seconds: float, *, timeout: float | None = None
    ) -> t.Notification:
        """See ``AsyncClient.snooze``."""
        return self._call(calls.snooze(notification_id, seconds), timeout)

    def replay(
        self,
        notification_id: str,
        *,
        reason: str = "",
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> t.Notification:
        """See ``AsyncClient.replay``."""
        return self._call(calls.replay(notification_id, reason, validate_only), timeout)

    def withdraw(
        self, notification_id: str, *, reason: str = "", timeout: float | None = None
    ) -> t.Notification:
        """See ``AsyncClient.withdraw``."""
        return self._call(calls.withdraw(notification_id, reason), timeout)

    def resolve_failure(
        self,
        notification_id: str,
        *,
        reason: str = "",
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> t.Notification:
        """See ``AsyncClient.resolve_failure``."""
        return self._call(calls.resolve_failure(notification_id, reason, validate_only), timeout)

    def put_maintenance_window(
        self,
        window_id: str,
        *,
        start_time: datetime,
        end_time: datetime,
        notification_types: Iterable[str],
        reason: str = "",
        timeout: float | None = None,
    ) -> mpb.MaintenanceWindow:
        """See ``AsyncClient.put_maintenance_window``."""
        call = windows.put(window_id, start_time, end_time, notification_types, reason)
        return self._call(call, timeout)

    def get_maintenance_window(
        self, window_id: str, *, timeout: float | None = None
    ) -> mpb.MaintenanceWindow:
        """See ``AsyncClient.get_maintenance_window``."""
        return self._call(windows.get(window_id), timeout)

    def list_maintenance_windows(
        self, *, timeout: float | None = None
    ) -> builtins.list[mpb.MaintenanceWindow]:
        """See ``AsyncClient.list_maintenance_windows``."""
        out: builtins.list[mpb.MaintenanceWindow] = []
        token = ""
        while True:
            page = self._call(windows.list_page(windows.PAGE_SIZE, token), timeout)
            out += page.windows
            token = page.next_page_token
            if not token:
                return out

    def delete_maintenance_window(
        self, window_id: str, *, timeout: float | None = None
    ) -> mpb.MaintenanceWindow:
        """See ``AsyncClient.delete_maintenance_window``."""
        return self._call(windows.delete(window_id), timeout)

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

    def beat(self, heartbeat_id: str, *, timeout: float | None = None) -> hpb.HeartbeatMonitor:
        """See ``AsyncClient.beat``."""
        return self._call(calls.beat(heartbeat_id), timeout, self._heartbeats)

    def _call(self, call: Call[Any, Resp, Out], timeout: float | None, stub: Any = None) -> Out:
        if stub is None:
            stub = self._maintenance if call.service == windows.SERVICE else self._stub
        method: grpc.UnaryUnaryMultiCallable[Any, Resp] = getattr(stub, call.rpc)
        deadline = self.config.timeout_seconds if timeout is None else timeout
        for attempt in sync_retrying(self.config, call.rpc, call.retry_on, call.context):
            with attempt:
                try:
                    response = method(call.request, timeout=deadline, metadata=self._metadata)
                except grpc.RpcError as exc:
                    raise error_from_rpc(exc) from exc
        # Retrying stops after the first attempt that succeeds and re-raises the last
        # error when it gives up, so a response is here.
        return call.result(response)
